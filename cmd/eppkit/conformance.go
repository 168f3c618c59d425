package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/manifests"
)

// Exit codes of `eppkit conformance` (gateway-api style contract).
const (
	exitPass        = 0 // every test that ran passed
	exitTestFailed  = 1 // at least one test failed
	exitHarness     = 2 // the harness or the target could not start
	exitBadFlags    = 3 // invalid flags or configuration
	defaultReportTo = ""
)

// exitError carries a process exit code to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode is the process exit code main uses.
func (e *exitError) ExitCode() int { return e.code }

func badFlags(format string, args ...any) error {
	return &exitError{code: exitBadFlags, err: fmt.Errorf(format, args...)}
}

func init() {
	conformance.RegisterTarget("reference", func(conformance.TargetOptions) (conformance.Target, error) {
		return conformance.NewCommandTarget("reference", conformance.ReferenceCommand)
	})
	subcommands = append(subcommands, newConformanceCommand)
}

// conformanceFlags are the flags of `eppkit conformance`.
type conformanceFlags struct {
	target, source, profiles, supported, exempt, skip, runTest string
	allFeatures                                                bool
	reportDir, timeoutConfig, command, address, healthAddress  string
	targetTLS, configFile, logDir                              string
	healthTLS, expectFailures, publishDir, readinessProbe      string
	fleet, simBinary                                           string
	org, project, url, implVersion                             string
	contact                                                    []string
	seed                                                       int64
	fleetSize, fleetPort                                       int
}

func newConformanceCommand() *cobra.Command {
	var f conformanceFlags
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Run the conformance suite against an EPP",
		Long: `Run the eppkit conformance suite against an endpoint picker (EPP).

The harness starts a fleet of fake vLLM servers, tells the target EPP about them through the
endpoint source, waits for the target's gRPC health SERVING and a first successful pick, then runs
every registered test of the selected profiles, printing each result as it finishes.

Targets: reference (this binary's reference-epp), command (--command template, run as a process,
killed at the end; fields {{.Eppkit}} {{.Endpoints}} {{.GRPCPort}} {{.HealthPort}} {{.MetricsPort}}
{{.Kubeconfig}} {{.PoolName}} {{.PoolNamespace}} {{.ConfigFile}} {{.Seed}}; without {{.HealthPort}} gRPC health
is probed on {{.GRPCPort}}), address (an already running EPP at --address; exit 2 once every connection
has been refused for targetRefused, 5 s by default: nothing listens there).

Exit codes: 0 all tests that ran passed, 1 a test failed, 2 the harness or target could not start,
3 bad flags. With --expect-failures, 0 means the failed tests are exactly the listed ones and 1 that
they differ (a listed test that passed counts as a change).

--publish-dir writes the GIE publication layout (<dir>/<GIE version>/epp/<organization>-<project>/:
one <channel>-<version>-<mode>-<profile>-report.yaml per profile and a README.md with the results
table and a Reproduce section), ready to copy into GIE's conformance/reports/.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return badFlags("%v", err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runConformance(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.target, "target", "reference", "target EPP: "+strings.Join(conformance.TargetNames(), ", "))
	fl.StringVar(&f.source, "endpoint-source", "static", "how the target learns the pool: static (addresses on its command line) or apiserver (InferencePool + Pods on a local kube-apiserver)")
	fl.StringVar(&f.profiles, "profiles", "all", "comma list of profiles to run and report (EPP, EPP-Routing, Reference) or all")
	fl.StringVar(&f.supported, "supported-features", "", "comma list of extended features the implementation claims, or all")
	fl.BoolVar(&f.allFeatures, "all-features", false, "claim every feature that has tests (same as --supported-features all)")
	fl.StringVar(&f.exempt, "exempt-features", "", "comma list of features whose tests are skipped even when supported")
	fl.StringVar(&f.skip, "skip-tests", "", "comma list of test ShortNames to skip")
	fl.StringVar(&f.runTest, "run-test", "", "run only the test with this ShortName")
	fl.StringVar(&f.reportDir, "report-output", defaultReportTo, "directory for the per-profile ConformanceReport YAML, junit.xml and summary.md (requires the implementation flags)")
	fl.StringVar(&f.org, "organization", "", "implementation organization (report)")
	fl.StringVar(&f.project, "project", "", "implementation project (report)")
	fl.StringVar(&f.url, "url", "", "implementation URL (report)")
	fl.StringVar(&f.implVersion, "version", "", "implementation version (report)")
	fl.StringSliceVar(&f.contact, "contact", nil, "implementation contacts, comma list (report)")
	fl.StringVar(&f.timeoutConfig, "timeout-config", "", "YAML file of TimeoutConfig overrides")
	fl.StringVar(&f.command, "command", "", "command template of the command target")
	fl.StringVar(&f.address, "address", "", "ext_proc host:port of the address target")
	fl.StringVar(&f.healthAddress, "health-address", "", "gRPC health host:port of the address target (default --address)")
	fl.StringVar(&f.targetTLS, "target-tls", "plaintext", "TLS to the target: plaintext, insecure (any certificate) or ca:<file>")
	fl.StringVar(&f.healthTLS, "target-health-tls", "", "TLS to the target's gRPC health port, as --target-tls (default: the same as --target-tls; the upstream EPP serves health in plaintext even with TLS on)")
	fl.StringVar(&f.expectFailures, "expect-failures", "", "file of test ShortNames expected to fail (one a line, # comments): exit 0 only if exactly these fail")
	fl.StringVar(&f.readinessProbe, "readiness-probe", "body", "the harness's first pick before the tests: body (a chat completion) or headers-only (GET /v1/models, for an EPP whose body exchange is broken)")
	fl.StringVar(&f.publishDir, "publish-dir", "", "also write the GIE publication layout under this directory (GIE's conformance/reports; requires the implementation flags)")
	fl.StringVar(&f.configFile, "config-file", "", "EndpointPickerConfig file given to the target as {{.ConfigFile}} (reference: --config-file)")
	fl.StringVar(&f.logDir, "log-dir", "out/conformance", "directory for the target's log")
	fl.Int64Var(&f.seed, "seed", 0, "seed for the fakes and the tests (0 = from the clock; EPPKIT_SEED overrides)")
	fl.IntVar(&f.fleetSize, "fleet-size", conformance.DefaultFleetSize, "number of fake vLLM servers in the pool")
	fl.IntVar(&f.fleetPort, "fleet-port", 0, "port every fake vLLM server listens on, on 127.0.10.1..N (0 = a free port); fix it to preconfigure an --address target")
	fl.StringVar(&f.fleet, "fleet", "fake", "the pool's model servers: fake (in-process fake vLLM servers on 127.0.10.x) or sim (llm-d-inference-sim processes, one per network namespace; needs root and iproute2, `eppkit tools build sim`)")
	fl.StringVar(&f.simBinary, "sim-binary", "", "llm-d-inference-sim binary for --fleet sim (default: the cached `eppkit tools build sim`)")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return badFlags("%v", err) })
	cmd.AddCommand(newCatalogueCommand())
	return cmd
}

func newCatalogueCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "catalogue",
		Short: "Print (or write) the Markdown catalogue of every conformance test",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			md := conformance.Catalogue(conformance.All())
			if out == "" {
				_, err := io.WriteString(cmd.OutOrStdout(), md)
				return err
			}
			return os.WriteFile(out, []byte(md), 0o644)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
	return cmd
}

// runPlan is a validated conformanceFlags.
type runPlan struct {
	sel      conformance.Selection
	timeouts conformance.TimeoutConfig
	target   conformance.Target
	source   conformance.EndpointSource
	meta     conformance.ReportMeta
	seed     int64
	expect   conformance.ExpectedFailures
	// startFleet is nil for the fake fleet (--fleet fake).
	startFleet conformance.FleetStarter
}

// parseHealthTLS parses --target-health-tls; set is false when it is empty (health is dialled
// like ext_proc).
func parseHealthTLS(s string) (cfg *tls.Config, set bool, err error) {
	if s == "" {
		return nil, false, nil
	}
	cfg, err = conformance.ParseTargetTLS(s)
	if err != nil {
		return nil, false, errors.New(strings.Replace(err.Error(), "--target-tls", "--target-health-tls", 1))
	}
	return cfg, true, nil
}

// plan validates the flags; every error is a badFlags (exit 3) naming the flag.
func plan(f conformanceFlags, tests []conformance.ConformanceTest) (*runPlan, error) {
	p := &runPlan{}
	var err error
	if p.sel.Profiles, err = conformance.ParseProfiles(f.profiles); err != nil {
		return nil, badFlags("--profiles: %v", err)
	}
	if f.allFeatures {
		f.supported = "all"
	}
	if p.sel.SupportedFeatures, err = conformance.ParseFeatures(f.supported); err != nil {
		return nil, badFlags("--supported-features: %v", err)
	}
	if p.sel.ExemptFeatures, err = conformance.ParseFeatures(f.exempt); err != nil {
		return nil, badFlags("--exempt-features: %v", err)
	}
	for _, s := range strings.Split(f.skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			p.sel.SkipTests = append(p.sel.SkipTests, s)
		}
	}
	p.sel.RunTest = strings.TrimSpace(f.runTest)
	if err := p.sel.Validate(tests); err != nil {
		return nil, badFlags("%v", err)
	}
	if p.timeouts, err = conformance.LoadTimeoutConfig(f.timeoutConfig); err != nil {
		return nil, badFlags("--timeout-config: %v", err)
	}
	if f.target != "command" && f.command != "" {
		return nil, badFlags("--command: only valid with --target command (got --target %s)", f.target)
	}
	if f.target != "address" && (f.address != "" || f.healthAddress != "") {
		return nil, badFlags("--address/--health-address: only valid with --target address (got --target %s)", f.target)
	}
	if p.target, err = conformance.NewTarget(f.target, conformance.TargetOptions{Command: f.command, Address: f.address, HealthAddress: f.healthAddress}); err != nil {
		return nil, badFlags("%v", err)
	}
	if p.source, err = conformance.NewEndpointSource(f.source); err != nil {
		return nil, badFlags("%v", err)
	}
	if f.configFile != "" {
		if _, err := os.Stat(f.configFile); err != nil {
			return nil, badFlags("--config-file: %v", err)
		}
		if f.target == "command" && !strings.Contains(f.command, ".ConfigFile") {
			return nil, badFlags("--config-file: the --command template does not pass {{.ConfigFile}} to your EPP, so the file would be ignored")
		}
	}
	if _, err := conformance.ParseTargetTLS(f.targetTLS); err != nil {
		return nil, badFlags("%v", err)
	}
	if _, _, err := parseHealthTLS(f.healthTLS); err != nil {
		return nil, badFlags("%v", err)
	}
	if f.readinessProbe != "body" && f.readinessProbe != "headers-only" {
		return nil, badFlags("--readiness-probe %q: want body or headers-only", f.readinessProbe)
	}
	if f.expectFailures != "" {
		if p.expect, err = conformance.LoadExpectedFailures(f.expectFailures, tests); err != nil {
			return nil, badFlags("%v", err)
		}
	}
	if f.fleetSize < 1 || f.fleetSize > 250 {
		return nil, badFlags("--fleet-size: must be in [1,250], got %d", f.fleetSize)
	}
	if f.fleetPort < 0 || f.fleetPort > 65535 {
		return nil, badFlags("--fleet-port: must be a port in [0,65535], got %d", f.fleetPort)
	}
	if p.startFleet, err = fleetStarter(f); err != nil {
		return nil, err
	}
	p.meta = conformance.ReportMeta{
		Implementation: confv1.Implementation{Organization: f.org, Project: f.project, URL: f.url, Version: f.implVersion, Contact: f.contact},
		EppkitVersion:  version,
		Selection:      p.sel,
	}
	for flag, dir := range map[string]string{"--report-output": f.reportDir, "--publish-dir": f.publishDir} {
		if dir == "" {
			continue
		}
		if err := p.meta.Implementation.Validate(); err != nil {
			return nil, badFlags("%s needs --organization --project --url --version --contact: %v", flag, err)
		}
	}
	p.seed = f.seed
	if env := os.Getenv("EPPKIT_SEED"); env != "" {
		if _, err := fmt.Sscan(env, &p.seed); err != nil {
			return nil, badFlags("EPPKIT_SEED %q: not an integer", env)
		}
	}
	if p.seed == 0 {
		p.seed = time.Now().UnixNano() % 1_000_000_000
	}
	return p, nil
}

func runConformance(cmd *cobra.Command, f conformanceFlags) error {
	out := cmd.OutOrStdout()
	tests := conformance.All()
	p, err := plan(f, tests)
	if err != nil {
		return err
	}
	tlsCfg, _ := conformance.ParseTargetTLS(f.targetTLS)
	healthTLS, healthTLSSet, _ := parseHealthTLS(f.healthTLS)
	eppkit, err := os.Executable()
	if err != nil {
		return &exitError{code: exitHarness, err: fmt.Errorf("locate the eppkit binary: %w", err)}
	}
	if f.target == "reference" && f.configFile == "" {
		// The reference passes every test only with the config that claims every feature
		// (manifests/epp-configs/conformance.yaml, embedded): use it unless --config-file says otherwise.
		tmp, err := writeTempConfig(manifests.ConformanceEPPConfig())
		if err != nil {
			return &exitError{code: exitHarness, err: err}
		}
		defer os.Remove(tmp)
		f.configFile = tmp
	}
	if ct, ok := p.target.(*conformance.CommandTarget); ok && f.target == "command" && !ct.UsesHealthPort() {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: the --command template has no {{.HealthPort}}: eppkit will probe gRPC health on the "+
			"EPP's ext_proc port ({{.GRPCPort}}); if your EPP serves health on a port of its own, add e.g. --grpc-health-port {{.HealthPort}}")
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	abort, stopAbort := secondInterrupt(cmd.ErrOrStderr())
	defer stopAbort()

	start := time.Now()
	p.meta.Date = start
	fmt.Fprintf(out, "eppkit conformance %s: target %s, endpoint source %s, profiles %v, supported features %v, seed %d\n",
		version, p.target.Name(), p.source.Name(), p.sel.Profiles, p.sel.SupportedFeatures, p.seed)

	// Only start the harness when some test will run.
	runs := 0
	var running []conformance.ConformanceTest
	for _, ct := range tests {
		if p.sel.SkipReason(ct) == "" {
			runs++
			running = append(running, ct)
		}
	}
	var suite *conformance.Suite
	if runs > 0 {
		logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
		suite, err = conformance.StartHarness(ctx, conformance.HarnessConfig{
			Target: p.target, TargetTLS: tlsCfg, HealthTLS: healthTLS, HealthTLSSet: healthTLSSet,
			ReadinessHeadersOnly: f.readinessProbe == "headers-only", Source: p.source, Eppkit: eppkit, ConfigFile: f.configFile,
			NoPredictorSidecar: !conformance.NeedsPredictorSidecar(running),
			LogDir:             f.logDir, Timeouts: p.timeouts, Seed: p.seed, FleetSize: f.fleetSize, FleetPort: f.fleetPort, Logger: logger,
			StartFleet: p.startFleet,
		})
		if err != nil && ctx.Err() != nil {
			// Ctrl-C or SIGTERM while starting: the readiness wait saw a cancelled context, not a
			// broken target, so say that rather than quote the target's log.
			return &exitError{code: exitHarness, err: fmt.Errorf("interrupted (Ctrl-C or SIGTERM) while the harness was starting, after %s: no test ran, no report written",
				time.Since(start).Round(time.Millisecond))}
		}
		if err != nil {
			var nl *conformance.NotListeningError
			if errors.As(err, &nl) {
				flag := "--address"
				if nl.Role == "gRPC health" && f.healthAddress != "" {
					flag = "--health-address"
				}
				return &exitError{code: exitHarness, err: fmt.Errorf("the harness could not start: %w\n"+
					"--target address does not start an EPP: start yours first, listening at %s, or fix %s", err, nl.Addr, flag)}
			}
			return &exitError{code: exitHarness, err: fmt.Errorf("the harness could not start: %w", err)}
		}
		defer suite.Close()
		fmt.Fprintf(out, "harness ready in %s: pool %v, target ext_proc %s\n", time.Since(start).Round(time.Millisecond),
			suite.Endpoints(), suite.TargetAddress)
	}

	r := &conformance.Runner{Suite: suite, Selection: p.sel, Progress: out, Context: ctx, Abort: abort}
	results := r.Run(tests)

	failed := 0
	fmt.Fprintln(out)
	for _, prof := range p.sel.Profiles {
		_, nf, _ := conformance.CountOutcomes(prof, results)
		failed += nf
		fmt.Fprintf(out, "profile %-12s %-11s %s\n", prof, conformance.ProfileVerdict(prof, results), conformance.ProfileLine(prof, results))
	}
	if line := conformance.InterruptionLine(results); line != "" {
		fmt.Fprintln(out, line)
	}
	if f.reportDir != "" {
		files, err := conformance.WriteReports(f.reportDir, p.meta, results, start)
		if err != nil {
			return &exitError{code: exitHarness, err: fmt.Errorf("write reports: %w", err)}
		}
		fmt.Fprintf(out, "reports: %s, %s, %s\n", strings.Join(files.Reports, ", "), files.JUnit, files.Summary)
		if abs, err := filepath.Abs(files.Summary); err == nil {
			fmt.Fprintf(out, "summary: %s\n", abs)
		}
	}
	if f.publishDir != "" {
		pf, err := conformance.WritePublication(f.publishDir, p.meta, results, reproduceLines(f))
		if err != nil {
			return &exitError{code: exitHarness, err: fmt.Errorf("write the publication layout: %w", err)}
		}
		fmt.Fprintf(out, "publication: %s (%d reports, README.md)\n", pf.Dir, len(pf.Reports))
	}
	fmt.Fprintf(out, "finished in %s (seed %d)\n", time.Since(start).Round(time.Millisecond), p.seed)
	if f.expectFailures != "" && !errors.Is(ctx.Err(), context.Canceled) {
		d := p.expect.Compare(p.sel, results)
		fmt.Fprintf(out, "expected failures (%s: %s): %s\n", f.expectFailures, strings.Join(p.expect.Tests, ", "), d)
		if !d.Matched() {
			return &exitError{code: exitTestFailed, err: fmt.Errorf("the results changed against %s: %s", f.expectFailures, d)}
		}
		return nil
	}
	if failed > 0 {
		return &exitError{code: exitTestFailed, err: fmt.Errorf("%d conformance test(s) failed", failed)}
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		ran, notRun := conformance.Interruption(results)
		return &exitError{code: exitHarness, err: fmt.Errorf("interrupted (Ctrl-C or SIGTERM): %d tests ran, %d did not run", ran, notRun)}
	}
	return nil
}

// reproduceLines are the Reproduce section of a publication README: build eppkit, build the
// pinned control plane when the apiserver source is used, and this run's command line.
func reproduceLines(f conformanceFlags) []string {
	lines := []string{"make build"}
	if f.source == "apiserver" {
		lines = append(lines, "./bin/eppkit tools build k8s && ./bin/eppkit tools build gie --only crds")
	}
	if f.fleet == "sim" && f.simBinary == "" {
		lines = append(lines, "./bin/eppkit tools build sim")
	}
	args := []string{"./bin/eppkit"}
	for _, a := range os.Args[1:] {
		args = append(args, conformance.ShellQuote(a))
	}
	return append(lines, strings.Join(args, " "))
}

// writeTempConfig writes an EndpointPickerConfig to a new temporary file and returns its path.
func writeTempConfig(b []byte) (string, error) {
	f, err := os.CreateTemp("", "eppkit-reference-config-*.yaml")
	if err != nil {
		return "", fmt.Errorf("write the reference's config: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("write the reference's config: %w", err)
	}
	return f.Name(), f.Close()
}

// secondInterrupt returns a channel closed by the run's second Ctrl-C or SIGTERM (the first
// cancels the run's context: no new test starts, the one in progress finishes), so the runner
// abandons the test in progress and the reports are written at once; and a func that stops
// listening.
func secondInterrupt(stderr io.Writer) (<-chan struct{}, func()) {
	abort := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for n := 0; ; {
			select {
			case <-sigs:
				if n++; n == 2 {
					fmt.Fprintln(stderr, "second interrupt: abandoning the test in progress; writing the reports")
					close(abort)
					return
				}
			case <-done:
				return
			}
		}
	}()
	return abort, func() { signal.Stop(sigs); close(done) }
}
