package harness

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"
)

// TargetEnvField is one field of a command template, as TargetEnvFields documents it.
type TargetEnvField struct {
	// Name is the TargetEnv field ("GRPCPort" for {{.GRPCPort}}).
	Name string
	// Doc says what the field holds and when it is empty.
	Doc string
	// Format is the exact form of the value (and, for a file, of its content) with an example;
	// docs/contracts.md has a section per field that repeats it (cmd/eppkit
	// TestTemplateFieldFormatsDocumented).
	Format string
}

// TargetEnvFields documents every field of TargetEnv a --command template can use, in one place:
// `eppkit conformance --help` prints it and docs/implementers.md's table is checked against it
// (cmd/eppkit TestCommandFieldsDocumented). A field that can be empty says when; where that would
// leave an EPP without what it needs, the run is refused at start (conformance.Options.Validate).
var TargetEnvFields = []TargetEnvField{
	{"Eppkit", "the running eppkit binary (absolute path)",
		"absolute path of an executable file, e.g. /home/you/eppkit/bin/eppkit"},
	{"Endpoints", "the pool as a comma list of ip:port (static source); a template that uses it is refused with another source",
		"ip:port entries joined by commas, no spaces, in pool order, e.g. 127.0.10.1:8000,127.0.10.2:8000,127.0.10.3:8000,127.0.10.4:8000"},
	{"GRPCPort", "free port on 127.0.0.1 for your EPP's ext_proc gRPC server",
		"a decimal TCP port number (1-65535), free on 127.0.0.1 when the command starts, e.g. 40123"},
	{"HealthPort", "free port on 127.0.0.1 for its gRPC health server; without it, health is probed on {{.GRPCPort}}",
		"a decimal TCP port number (1-65535), free on 127.0.0.1 when the command starts, e.g. 40124"},
	{"MetricsPort", "free port on 127.0.0.1 for its Prometheus metrics",
		"a decimal TCP port number (1-65535), free on 127.0.0.1 when the command starts, e.g. 40125"},
	{"Kubeconfig", "kubeconfig of the run's kube-apiserver (apiserver source; empty with static)",
		"absolute path of a kubeconfig file (client-go clientcmd v1 Config: one cluster at https://127.0.0.1:<port>, one user, one current context; certificates inlined)"},
	{"PoolName", "the InferencePool's name (apiserver source; empty with static)",
		"a Kubernetes object name (DNS-1123 subdomain), e.g. eppkit-conformance"},
	{"PoolNamespace", "the InferencePool's namespace (apiserver source; empty with static)",
		"a Kubernetes namespace name, e.g. default"},
	{"ConfigFile", "the --config-file path, absolute (empty without --config-file; --config-file with a template that does not use it is refused)",
		"absolute path of the file given with --config-file, passed unchanged: its content is whatever your EPP reads (the reference: an EndpointPickerConfig)"},
	{"Seed", "the run's seed",
		"a decimal int64, e.g. 807017231 (EPPKIT_SEED=<seed> replays the run)"},
	{"LogDir", "the directory of the target's log (target.log)",
		"path of a directory, as given with --log-dir (default out/conformance, relative to the working directory), e.g. out/conformance"},
	{"ModelRewritesFile", "a file with the conformance model rewrite rules (the InferenceModelRewrite spec's rules) for an EPP " +
		"with a static pool (the reference: --model-rewrites); with the apiserver source the rewrite is an InferenceModelRewrite object",
		"absolute path of a YAML file: the rules of GIE's InferenceModelRewrite spec (Go type harness.ModelRewritesFile), e.g. rules: [{matches: [{model: {type: Exact, value: eppkit-conformance-alias}}], targets: [{modelRewrite: conformance-lora-0-0, weight: 3}, {modelRewrite: conformance-lora-1-0, weight: 1}]}]"},
	{"PredictorURL", "base URL of the latency predictor sidecar the harness runs (eppkit predictor, upstream's sidecar API); " +
		"always set when the template uses it; tests that pause or kill the sidecar skip for templates without it",
		"http://127.0.0.1:<port> without a trailing slash, serving upstream's predictor sidecar API (POST /predict, /predict/bulk, GET /readyz, ...), e.g. http://127.0.0.1:40126"},
}

// TargetEnv are the values a target is started with; a command target's template sees each as
// {{.Name}} (TargetEnvFields documents them). Every instance of the target gets every field: the
// second instance of DataParallelRanks too, for its own pool and ports.
type TargetEnv struct {
	// Eppkit is the absolute path of the running eppkit binary.
	Eppkit string
	// Endpoints is the comma-separated ip:port pool (static source), "" otherwise.
	Endpoints string
	// GRPCPort, HealthPort and MetricsPort are free ports on 127.0.0.1 the target should listen
	// on (ext_proc gRPC, gRPC health, Prometheus).
	GRPCPort, HealthPort, MetricsPort int
	// Kubeconfig, PoolName, PoolNamespace locate the InferencePool (apiserver source).
	Kubeconfig, PoolName, PoolNamespace string
	// ConfigFile is the EndpointPickerConfig file given with --config-file ("" = the target's default).
	ConfigFile string
	// Seed is the run's seed, for targets that take one (the reference's --seed).
	Seed int64
	// LogDir is where a command target writes its log (target.log).
	LogDir string
	// PredictorURL is the base URL of the latency predictor sidecar the harness runs
	// (`eppkit predictor`, upstream's sidecar API), "" when it runs none. The reference passes it
	// as --predictor-url; the PredictedLatencyPredictorDown test kills it.
	PredictorURL string
	// ModelRewritesFile is a file holding the conformance model rewrite (ModelRewritesYAML: the
	// InferenceModelRewrite spec's rules) for EPPs with a static pool; the reference takes it as
	// --model-rewrites. With the apiserver source the rewrite is an InferenceModelRewrite object.
	ModelRewritesFile string
}

// PredictorURLReceiver is a Target that can tell whether its EPP is given {{.PredictorURL}} (a
// command template that mentions it). The harness starts its predictor sidecar only for a target
// that receives it, so tests of the sidecar skip, rather than fail, for the others.
type PredictorURLReceiver interface {
	ReceivesPredictorURL() bool
}

// ReceivesPredictorURL reports whether t passes {{.PredictorURL}} to its EPP; false for targets
// that do not say (the address and cluster targets start no EPP from TargetEnv).
func ReceivesPredictorURL(t Target) bool {
	r, ok := t.(PredictorURLReceiver)
	return ok && r.ReceivesPredictorURL()
}

// TargetAddrs are where a started target listens.
type TargetAddrs struct {
	// GRPC is the ext_proc address (host:port).
	GRPC string
	// Health is the gRPC health address; often equal to GRPC for external EPPs.
	Health string
	// Metrics is the Prometheus host:port, "" when unknown.
	Metrics string
	// AlreadyRunning is true when Start did not start the EPP (it runs already: the address
	// target). Readiness then fails after Timeouts.TargetRefused once every connection was
	// refused — nothing listens there — instead of waiting the full targetReady.
	AlreadyRunning bool
}

// Target is an EPP the suite runs against.
type Target interface {
	// Name is the --target value.
	Name() string
	// Start launches (or locates) the EPP and returns its addresses. It does not wait for
	// readiness (see WaitReady).
	Start(ctx context.Context, env TargetEnv) (TargetAddrs, error)
	// Exited returns a closed channel once a target process has exited (nil for targets that are
	// not processes), and ExitErr the reason.
	Exited() <-chan struct{}
	ExitErr() error
	// Stop stops what Start started (graceful, then forced after timeout).
	Stop(timeout time.Duration) error
}

// ReadinessHinter is implemented by targets that can explain a readiness failure (a command
// template without {{.HealthPort}}); Start adds the hint to the failure.
type ReadinessHinter interface {
	// ReadinessHint is the hint, "" when there is none.
	ReadinessHint() string
}

// LogTailer is implemented by targets with a log (a command target's target.log); the harness
// quotes its end when the target fails to become ready or exits during the run.
type LogTailer interface {
	// LogTail returns the last n lines of the log.
	LogTail(n int) string
	// LogPath is the log file.
	LogPath() string
}

// FreePorts returns n distinct TCP ports free on every address (listen on the wildcard's port 0,
// then close; a port may in principle be taken again before the target binds it).
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		// The wildcard address: a port free there is free on every address, so a target that
		// listens on all interfaces (as EPPs do) cannot collide with a fake listening on one
		// loopback alias (127.0.10.x) with that port, which a 127.0.0.1 probe would not see.
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// FormatTargetEnvFields renders TargetEnvFields as text lines, "  {{.Name}}  doc", for --help.
func FormatTargetEnvFields() string {
	var b strings.Builder
	for _, f := range TargetEnvFields {
		fmt.Fprintf(&b, "  %-20s %s\n", "{{."+f.Name+"}}", f.Doc)
	}
	return b.String()
}
