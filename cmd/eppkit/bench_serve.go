package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/conformance"
)

func init() {
	benchParent = setupServingBench
	benchSubcommands = append(benchSubcommands, newBenchCompareCommand)
}

// serveFlags are the flags shared by `eppkit bench` and `eppkit bench compare`: the workload and
// load-generator options, and where the outputs go.
type serveFlags struct {
	bench.ServeOptions
	outputDir, logDir string
	cpuProfile        string
}

func (f *serveFlags) register(fl *pflag.FlagSet, defaultRate string) {
	fl.StringVar(&f.Workload, "workload", bench.WorkloadSharedPrefix, "workload: "+strings.Join(bench.WorkloadNames, ", "))
	fl.StringVar(&f.Shape, "shape", "", "a workload preset shaped like llm-d's token-aware routing study's: "+strings.Join(bench.Shapes, ", ")+" (sets --workload and the sizes not given; docs/bench.md)")
	fl.StringVar(&f.WorkloadFile, "workload-file", "", "read the requests from this JSONL file (one {\"prompt\",\"output_tokens\",\"model\"} per line) instead of generating them")
	fl.StringVar(&f.ExportWorkload, "export-workload", "", "write the generated requests to this JSONL file")
	fl.StringVar(&f.DatasetPath, "dataset-path", "", "sharegpt: a local ShareGPT-layout JSON file (nothing is downloaded)")
	fl.Int64Var(&f.Seed, "seed", 1, "seed of the workload, the arrivals and the fakes")
	fl.StringVar(&f.Rate, "rate", defaultRate, "request rate in req/s, or a comma-separated ladder (steps share --duration evenly)")
	fl.DurationVar(&f.Duration, "duration", 60*time.Second, "total arrival time per target (all ladder steps)")
	fl.Float64Var(&f.Burstiness, "burstiness", 1, "gamma shape of inter-arrival times (1 = Poisson; <1 burstier), as vllm bench serve --burstiness")
	fl.IntVar(&f.MaxConcurrency, "max-concurrency", 0, "cap on requests in flight (0 = none), as vllm bench serve --max-concurrency")
	fl.IntVar(&f.FleetSize, "fleet-size", 0, fmt.Sprintf("fake vLLM endpoints (default: the endpoints --fleet-profiles lists, else %d)", bench.DefaultFleetSize))
	fl.StringVar(&f.FleetProfiles, "fleet-profiles", "", "the endpoints' latency profiles (SPEC §7: "+strings.Join(bench.ProfileNames, ", ")+") as NAME:COUNT runs, cycled over the fleet: default:1,slow:1 (default: all default)")
	fl.IntVar(&f.KVCacheSize, "kv-cache-size", bench.DefaultKVCacheSize, "KV cache blocks (16 tokens) per endpoint")
	fl.IntVar(&f.MaxModelLen, "max-model-len", bench.DefaultMaxModelLen, "context window of the fakes, tokens")
	fl.IntVar(&f.InputLen, "input-len", 0, "random, multi-lora: mean prompt tokens (default 512)")
	fl.IntVar(&f.OutputLen, "output-len", 0, "output tokens per request (default 32)")
	fl.Float64Var(&f.RangeRatio, "range-ratio", 0, "random, multi-lora: lengths uniform in len×(1±ratio) (default 0.5); shared-prefix: question and output lengths (default 0: fixed)")
	fl.IntVar(&f.MaxOutputLen, "max-output-len", 0, "sharegpt: cap on output tokens (default 128)")
	fl.IntVar(&f.Groups, "groups", 0, "shared-prefix: number of system prompts (default 32)")
	fl.IntVar(&f.PromptsPerGroup, "prompts-per-group", 0, "shared-prefix: questions per system prompt (default 16)")
	fl.IntVar(&f.SystemPromptLen, "system-prompt-len", 0, "shared-prefix: system prompt tokens (default 2048)")
	fl.IntVar(&f.QuestionLen, "question-len", 0, "shared-prefix: question tokens (default 128)")
	fl.BoolVar(&f.MultiTurn, "multi-turn", false, "shared-prefix: repeated draws of a question continue its conversation")
	fl.IntVar(&f.NumPrefixes, "num-prefixes", 0, "prefix-repetition: number of prefixes (default 8)")
	fl.IntVar(&f.PrefixLen, "prefix-len", 0, "prefix-repetition: prefix tokens (default 1024)")
	fl.IntVar(&f.SuffixLen, "suffix-len", 0, "prefix-repetition: suffix tokens (default 128)")
	fl.StringVar(&f.Goodput, "goodput", "", "SLOs of goodput, as vllm bench serve --goodput: \"ttft:500 tpot:50\" (ms; keys ttft, tpot, e2el)")
	fl.Float64Var(&f.SLOFraction, "slo-fraction", 0, "share of interactive requests, which send --slo as x-slo-ttft-ms / x-slo-tpot-ms headers; the rest are batch requests without SLOs")
	fl.StringVar(&f.SLO, "slo", "", "the SLOs interactive requests carry: \"ttft:300 tpot:40\" (ms; keys ttft, tpot)")
	fl.StringVar(&f.PercentileMetrics, "percentile-metrics", "ttft,tpot,itl", "metrics in the result block: ttft,tpot,itl,e2el")
	fl.StringVar(&f.MetricPercentiles, "metric-percentiles", "90,99", "percentiles in the result block")
	fl.StringVar(&f.outputDir, "output-dir", "", "where the JSON and plots go (default out/bench/<name>)")
	fl.StringVar(&f.logDir, "log-dir", "", "target logs (default <output-dir>/logs)")
	fl.BoolVar(&f.NoProgress, "no-progress", false, "no progress bar (it is shown only when stderr is a terminal)")
	fl.BoolVar(&f.Verbose, "verbose", false, "log harness progress")
	fl.StringVar(&f.ReportFormat, "report-format", bench.ReportEppkit, "reports to write, comma-separated: eppkit (results.json, vllm_*.json, plots: always written), inference-perf (also inference-perf's summary, per-stage and per-request lifecycle JSON under <output-dir>/inference-perf/<target>/)")
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
fleet with the frozen latency profile (SPEC §7; --fleet-profiles mixes in the slow one) behind one
target EPP, and print the result in the layout of vllm bench serve, the rate-ladder table and the
per-endpoint table; the JSON result and plots go to --output-dir.

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
			if cmd.Flags().NFlag() > 0 {
				// Flags given but no target: a run was meant; say what is missing instead of
				// printing the help and exiting 0.
				return badFlags("--target is required to run a serving benchmark (reference, round-robin, command, address; see --help)")
			}
			return cmd.Help()
		}
		return runServingBench(cmd, &f)
	}
}

func runServingBench(cmd *cobra.Command, f *singleFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	rc, err := f.RunConfig(stderr)
	if err != nil {
		return badFlags("%v", err)
	}
	name := f.target
	if f.target != bench.TargetRoundRobin && !slices.Contains(conformance.TargetNames(), f.target) {
		return badFlags("--target: unknown target %q (have %s, %s)", f.target, bench.TargetRoundRobin,
			strings.Join(conformance.TargetNames(), ", "))
	}
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
		outDir = filepath.Join("out", "bench", sanitize(f.target)+"-"+f.Name())
	}
	rc.Env.LogDir = f.logDir
	if rc.Env.LogDir == "" {
		rc.Env.LogDir = filepath.Join(outDir, "logs")
	}
	ctx, cancel := signalContext()
	defer cancel()
	fmt.Fprintf(stderr, "eppkit bench: target %s, workload %s, rate %s req/s over %v, seed %d, load average %s\n",
		name, f.Workload, f.Rate, f.Duration, f.Seed, bench.LoadAverage())
	stop, err := f.startProfile()
	if err != nil {
		return err
	}
	res, err := bench.Run(ctx, rc)
	stop()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if err := bench.WriteRun(stdout, outDir, res, f.BlockOptions(rc)); err != nil {
		return err
	}
	return f.writeInferencePerf(stdout, outDir, rc, []*bench.Result{res})
}

// writeInferencePerf writes the inference-perf reports of results when --report-format asks
// for them, with the requests of rc's plan (the same for every result of a run or comparison).
func (f *serveFlags) writeInferencePerf(stdout io.Writer, outDir string, rc bench.RunConfig, results []*bench.Result) error {
	if !f.InferencePerf() {
		return nil
	}
	plan, err := bench.MakePlan(rc, bench.AdapterNames(rc.Env.FleetSize))
	if err != nil {
		return err
	}
	files, err := bench.WriteInferencePerf(outDir, results, plan.Requests)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote inference-perf reports: %s\n", strings.Join(files, ", "))
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
