package conformance

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"

	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/conformance/simfleet"
	"github.com/eppkit/eppkit/conformance/target"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/internal/toolcache"
	"github.com/eppkit/eppkit/internal/version"
)

// Exit codes of a run (Result.ExitCode, ExitError.Code, `eppkit conformance`), the gateway-api
// style contract CI gates on.
const (
	// ExitPassed: every test that ran passed (with ExpectFailures: exactly the listed tests failed).
	ExitPassed = 0
	// ExitTestFailed: a test failed (with ExpectFailures: the failures differ from the list).
	ExitTestFailed = 1
	// ExitHarness: the harness or the target could not start, the target stopped answering while
	// selected tests were still to run, the run was interrupted, or a report could not be written.
	ExitHarness = 2
	// ExitBadOptions: an option is invalid (Options.Validate).
	ExitBadOptions = 3
)

// ExitError is the error of a run that did not pass: its exit code and the cause.
type ExitError struct {
	// Code is one of the Exit* constants.
	Code int
	// Err says what went wrong, naming the option for ExitBadOptions.
	Err error
}

func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is the process exit code for the error (cmd/eppkit exits with it).
func (e *ExitError) ExitCode() int { return e.Code }

func exitErr(code int, format string, args ...any) *ExitError {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// Options configure a conformance run: Run, RunTest and Start. Each field names the
// `eppkit conformance` flag it mirrors; its zero value is the documented default. Validate
// reports the first invalid option by its flag ("--fleet-size: must be in [1,250]"), the name a
// CLI user and, through these docs, a library user both know; where no flag is involved it names
// the field ("Target (--target): required").
type Options struct {
	// Target names the EPP under test (--target): "command" (Command), "address" (Address) or a
	// target registered with RegisterTarget ("reference" and "cluster", by conformance/wiring).
	// Required.
	Target string
	// Command is the command template of the command target (--command): a text/template over
	// harness.TargetEnv ({{.GRPCPort}}, {{.HealthPort}}, {{.Endpoints}}, {{.Kubeconfig}}, ...),
	// run with /bin/sh -c.
	Command string
	// Address and HealthAddress are the ext_proc and gRPC health host:port of the address target
	// (--address, --health-address; HealthAddress "" = Address).
	Address, HealthAddress string
	// EndpointSource tells the target the pool (--endpoint-source): "static" (default) or
	// "apiserver" (a local kube-apiserver + etcd holding the InferencePool and Ready Pods).
	EndpointSource string
	// TargetImpl and SourceImpl, for drivers that build their own (the e2e-framework feature's
	// cluster run), are used instead of the registries' Target and EndpointSource, which must
	// then be empty. No flag sets them.
	TargetImpl harness.Target
	SourceImpl harness.EndpointSource

	// Profiles are the profiles to run and report (--profiles); nil = every profile.
	Profiles []Profile
	// SupportedFeatures are the extended features the implementation claims
	// (--supported-features); AllFeatures claims every feature that has tests (--all-features).
	SupportedFeatures []Feature
	AllFeatures       bool
	// ExemptFeatures are skipped even when supported (--exempt-features).
	ExemptFeatures []Feature
	// SkipTests are ShortNames to skip (--skip-tests); RunTest, when set, runs only that test
	// (--run-test).
	SkipTests []string
	RunTest   string

	// Timeouts holds every wait (--timeout-config); the zero value is
	// harness.DefaultTimeoutConfig().
	Timeouts harness.TimeoutConfig
	// TargetTLS is how to dial the target (--target-tls): "plaintext" (default), "insecure" (TLS,
	// any certificate) or "ca:<file>". TargetHealthTLS does the same for its gRPC health port
	// (--target-health-tls; "" = as TargetTLS).
	TargetTLS, TargetHealthTLS string
	// ReadinessProbe is the request the readiness wait probes with (--readiness-probe): "body"
	// (default; a chat completion) or "headers-only" (GET /v1/models, for an EPP whose body
	// exchange is broken).
	ReadinessProbe string
	// ConfigFile is the EndpointPickerConfig given to the target as {{.ConfigFile}}
	// (--config-file; "" = the target's default).
	ConfigFile string
	// LeaderElectionArgs are the arguments that turn the EPP's leader election on
	// (--leader-election-args), appended to the command of the replicas the high-availability
	// tests start ("" = the target's own: --ha-enable-leader-election for the reference; for a
	// command target without them those tests do not apply).
	LeaderElectionArgs string
	// ExpectFailures is a file of ShortNames expected to fail (--expect-failures; one a line, #
	// comments): the run then passes only when exactly these fail.
	ExpectFailures string

	// Fleet is the pool's model servers (--fleet): "fake" (default; in-process fake vLLM servers
	// on 127.0.10.x) or "sim" (llm-d-inference-sim processes in network namespaces; root and
	// iproute2); SimBinary is the simulator (--sim-binary; "" = the tools cache's).
	Fleet, SimBinary string
	// FleetSize is the number of model servers (--fleet-size; 0 = harness.DefaultFleetSize,
	// 1–250); FleetPort the port every fake listens on (--fleet-port; 0 = a free one).
	FleetSize, FleetPort int
	// Seed seeds the fakes and the tests (--seed; 0 = from the clock); EPPKIT_SEED, when set,
	// overrides it. The seed is printed and recorded in every report.
	Seed int64
	// Eppkit is the eppkit binary ({{.Eppkit}}; it also runs the predictor sidecar); "" = this
	// executable. A test binary must set it (suites build ./cmd/eppkit).
	Eppkit string

	// ReportDir receives one ConformanceReport YAML per profile, junit.xml and summary.md
	// (--report-output); PublishDir the GIE publication layout (--publish-dir). Both need
	// Implementation.
	ReportDir, PublishDir string
	// ResultsFile receives the machine-readable Results (--results-file), whatever the run's
	// end once the options are valid.
	ResultsFile string
	// Implementation names the EPP in the reports (--organization --project --url --version
	// --contact); every field is required with ReportDir or PublishDir.
	Implementation confv1.Implementation
	// Reproduce are the command lines of the publication README's Reproduce section (the CLI
	// passes its own command line).
	Reproduce []string
	// LogDir receives the target's and the predictor's logs (--log-dir; "" = os.TempDir()).
	LogDir string

	// Out receives the console lines: the banner, one line per finished test, the profile
	// verdicts and the report paths; Err receives warnings; Logger the harness's progress. nil
	// discards each.
	Out, Err io.Writer
	Logger   *slog.Logger
	// Abort, when closed (a second Ctrl-C), abandons the test in progress: it is reported skipped
	// as interrupted and the reports are written at once. Cancelling Run's context (the first
	// Ctrl-C) lets the test in progress finish and skips the rest.
	Abort <-chan struct{}
}

// optionError is a Validate error: the field and its flag, then the problem.
func optionError(field, flag string, err error) *ExitError {
	return &ExitError{Code: ExitBadOptions, Err: fmt.Errorf("%s (%s): %w", field, flag, err)}
}

// plan is validated Options, ready to run.
type plan struct {
	opts       Options
	tests      []ConformanceTest
	sel        Selection
	timeouts   harness.TimeoutConfig
	target     harness.Target
	source     harness.EndpointSource
	targetTLS  *tls.Config
	healthTLS  *tls.Config
	healthSet  bool
	expect     ExpectedFailures
	startFleet harness.FleetStarter
	seed       int64
	meta       ReportMeta
	// warnings are printed to Options.Err when the run starts (former test names, a publication
	// without a version or a reproduction).
	warnings []string
}

// Validate checks the options against the registry (every name must exist) and the files they
// name; the error (an *ExitError, ExitBadOptions) names the field and its flag.
func (o Options) Validate() error {
	_, err := o.plan()
	return err
}

func (o Options) plan() (*plan, error) {
	tests := All()
	if len(tests) == 0 {
		return nil, exitErr(ExitBadOptions, "no conformance tests are registered: import _ \"github.com/eppkit/eppkit/conformance/tests\"")
	}
	p := &plan{opts: o, tests: tests}
	p.sel = Selection{Profiles: o.Profiles, SupportedFeatures: o.SupportedFeatures, ExemptFeatures: o.ExemptFeatures,
		SkipTests: slices.Clone(o.SkipTests), RunTest: strings.TrimSpace(o.RunTest)}
	// Renamed tests keep answering to their former names (ConformanceTest.FormerNames).
	if n, renamed := ResolveName(tests, p.sel.RunTest); renamed {
		p.warnings = append(p.warnings, fmt.Sprintf("--run-test %s: the test is now named %s; use the new name", p.sel.RunTest, n))
		p.sel.RunTest = n
	}
	for i, name := range p.sel.SkipTests {
		if n, renamed := ResolveName(tests, name); renamed {
			p.warnings = append(p.warnings, fmt.Sprintf("--skip-tests %s: the test is now named %s; use the new name", name, n))
			p.sel.SkipTests[i] = n
		}
	}
	if p.sel.Profiles == nil {
		p.sel.Profiles = slices.Clone(Profiles)
	}
	if o.AllFeatures {
		p.sel.SupportedFeatures = TestedFeatures()
	}
	if err := p.sel.Validate(tests); err != nil {
		return nil, exitErr(ExitBadOptions, "%w", err)
	}
	p.timeouts = o.Timeouts
	if p.timeouts == (harness.TimeoutConfig{}) {
		p.timeouts = harness.DefaultTimeoutConfig()
	}
	if err := p.timeouts.Validate(); err != nil {
		return nil, optionError("Timeouts", "--timeout-config", err)
	}
	if (o.TargetImpl != nil) != (o.SourceImpl != nil) {
		return nil, exitErr(ExitBadOptions, "TargetImpl and SourceImpl: set both or neither")
	}
	if o.TargetImpl != nil && (o.Target != "" || o.EndpointSource != "" || o.Command != "" || o.Address != "") {
		return nil, exitErr(ExitBadOptions, "TargetImpl: Target, EndpointSource, Command and Address must be empty with it")
	}
	if o.Target == "" && o.TargetImpl == nil {
		return nil, optionError("Target", "--target", fmt.Errorf("required (have %v)", TargetNames()))
	}
	if o.Target != "command" && o.Command != "" {
		return nil, exitErr(ExitBadOptions, "--command: only valid with --target command (got --target %s)", o.Target)
	}
	if o.Target != "address" && (o.Address != "" || o.HealthAddress != "") {
		return nil, exitErr(ExitBadOptions, "--address/--health-address: only valid with --target address (got --target %s)", o.Target)
	}
	var err error
	if o.TargetImpl != nil {
		p.target = o.TargetImpl
	} else if p.target, err = NewTarget(o.Target, TargetOptions{Command: o.Command, Address: o.Address, HealthAddress: o.HealthAddress}); err != nil {
		return nil, exitErr(ExitBadOptions, "%w", err)
	}
	sourceName := o.EndpointSource
	if sourceName == "" {
		sourceName = "static"
	}
	if ct, ok := p.target.(*target.CommandTarget); ok && o.Target == "command" && sourceName != "static" {
		if ct.UsesField("Endpoints") {
			return nil, exitErr(ExitBadOptions, "--command: {{.Endpoints}} is empty with --endpoint-source %s (the pool is an "+
				"InferencePool: give your EPP {{.Kubeconfig}}, {{.PoolName}} and {{.PoolNamespace}}); remove it, or use --endpoint-source static", sourceName)
		}
		if ct.UsesField("ModelRewritesFile") {
			return nil, exitErr(ExitBadOptions, "--command: {{.ModelRewritesFile}} is empty with --endpoint-source %s (the rewrite "+
				"is an InferenceModelRewrite object your EPP reads from the cluster); remove it, or use --endpoint-source static", sourceName)
		}
	}
	if o.SourceImpl != nil {
		p.source = o.SourceImpl
	} else if p.source, err = NewEndpointSource(sourceName); err != nil {
		return nil, exitErr(ExitBadOptions, "%w", err)
	}
	if o.ConfigFile != "" {
		if _, err := os.Stat(o.ConfigFile); err != nil {
			return nil, exitErr(ExitBadOptions, "--config-file: %w", err)
		}
		if o.Target == "command" && !strings.Contains(o.Command, ".ConfigFile") {
			return nil, exitErr(ExitBadOptions, "--config-file: the --command template does not pass {{.ConfigFile}} to your EPP, so the file would be ignored")
		}
	}
	if p.targetTLS, err = extprocclient.ParseTLSSpec("--target-tls", o.TargetTLS); err != nil {
		return nil, exitErr(ExitBadOptions, "%w", err)
	}
	if o.TargetHealthTLS != "" {
		if p.healthTLS, err = extprocclient.ParseTLSSpec("--target-health-tls", o.TargetHealthTLS); err != nil {
			return nil, exitErr(ExitBadOptions, "%w", err)
		}
		p.healthSet = true
	}
	switch o.ReadinessProbe {
	case "", "body", "headers-only":
	default:
		return nil, exitErr(ExitBadOptions, "--readiness-probe %q: want body or headers-only", o.ReadinessProbe)
	}
	if o.ExpectFailures != "" {
		if p.expect, err = LoadExpectedFailures(o.ExpectFailures, tests); err != nil {
			return nil, exitErr(ExitBadOptions, "%w", err)
		}
		p.warnings = append(p.warnings, p.expect.Renamed...)
	}
	if o.FleetSize < 0 || o.FleetSize > 250 {
		return nil, exitErr(ExitBadOptions, "--fleet-size: must be in [1,250], got %d", o.FleetSize)
	}
	if o.FleetPort < 0 || o.FleetPort > 65535 {
		return nil, exitErr(ExitBadOptions, "--fleet-port: must be a port in [0,65535], got %d", o.FleetPort)
	}
	if p.startFleet, err = o.fleetStarter(); err != nil {
		return nil, err
	}
	p.meta = ReportMeta{Implementation: o.Implementation, EppkitVersion: version.Version(), Selection: p.sel}
	if o.PublishDir != "" {
		if len(o.Reproduce) == 0 {
			return nil, exitErr(ExitBadOptions, "--publish-dir: Options.Reproduce is empty: the publication README's Reproduce section "+
				"must say how to rerun the run (the CLI passes its own command line, conformance.RunTest its go test command)")
		}
		if v := p.meta.EppkitVersion; v == "" || v == "dev" || v == "(devel)" {
			p.warnings = append(p.warnings, fmt.Sprintf("--publish-dir: this eppkit has no version (eppkitVersion: %q): readers cannot "+
				"tell which eppkit ran the suite; build it with one (make build sets it from git) or require a released eppkit module", v))
		}
		if v := o.Implementation.Version; v == "dev" || v == "(devel)" || v == "latest" {
			p.warnings = append(p.warnings, fmt.Sprintf("--publish-dir: --version %q names no release of your EPP: publish the version you tested", v))
		}
	}
	if o.PublishDir != "" && (p.sel.RunTest != "" || len(p.sel.SkipTests) > 0 || len(p.sel.ExemptFeatures) > 0) {
		return nil, exitErr(ExitBadOptions, "--publish-dir: a publication must be a full run of its profiles (GIE accepts a report "+
			"only when its result is success); drop --run-test, --skip-tests and --exempt-features, or write --report-output only")
	}
	for _, d := range []struct{ flag, dir string }{{"--report-output", o.ReportDir}, {"--publish-dir", o.PublishDir}} {
		if d.dir == "" {
			continue
		}
		if err := p.meta.Implementation.Validate(); err != nil {
			return nil, exitErr(ExitBadOptions, "%s needs --organization --project --url --version --contact: %w", d.flag, err)
		}
	}
	p.seed = o.Seed
	if env := os.Getenv("EPPKIT_SEED"); env != "" {
		if _, err := fmt.Sscan(env, &p.seed); err != nil {
			return nil, exitErr(ExitBadOptions, "EPPKIT_SEED %q: not an integer", env)
		}
	}
	if p.seed == 0 {
		p.seed = time.Now().UnixNano() % 1_000_000_000
	}
	return p, nil
}

// fleetStarter validates Fleet and SimBinary: nil for the fake fleet, the simulator fleet's
// starter for "sim" (the binary from SimBinary or the tools cache).
func (o Options) fleetStarter() (harness.FleetStarter, error) {
	switch o.Fleet {
	case "", "fake":
		if o.SimBinary != "" {
			return nil, exitErr(ExitBadOptions, "--sim-binary: only valid with --fleet sim")
		}
		return nil, nil
	case "sim":
		if o.FleetPort != 0 {
			return nil, exitErr(ExitBadOptions, "--fleet-port: the simulators listen on port %d in their own network namespaces; not valid with --fleet sim", simfleet.DefaultPort)
		}
		bin := o.SimBinary
		if bin == "" {
			p, err := toolcache.Path(toolcache.SimTool, toolcache.SimBinary)
			if err != nil {
				return nil, exitErr(ExitBadOptions, "--fleet sim: %w", err)
			}
			bin = p
		}
		return simfleet.Starter(bin), nil
	default:
		return nil, exitErr(ExitBadOptions, "--fleet %q: want fake or sim", o.Fleet)
	}
}

// Result is what a run produced.
type Result struct {
	// Tests are the results of the selected profiles' tests, in run order (nil when the harness
	// did not start).
	Tests []TestResult
	// Seed is the run's seed; Start and Duration its start and wall time.
	Seed     int64
	Start    time.Time
	Duration time.Duration
	// Reports and Publication are the files written (zero without ReportDir / PublishDir).
	Reports     ReportFiles
	Publication PublishFiles
	// Expected is the comparison with ExpectFailures, nil without it.
	Expected *ExpectationDiff
	// Verdict is the run's verdict (Judge), which every report printed.
	Verdict Verdict
	// Results is what ResultsFile holds (also when it is not written).
	Results Results
}

// Session is a run in progress: the harness is up and tests run one at a time through RunOne;
// Finish writes the reports. Run drives a Session over every test in registry order; RunTest and
// the Ginkgo suite (suites/conformance) drive it from their own test runners, so every driver
// gets the same runner (timeouts, panics, interruption, a dead target) and the same reports.
type Session struct {
	p     *plan
	ctx   context.Context
	start time.Time
	suite *harness.Suite
	out   io.Writer

	runner *Runner

	mu       sync.Mutex
	results  map[string]TestResult
	finished bool

	// startErr is the harness error of a run whose target was started but never got ready (or
	// whose gateway did not start): Finish reports every test not run with it.
	startErr string

	// reproduce and quiet are set by drivers with a runner of their own (RunTest): the command
	// that reruns one test, and no per-test console line (the driver prints its own).
	reproduce func(ct ConformanceTest, seed int64) string
	quiet     bool
}

// Start validates opts, prints the banner, starts the harness (when a selected test will run)
// and returns the Session. Its error is an *ExitError: ExitBadOptions (nothing written) or
// ExitHarness (the results file, when asked for, is written with the error).
func Start(ctx context.Context, opts Options) (*Session, error) {
	p, err := opts.plan()
	if err != nil {
		return nil, err
	}
	s := &Session{p: p, ctx: ctx, start: time.Now(), out: opts.Out, results: map[string]TestResult{}}
	if s.out == nil {
		s.out = io.Discard
	}
	p.meta.Date = s.start
	fmt.Fprintf(s.out, "eppkit conformance %s: target %s, endpoint source %s, profiles %v, supported features %v, seed %d\n",
		p.meta.EppkitVersion, p.target.Name(), p.source.Name(), p.sel.Profiles, p.sel.SupportedFeatures, p.seed)
	if opts.Err != nil {
		for _, w := range p.warnings {
			fmt.Fprintln(opts.Err, "warning: "+w)
		}
	}
	if err := s.startHarness(); err != nil {
		var he *harness.Error
		if errors.As(err, &he) && he.TargetStarted && s.ctx.Err() == nil {
			// The target was started: the run still gets its reports, every test not run, so a
			// CI job sees a JUnit and a ConformanceReport naming the phase that failed.
			s.startErr = err.Error()
			fmt.Fprintf(s.out, "the harness could not start (%s); every selected test is reported not run\n", he.Stage)
			if _, ferr := s.Finish(); ferr != nil {
				var ee *ExitError
				if errors.As(ferr, &ee) && ee.Code == ExitHarness && !strings.HasPrefix(ee.Error(), "write ") {
					return nil, err
				}
				return nil, &ExitError{Code: ExitHarness, Err: errors.Join(err, ferr)}
			}
			return nil, err
		}
		r := NewResults(p.meta, p.target.Name(), p.source.Name(), p.seed, s.start, nil, Verdict{})
		r.ExitCode, r.Error, r.Interrupted = err.Code, err.Error(), errors.Is(ctx.Err(), context.Canceled)
		if werr := s.writeResultsFile(r); werr != nil {
			return nil, &ExitError{Code: ExitHarness, Err: errors.Join(err, werr)}
		}
		return nil, err
	}
	return s, nil
}

func (s *Session) startHarness() *ExitError {
	p, o := s.p, s.p.opts
	var running []ConformanceTest
	for _, ct := range p.tests {
		if p.sel.SkipReason(ct) == "" {
			running = append(running, ct)
		}
	}
	if len(running) == 0 {
		return nil
	}
	if ct, ok := p.target.(*target.CommandTarget); ok && o.Target == "command" && !ct.UsesHealthPort() && o.Err != nil {
		fmt.Fprintln(o.Err, "warning: the --command template has no {{.HealthPort}}: eppkit will probe gRPC health on the "+
			"EPP's ext_proc port ({{.GRPCPort}}); if your EPP serves health on a port of its own, add e.g. --grpc-health-port {{.HealthPort}}")
	}
	// A user's template that names {{.PredictorURL}} always gets a value, whatever runs.
	userTemplateWantsPredictor := o.Target == "command" && harness.ReceivesPredictorURL(p.target)
	eppkit := o.Eppkit
	if eppkit == "" {
		self, err := os.Executable()
		if err != nil {
			return exitErr(ExitHarness, "locate the eppkit binary: %w", err)
		}
		eppkit = self
	}
	suite, err := harness.Start(s.ctx, harness.Config{
		Target: p.target, TargetTLS: p.targetTLS, HealthTLS: p.healthTLS, HealthTLSSet: p.healthSet,
		ReadinessHeadersOnly: o.ReadinessProbe == "headers-only", Source: p.source, Eppkit: eppkit, ConfigFile: o.ConfigFile,
		NoPredictorSidecar: !NeedsPredictorSidecar(running) && !userTemplateWantsPredictor, LogDir: o.LogDir, Timeouts: p.timeouts, Seed: p.seed,
		FleetSize: o.FleetSize, FleetPort: o.FleetPort, Logger: o.Logger, StartFleet: p.startFleet,
		LeaderElectionArgs: o.LeaderElectionArgs,
	})
	if err != nil && s.ctx.Err() != nil {
		// Ctrl-C or SIGTERM while starting: the readiness wait saw a cancelled context, not a
		// broken target, so say that rather than quote the target's log.
		return exitErr(ExitHarness, "interrupted (Ctrl-C or SIGTERM) while the harness was starting, after %s: no test ran, no report written",
			time.Since(s.start).Round(time.Millisecond))
	}
	if err != nil {
		var nl *harness.NotListeningError
		if errors.As(err, &nl) {
			flag := "--address"
			if nl.Role == "gRPC health" && o.HealthAddress != "" {
				flag = "--health-address"
			}
			return exitErr(ExitHarness, "the harness could not start: %w\n"+
				"--target address does not start an EPP: start yours first, listening at %s, or fix %s", err, nl.Addr, flag)
		}
		return &ExitError{Code: ExitHarness, Err: fmt.Errorf("the harness could not start: %w", err)}
	}
	s.suite = suite
	fmt.Fprintf(s.out, "harness ready in %s: pool %v, target ext_proc %s\n", time.Since(s.start).Round(time.Millisecond),
		suite.Endpoints(), suite.TargetAddress)
	return nil
}

// Suite is the running harness; nil when no selected test runs.
func (s *Session) Suite() *harness.Suite { return s.suite }

// NotSupported reports whether ct does not run only because its feature is not claimed
// (Selection.NotSupported): drivers give such a test no line or subtest of its own.
func (s *Session) NotSupported(ct ConformanceTest) bool { return s.p.sel.NotSupported(ct) }

// Finished reports whether Finish was called.
func (s *Session) Finished() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finished
}

// Seed is the run's seed.
func (s *Session) Seed() int64 { return s.p.seed }

// Tests are the tests of the selected profiles, in registry order (RunOne takes them).
func (s *Session) Tests() []ConformanceTest {
	var out []ConformanceTest
	for _, ct := range s.p.tests {
		if s.p.sel.Selected(ct) {
			out = append(out, ct)
		}
	}
	return out
}

// SkipReason is why ct will not run in this session ("" when it runs): Selection.SkipReason.
func (s *Session) SkipReason(ct ConformanceTest) string { return s.p.sel.SkipReason(ct) }

// RunOne runs one test with the run's runner (skip rules, the interruption, a target that died,
// testTimeout, panics), prints its line to Out, records the result for the reports and returns
// it. Tests of unselected profiles are not run and not recorded.
func (s *Session) RunOne(ct ConformanceTest) TestResult {
	s.mu.Lock()
	if s.runner == nil {
		s.runner = &Runner{Suite: s.suite, Selection: s.p.sel, Progress: s.out, Context: s.ctx, Abort: s.p.opts.Abort, Reproduce: s.reproduce}
		if s.quiet {
			s.runner.Progress = nil
		}
	}
	r := s.runner
	s.mu.Unlock()
	res := r.Run([]ConformanceTest{ct})
	if len(res) == 0 {
		return TestResult{Test: ct, Outcome: Skipped, Message: s.p.sel.SkipReason(ct), Start: time.Now()}
	}
	s.mu.Lock()
	s.results[ct.ShortName] = res[0]
	s.mu.Unlock()
	return res[0]
}

// HarnessNotStartedMessage is the skip reason of every selected test of a run whose target was
// started but whose harness never got ready (Verdict.Stopped has the harness error).
const HarnessNotStartedMessage = "not run: the harness could not start (see the run's verdict)"

// NotRunMessage is the skip reason the reports give a selected test its driver never ran (a
// `go test -run` or `ginkgo --focus` filter).
const NotRunMessage = "not run: the test driver filtered it out (go test -run, ginkgo --focus or --label-filter)"

// Finish stops the harness, prints the profile verdicts, writes the reports, the publication
// layout and the results file, and returns the Result with the run's error: nil when it passed,
// else an *ExitError (ExitTestFailed, or ExitHarness when interrupted or a report could not be
// written). Selected tests RunOne never saw are reported skipped with NotRunMessage. Finish may
// be called once.
func (s *Session) Finish() (Result, error) {
	s.mu.Lock()
	if s.finished {
		s.mu.Unlock()
		return Result{}, exitErr(ExitHarness, "conformance.Session.Finish called twice")
	}
	s.finished = true
	var results []TestResult
	for _, ct := range s.Tests() {
		res, ok := s.results[ct.ShortName]
		if !ok {
			res = TestResult{Test: ct, Outcome: Skipped, Message: NotRunMessage, Start: s.start}
			if reason := s.p.sel.SkipReason(ct); reason != "" {
				res.Message = reason
			} else if s.startErr != "" {
				res.Message, res.Interrupted = HarnessNotStartedMessage, true
			} else if s.ctx.Err() != nil {
				res.Message, res.Interrupted = InterruptedMessage, true
			}
		}
		results = append(results, res)
	}
	s.mu.Unlock()
	if s.suite != nil {
		s.suite.Close()
	}
	p, o := s.p, s.p.opts
	res := Result{Tests: results, Seed: p.seed, Start: s.start}
	in := JudgeInput{Selection: p.sel, Interrupted: errors.Is(s.ctx.Err(), context.Canceled), TargetDown: s.targetDown(), HarnessError: s.startErr}
	if o.ExpectFailures != "" {
		in.Expect = &p.expect
	}
	v := Judge(in, results)
	res.Verdict, res.Expected = v, v.Expected
	fmt.Fprintln(s.out)
	fmt.Fprint(s.out, ConsoleVerdict(v, results))
	var runErr *ExitError
	if v.ExitCode != ExitPassed {
		runErr = &ExitError{Code: v.ExitCode, Err: errors.New(v.Reason)}
	}
	if o.ReportDir != "" {
		files, err := WriteReports(o.ReportDir, p.meta, results, s.start, v)
		if err != nil {
			runErr = exitErr(ExitHarness, "write reports: %w", err)
		} else {
			res.Reports = files
			fmt.Fprintf(s.out, "reports: %s, %s, %s\n", strings.Join(files.Reports, ", "), files.JUnit, files.Summary)
			if abs, err := filepath.Abs(files.Summary); err == nil {
				fmt.Fprintf(s.out, "summary: %s\n", abs)
			}
		}
	}
	if o.PublishDir != "" && (runErr == nil || runErr.Code != ExitHarness) {
		pf, err := WritePublication(o.PublishDir, p.meta, results, o.Reproduce, v)
		if err != nil {
			runErr = exitErr(ExitHarness, "write the publication layout: %w", err)
		} else {
			res.Publication = pf
			fmt.Fprintf(s.out, "publication: %s (%d reports, README.md)\n", pf.Dir, len(pf.Reports))
		}
	}
	res.Duration = time.Since(s.start)
	fmt.Fprintf(s.out, "finished in %s (seed %d)\n", res.Duration.Round(time.Millisecond), p.seed)
	fmt.Fprintln(s.out, v.Line())
	res.Results = NewResults(p.meta, p.target.Name(), p.source.Name(), p.seed, s.start, results, v)
	res.Results.Interrupted = in.Interrupted
	if res.Expected != nil {
		res.Results.RecordExpectedFailures(o.ExpectFailures, p.expect, *res.Expected)
	}
	if runErr != nil {
		res.Results.ExitCode, res.Results.Error = runErr.Code, runErr.Error()
	}
	if err := s.writeResultsFile(res.Results); err != nil && runErr == nil {
		runErr = &ExitError{Code: ExitHarness, Err: err}
	}
	if runErr != nil {
		return res, runErr
	}
	return res, nil
}

// targetDown is the diagnosis of a target that stopped answering during the run, "" when it
// did not.
func (s *Session) targetDown() string {
	if s.runner == nil || s.runner.Stopped() == nil {
		return ""
	}
	return s.runner.Stopped().Error()
}

func (s *Session) writeResultsFile(r Results) error {
	if s.p.opts.ResultsFile == "" {
		return nil
	}
	return WriteResultsFile(s.p.opts.ResultsFile, r)
}

// Run runs the conformance suite against the target and writes the reports: Start, RunOne for
// every test of the selected profiles in registry order, Finish. Cancelling ctx (Ctrl-C) lets
// the test in progress finish, skips the rest as interrupted and still writes the reports. The
// error is nil when the run passed, else an *ExitError whose Code is the CLI's exit code; the
// Result is valid with either (empty for ExitBadOptions).
func Run(ctx context.Context, opts Options) (Result, error) {
	s, err := Start(ctx, opts)
	if err != nil {
		return Result{}, err
	}
	for _, ct := range s.Tests() {
		s.RunOne(ct)
	}
	return s.Finish()
}
