package bench

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eppkit/eppkit/conformance"
)

// ServeOptions are the workload and load-generator options shared by `eppkit bench` and
// `eppkit bench compare`, each named after its flag; RunConfig turns them into a RunConfig. Zero
// values of the workload sizes take the workload's defaults (DefaultSpec).
type ServeOptions struct {
	// Workload names the workload (--workload); WorkloadFile replaces it with JSONL requests
	// (--workload-file); ExportWorkload writes the generated requests (--export-workload);
	// DatasetPath is the sharegpt file (--dataset-path).
	Workload, WorkloadFile, ExportWorkload, DatasetPath string
	// Seed seeds the workload, the arrivals and the fakes (--seed).
	Seed int64
	// Rate is a rate or a comma-separated ladder in req/s (--rate), sharing Duration (--duration).
	Rate     string
	Duration time.Duration
	// Burstiness is the gamma shape of inter-arrival times (--burstiness; > 0, and 0 in a struct
	// built in code means the flag default 1, Poisson); MaxConcurrency caps the
	// requests in flight (--max-concurrency, 0 = none).
	Burstiness     float64
	MaxConcurrency int
	// FleetSize, KVCacheSize and MaxModelLen size the fake fleet (--fleet-size, --kv-cache-size,
	// --max-model-len). FleetSize 0 is the number of endpoints FleetProfiles lists, or
	// DefaultFleetSize without it (Fleet).
	FleetSize, KVCacheSize, MaxModelLen int
	// FleetProfiles are the endpoints' latency profiles (--fleet-profiles, ParseFleetProfiles:
	// "default:1,slow:1"), cycled over the fleet; "" is every endpoint default.
	FleetProfiles string
	// The workload's shape (--input-len, --output-len, --max-output-len, --range-ratio, --groups,
	// --prompts-per-group, --system-prompt-len, --question-len, --multi-turn, --num-prefixes,
	// --prefix-len, --suffix-len).
	InputLen, OutputLen, MaxOutputLen                     int
	RangeRatio                                            float64
	Groups, PromptsPerGroup, SystemPromptLen, QuestionLen int
	MultiTurn                                             bool
	NumPrefixes, PrefixLen, SuffixLen                     int
	// Goodput are the SLOs of goodput, as vllm bench serve --goodput ("ttft:500 tpot:50";
	// ParseGoodput).
	Goodput string
	// SLOFraction is the share of interactive requests, which carry SLO as SLO headers
	// (--slo-fraction, --slo "ttft:300 tpot:40"; Spec.SLOFraction); the rest are batch.
	SLOFraction float64
	SLO         string
	// PercentileMetrics ("ttft,tpot,itl,e2el") and MetricPercentiles ("90,99") shape the result
	// block (--percentile-metrics, --metric-percentiles).
	PercentileMetrics, MetricPercentiles string
	// NoProgress hides the progress bar (--no-progress); Verbose logs harness progress (--verbose).
	NoProgress, Verbose bool
	// Shape is --shape: a preset of the workload and its sizes (Shapes); "" = none.
	Shape string
	// ReportFormat is --report-format: a comma list of ReportFormats ("" = eppkit). eppkit's
	// own files are always written; inference-perf adds that tool's report layout.
	ReportFormat string
}

// InferencePerf reports whether --report-format asks for inference-perf's reports (it must have
// been validated: RunConfig does).
func (f *ServeOptions) InferencePerf() bool {
	formats, _ := ParseReportFormats(f.ReportFormat)
	return slices.Contains(formats, ReportInferencePerf)
}

// Workload shapes (--shape): presets shaped like the three workloads of llm-d's token-aware
// routing study (blog "Sticky until saturated", 2026-08-17: code-generation, b2b-saas, reasoning),
// scaled to the fake fleet's context (--max-model-len 8,192) and cache (3,072 blocks of 16 tokens).
const (
	// ShapePrefillBound: long shared prefixes, short answers (the blog's code-generation; cf.
	// inference-perf's workload-catalog/code-generation: a 3,000-token shared system prompt).
	// shared-prefix, 24 groups × 16 questions, 3,000-token system prompts, 200-token questions
	// (±30%), 16 output tokens: 72,000 tokens of prefixes, more than one endpoint's 49,152-token
	// cache and less than two, so where a group goes decides whether its prefix stays cached; a
	// miss costs 750 ms of prefill.
	ShapePrefillBound = "prefill-bound"
	// ShapeMixed: moderate shared prefixes and answers (the blog's b2b-saas). shared-prefix, 32
	// groups × 16, 1,024-token system prompts, 512-token questions and 128 output tokens (±50%).
	ShapeMixed = "mixed"
	// ShapeDecodeBound: short prompts, long answers (the blog's reasoning; cf. inference-perf's
	// workload-catalog/reasoning: ~1,000 input tokens, long outputs). random, 1,000 input and
	// 1,024 output tokens (±50%): about 12 s of decode per request.
	ShapeDecodeBound = "decode-bound"
)

// Shapes lists the --shape presets.
var Shapes = []string{ShapePrefillBound, ShapeMixed, ShapeDecodeBound}

// ApplyShape sets the workload of --shape and every size of it the options leave at 0 (flags
// given explicitly win); "" does nothing. Errors name --shape.
func (f *ServeOptions) ApplyShape() error {
	set := func(dst *int, v int) {
		if *dst == 0 {
			*dst = v
		}
	}
	setRatio := func(v float64) {
		if f.RangeRatio == 0 {
			f.RangeRatio = v
		}
	}
	switch f.Shape {
	case "":
	case ShapePrefillBound:
		f.Workload = WorkloadSharedPrefix
		set(&f.Groups, 24)
		set(&f.PromptsPerGroup, 16)
		set(&f.SystemPromptLen, 3000)
		set(&f.QuestionLen, 200)
		set(&f.OutputLen, 16)
		setRatio(0.3)
	case ShapeMixed:
		f.Workload = WorkloadSharedPrefix
		set(&f.Groups, 32)
		set(&f.PromptsPerGroup, 16)
		set(&f.SystemPromptLen, 1024)
		set(&f.QuestionLen, 512)
		set(&f.OutputLen, 128)
		setRatio(0.5)
	case ShapeDecodeBound:
		f.Workload = WorkloadRandom
		set(&f.InputLen, 1000)
		set(&f.OutputLen, 1024)
		setRatio(0.5)
	default:
		return fmt.Errorf("--shape: unknown shape %q (have %s)", f.Shape, strings.Join(Shapes, ", "))
	}
	return nil
}

// Name is what names a run's output: the shape when there is one, else the workload.
func (f *ServeOptions) Name() string {
	if f.Shape != "" {
		return f.Shape
	}
	return f.Workload
}

// MaxRealFleetSize bounds the fleet of a real (not simulated) run: fakes on 127.0.10.1 … .250.
const MaxRealFleetSize = 250

// Fleet resolves the fleet's size and profiles: FleetProfiles parsed (ParseFleetProfiles, at
// most maxSize endpoints) and FleetSize, or, when FleetSize is 0, the number of endpoints
// FleetProfiles lists (DefaultFleetSize without it). Errors name --fleet-size or --fleet-profiles.
func (f *ServeOptions) Fleet(maxSize int) (n int, profiles []string, err error) {
	if profiles, err = ParseFleetProfiles(f.FleetProfiles, maxSize); err != nil {
		return 0, nil, err
	}
	switch n = f.FleetSize; {
	case n == 0 && len(profiles) > 0:
		n = len(profiles)
	case n == 0:
		n = DefaultFleetSize
	case n < 0 || n > maxSize:
		return 0, nil, fmt.Errorf("--fleet-size must be in [1,%d], got %d", maxSize, n)
	}
	return n, profiles, nil
}

// spec builds the workload spec for a fleet of n endpoints.
func (f *ServeOptions) spec(n int) (Spec, error) {
	s := DefaultSpec(f.Workload)
	s.Seed = f.Seed
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	set(&s.InputLen, f.InputLen)
	set(&s.OutputLen, f.OutputLen)
	set(&s.MaxOutputLen, f.MaxOutputLen)
	set(&s.Groups, f.Groups)
	set(&s.PromptsPerGroup, f.PromptsPerGroup)
	set(&s.SystemPromptLen, f.SystemPromptLen)
	set(&s.QuestionLen, f.QuestionLen)
	set(&s.NumPrefixes, f.NumPrefixes)
	set(&s.PrefixLen, f.PrefixLen)
	set(&s.SuffixLen, f.SuffixLen)
	if f.RangeRatio != 0 {
		s.RangeRatio = f.RangeRatio
	}
	s.MultiTurn = f.MultiTurn
	s.Path = f.DatasetPath
	slo, err := ParseSLOs("--slo", f.SLO)
	if err != nil {
		return s, err
	}
	if f.SLOFraction < 0 || f.SLOFraction > 1 || math.IsNaN(f.SLOFraction) {
		return s, fmt.Errorf("--slo-fraction must be in [0,1], got %v", f.SLOFraction)
	}
	if f.SLOFraction > 0 && !slo.Set() {
		return s, fmt.Errorf("--slo-fraction %v needs --slo (\"ttft:300 tpot:40\")", f.SLOFraction)
	}
	if f.SLOFraction == 0 && slo.Set() {
		// Without a share of interactive requests no request would carry the SLO: refuse rather
		// than run a workload the user did not ask for.
		return s, fmt.Errorf("--slo %q needs --slo-fraction above 0 (the share of requests that carry it; 0, the default, sends none)", f.SLO)
	}
	if slo.E2ELMs > 0 {
		return s, fmt.Errorf("--slo %q: e2el has no request header; use ttft and tpot", f.SLO)
	}
	s.SLOFraction, s.SLO = f.SLOFraction, slo
	if f.Workload == WorkloadMultiLoRA {
		s.Adapters = AdapterNames(n)
	}
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

// RunConfig validates the options (errors name the flag) and builds the RunConfig of a run: the
// workload, the rate ladder, the fleet sizing, the percentiles, the progress bar (on stderr when
// it is a terminal), and, with ExportWorkload, writes the generated requests there.
func (f *ServeOptions) RunConfig(stderr io.Writer) (RunConfig, error) {
	var rc RunConfig
	if err := f.ApplyShape(); err != nil {
		return rc, err
	}
	n, profiles, err := f.Fleet(MaxRealFleetSize)
	if err != nil {
		return rc, err
	}
	spec, err := f.spec(n)
	if err != nil {
		return rc, err
	}
	steps, err := ParseLadder(f.Rate, f.Duration)
	if err != nil {
		return rc, err
	}
	if f.Burstiness < 0 || math.IsNaN(f.Burstiness) || math.IsInf(f.Burstiness, 0) {
		return rc, fmt.Errorf("--burstiness must be a finite number > 0 (1 = Poisson arrivals), got %v", f.Burstiness)
	}
	if f.MaxConcurrency < 0 {
		return rc, fmt.Errorf("--max-concurrency must not be negative, got %d", f.MaxConcurrency)
	}
	goodput, err := ParseGoodput(f.Goodput)
	if err != nil {
		return rc, err
	}
	if f.ReportFormat != "" {
		if _, err := ParseReportFormats(f.ReportFormat); err != nil {
			return rc, err
		}
	}
	pcts, err := parsePercentiles(f.MetricPercentiles)
	if err != nil {
		return rc, err
	}
	for _, m := range conformance.SplitList(f.PercentileMetrics) {
		switch m {
		case "ttft", "tpot", "itl", "e2el":
		default:
			return rc, fmt.Errorf("--percentile-metrics: unknown metric %q (have ttft, tpot, itl, e2el)", m)
		}
	}
	rc = RunConfig{Spec: spec, Steps: steps, Burstiness: f.Burstiness, MaxConcurrency: f.MaxConcurrency, Percentiles: pcts, Goodput: goodput,
		Env: EnvConfig{Seed: f.Seed, FleetSize: n, Profiles: profiles, KVCacheSize: f.KVCacheSize, MaxModelLen: f.MaxModelLen}}
	if f.WorkloadFile != "" {
		if rc.Requests, err = ReadJSONLFile(f.WorkloadFile); err != nil {
			return rc, fmt.Errorf("--workload-file: %v", err)
		}
		if len(rc.Requests) == 0 {
			return rc, fmt.Errorf("--workload-file %s: no requests", f.WorkloadFile)
		}
	}
	if !f.NoProgress && isTerminal(stderr) {
		rc.Progress = stderr
	}
	if f.Verbose {
		rc.Logger = slog.New(slog.NewTextHandler(stderr, nil))
		rc.Env.Logger = rc.Logger
	}
	if f.ExportWorkload != "" {
		plan, err := MakePlan(rc, AdapterNames(n))
		if err != nil {
			return rc, err
		}
		if err := writeJSONLFile(f.ExportWorkload, plan.Requests); err != nil {
			return rc, err
		}
		fmt.Fprintf(stderr, "wrote %d requests to %s\n", len(plan.Requests), f.ExportWorkload)
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

func writeJSONLFile(path string, reqs []Request) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteJSONL(fh, reqs); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

func parsePercentiles(s string) ([]float64, error) {
	var out []float64
	for _, p := range conformance.SplitList(s) {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 || v >= 100 {
			return nil, fmt.Errorf("--metric-percentiles: %q is not a percentile in (0,100)", p)
		}
		out = append(out, v)
	}
	return out, nil
}

// BlockOptions are the options of the result block (PrintServingBlock) of a run of rc:
// MaxConcurrency, the request rate when the ladder has one step, PercentileMetrics and rc's
// percentiles.
func (f *ServeOptions) BlockOptions(rc RunConfig) BlockOptions {
	single := 0.0
	if len(rc.Steps) == 1 {
		single = rc.Steps[0].Rate
	}
	return BlockOptions{MaxConcurrency: f.MaxConcurrency, RequestRate: single, PercentileMetrics: conformance.SplitList(f.PercentileMetrics),
		Percentiles: rc.Percentiles}
}
