// Package inferenceperf writes benchmark runs in the report format of kubernetes-sigs/inference-perf
// (docs/reports.md, docs/metrics.md, docs/goodput.md; the key names, nesting and units are those of
// its report writer, inference_perf/reportgen/base.py summarize_requests and
// ReportGenerator.generate_reports, read at commit 7de5ef2 of 2026-08-19), so inference-perf's
// users and its `--analyze` tool can read eppkit's runs beside their own:
//
//	summary_lifecycle_metrics.json      the whole run: load_summary, successes, failures
//	stage_<N>_lifecycle_metrics.json    one per load stage (a rung of eppkit's rate ladder)
//	per_request_lifecycle_metrics.json  every request: start_time, end_time, request, response, info, error
//	config.yaml                         what produced the run (eppkit's settings, in inference-perf's load/report shape)
//
// Units are inference-perf's: every latency and time in seconds (request_latency, time_to_first_token,
// time_per_output_token, normalized_time_per_output_token, inter_token_latency, schedule_delay),
// throughputs per second, sizes in bytes and tokens. Every distribution is {mean, min, max, p0.1, p1,
// p5, p10, p25, median, p75, p90, p95, p99, p99.9} (inference-perf's default percentiles, the 50th
// named "median"), percentiles by linear interpolation as numpy's default (internal/percentile); an
// empty distribution is null, as there.
//
// The package knows nothing of eppkit's load generators: each driver (bench, bench/sim,
// bench/extproc) turns its records into Requests.
package inferenceperf

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/eppkit/eppkit/internal/percentile"
)

// DefaultPercentiles are inference-perf's default report percentiles
// (inference_perf/config/reportgen/config.py RequestLifecycleMetricsReportConfig.percentiles).
var DefaultPercentiles = []float64{0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9}

// File names of the report (inference-perf's ReportFile names).
const (
	SummaryFile    = "summary_lifecycle_metrics.json"
	PerRequestFile = "per_request_lifecycle_metrics.json"
	ConfigFile     = "config.yaml"
)

// StageFile is the name of stage i's report.
func StageFile(i int) string { return "stage_" + strconv.Itoa(i) + "_lifecycle_metrics.json" }

// Request is one request as inference-perf's RequestLifecycleMetric records it. Times are seconds
// on one clock (eppkit: Unix time, or the run's own clock when it has no wall-clock start).
type Request struct {
	// Stage is the load stage (ladder step) the request was scheduled in, from 0.
	Stage int
	// Scheduled is the planned send time, Start the actual one, End when the response ended (or
	// the request failed).
	Scheduled, Start, End float64
	// RequestData is the request body as sent; ResponseData the response body (nil when not kept).
	RequestData  string
	ResponseData *string
	// InputTokens is the prompt's length in tokens (the server's usage.prompt_tokens when it
	// reported one); OutputTokens the generated tokens.
	InputTokens, OutputTokens int
	// Usage is the server's usage block, nil when it sent none.
	Usage *Usage
	// Streamed marks a streamed response; TokenTimes are the arrival times of its output tokens
	// (one per token; the first is the first token).
	Streamed   bool
	TokenTimes []float64
	// LoRAAdapter is the adapter the request named ("" = the base model).
	LoRAAdapter string
	// Error is nil for a success.
	Error *Error
	// TTFTSLOSec and TPOTSLOSec are the request's own SLOs (inference-perf reads them from the
	// x-slo-ttft-ms / x-slo-tpot-ms headers), nil when it carries none.
	TTFTSLOSec, TPOTSLOSec *float64
	// RequestBytes is len(RequestData) when RequestData is not kept (0: use len(RequestData)).
	RequestBytes int
}

// Usage is an OpenAI usage block.
type Usage struct {
	PromptTokens     int  `json:"prompt_tokens"`
	CompletionTokens int  `json:"completion_tokens"`
	TotalTokens      int  `json:"total_tokens"`
	CachedTokens     *int `json:"-"`
}

// MarshalJSON writes prompt_tokens_details only when the server reported cached tokens.
func (u Usage) MarshalJSON() ([]byte, error) {
	m := map[string]any{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.TotalTokens}
	if u.CachedTokens != nil {
		m["prompt_tokens_details"] = map[string]any{"cached_tokens": *u.CachedTokens}
	}
	return json.Marshal(m)
}

// Error is inference-perf's ErrorResponseInfo: Type is "HTTP Error <status>" for an HTTP error,
// else an error class name; Msg the message or response body.
type Error struct {
	Type string `json:"error_type"`
	Msg  string `json:"error_msg"`
}

// HTTPError is the Error of a response with a non-200 status.
func HTTPError(status int, body string) *Error {
	return &Error{Type: "HTTP Error " + strconv.Itoa(status), Msg: body}
}

// Stage is one load stage: its configured rate (requests/s; 0 = not rate-driven) and duration (s).
type Stage struct {
	Rate      float64 `json:"rate"`
	DurationS float64 `json:"duration"`
	// Concurrency is the stage's concurrency level for a concurrency-driven stage (0 = none).
	Concurrency int `json:"concurrency,omitempty"`
}

// Run is what Write writes.
type Run struct {
	Requests []Request
	Stages   []Stage
	// Percentiles default to DefaultPercentiles.
	Percentiles []float64
	// Goodput are the global goodput constraints in seconds, by inference-perf's keys ttft, tpot,
	// itl, ntpot, request_latency; nil or empty = none (per-request SLOs still count).
	Goodput map[string]float64
	// Config is written as config.yaml (any value sigs.k8s.io/yaml can marshal).
	Config any
}

// Dist is a distribution summary (inference-perf's summarize): mean, min, max and the percentiles
// by name; nil is an empty distribution (JSON null).
type Dist map[string]float64

// Summarize returns inference-perf's summary of items, nil when there are none.
func Summarize(items []float64, percentiles []float64) Dist {
	if len(items) == 0 {
		return nil
	}
	s := slices.Clone(items)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	d := Dist{"mean": sum / float64(len(s)), "min": s[0], "max": s[len(s)-1]}
	for _, p := range percentiles {
		d[PercentileKey(p)] = percentile.Sorted(s, p)
	}
	return d
}

// PercentileKey is inference-perf's name of percentile p: "median" for 50, else "p" and p in
// Python's %g form ("p0.1", "p90", "p99.9").
func PercentileKey(p float64) string {
	if p == 50 {
		return "median"
	}
	return "p" + strconv.FormatFloat(p, 'g', -1, 64)
}

// Summary is inference-perf's ResponsesSummary: the content of summary_lifecycle_metrics.json and
// of each stage file.
type Summary struct {
	BenchmarkTimeSeconds float64        `json:"benchmark_time_seconds"`
	LoadSummary          map[string]any `json:"load_summary"`
	Successes            map[string]any `json:"successes"`
	Failures             map[string]any `json:"failures"`
}

// SummarizeRequests is inference-perf's summarize_requests: stageRate, when not nil, adds the
// stage's send_duration, requested_rate and achieved_rate to load_summary (and concurrency > 0 its
// concurrency). reqs must not be empty.
func SummarizeRequests(reqs []Request, percentiles []float64, stageRate *float64, concurrency int, goodput map[string]float64) Summary {
	var ok, failed []Request
	for _, r := range reqs {
		if r.Error == nil {
			ok = append(ok, r)
		} else {
			failed = append(failed, r)
		}
	}
	minStart, maxStart, maxEnd := math.Inf(1), math.Inf(-1), math.Inf(-1)
	var delays []float64
	for _, r := range reqs {
		minStart, maxStart, maxEnd = math.Min(minStart, r.Start), math.Max(maxStart, r.Start), math.Max(maxEnd, r.End)
		delays = append(delays, r.Start-r.Scheduled)
	}
	total := 0.0
	if len(reqs) > 0 {
		total = maxEnd - minStart
	}
	load := map[string]any{"count": len(reqs), "schedule_delay": Summarize(delays, percentiles)}
	if stageRate != nil {
		send := maxStart - minStart
		achieved := 0.0
		if send > 0 {
			achieved = float64(len(reqs)) / send
		}
		load["send_duration"], load["requested_rate"], load["achieved_rate"] = send, *stageRate, achieved
		if concurrency > 0 {
			load["concurrency"] = concurrency
		}
	}

	var latency, ntpot, itl []float64
	ttfts := make([]*float64, len(ok))
	tpots := make([]*float64, len(ok))
	itlMeans := make([]*float64, len(ok))
	ntpots := make([]float64, len(ok))
	lat := make([]float64, len(ok))
	var inTok, outTok float64
	var sizes, outPer []float64
	for i, r := range ok {
		lat[i] = r.End - r.Start
		latency = append(latency, lat[i])
		if r.OutputTokens > 0 {
			ntpots[i] = (r.End - r.Start) / float64(r.OutputTokens)
		}
		ntpot = append(ntpot, ntpots[i])
		if r.Streamed && len(r.TokenTimes) > 1 {
			t := r.TokenTimes[0] - r.Start
			ttfts[i] = &t
			if r.OutputTokens > 1 {
				v := (r.TokenTimes[len(r.TokenTimes)-1] - r.TokenTimes[0]) / float64(r.OutputTokens-1)
				tpots[i] = &v
			}
			var sum float64
			for j := 1; j < len(r.TokenTimes); j++ {
				g := r.TokenTimes[j] - r.TokenTimes[j-1]
				itl = append(itl, g)
				sum += g
			}
			m := sum / float64(len(r.TokenTimes)-1)
			itlMeans[i] = &m
		}
		inTok += float64(r.InputTokens)
		outTok += float64(r.OutputTokens)
		sizes = append(sizes, float64(r.size()))
		outPer = append(outPer, float64(r.OutputTokens))
	}
	var ttftList, tpotList []float64
	for i := range ok {
		if ttfts[i] != nil {
			ttftList = append(ttftList, *ttfts[i])
		}
		if tpots[i] != nil {
			tpotList = append(tpotList, *tpots[i])
		}
	}
	per := func(x float64) float64 {
		if total > 0 {
			return x / total
		}
		return 0
	}
	zeros := make([]float64, len(ok))
	successes := map[string]any{
		"count": len(ok),
		"latency": map[string]any{
			"request_latency":                  Summarize(latency, percentiles),
			"normalized_time_per_output_token": Summarize(ntpot, percentiles),
			"time_per_output_token":            Summarize(tpotList, percentiles),
			"time_to_first_token":              Summarize(ttftList, percentiles),
			"inter_token_latency":              Summarize(itl, percentiles),
		},
		"throughput": map[string]any{
			"input_tokens_per_sec":  per(inTok),
			"output_tokens_per_sec": per(outTok),
			"total_tokens_per_sec":  per(inTok + outTok),
			"requests_per_sec":      per(float64(len(ok))),
			"images_per_sec":        0.0,
			"videos_per_sec":        0.0,
			"audios_per_sec":        0.0,
		},
		"request_size_bytes": Summarize(sizes, percentiles),
		// Text only: no image, video or audio instances (inference-perf's shape, zero counts).
		"image":                  map[string]any{"count": Summarize(zeros, percentiles), "pixels": nil, "bytes": nil, "aspect_ratio": nil},
		"video":                  map[string]any{"count": Summarize(zeros, percentiles), "frames": nil, "pixels": nil, "bytes": nil, "aspect_ratio": nil},
		"audio":                  map[string]any{"count": Summarize(zeros, percentiles), "seconds": nil, "bytes": nil},
		"prompt_tokens":          promptTokens(ok, percentiles),
		"output_len":             Summarize(outPer, percentiles),
		"output_tokens":          withDist(map[string]any{"total": outTok}, Summarize(outPer, percentiles)),
		"token_count_mismatches": 0,
	}
	if g := goodputMetrics(ok, goodput, ttfts, tpots, ntpots, lat, itlMeans); g != nil {
		successes["goodput_metrics"] = g
	}
	var flat []float64
	for _, r := range failed {
		flat = append(flat, r.End-r.Start)
	}
	failures := map[string]any{
		"count":           len(failed),
		"request_latency": Summarize(flat, percentiles),
		"prompt_tokens":   promptTokens(failed, percentiles),
		"by_label":        byLabel(failed, 100),
	}
	return Summary{BenchmarkTimeSeconds: total, LoadSummary: load, Successes: successes, Failures: failures}
}

func (r *Request) size() int {
	if r.RequestBytes > 0 {
		return r.RequestBytes
	}
	return len(r.RequestData)
}

// promptTokens is summarize_prompt_token_usage: totals, the cached and uncached split from the
// usage blocks, and the per-request distribution.
func promptTokens(reqs []Request, percentiles []float64) map[string]any {
	var total, cached float64
	var per []float64
	for _, r := range reqs {
		total += float64(r.InputTokens)
		per = append(per, float64(r.InputTokens))
		if r.Usage != nil && r.Usage.CachedTokens != nil {
			cached += float64(*r.Usage.CachedTokens)
		}
	}
	return withDist(map[string]any{"total": total, "cached": cached, "uncached": math.Max(total-cached, 0)}, Summarize(per, percentiles))
}

func withDist(m map[string]any, d Dist) map[string]any {
	for k, v := range d {
		m[k] = v
	}
	return m
}

// goodputMetrics is calculate_goodput_metrics: a request is good when it meets every constraint
// that applies to it (its own TTFT/TPOT SLO over the global one); nil without any constraint.
func goodputMetrics(ok []Request, global map[string]float64, ttfts, tpots []*float64, ntpots, lat []float64, itls []*float64) map[string]any {
	has := len(global) > 0
	for _, r := range ok {
		has = has || r.TTFTSLOSec != nil || r.TPOTSLOSec != nil
	}
	if !has || len(ok) == 0 {
		return nil
	}
	minStart, maxEnd := math.Inf(1), math.Inf(-1)
	for _, r := range ok {
		minStart, maxEnd = math.Min(minStart, r.Start), math.Max(maxEnd, r.End)
	}
	span := maxEnd - minStart
	att, app := map[string]int{}, map[string]int{}
	good, goodTokens := 0, 0
	for i, r := range ok {
		isGood := true
		check := func(key string, slo *float64, v *float64) {
			if slo == nil {
				return
			}
			app[key]++
			if v != nil && *v <= *slo {
				att[key]++
			} else {
				isGood = false
			}
		}
		pick := func(own *float64, key string) *float64 {
			if own != nil {
				return own
			}
			if v, ok := global[key]; ok {
				return &v
			}
			return nil
		}
		check("ttft", pick(r.TTFTSLOSec, "ttft"), ttfts[i])
		check("tpot", pick(r.TPOTSLOSec, "tpot"), tpots[i])
		check("itl", pick(nil, "itl"), itls[i])
		check("ntpot", pick(nil, "ntpot"), &ntpots[i])
		check("request_latency", pick(nil, "request_latency"), &lat[i])
		if isGood {
			good++
			goodTokens += r.InputTokens + r.OutputTokens
		}
	}
	out := map[string]any{
		"goodput_percentage": float64(good) / float64(len(ok)) * 100,
		"request_goodput":    0.0,
		"token_goodput":      0.0,
		"good_requests":      good,
		"total_requests":     len(ok),
	}
	if span > 0 {
		out["request_goodput"], out["token_goodput"] = float64(good)/span, float64(goodTokens)/span
	}
	for k, n := range app {
		if n > 0 {
			out[k+"_attainment_percentage"] = float64(att[k]) / float64(n) * 100
		}
	}
	return out
}

var (
	httpCodeLabels = map[string]string{"429": "Rate Limit", "500": "Internal Server Error", "502": "Bad Gateway",
		"503": "Service Unavailable", "504": "Gateway Timeout"}
	httpMsgLabels = []struct {
		re    *regexp.Regexp
		label string
	}{
		{regexp.MustCompile(`(?i)context.window|context length|maximum context|max.?tokens|token.?limit`), "Context Window"},
		{regexp.MustCompile(`(?i)invalid.?json|json.?parse|malformed.?json|unexpected.?token|expecting value|unterminated string|expecting ',' delimiter`), "Invalid JSON"},
		{regexp.MustCompile(`(?i)timeout|timed.?out`), "Timeout"},
		{regexp.MustCompile(`(?i)model.?not.?found|no such model`), "Model Not Found"},
	}
	otherLabels = []struct {
		re    *regexp.Regexp
		label string
	}{
		{regexp.MustCompile(`(?i)timeout|timed.?out`), "Timeout"},
		{regexp.MustCompile(`(?i)connection.?refused|connect`), "Connection Error"},
	}
)

// ConciseLabel is make_concise_label: "<code> - <label>" for an HTTP error (by status, then by
// message, else "other"), else a label by message or the lower-cased type.
func ConciseLabel(e *Error, msg string) string {
	if code, ok := strings.CutPrefix(e.Type, "HTTP Error "); ok {
		if l, ok := httpCodeLabels[code]; ok {
			return code + " - " + l
		}
		for _, p := range httpMsgLabels {
			if p.re.MatchString(msg) {
				return code + " - " + p.label
			}
		}
		return code + " - other"
	}
	for _, p := range otherLabels {
		if p.re.MatchString(msg) {
			return p.label
		}
	}
	return strings.ToLower(strings.TrimSpace(e.Type))
}

// errorMessage is parse_error_message: the inner message of a JSON error body, else the raw text.
func errorMessage(raw string) string {
	var body map[string]any
	if json.Unmarshal([]byte(raw), &body) == nil {
		inner := body
		if e, ok := body["error"].(map[string]any); ok {
			inner = e
		}
		if m, ok := inner["message"]; ok {
			return fmt.Sprint(m)
		}
	}
	return raw
}

// byLabel is build_error_counts: per label the count and up to maxMessages distinct messages,
// labels by descending count (eppkit requests have no session ids, so none are listed).
func byLabel(failed []Request, maxMessages int) map[string]any {
	counts := map[string]int{}
	msgs := map[string][]string{}
	for _, r := range failed {
		m := errorMessage(r.Error.Msg)
		l := ConciseLabel(r.Error, m)
		counts[l]++
		if !slices.Contains(msgs[l], m) && len(msgs[l]) < maxMessages {
			msgs[l] = append(msgs[l], m)
		}
	}
	out := map[string]any{}
	for l, n := range counts {
		var list []map[string]any
		for _, m := range msgs[l] {
			list = append(list, map[string]any{"message": m})
		}
		out[l] = map[string]any{"count": n, "messages": list}
	}
	return out
}

// perRequest is one entry of per_request_lifecycle_metrics.json.
type perRequest struct {
	StartTime float64 `json:"start_time"`
	EndTime   float64 `json:"end_time"`
	Request   string  `json:"request"`
	Response  *string `json:"response"`
	Info      info    `json:"info"`
	Error     *Error  `json:"error"`
}

// info is inference-perf's InferenceInfo as model_dump writes it.
type info struct {
	RequestMetrics  requestMetrics    `json:"request_metrics"`
	ResponseMetrics *responseMetrics  `json:"response_metrics"`
	ExtraInfo       map[string]any    `json:"extra_info"`
	LoRAAdapter     *string           `json:"lora_adapter"`
	Labels          map[string]string `json:"labels"`
	// InputTokens is the deprecated top-level mirror of request_metrics.text.input_tokens.
	InputTokens int `json:"input_tokens"`
}

type requestMetrics struct {
	Text  struct{ InputTokens int } `json:"-"`
	Image any                       `json:"image"`
	Video any                       `json:"video"`
	Audio any                       `json:"audio"`
}

// MarshalJSON writes text as {"input_tokens": n}.
func (m requestMetrics) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"text": map[string]int{"input_tokens": m.Text.InputTokens}, "image": m.Image, "video": m.Video, "audio": m.Audio})
}

// responseMetrics is StreamedResponseMetrics (UnaryResponseMetrics has only the first two fields).
type responseMetrics struct {
	OutputTokens     int       `json:"output_tokens"`
	ServerUsage      *Usage    `json:"server_usage"`
	ResponseChunks   []string  `json:"response_chunks,omitempty"`
	ChunkTimes       []float64 `json:"chunk_times,omitempty"`
	OutputTokenTimes []float64 `json:"output_token_times,omitempty"`
	streamed         bool
}

// MarshalJSON writes the streamed fields (possibly empty lists) only for a streamed response.
func (m responseMetrics) MarshalJSON() ([]byte, error) {
	out := map[string]any{"output_tokens": m.OutputTokens, "server_usage": m.ServerUsage}
	if m.streamed {
		nz := func(x []float64) []float64 {
			if x == nil {
				return []float64{}
			}
			return x
		}
		out["response_chunks"] = []string{}
		out["chunk_times"], out["output_token_times"] = nz(m.ChunkTimes), nz(m.OutputTokenTimes)
	}
	return json.Marshal(out)
}

func perRequestEntry(r *Request) perRequest {
	e := perRequest{StartTime: r.Start, EndTime: r.End, Request: r.RequestData, Response: r.ResponseData, Error: r.Error}
	e.Info = info{ExtraInfo: map[string]any{}, Labels: map[string]string{}, InputTokens: r.InputTokens}
	e.Info.RequestMetrics.Text.InputTokens = r.InputTokens
	if r.LoRAAdapter != "" {
		a := r.LoRAAdapter
		e.Info.LoRAAdapter = &a
	}
	if r.Error == nil || r.OutputTokens > 0 {
		e.Info.ResponseMetrics = &responseMetrics{OutputTokens: r.OutputTokens, ServerUsage: r.Usage, streamed: r.Streamed,
			ChunkTimes: r.TokenTimes, OutputTokenTimes: r.TokenTimes}
	}
	return e
}

// Write writes the report of run into dir (created when missing): the summary, one file per
// stage that has requests, the per-request file and config.yaml. It returns the files written.
func Write(dir string, run Run) ([]string, error) {
	if len(run.Requests) == 0 {
		return nil, fmt.Errorf("inference-perf report: no requests")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pcts := run.Percentiles
	if len(pcts) == 0 {
		pcts = DefaultPercentiles
	}
	var files []string
	put := func(name string, v any) error {
		path := filepath.Join(dir, name)
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return err
		}
		files = append(files, path)
		return nil
	}
	if err := put(SummaryFile, SummarizeRequests(run.Requests, pcts, nil, 0, run.Goodput)); err != nil {
		return files, err
	}
	byStage := map[int][]Request{}
	for _, r := range run.Requests {
		byStage[r.Stage] = append(byStage[r.Stage], r)
	}
	stages := make([]int, 0, len(byStage))
	for s := range byStage {
		stages = append(stages, s)
	}
	sort.Ints(stages)
	for _, s := range stages {
		var rate float64
		var conc int
		if s < len(run.Stages) {
			rate, conc = run.Stages[s].Rate, run.Stages[s].Concurrency
		}
		if err := put(StageFile(s), SummarizeRequests(byStage[s], pcts, &rate, conc, run.Goodput)); err != nil {
			return files, err
		}
	}
	entries := make([]perRequest, len(run.Requests))
	for i := range run.Requests {
		entries[i] = perRequestEntry(&run.Requests[i])
	}
	if err := put(PerRequestFile, entries); err != nil {
		return files, err
	}
	if run.Config != nil {
		b, err := yaml.Marshal(run.Config)
		if err != nil {
			return files, fmt.Errorf("%s: %w", ConfigFile, err)
		}
		path := filepath.Join(dir, ConfigFile)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}
