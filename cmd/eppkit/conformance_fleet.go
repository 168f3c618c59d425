package main

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/internal/simfleet"
	"github.com/eppkit/eppkit/internal/toolcache"
)

// fleetStarter validates --fleet and --sim-binary: nil for the fake fleet, the simulator fleet's
// starter for --fleet sim (the binary from --sim-binary or the tools cache; exit 3 naming the
// build command when it is missing).
func fleetStarter(f conformanceFlags) (conformance.FleetStarter, error) {
	switch f.fleet {
	case "", "fake":
		if f.simBinary != "" {
			return nil, badFlags("--sim-binary: only valid with --fleet sim")
		}
		return nil, nil
	case "sim":
		if f.fleetPort != 0 {
			return nil, badFlags("--fleet-port: the simulators listen on port %d in their own network namespaces; not valid with --fleet sim", simfleet.DefaultPort)
		}
		bin := f.simBinary
		if bin == "" {
			p, err := toolcache.Path(toolcache.SimTool, toolcache.SimBinary)
			if err != nil {
				return nil, badFlags("--fleet sim: %v", err)
			}
			bin = p
		}
		return simfleet.Starter(bin), nil
	default:
		return nil, badFlags("--fleet %q: want fake or sim", f.fleet)
	}
}
