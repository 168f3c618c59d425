package harness

import "context"

// EndpointSource tells the target EPP which endpoints form the pool. The static source passes the
// fleet's addresses on the target's command line ({{.Endpoints}}); the apiserver source
// (conformance/endpointsource/apiserver) writes an InferencePool and Ready Pods to a real kube-apiserver and hands
// the target a kubeconfig.
type EndpointSource interface {
	// Name is the --endpoint-source value ("static", "apiserver").
	Name() string
	// Start makes the pool of addrs (ip:port, the fleet's rank-0 addresses, all on one port)
	// visible to an EPP and returns what the target needs to find it. It returns once the pool is
	// observable; it stops with ctx or Stop.
	Start(ctx context.Context, addrs []string) (Env, error)
	// SetReady marks the endpoint addr ready or not ready (removed from the pool), for
	// EndpointChurn. The static source cannot do this and returns ErrUnsupported.
	SetReady(ctx context.Context, addr string, ready bool) error
	// Stop releases everything Start created.
	Stop(ctx context.Context) error
}

// Env is what an endpoint source gives the target: the template values of a command target.
type Env struct {
	// Endpoints is the comma-separated ip:port list (static source), "" otherwise.
	Endpoints string
	// Kubeconfig is the path of a kubeconfig for the API server (apiserver source), "" otherwise.
	Kubeconfig string
	// PoolName and PoolNamespace name the InferencePool (apiserver source).
	PoolName, PoolNamespace string
	// GroupObjects is true when the source wrote the llm-d.ai group test's objects
	// (GroupObjectives, GroupModelRewrites) before the EPP started (the apiserver source); a
	// cluster the suite only reads has none of them.
	GroupObjects bool
	// Details is one line for the run's log about what the source runs ("" = nothing to say):
	// the apiserver source names its kube-apiserver and etcd, their versions and origin.
	Details string
}
