package harness

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// Harness defaults.
const (
	// DefaultFleetSize is the number of fake vLLM servers in the pool.
	DefaultFleetSize = 4
	// DefaultModelName is the base model every fake serves.
	DefaultModelName = "eppkit/conformance-base"
	// DefaultAdaptersPerServer is how many LoRA adapters each fake serves; names are unique
	// across the fleet ("conformance-lora-<member>-<j>").
	DefaultAdaptersPerServer = 2
	// DefaultPoolName and DefaultPoolNamespace name the InferencePool (apiserver source).
	DefaultPoolName      = "eppkit-conformance"
	DefaultPoolNamespace = "default"
)

// Config configures Start.
type Config struct {
	// Target is the EPP under test (required).
	Target Target
	// TargetTLS dials the target with TLS; nil = plaintext.
	TargetTLS *tls.Config
	// HealthTLS dials the target's gRPC health service when HealthTLSSet (nil = plaintext);
	// otherwise health is dialled like ext_proc (TargetTLS). The upstream EPP v1.5.0 serves health
	// in plaintext even with --secure-serving (cmd/epp/runner/runner.go, registerHealthServer),
	// as kubelet gRPC probes expect.
	HealthTLS    *tls.Config
	HealthTLSSet bool
	// ReadinessHeadersOnly makes the readiness probe a request without a body
	// (--readiness-probe headers-only), so an EPP that breaks the FULL_DUPLEX_STREAMED body
	// exchange still gets its tests run (and failed) one by one.
	ReadinessHeadersOnly bool
	// Source tells the target the pool (required; StaticSource{} for static).
	Source EndpointSource
	// Eppkit is the eppkit binary path ({{.Eppkit}}). When set, the harness also runs
	// `eppkit predictor` as the latency predictor sidecar ({{.PredictorURL}}) unless
	// NoPredictorSidecar is true or the target is not given {{.PredictorURL}}
	// (ReceivesPredictorURL): a sidecar the EPP does not know of cannot be tested through it.
	Eppkit string
	// NoPredictorSidecar skips the predictor sidecar: set it when no selected test uses a
	// predictor (see NeedsPredictorSidecar), so an EPP-only run does not depend on it.
	NoPredictorSidecar bool
	// ConfigFile is the EndpointPickerConfig for the target ({{.ConfigFile}}), "" = its default.
	ConfigFile string
	// LogDir receives target.log; default os.TempDir().
	LogDir string
	// Timeouts; zero value = DefaultTimeoutConfig().
	Timeouts TimeoutConfig
	// Seed seeds the fakes and Suite.Rand.
	Seed int64
	// FleetSize, ModelName, AdaptersPerServer default to the Default* constants.
	FleetSize         int
	ModelName         string
	AdaptersPerServer int
	// FleetPort is the port every fleet member listens on (0 = a free one), so an EPP started
	// outside the harness (address target) can be given 127.0.10.1..N:FleetPort in advance.
	FleetPort int
	// DistinctPorts puts the fleet on distinct ports of 127.0.0.1 (where loopback aliases do not
	// work; detected automatically too).
	DistinctPorts bool
	// Logger receives harness progress; nil discards.
	Logger *slog.Logger
	// StartFleet, when set, starts the model servers instead of the fake vLLM fleet (`eppkit
	// conformance --fleet sim`, or eppkit bench's own fake fleet); FleetPort and DistinctPorts
	// are then ignored. When nil and Source is a FleetSource, the source's fleet is used.
	StartFleet FleetStarter
	// EndpointDial, when set, opens the connections to pool members (a FleetSource's
	// DialEndpoint); nil dials them directly.
	EndpointDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// LeaderElectionArgs are the arguments that turn the EPP's leader election on, appended to
	// the command of the replicas of Suite.StartReplicas (--leader-election-args); "" = what the
	// target knows (LeaderElectionArgsProvider), else leader election tests do not apply.
	LeaderElectionArgs string
}

// Error says which stage of Start failed; the CLI exits 2 on it.
type Error struct {
	// Stage is "fleet", "endpoint source", "target" or "readiness".
	Stage string
	// TargetStarted is true when the target was started before the failure (readiness and
	// later): the run then writes its reports, every test not run.
	TargetStarted bool
	// Err is the cause; for a command target it includes the tail of the target's log.
	Err error
}

func (e *Error) Error() string { return e.Stage + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Start starts the fake fleet, the endpoint source and the target, waits until the target
// is ready (gRPC health SERVING and an ext_proc stream that answers: WaitReadyRecord; what it saw
// is Suite.Readiness), and returns the Suite. Close
// it with Suite.Close. Errors are *Error.
func Start(ctx context.Context, cfg Config) (s *Suite, err error) {
	if cfg.Target == nil || cfg.Source == nil {
		return nil, &Error{Stage: "config", Err: errors.New("Target and Source are required")}
	}
	if cfg.Timeouts == (TimeoutConfig{}) {
		cfg.Timeouts = DefaultTimeoutConfig()
	}
	if cfg.FleetSize == 0 {
		cfg.FleetSize = DefaultFleetSize
	}
	if cfg.ModelName == "" {
		cfg.ModelName = DefaultModelName
	}
	if cfg.AdaptersPerServer == 0 {
		cfg.AdaptersPerServer = DefaultAdaptersPerServer
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var fleetSource FleetSource
	if fs, ok := cfg.Source.(FleetSource); ok && cfg.StartFleet == nil {
		fleetSource = fs
		cfg.StartFleet = fs.StartFleet
		if cfg.EndpointDial == nil {
			cfg.EndpointDial = fs.DialEndpoint
		}
	}
	s = &Suite{Timeouts: cfg.Timeouts, Seed: cfg.Seed, ModelName: cfg.ModelName, TargetTLS: cfg.TargetTLS, cfg: cfg,
		Stalls: extprocclient.NewStallWatch(extprocclient.DefaultStallThreshold, extprocclient.DefaultStallShort)}
	s.TargetName, s.target, s.source = cfg.Target.Name(), cfg.Target, cfg.Source
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()

	// Fleet: every member serves the base model and its own adapters, prefix caching on.
	base := vllm.DefaultConfig()
	base.Model = cfg.ModelName
	base.Seed = cfg.Seed
	base.EnableKVCache = true
	base.MaxLoras = cfg.AdaptersPerServer
	base.MaxNumSeqs = 16
	s.LoRAAdapters = make([][]string, cfg.FleetSize)
	for i := range s.LoRAAdapters {
		for j := 0; j < cfg.AdaptersPerServer; j++ {
			s.LoRAAdapters[i] = append(s.LoRAAdapters[i], AdapterName(i, j))
		}
	}
	fctx, cancel := context.WithTimeout(ctx, cfg.Timeouts.HarnessStart.D())
	defer cancel()
	if cfg.StartFleet != nil {
		log.Info("starting the external fleet", "count", cfg.FleetSize, "model", cfg.ModelName)
		flctx := fctx
		if fleetSource != nil && fleetSource.FleetStartTimeout() > cfg.Timeouts.HarnessStart.D() {
			// A fleet that brings its cluster up gets its own bound; the later stages then get
			// HarnessStart from its end.
			var flcancel context.CancelFunc
			flctx, flcancel = context.WithTimeout(ctx, fleetSource.FleetStartTimeout())
			defer flcancel()
		}
		s.External, err = cfg.StartFleet(flctx, FleetSpec{Count: cfg.FleetSize, ModelName: cfg.ModelName,
			Adapters: s.LoRAAdapters, MaxNumSeqs: base.MaxNumSeqs, Seed: cfg.Seed, LogDir: cfg.LogDir, Logger: log})
		if err != nil {
			return s, &Error{Stage: "fleet", Err: err}
		}
		if flctx != fctx {
			// The later stages get HarnessStart from the fleet's end.
			var later context.CancelFunc
			fctx, later = context.WithTimeout(ctx, cfg.Timeouts.HarnessStart.D())
			defer later()
		}
	} else if err := s.startFakeFleet(fctx, cfg, base, log); err != nil {
		return s, &Error{Stage: "fleet", Err: err}
	}

	// Endpoint source.
	log.Info("starting endpoint source", "source", cfg.Source.Name())
	s.Source, err = cfg.Source.Start(fctx, s.Endpoints())
	if err != nil {
		return s, &Error{Stage: "endpoint source " + cfg.Source.Name(), Err: err}
	}
	s.sourceStarted = true
	if s.Source.Details != "" {
		log.Info("endpoint source started", "source", cfg.Source.Name(), "details", s.Source.Details)
	}

	// Target. The sidecar starts (and holds its port) before the target's ports are picked: picked
	// first, a port was closed again and the sidecar's listen on :0 could be given the same one
	// (seen in CI: --grpc-port 45463 with --predictor-url http://127.0.0.1:45463).
	if cfg.Eppkit != "" && !cfg.NoPredictorSidecar && ReceivesPredictorURL(cfg.Target) {
		log.Info("starting the latency predictor sidecar")
		if s.predictor, err = startPredictorSidecar(fctx, cfg.Eppkit, cfg.LogDir, cfg.Timeouts.HarnessStart.D()); err != nil {
			return s, &Error{Stage: "predictor", Err: err}
		}
	}
	ports, err := FreePorts(3)
	if err != nil {
		return s, &Error{Stage: "target", Err: err}
	}
	env := TargetEnv{Eppkit: cfg.Eppkit, Endpoints: s.Source.Endpoints, GRPCPort: ports[0], HealthPort: ports[1],
		MetricsPort: ports[2], Kubeconfig: s.Source.Kubeconfig, PoolName: s.Source.PoolName,
		PoolNamespace: s.Source.PoolNamespace, ConfigFile: cfg.ConfigFile, LogDir: cfg.LogDir, Seed: cfg.Seed,
		PredictorURL: s.PredictorURL()}
	if s.Source.Endpoints != "" {
		if env.ModelRewritesFile, err = writeModelRewrites(cfg.LogDir); err != nil {
			return s, &Error{Stage: "target", Err: err}
		}
		s.modelRewritesFile = env.ModelRewritesFile
	}
	if env.ConfigFile != "" {
		if abs, err := filepath.Abs(env.ConfigFile); err == nil {
			env.ConfigFile = abs
		}
	}
	log.Info("starting target", "target", cfg.Target.Name())
	addrs, err := cfg.Target.Start(ctx, env)
	if err != nil {
		return s, &Error{Stage: "target " + cfg.Target.Name(), Err: err, TargetStarted: true}
	}
	s.targetStarted = true
	s.TargetAddress, s.HealthAddress, s.MetricsAddress = addrs.GRPC, addrs.Health, addrs.Metrics

	s.HealthTLS = cfg.TargetTLS
	if cfg.HealthTLSSet {
		s.HealthTLS = cfg.HealthTLS
	}
	log.Info("waiting for the target", "grpc", addrs.GRPC, "health", addrs.Health)
	start := time.Now()
	probe := ReadyProbe{ExtProc: cfg.TargetTLS, Health: s.HealthTLS, HeadersOnly: cfg.ReadinessHeadersOnly, Stalls: s.Stalls}
	if addrs.AlreadyRunning {
		// An already running EPP accepts connections at once; a spawned one may need the full
		// targetReady to bind, so only an EPP the harness did not start fails fast on refusals.
		probe.RefusedGrace = cfg.Timeouts.TargetRefused.D()
	}
	s.Readiness, err = WaitReadyRecord(ctx, cfg.Target, addrs, probe, cfg.ModelName, cfg.Timeouts.TargetReady.D(), cfg.Timeouts.Poll.D()*4)
	if err != nil {
		if rh, ok := cfg.Target.(ReadinessHinter); ok {
			if hint := rh.ReadinessHint(); hint != "" {
				err = fmt.Errorf("%w\n%s", err, hint)
			}
		}
		if lt, ok := cfg.Target.(LogTailer); ok {
			if tail := lt.LogTail(20); tail != "" {
				err = fmt.Errorf("%w\n--- last lines of the target log (%s) ---\n%s", err, lt.LogPath(), tail)
			}
		}
		return s, &Error{Stage: "readiness", Err: err, TargetStarted: true}
	}
	log.Info("target ready", "after", time.Since(start).Round(time.Millisecond))

	// The fake gateway in strict mode: every request must get a valid pick from the target.
	s.Gateway, err = gateway.New(gateway.Config{EPPAddress: addrs.GRPC, EPPTLS: cfg.TargetTLS, Mode: gateway.ModeStrict,
		Endpoints: s.Endpoints(), MessageTimeout: cfg.Timeouts.Request.D(), Logger: slog.New(errorsOnly{log.Handler()}), Dial: cfg.EndpointDial,
		Stalls: s.Stalls})
	if err != nil {
		return s, &Error{Stage: "gateway", Err: err, TargetStarted: true}
	}
	return s, nil
}

// ExtProc returns a fresh ext_proc client to the target, closed in t.Cleanup.
func (s *Suite) ExtProc(t TestingT) *extprocclient.Client {
	t.Helper()
	c, err := extprocclient.Dial(s.TargetAddress, s.TargetTLS)
	if err != nil {
		t.Fatalf("dial the target's ext_proc at %s: %v", s.TargetAddress, err)
	}
	c.MessageTimeout = s.Timeouts.Request.D()
	c.Stalls = s.Stalls
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TargetExited returns nil while the target runs (or is not a process), else an error with its
// exit reason and the end of its log. A nil Suite has no target.
func (s *Suite) TargetExited() error {
	if s == nil || s.target == nil || !s.targetStarted {
		return nil
	}
	select {
	case <-s.target.Exited():
	default:
		return nil
	}
	msg := fmt.Sprintf("target %s exited during the run: %v", s.target.Name(), s.target.ExitErr())
	if lt, ok := s.target.(LogTailer); ok {
		msg += fmt.Sprintf("\n--- last lines of the target log (%s) ---\n%s", lt.LogPath(), lt.LogTail(20))
	}
	return errors.New(msg)
}

// TargetDown returns nil while the target answers, else one diagnosis: its process exited
// (TargetExited), or its ext_proc address refused (or timed out) every TCP connection for
// Timeouts.TargetRefused (5 s by default), with the end of its log when the harness has it. It
// returns nil at once when ctx is done (an interrupted run is not a dead target). A nil Suite has
// no target.
func (s *Suite) TargetDown(ctx context.Context) error {
	if err := s.TargetExited(); err != nil || s == nil || s.TargetAddress == "" {
		return err
	}
	grace, poll := s.Timeouts.TargetRefused.D(), s.Timeouts.Poll.D()
	deadline := time.Now().Add(grace)
	var last error
	for {
		if ctx.Err() != nil {
			return nil
		}
		d := net.Dialer{Timeout: s.Timeouts.Request.D()}
		c, err := d.DialContext(ctx, "tcp", s.TargetAddress)
		if err == nil {
			_ = c.Close()
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
	msg := fmt.Sprintf("the target stopped answering: its ext_proc address %s refused connections for %s (%v)", s.TargetAddress, grace, last)
	if lt, ok := s.target.(LogTailer); ok && s.target != nil {
		if tail := lt.LogTail(20); tail != "" {
			msg += fmt.Sprintf("\n--- last lines of the target log (%s) ---\n%s", lt.LogPath(), tail)
		}
	}
	return errors.New(msg)
}

// SetEndpointReady marks a pool member ready or not through the endpoint source (EndpointChurn).
// With the static source it returns ErrUnsupported.
func (s *Suite) SetEndpointReady(ctx context.Context, addr string, ready bool) error {
	if s.source == nil {
		return ErrUnsupported
	}
	return s.source.SetReady(ctx, addr, ready)
}

// Close stops the gateway, the target, the endpoint source and the fleet, in that order.
func (s *Suite) Close() {
	if s.Gateway != nil {
		_ = s.Gateway.Close()
	}
	if s.targetStarted && s.target != nil {
		_ = s.target.Stop(s.Timeouts.TargetStop.D())
	}
	if s.sourceStarted && s.source != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.source.Stop(ctx)
		cancel()
	}
	if s.predictor != nil {
		_ = s.predictor.Kill()
	}
	if s.Fleet != nil {
		s.Fleet.Close()
	}
	if s.External != nil {
		s.External.Close()
	}
}

// startFakeFleet starts the fake vLLM fleet (fakes/fleet) and waits until it is healthy.
func (s *Suite) startFakeFleet(ctx context.Context, cfg Config, base vllm.Config, log *slog.Logger) (err error) {
	log.Info("starting fake vLLM fleet", "count", cfg.FleetSize, "model", cfg.ModelName)
	s.Fleet, err = fleet.Start(fleet.Options{
		Count: cfg.FleetSize, Base: base, Port: cfg.FleetPort, DistinctPorts: cfg.DistinctPorts, NamePrefix: "conformance-",
		PerServer: func(i int, c *vllm.Config) {
			c.Seed = cfg.Seed + int64(i)
			for _, a := range s.LoRAAdapters[i] {
				c.LoraModules = append(c.LoraModules, vllm.LoraModule{Name: a})
			}
		},
	})
	if err != nil {
		return err
	}
	return s.Fleet.WaitHealthy(ctx)
}

// writeModelRewrites writes ModelRewritesYAML to a new file in dir (os.TempDir() when empty)
// and returns its absolute path.
func writeModelRewrites(dir string) (string, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "model-rewrites-*.yaml")
	if err != nil {
		return "", fmt.Errorf("model rewrites file: %w", err)
	}
	if _, err := f.Write(ModelRewritesYAML()); err != nil {
		f.Close()
		return "", fmt.Errorf("model rewrites file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return filepath.Abs(f.Name())
}
