package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/bench"
)

func init() {
	benchParent = setupServingBench
	benchSubcommands = append(benchSubcommands, newBenchCompareCommand)
}

// serveFlags are the workload and load-generator flags shared by `eppkit bench` and
// `eppkit bench compare`.
type serveFlags struct {
	workload, workloadFile, exportWorkload, datasetPath string
	seed                                                int64
	rate                                                string
	duration                                            time.Duration
	burstiness                                          float64
	maxConcurrency                                      int
	fleetSize, kvCacheSize, maxModelLen                 int
	inputLen, outputLen, maxOutputLen                   int
	rangeRatio                                          float64
	groups, promptsPerGroup, systemPromptLen            int
	questionLen                                         int
	multiTurn                                           bool
	numPrefixes, prefixLen, suffixLen                   int
	percentileMetrics, metricPercentiles                string
	outputDir, logDir                                   string
	noProgress, verbose                                 bool
	cpuProfile                                          string
}

func (f *serveFlags) register(fl *pflag.FlagSet, defaultRate string) {
	fl.StringVar(&f.workload, "workload", bench.WorkloadSharedPrefix, "workload: "+strings.Join(bench.WorkloadNames, ", "))
	fl.StringVar(&f.workloadFile, "workload-file", "", "read the requests from this JSONL file (one {\"prompt\",\"output_tokens\",\"model\"} per line) instead of generating them")
	fl.StringVar(&f.exportWorkload, "export-workload", "", "write the generated requests to this JSONL file")
	fl.StringVar(&f.datasetPath, "dataset-path", "", "sharegpt: a local ShareGPT-layout JSON file (nothing is downloaded)")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the workload, the arrivals and the fakes")
	fl.StringVar(&f.rate, "rate", defaultRate, "request rate in req/s, or a comma-separated ladder (steps share --duration evenly)")
	fl.DurationVar(&f.duration, "duration", 60*time.Second, "total arrival time per target (all ladder steps)")
	fl.Float64Var(&f.burstiness, "burstiness", 1, "gamma shape of inter-arrival times (1 = Poisson; <1 burstier), as vllm bench serve --burstiness")
	fl.IntVar(&f.maxConcurrency, "max-concurrency", 0, "cap on requests in flight (0 = none), as vllm bench serve --max-concurrency")
	fl.IntVar(&f.fleetSize, "fleet-size", bench.DefaultFleetSize, "fake vLLM endpoints")
	fl.IntVar(&f.kvCacheSize, "kv-cache-size", bench.DefaultKVCacheSize, "KV cache blocks (16 tokens) per endpoint")
	fl.IntVar(&f.maxModelLen, "max-model-len", bench.DefaultMaxModelLen, "context window of the fakes, tokens")
	fl.IntVar(&f.inputLen, "input-len", 0, "random, multi-lora: mean prompt tokens (default 512)")
	fl.IntVar(&f.outputLen, "output-len", 0, "output tokens per request (default 32)")
	fl.Float64Var(&f.rangeRatio, "range-ratio", 0, "random, multi-lora: lengths uniform in len×(1±ratio) (default 0.5); shared-prefix: question and output lengths (default 0: fixed)")
	fl.IntVar(&f.maxOutputLen, "max-output-len", 0, "sharegpt: cap on output tokens (default 128)")
	fl.IntVar(&f.groups, "groups", 0, "shared-prefix: number of system prompts (default 32)")
	fl.IntVar(&f.promptsPerGroup, "prompts-per-group", 0, "shared-prefix: questions per system prompt (default 16)")
	fl.IntVar(&f.systemPromptLen, "system-prompt-len", 0, "shared-prefix: system prompt tokens (default 2048)")
	fl.IntVar(&f.questionLen, "question-len", 0, "shared-prefix: question tokens (default 128)")
	fl.BoolVar(&f.multiTurn, "multi-turn", false, "shared-prefix: repeated draws of a question continue its conversation")
	fl.IntVar(&f.numPrefixes, "num-prefixes", 0, "prefix-repetition: number of prefixes (default 8)")
	fl.IntVar(&f.prefixLen, "prefix-len", 0, "prefix-repetition: prefix tokens (default 1024)")
	fl.IntVar(&f.suffixLen, "suffix-len", 0, "prefix-repetition: suffix tokens (default 128)")
	fl.StringVar(&f.percentileMetrics, "percentile-metrics", "ttft,tpot,itl", "metrics in the result block: ttft,tpot,itl,e2el")
	fl.StringVar(&f.metricPercentiles, "metric-percentiles", "90,99", "percentiles in the result block")
	fl.StringVar(&f.outputDir, "output-dir", "", "where the JSON and plots go (default out/bench/<name>)")
	fl.StringVar(&f.logDir, "log-dir", "", "target logs (default <output-dir>/logs)")
	fl.BoolVar(&f.noProgress, "no-progress", false, "no progress bar (it is shown only when stderr is a terminal)")
	fl.BoolVar(&f.verbose, "verbose", false, "log harness progress")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (load generator, gateway, fleet) to this file")
	_ = fl.MarkHidden("cpuprofile")
}

// startProfile starts the --cpuprofile CPU profile; the returned func stops it.
func (f *serveFlags) startProfile() (func(), error) {
	if f.cpuProfile == "" {
		return func() {}, nil
	}
	fh, err := os.Create(f.cpuProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		fh.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); fh.Close() }, nil
}

// spec builds the workload spec from the flags.
func (f *serveFlags) spec() (bench.Spec, error) {
	s := bench.DefaultSpec(f.workload)
	s.Seed = f.seed
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	set(&s.InputLen, f.inputLen)
	set(&s.OutputLen, f.outputLen)
	set(&s.MaxOutputLen, f.maxOutputLen)
	set(&s.Groups, f.groups)
	set(&s.PromptsPerGroup, f.promptsPerGroup)
	set(&s.SystemPromptLen, f.systemPromptLen)
	set(&s.QuestionLen, f.questionLen)
	set(&s.NumPrefixes, f.numPrefixes)
	set(&s.PrefixLen, f.prefixLen)
	set(&s.SuffixLen, f.suffixLen)
	if f.rangeRatio != 0 {
		s.RangeRatio = f.rangeRatio
	}
	s.MultiTurn = f.multiTurn
	s.Path = f.datasetPath
	if f.workload == bench.WorkloadMultiLoRA {
		s.Adapters = bench.AdapterNames(f.fleetSize)
	}
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

// runConfig builds the shared part of a RunConfig.
func (f *serveFlags) runConfig(stderr io.Writer) (bench.RunConfig, error) {
	var rc bench.RunConfig
	spec, err := f.spec()
	if err != nil {
		return rc, badFlags("%v", err)
	}
	steps, err := bench.ParseLadder(f.rate, f.duration)
	if err != nil {
		return rc, badFlags("%v", err)
	}
	if f.maxConcurrency < 0 {
		return rc, badFlags("--max-concurrency must not be negative, got %d", f.maxConcurrency)
	}
	if f.fleetSize < 1 || f.fleetSize > 250 {
		return rc, badFlags("--fleet-size must be in [1,250], got %d", f.fleetSize)
	}
	pcts, err := parsePercentiles(f.metricPercentiles)
	if err != nil {
		return rc, badFlags("%v", err)
	}
	for _, m := range splitList(f.percentileMetrics) {
		switch m {
		case "ttft", "tpot", "itl", "e2el":
		default:
			return rc, badFlags("--percentile-metrics: unknown metric %q (have ttft, tpot, itl, e2el)", m)
		}
	}
	rc = bench.RunConfig{Spec: spec, Steps: steps, Burstiness: f.burstiness, MaxConcurrency: f.maxConcurrency, Percentiles: pcts,
		Env: bench.EnvConfig{Seed: f.seed, FleetSize: f.fleetSize, KVCacheSize: f.kvCacheSize, MaxModelLen: f.maxModelLen}}
	if f.workloadFile != "" {
		if rc.Requests, err = bench.ReadJSONLFile(f.workloadFile); err != nil {
			return rc, badFlags("--workload-file: %v", err)
		}
		if len(rc.Requests) == 0 {
			return rc, badFlags("--workload-file %s: no requests", f.workloadFile)
		}
	}
	if !f.noProgress && isTerminal(stderr) {
		rc.Progress = stderr
	}
	if f.verbose {
		rc.Logger = slog.New(slog.NewTextHandler(stderr, nil))
		rc.Env.Logger = rc.Logger
	}
	if f.exportWorkload != "" {
		plan, err := bench.MakePlan(rc, bench.AdapterNames(f.fleetSize))
		if err != nil {
			return rc, badFlags("%v", err)
		}
		if err := writeJSONL(f.exportWorkload, plan.Requests); err != nil {
			return rc, err
		}
		fmt.Fprintf(stderr, "wrote %d requests to %s\n", len(plan.Requests), f.exportWorkload)
	}
	return rc, nil
}

// isTerminal reports whether w is a character device (a terminal): the progress bar redraws
// its line and would fill a log file.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func writeJSONL(path string, reqs []bench.Request) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := bench.WriteJSONL(fh, reqs); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

func parsePercentiles(s string) ([]float64, error) {
	var out []float64
	for _, p := range splitList(s) {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 || v >= 100 {
			return nil, fmt.Errorf("--metric-percentiles: %q is not a percentile in (0,100)", p)
		}
		out = append(out, v)
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// singleFlags are the flags of `eppkit bench` itself (one target).
type singleFlags struct {
	serveFlags
	target, command, address, healthAddress, configFile, source string
	fleetPort                                                   int
}

// setupServingBench makes `eppkit bench` (no subcommand) the serving benchmark of one target.
func setupServingBench(cmd *cobra.Command) {
	var f singleFlags
	cmd.Long = `Serving benchmarks of endpoint pickers.

Without a subcommand: send a workload open-loop through the gateway stand-in to a fresh fake vLLM
fleet with the frozen latency profile (SPEC §7) behind one target EPP, and print the result in the
layout of vllm bench serve, the rate-ladder table and the per-endpoint table; the JSON result and
plots go to --output-dir.

Targets: reference (this binary's reference-epp; --config-file picks an EndpointPickerConfig),
round-robin (the gateway without an EPP), command (--command template, as in eppkit conformance),
address (an EPP already running at --address; start it with the pool 127.0.10.1..N:P and pass
--fleet-port P).`
	cmd.Example = `  eppkit bench --target reference --workload shared-prefix --duration 20s
  eppkit bench --target round-robin --workload shared-prefix --rate 4,8,12 --duration 60s
  eppkit bench compare --workload shared-prefix --duration 60s`
	fl := cmd.Flags()
	f.register(fl, "16")
	fl.StringVar(&f.target, "target", "", "target EPP: reference, round-robin, command, address (required to run)")
	fl.StringVar(&f.command, "command", "", "command target: the EPP command template ({{.Eppkit}} {{.Endpoints}} {{.GRPCPort}} …)")
	fl.StringVar(&f.address, "address", "", "address target: the EPP's ext_proc host:port")
	fl.StringVar(&f.healthAddress, "health-address", "", "address target: its gRPC health host:port (default --address)")
	fl.StringVar(&f.configFile, "config-file", "", "EndpointPickerConfig for the target ({{.ConfigFile}})")
	fl.StringVar(&f.source, "endpoint-source", "static", "how the target learns the pool: static or apiserver")
	fl.IntVar(&f.fleetPort, "fleet-port", 0, "port of every fake endpoint (127.0.10.1..N); 0 picks a free one. Give it for --target address so the EPP can be told the pool in advance")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if f.target == "" {
			return cmd.Help()
		}
		return runServingBench(cmd, &f)
	}
}

func runServingBench(cmd *cobra.Command, f *singleFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	rc, err := f.runConfig(stderr)
	if err != nil {
		return err
	}
	name := f.target
	if f.target != bench.TargetRoundRobin {
		t, err := conformance.NewTarget(f.target, conformance.TargetOptions{Command: f.command, Address: f.address, HealthAddress: f.healthAddress})
		if err != nil {
			return badFlags("%v", err)
		}
		src, err := conformance.NewEndpointSource(f.source)
		if err != nil {
			return badFlags("%v", err)
		}
		rc.Env.Target, rc.Env.Source, rc.Env.ConfigFile = t, src, f.configFile
		if f.configFile != "" {
			name += " (" + strings.TrimSuffix(filepath.Base(f.configFile), filepath.Ext(f.configFile)) + ")"
		}
	} else if f.configFile != "" {
		return badFlags("--config-file: the round-robin target has no EPP to configure")
	}
	rc.Env.Name = name
	if f.fleetPort < 0 || f.fleetPort > 65535 {
		return badFlags("--fleet-port must be in 0–65535, got %d", f.fleetPort)
	}
	rc.Env.FleetPort = f.fleetPort
	if rc.Env.Eppkit, err = os.Executable(); err != nil {
		return err
	}
	outDir := f.outputDir
	if outDir == "" {
		outDir = filepath.Join("out", "bench", sanitize(f.target)+"-"+f.workload)
	}
	rc.Env.LogDir = f.logDir
	if rc.Env.LogDir == "" {
		rc.Env.LogDir = filepath.Join(outDir, "logs")
	}
	ctx, cancel := signalContext()
	defer cancel()
	fmt.Fprintf(stderr, "eppkit bench: target %s, workload %s, rate %s req/s over %v, seed %d, load average %s\n",
		name, f.workload, f.rate, f.duration, f.seed, bench.LoadAverage())
	stop, err := f.startProfile()
	if err != nil {
		return err
	}
	res, err := bench.Run(ctx, rc)
	stop()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	single := 0.0
	if len(rc.Steps) == 1 {
		single = rc.Steps[0].Rate
	}
	bench.PrintServingBlock(stdout, res.Overall, bench.BlockOptions{MaxConcurrency: f.maxConcurrency, RequestRate: single,
		PercentileMetrics: splitList(f.percentileMetrics), Percentiles: rc.Percentiles})
	fmt.Fprintln(stdout)
	bench.PrintSteps(stdout, res)
	fmt.Fprintln(stdout)
	bench.PrintEndpoints(stdout, res)
	fmt.Fprintf(stdout, "\noracle bound: mean TTFT ≥ %.1f ms (cached %.0f%% of prompt tokens); measured mean %.1f ms = %.2fx the bound\n",
		res.Oracle.MeanTTFTMs, 100*res.Oracle.CachedTokenFraction, res.Overall.TTFT.Mean, res.OracleRatio)
	if res.EngineTTFTMs >= 0 {
		fmt.Fprintf(stdout, "the fakes' own mean TTFT %.1f ms (queue wait %.1f ms): %.1f ms of the mean TTFT is spent outside them (client, gateway, EPP, scheduling)\n",
			res.EngineTTFTMs, res.EngineQueueMs, res.Overall.TTFT.Mean-res.EngineTTFTMs)
	}
	fmt.Fprintf(stdout, "load average: %s before, %s after\n", res.LoadAvgStart, res.LoadAvgEnd)
	files, err := bench.WriteOutputs(outDir, []*bench.Result{res}, -1)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", strings.Join(files, ", "))
	return nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == '(' || r == ')' {
			return '-'
		}
		return r
	}, s)
}

// writeJSON writes v indented to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
