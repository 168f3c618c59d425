package bench

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/eppkit/eppkit/bench/inferenceperf"
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/internal/version"
)

// Report formats of --report-format. eppkit's own files (results.json, vllm_<target>.json, the
// plots) are always written; ReportInferencePerf adds inference-perf's layout beside them.
const (
	ReportEppkit        = "eppkit"
	ReportInferencePerf = "inference-perf"
	// InferencePerfDir is the folder, under a run's output directory, of the inference-perf
	// reports: one subfolder per target (InferencePerfTargetDir).
	InferencePerfDir = "inference-perf"
)

// ReportFormats lists the values --report-format accepts.
var ReportFormats = []string{ReportEppkit, ReportInferencePerf}

// ParseReportFormats parses --report-format: a comma-separated list of ReportFormats. Errors
// name the flag.
func ParseReportFormats(s string) ([]string, error) {
	var out []string
	for _, f := range conformance.SplitList(s) {
		if !slices.Contains(ReportFormats, f) {
			return nil, fmt.Errorf("--report-format: unknown format %q (have %s)", f, strings.Join(ReportFormats, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--report-format: empty list (have %s)", strings.Join(ReportFormats, ", "))
	}
	return out, nil
}

// InferencePerfTargetDir is where target's inference-perf report of a run in outDir goes.
func InferencePerfTargetDir(outDir, target string) string {
	return filepath.Join(outDir, InferencePerfDir, fileName(target))
}

// InferencePerfRun turns r into an inference-perf run. reqs are the run's requests indexed like
// r.Outcomes (the plan's; nil when unknown: the per-request file then carries no request bodies).
// Times are Unix seconds from r.StartedAt (seconds from the run's start when it is zero, as in
// a simulation); each output token arrives at its chunk's time (the fakes stream one token per
// chunk); cached tokens come from the usage chunk.
func InferencePerfRun(r *Result, reqs []Request) inferenceperf.Run {
	base := 0.0
	if !r.StartedAt.IsZero() {
		base = float64(r.StartedAt.UnixNano()) / 1e9
	}
	run := inferenceperf.Run{Requests: make([]inferenceperf.Request, len(r.Outcomes))}
	for i := range r.Outcomes {
		o := &r.Outcomes[i]
		q := inferenceperf.Request{Stage: o.Step, Scheduled: base + o.ScheduledMs/1000, Start: base + o.SentMs/1000,
			InputTokens: o.PromptTokens, OutputTokens: o.OutputTokens, Streamed: true}
		q.End = q.Start + o.E2EMs/1000
		if i < len(reqs) {
			q.RequestData = string(CompletionBody(&reqs[i], harness.DefaultModelName))
			q.LoRAAdapter = reqs[i].Model
		}
		if o.OutputTokens > 0 && o.TTFTMs > 0 {
			t := q.Start + o.TTFTMs/1000
			q.TokenTimes = append(make([]float64, 0, 1+len(o.ITLMs)), t)
			for _, g := range o.ITLMs {
				t += g / 1000
				q.TokenTimes = append(q.TokenTimes, t)
			}
		}
		if o.OK() {
			cached := o.CachedTokens
			q.Usage = &inferenceperf.Usage{PromptTokens: o.PromptTokens, CompletionTokens: o.OutputTokens,
				TotalTokens: o.PromptTokens + o.OutputTokens, CachedTokens: &cached}
		} else {
			q.Error = outcomeError(o)
		}
		if o.SLO != nil {
			if o.SLO.TTFTMs > 0 {
				v := o.SLO.TTFTMs / 1000
				q.TTFTSLOSec = &v
			}
			if o.SLO.TPOTMs > 0 {
				v := o.SLO.TPOTMs / 1000
				q.TPOTSLOSec = &v
			}
		}
		run.Requests[i] = q
	}
	for _, s := range r.Steps {
		run.Stages = append(run.Stages, inferenceperf.Stage{Rate: s.Rate, DurationS: s.DurationS})
	}
	if r.Goodput != nil {
		run.Goodput = map[string]float64{}
		for k, v := range map[string]float64{"ttft": r.Goodput.SLOs.TTFTMs, "tpot": r.Goodput.SLOs.TPOTMs, "request_latency": r.Goodput.SLOs.E2ELMs} {
			if v > 0 {
				run.Goodput[k] = v / 1000
			}
		}
	}
	run.Config = inferencePerfConfig(r, run)
	return run
}

// outcomeError is the inference-perf error of a failed outcome: "HTTP Error <status>" with the
// body for a refused request, else the load generator's message under an error type named for
// what went wrong.
func outcomeError(o *Outcome) *inferenceperf.Error {
	switch {
	case o.Status != 0 && o.Status != 200:
		return inferenceperf.HTTPError(o.Status, o.Error)
	case o.Status == 0:
		return &inferenceperf.Error{Type: "ClientError", Msg: o.Error}
	case o.Error == "":
		return &inferenceperf.Error{Type: "EmptyResponse", Msg: "the response carried no output token"}
	}
	return &inferenceperf.Error{Type: "StreamError", Msg: o.Error}
}

// inferencePerfConfig is config.yaml: inference-perf's load and report sections describing what
// eppkit ran, and eppkit's own settings (which inference-perf does not read).
func inferencePerfConfig(r *Result, run inferenceperf.Run) map[string]any {
	loadType := "poisson"
	if r.Burstiness != 0 && r.Burstiness != 1 {
		loadType = fmt.Sprintf("gamma (burstiness %g)", r.Burstiness)
	}
	stages := make([]map[string]any, len(run.Stages))
	for i, s := range run.Stages {
		stages[i] = map[string]any{"rate": s.Rate, "duration": s.DurationS}
	}
	cfg := map[string]any{
		"api":  map[string]any{"type": "completion", "streaming": true, "slo_unit": "ms", "slo_ttft_header": "x-slo-ttft-ms", "slo_tpot_header": "x-slo-tpot-ms"},
		"load": map[string]any{"type": loadType, "stages": stages},
		"report": map[string]any{"request_lifecycle": map[string]any{"summary": true, "per_stage": true, "per_request": true,
			"percentiles": inferenceperf.DefaultPercentiles}},
		"eppkit": map[string]any{"version": version.Version(), "target": r.Target, "workload": r.Workload,
			"max_concurrency": r.MaxConcurrency, "note": "written by eppkit bench, not by inference-perf"},
	}
	if len(run.Goodput) > 0 {
		cfg["report"].(map[string]any)["goodput"] = map[string]any{"constraints": run.Goodput}
	}
	return cfg
}

// WriteInferencePerf writes each result's inference-perf report under
// outDir/inference-perf/<target>/ (InferencePerfTargetDir). reqs are the requests of the plan the
// results share (nil when unknown). It returns the files written.
func WriteInferencePerf(outDir string, results []*Result, reqs []Request) ([]string, error) {
	var files []string
	for _, r := range results {
		if len(r.Outcomes) == 0 {
			continue
		}
		fs, err := inferenceperf.Write(InferencePerfTargetDir(outDir, r.Target), InferencePerfRun(r, reqs))
		files = append(files, fs...)
		if err != nil {
			return files, fmt.Errorf("inference-perf report of %s: %w", r.Target, err)
		}
	}
	return files, nil
}
