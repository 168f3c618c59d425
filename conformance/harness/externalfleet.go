package harness

import (
	"context"
	"log/slog"
	"net"
	"time"
)

// ExternalFleet is a pool of model servers the harness does not run in process — e.g.
// llm-d-inference-sim processes in their own network namespaces (conformance/simfleet, `eppkit
// conformance --fleet sim`) — used instead of the fake vLLM fleet (fakes/fleet). Its members must
// answer the simulator's admin API as the fakes do: POST /admin/config with "fake-metrics" (the
// simulator's schema, vllm.FakeMetrics) and its latency keys, and GET /admin/config.
type ExternalFleet interface {
	// Members lists the model servers in order.
	Members() []ExternalMember
	// DistinctIPs reports whether every member has its own IP (as the fake fleet on 127.0.10.x).
	DistinctIPs() bool
	// UnpinMetrics is the "fake-metrics" value that undoes PinMetrics (the fakes take null; the
	// simulator ignores null and needs its baseline values posted back).
	UnpinMetrics() any
	// Close stops every member and releases what Start created.
	Close()
}

// ExternalMember is one model server of an ExternalFleet.
type ExternalMember struct {
	// Name is the pod name it returns in the x-inference-pod response header.
	Name string
	// Addr is its ip:port.
	Addr string
}

// FleetSpec is what an ExternalFleet must serve: the harness's own fleet settings.
type FleetSpec struct {
	// Count is the number of members.
	Count int
	// ModelName is the base model every member serves.
	ModelName string
	// Adapters[i] are the LoRA adapters member i serves (names unique across the fleet).
	Adapters [][]string
	// MaxNumSeqs is each member's batch size (the fakes' MaxNumSeqs).
	MaxNumSeqs int
	// Seed seeds the members.
	Seed int64
	// LogDir receives the members' logs.
	LogDir string
	// Logger receives progress.
	Logger *slog.Logger
}

// FleetStarter starts an ExternalFleet; Config.StartFleet. Its error is reported as the
// harness's "fleet" stage.
type FleetStarter func(ctx context.Context, spec FleetSpec) (ExternalFleet, error)

// FleetSource is an endpoint source that brings its own model servers, on a network this
// process reaches only through a dialer: the cluster source (conformance/cluster/clustertarget)
// runs the fleet as pods and reaches their IPs through port-forwards. StartHarness uses its
// StartFleet when HarnessConfig.StartFleet is nil, and DialEndpoint for every connection to a
// pool member (the gateway's forwarded requests, the admin API).
type FleetSource interface {
	EndpointSource
	// StartFleet starts the pool's model servers (called before Start).
	StartFleet(ctx context.Context, spec FleetSpec) (ExternalFleet, error)
	// DialEndpoint connects to a member's "ip:port".
	DialEndpoint(ctx context.Context, network, addr string) (net.Conn, error)
	// FleetStartTimeout bounds StartFleet when it is longer than TimeoutConfig.HarnessStart (a
	// cluster that is created first takes minutes); the later stages keep HarnessStart.
	FleetStartTimeout() time.Duration
}
