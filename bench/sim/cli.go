package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/bench/extproc"
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/internal/procstat"
)

// Policies are the policies `eppkit bench simulate` knows, in table order: the baselines
// (round-robin, oracle) and the reference EPP with the EndpointPickerConfig files of
// `eppkit bench compare` (bench.PolicyConfig).
var Policies = []string{PolicyRoundRobin, bench.PolicyRandom, bench.PolicyReference, bench.PolicyLoadOnly, bench.PolicyPredicted,
	bench.PolicyTokenLoad, bench.PolicyActiveRequest, PolicyOracle}

// DefaultValidatePolicies are the policies of `eppkit bench simulate --validate`; DefaultComparePolicies
// those of `eppkit bench simulate compare`.
const (
	DefaultValidatePolicies = PolicyRoundRobin + "," + bench.PolicyReference + "," + bench.PolicyPredicted
	DefaultComparePolicies  = PolicyRoundRobin + "," + bench.PolicyReference + "," + bench.PolicyLoadOnly + "," + bench.PolicyPredicted + "," + PolicyOracle
)

// ReferencePicker builds a picker that runs the reference EPP named name with the
// EndpointPickerConfig file configFile ("" = the reference's default profile). bench/simepp
// provides it (conformance never imports the reference).
type ReferencePicker func(name, configFile string) (Picker, error)

// Options are the options shared by `eppkit bench simulate` and `eppkit bench simulate compare`,
// each named after its flag; --duration and --rate are virtual time. The load-generator options
// of the real bench that the simulation does not model (--max-concurrency) are refused.
type Options struct {
	bench.ServeOptions
	// ConfigsDir holds the reference policies' EndpointPickerConfig files (--configs-dir).
	ConfigsDir string
	// RefreshInterval is the virtual time between two scrapes of an endpoint
	// (--refresh-metrics-interval); StaleThreshold the age at which the picker treats metrics
	// as stale (--stale-threshold).
	RefreshInterval, StaleThreshold time.Duration
	// OutputDir receives the JSON and the plots (--output-dir; "" = out/bench/simulate-…).
	OutputDir string
	// NewReference builds the reference policies' pickers; required for them.
	NewReference ReferencePicker
}

// badOptions is the error of an invalid option: exit code conformance.ExitBadOptions.
func badOptions(format string, args ...any) error {
	return &conformance.ExitError{Code: conformance.ExitBadOptions, Err: fmt.Errorf(format, args...)}
}

// runFailed is the error of a run that could not finish: exit code conformance.ExitHarness.
func runFailed(err error) error {
	return &conformance.ExitError{Code: conformance.ExitHarness, Err: err}
}

// Config validates the options and builds the simulation's Config. Errors are
// *conformance.ExitError with ExitBadOptions, naming the flag.
func (o *Options) Config(stderr io.Writer) (Config, error) {
	var c Config
	if o.MaxConcurrency != 0 {
		return c, badOptions("--max-concurrency is not simulated (the simulation is open loop only)")
	}
	n, profiles, err := o.Fleet(MaxFleetSize)
	if err != nil {
		return c, badOptions("%v", err)
	}
	o.FleetSize = n // resolved once: the output names and headers print it
	// The real bench's checks (workload, ladder, percentiles, workload file), with a fleet size
	// it accepts: the simulated fleet may be larger than a real one.
	so := o.ServeOptions
	so.FleetSize, so.FleetProfiles, so.Verbose = min(so.FleetSize, bench.MaxRealFleetSize), "", false
	rc, err := so.RunConfig(stderr)
	if err != nil {
		return c, badOptions("%v", err)
	}
	if o.Workload == bench.WorkloadMultiLoRA {
		rc.Spec.Adapters = bench.AdapterNames(o.FleetSize)
	}
	if o.RefreshInterval <= 0 {
		return c, badOptions("--refresh-metrics-interval must be > 0, got %v", o.RefreshInterval)
	}
	if o.StaleThreshold < o.RefreshInterval {
		return c, badOptions("--stale-threshold must be ≥ --refresh-metrics-interval (got %v < %v)", o.StaleThreshold, o.RefreshInterval)
	}
	c = Config{Spec: rc.Spec, Requests: rc.Requests, Steps: rc.Steps, Burstiness: o.Burstiness, Percentiles: rc.Percentiles,
		FleetSize: o.FleetSize, KVCacheSize: o.KVCacheSize, MaxModelLen: o.MaxModelLen, Profiles: profiles, Seed: o.Seed,
		RefreshInterval: o.RefreshInterval, StaleThreshold: o.StaleThreshold, Goodput: rc.Goodput, Progress: rc.Progress}
	return c, nil
}

// NewPicker returns a fresh picker of policy (one of Policies); configFile, when set, replaces a
// reference policy's EndpointPickerConfig.
func (o *Options) NewPicker(policy, configFile string) (Picker, error) {
	switch policy {
	case PolicyRoundRobin:
		return NewRoundRobin(), nil
	case PolicyOracle:
		return NewOracle(), nil
	case bench.PolicyRandom, bench.PolicyReference, bench.PolicyLoadOnly, bench.PolicyPredicted, bench.PolicyTokenLoad, bench.PolicyActiveRequest:
		if o.NewReference == nil {
			return nil, errors.New("sim: Options.NewReference is not set (bench/simepp.NewPicker)")
		}
		if configFile == "" && bench.PolicyConfig(policy) != "" {
			configFile = filepath.Join(o.ConfigsDir, bench.PolicyConfig(policy))
		}
		return o.NewReference(policy, configFile)
	}
	return nil, fmt.Errorf("unknown policy %q (have %s)", policy, strings.Join(Policies, ", "))
}

// SimulateOptions are the options of `eppkit bench simulate`: one policy (--policy) and, for a
// reference policy, an EndpointPickerConfig replacing its own (--config-file).
type SimulateOptions struct {
	Options
	Policy, ConfigFile string
}

// Simulate runs one policy, prints the result as `eppkit bench` does (marked SIMULATED) with this
// process's peak RSS, and writes the outputs (WriteOutputs). Errors are *conformance.ExitError.
func Simulate(ctx context.Context, stdout, stderr io.Writer, o SimulateOptions) error {
	cfg, err := o.Config(stderr)
	if err != nil {
		return err
	}
	picker, err := o.NewPicker(o.Policy, o.ConfigFile)
	if err != nil {
		return badOptions("--policy: %v", err)
	}
	outDir := o.OutputDir
	if outDir == "" {
		outDir = filepath.Join("out", "bench", "simulate-"+o.Policy+"-"+strconv.Itoa(o.FleetSize)+"-"+o.Name())
	}
	fmt.Fprintf(stderr, "eppkit bench simulate: policy %s, %d endpoints, workload %s, rate %s req/s over %v of virtual time, seed %d, load average %s\n",
		o.Policy, o.FleetSize, o.Workload, o.Rate, o.Duration, o.Seed, bench.LoadAverage())
	res, err := Run(ctx, cfg, picker)
	if err != nil {
		return runFailed(err)
	}
	PrintResult(stdout, res, o.BlockOptions(bench.RunConfig{Steps: cfg.Steps, Percentiles: cfg.Percentiles}))
	fmt.Fprintf(stdout, "peak RSS of this process: %s; load average at the end: %s\n", procstat.PeakRSSString(), bench.LoadAverage())
	files, err := WriteOutputs(outDir, res)
	if err != nil {
		return runFailed(err)
	}
	if o.InferencePerf() {
		more, err := WriteInferencePerf(outDir, cfg, res)
		if err != nil {
			return runFailed(err)
		}
		files = append(files, more...)
	}
	fmt.Fprintf(stdout, "wrote %s\n", strings.Join(files, ", "))
	return nil
}

// Requests returns the n requests a simulation of cfg sends (the same as Run's, arrival i's
// request at index i).
func Requests(cfg Config, n int) ([]bench.Request, error) {
	next, _, err := requestSource(cfg)
	if err != nil {
		return nil, err
	}
	out := make([]bench.Request, n)
	for i := range out {
		out[i] = next(i)
	}
	return out, nil
}

// WriteInferencePerf writes the inference-perf report of the simulated run res of cfg under
// outDir/inference-perf/<policy> (bench.WriteInferencePerf; times are seconds of virtual time
// from the simulation's epoch) and returns the files written.
func WriteInferencePerf(outDir string, cfg Config, res *Result) ([]string, error) {
	reqs, err := Requests(cfg, len(res.Outcomes))
	if err != nil {
		return nil, err
	}
	return bench.WriteInferencePerf(outDir, []*bench.Result{res.Result}, reqs)
}

// ValidateOptions are the options of `eppkit bench simulate --validate`: the policies run both in
// real time and in simulation (--validate-policies), and the eppkit binary that runs the
// reference EPP of the real runs ("" = this executable).
type ValidateOptions struct {
	Options
	Policies string
	Eppkit   string
}

// ValidationRun is one policy of a validation: its real-time and simulated results.
type ValidationRun struct {
	Policy    string        `json:"policy"`
	Real      *bench.Result `json:"real"`
	Simulated *Result       `json:"simulated"`
}

// RunValidation runs the workload in real time (bench.Compare: a fresh fake fleet of at most 250
// endpoints per policy, frozen profile) and then in simulation for every policy, prints the
// simulation's errors (Validate, PrintValidation) and writes the real and simulated outputs
// (named <policy>-real and <policy>-simulated) and validation.json under the output directory.
// The "reference" conformance target must be registered (conformance/wiring). Errors are
// *conformance.ExitError.
func RunValidation(ctx context.Context, stdout, stderr io.Writer, o ValidateOptions) error {
	scfg, err := o.Config(stderr)
	if err != nil {
		return err
	}
	if o.FleetSize > bench.MaxRealFleetSize {
		return badOptions("--validate runs the real fleet too: at most %d endpoints (--fleet-size, --fleet-profiles), got %d", bench.MaxRealFleetSize, o.FleetSize)
	}
	policies := conformance.SplitList(o.Policies)
	for _, p := range policies {
		if p == PolicyOracle {
			return badOptions("--validate-policies: the oracle has no real-time counterpart")
		}
		if _, err := o.NewPicker(p, ""); err != nil {
			return badOptions("--validate-policies: %v", err)
		}
	}
	rc, err := o.ServeOptions.RunConfig(stderr)
	if err != nil {
		return badOptions("%v", err)
	}
	targets, notes, err := bench.Policies(strings.Join(policies, ","), bench.PolicyOptions{ConfigsDir: o.ConfigsDir})
	if err != nil {
		return badOptions("%v", err)
	}
	for _, n := range notes {
		fmt.Fprintln(stderr, n)
	}
	outDir := o.OutputDir
	if outDir == "" {
		outDir = filepath.Join("out", "bench", "simulate-validate-"+o.Name())
	}
	rc.Env.Eppkit, rc.Env.LogDir = o.Eppkit, filepath.Join(outDir, "logs")
	if rc.Env.Eppkit == "" {
		if rc.Env.Eppkit, err = os.Executable(); err != nil {
			return runFailed(err)
		}
	}
	fmt.Fprintf(stderr, "eppkit bench simulate --validate: %s on %d endpoints, workload %s, rate %s req/s over %v, seed %d, load average %s\n",
		strings.Join(policies, ", "), o.FleetSize, o.Workload, o.Rate, o.Duration, o.Seed, bench.LoadAverage())
	real, err := bench.Compare(ctx, rc, targets, stderr)
	if err != nil {
		return runFailed(err)
	}
	for name, why := range real.Skipped {
		fmt.Fprintf(stderr, "real-time run of %s skipped: %s\n", name, why)
	}
	var rows []ValidationRow
	var runs []ValidationRun
	var all []*bench.Result
	for _, rr := range real.Results {
		picker, err := o.NewPicker(rr.Target, "")
		if err != nil {
			return runFailed(err)
		}
		fmt.Fprintf(stderr, "== %s: simulating\n", rr.Target)
		sr, err := Run(ctx, scfg, picker)
		if err != nil {
			return runFailed(err)
		}
		rows = append(rows, Validate(rr.Target, rr, sr)...)
		runs = append(runs, ValidationRun{Policy: rr.Target, Real: rr, Simulated: sr})
		realCopy, simCopy := *rr, *sr.Result
		realCopy.Target, simCopy.Target = rr.Target+"-real", rr.Target+"-simulated"
		all = append(all, &realCopy, &simCopy)
		fmt.Fprintf(stdout, "%s: real mean TTFT %.1f ms (the fakes' own %.1f ms), simulated %.1f ms; real load average %s → %s\n",
			rr.Target, rr.Overall.TTFT.Mean, rr.EngineTTFTMs, sr.Overall.TTFT.Mean, rr.LoadAvgStart, rr.LoadAvgEnd)
	}
	fmt.Fprintf(stdout, "\nSimulation vs real time: %d endpoints, workload %s, rate %s req/s over %v, seed %d\n",
		o.FleetSize, o.Workload, o.Rate, o.Duration, o.Seed)
	PrintValidation(stdout, rows)
	fmt.Fprintf(stdout, "load average at the end: %s\n", bench.LoadAverage())
	files, err := bench.WriteOutputs(outDir, all, -1)
	if err != nil {
		return runFailed(err)
	}
	if o.InferencePerf() && len(real.Results) > 0 {
		// all alternates each policy's real and simulated result; both saw the same requests.
		reqs, err := Requests(scfg, len(real.Results[0].Outcomes))
		if err != nil {
			return runFailed(err)
		}
		more, err := bench.WriteInferencePerf(outDir, all, reqs)
		if err != nil {
			return runFailed(err)
		}
		files = append(files, more...)
	}
	path := filepath.Join(outDir, "validation.json")
	if err := bench.WriteJSONFile(path, struct {
		Rows  []ValidationRow `json:"rows"`
		Runs  []ValidationRun `json:"runs"`
		Steps []bench.Step    `json:"steps"`
	}{rows, runs, rc.Steps}); err != nil {
		return runFailed(err)
	}
	fmt.Fprintf(stdout, "wrote %s\n", strings.Join(append(files, path), ", "))
	return nil
}

// CompareOptions are the options of `eppkit bench simulate compare`, each named after its flag:
// the fleet sizes (--endpoints, comma-separated), the policies (--policies), and the experiment
// of SweepConfig (--rate-per-endpoint, --warmup, --groups-per-endpoint, --min-requests);
// --duration is the measured virtual time per run.
type CompareOptions struct {
	Options
	Endpoints, Policies string
	RatePerEndpoint     float64
	Warmup              time.Duration
	GroupsPerEndpoint   int
	MinRequests         int
}

// RunCompare runs the sweep (RunSweep), prints its table with the wall time, this process's peak
// RSS and the load average, and writes sweep.json and the plots against fleet size
// (WriteSweepOutputs). An interrupted sweep writes the cells that finished and returns an
// ExitHarness error. Errors are *conformance.ExitError.
func RunCompare(ctx context.Context, stdout, stderr io.Writer, o CompareOptions) error {
	sizes, err := extproc.ParseIntList("--endpoints", o.Endpoints, 1)
	if err != nil {
		return badOptions("%v", err)
	}
	for i, n := range sizes {
		if n > MaxFleetSize || slices.Contains(sizes[:i], n) {
			return badOptions("--endpoints: %d is above %d or listed twice", n, MaxFleetSize)
		}
	}
	policies := conformance.SplitList(o.Policies)
	for _, p := range policies {
		if _, err := o.NewPicker(p, ""); err != nil {
			return badOptions("--policies: %v", err)
		}
	}
	if o.MinRequests < 1 {
		return badOptions("--min-requests must be at least 1, got %d", o.MinRequests)
	}
	o.FleetSize = sizes[0]
	base, err := o.Config(stderr)
	if err != nil {
		return err
	}
	outDir := o.OutputDir
	if outDir == "" {
		outDir = filepath.Join("out", "bench", "simulate-compare-"+o.Name())
	}
	fmt.Fprintf(stderr, "eppkit bench simulate compare: %s on %s endpoints, %.1f req/s per endpoint, %v warm-up + %v measured (virtual), seed %d, load average %s\n",
		strings.Join(policies, ", "), o.Endpoints, o.RatePerEndpoint, o.Warmup, o.Duration, o.Seed, bench.LoadAverage())
	ipDir := ""
	if o.InferencePerf() {
		ipDir = outDir
	}
	started := time.Now()
	sw, err := RunSweep(ctx, SweepConfig{Base: base, FleetSizes: sizes, Policies: policies, RatePerEndpoint: o.RatePerEndpoint,
		Warmup: o.Warmup, Duration: o.Duration, GroupsPerEndpoint: o.GroupsPerEndpoint, MinRequests: o.MinRequests, Log: stderr,
		InferencePerfDir: ipDir,
		NewPicker:        func(p string) (Picker, error) { return o.NewPicker(p, "") }})
	if err != nil && (sw == nil || !sw.Interrupted) {
		return badOptions("%v", err)
	}
	fmt.Fprintln(stdout)
	PrintSweep(stdout, sw)
	fmt.Fprintf(stdout, "wall time %.0f s, peak RSS of this process %s, load average at the end %s\n",
		time.Since(started).Seconds(), procstat.PeakRSSString(), bench.LoadAverage())
	files, werr := WriteSweepOutputs(outDir, sw)
	if werr != nil {
		return runFailed(werr)
	}
	fmt.Fprintf(stdout, "wrote %s\n", strings.Join(files, ", "))
	if sw.Interrupted {
		return runFailed(errors.New("interrupted: wrote the cells that finished"))
	}
	return nil
}
