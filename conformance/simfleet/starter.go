package simfleet

import (
	"context"

	"github.com/eppkit/eppkit/conformance/harness"
)

// Starter returns a harness.FleetStarter that runs spec.Count simulators of binary (`eppkit
// conformance --fleet sim`). Pod names are "sim-<i>".
func Starter(binary string) harness.FleetStarter {
	return func(ctx context.Context, spec harness.FleetSpec) (harness.ExternalFleet, error) {
		f, err := Start(ctx, Options{Binary: binary, Count: spec.Count, Model: spec.ModelName, Adapters: spec.Adapters,
			MaxNumSeqs: spec.MaxNumSeqs, Seed: spec.Seed, LogDir: spec.LogDir, Logger: spec.Logger})
		if err != nil {
			return nil, err
		}
		return external{f}, nil
	}
}

// external adapts a Fleet to harness.ExternalFleet.
type external struct{ f *Fleet }

func (e external) Members() []harness.ExternalMember {
	out := make([]harness.ExternalMember, 0, len(e.f.members))
	for _, m := range e.f.members {
		out = append(out, harness.ExternalMember{Name: m.Name, Addr: m.Addr()})
	}
	return out
}

// DistinctIPs is true: every member has its own namespace and IP.
func (e external) DistinctIPs() bool { return true }

// UnpinMetrics is Baseline: the simulator ignores a null fake-metrics.
func (e external) UnpinMetrics() any { return Baseline() }

func (e external) Close() { e.f.Close() }
