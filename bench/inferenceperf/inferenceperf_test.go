package inferenceperf

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"sigs.k8s.io/yaml"
)

func ptr[T any](v T) *T { return &v }

// sampleRun: stage 0 has two streamed successes, stage 1 one success with its own TTFT SLO, a
// 429 refusal and a broken connection. Times in seconds.
func sampleRun() Run {
	return Run{
		Stages: []Stage{{Rate: 2, DurationS: 1}, {Rate: 4, DurationS: 1}},
		Requests: []Request{
			// TTFT 0.1; tokens at 0.10, 0.12, 0.14; end 0.15: TPOT 0.02, NTPOT 0.05, ITL 0.02 ×2.
			{Stage: 0, Scheduled: 0, Start: 0, End: 0.15, RequestData: `{"prompt":"ab"}`, InputTokens: 10, OutputTokens: 3,
				Streamed: true, TokenTimes: []float64{0.10, 0.12, 0.14},
				Usage: &Usage{PromptTokens: 10, CompletionTokens: 3, TotalTokens: 13, CachedTokens: ptr(4)}},
			// Sent 0.01 s late; TTFT 0.3; tokens at 0.8, 0.9; end 1.0: TPOT 0.1, NTPOT 0.25, ITL 0.1.
			{Stage: 0, Scheduled: 0.49, Start: 0.5, End: 1.0, RequestData: `{"prompt":"cd"}`, InputTokens: 20, OutputTokens: 2,
				Streamed: true, TokenTimes: []float64{0.8, 0.9}, LoRAAdapter: "lora-a",
				Usage: &Usage{PromptTokens: 20, CompletionTokens: 2, TotalTokens: 22, CachedTokens: ptr(0)}},
			// Own TTFT SLO 0.05 s, TTFT 0.1: misses it.
			{Stage: 1, Scheduled: 1, Start: 1, End: 1.2, InputTokens: 30, OutputTokens: 2, Streamed: true,
				TokenTimes: []float64{1.1, 1.15}, TTFTSLOSec: ptr(0.05)},
			{Stage: 1, Scheduled: 1.1, Start: 1.1, End: 1.11, InputTokens: 5, Streamed: true,
				Error: HTTPError(429, `{"error":{"message":"shed: pool saturated","type":"TooManyRequests","code":429}}`)},
			{Stage: 1, Scheduled: 1.2, Start: 1.2, End: 1.3, InputTokens: 5, Streamed: true,
				Error: &Error{Type: "ClientError", Msg: "dial tcp 127.0.0.1:1: connect: connection refused"}},
		},
		Goodput: map[string]float64{"ttft": 0.2},
		Config:  map[string]any{"load": map[string]any{"type": "poisson"}},
	}
}

func readJSON(t *testing.T, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func keys(t *testing.T, where string, v any) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: want an object, got %T (%v)", where, v, v)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func wantKeys(t *testing.T, where string, v any, want ...string) map[string]any {
	t.Helper()
	got := keys(t, where, v)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: keys %v, want %v", where, got, want)
	}
	return v.(map[string]any)
}

// distKeys are a distribution's keys with inference-perf's default percentiles.
var distKeys = []string{"mean", "min", "max", "p0.1", "p1", "p5", "p10", "p25", "median", "p75", "p90", "p95", "p99", "p99.9"}

func wantDist(t *testing.T, where string, v any) map[string]any {
	t.Helper()
	m := wantKeys(t, where, v, distKeys...)
	for k, x := range m {
		if _, ok := x.(float64); !ok {
			t.Fatalf("%s.%s: want a number, got %T", where, k, x)
		}
	}
	return m
}

func near(t *testing.T, where string, got any, want float64) {
	t.Helper()
	g, ok := got.(float64)
	if !ok || math.Abs(g-want) > 1e-9 {
		t.Fatalf("%s = %v, want %v", where, got, want)
	}
}

// TestWrittenFilesHaveTheDocumentedShape writes a run and checks every file against
// inference-perf's documented report (docs/reports.md, docs/metrics.md) and its writer
// (reportgen/base.py summarize_requests, generate_reports): file names, key names, nesting,
// types and units (seconds).
func TestWrittenFilesHaveTheDocumentedShape(t *testing.T) {
	dir := t.TempDir()
	files, err := Write(dir, sampleRun())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	want := []string{SummaryFile, "stage_0_lifecycle_metrics.json", "stage_1_lifecycle_metrics.json", PerRequestFile, ConfigFile}
	if !slices.Equal(names, want) {
		t.Fatalf("files %v, want %v", names, want)
	}

	sum := wantKeys(t, "summary", readJSON(t, filepath.Join(dir, SummaryFile)),
		"benchmark_time_seconds", "load_summary", "successes", "failures")
	near(t, "benchmark_time_seconds", sum["benchmark_time_seconds"], 1.3)
	load := wantKeys(t, "load_summary", sum["load_summary"], "count", "schedule_delay")
	near(t, "load_summary.count", load["count"], 5)
	sd := wantDist(t, "schedule_delay", load["schedule_delay"])
	near(t, "schedule_delay.max", sd["max"], 0.01)

	succ := wantKeys(t, "successes", sum["successes"], "count", "latency", "throughput", "request_size_bytes", "image", "video",
		"audio", "prompt_tokens", "output_len", "output_tokens", "token_count_mismatches", "goodput_metrics")
	near(t, "successes.count", succ["count"], 3)
	lat := wantKeys(t, "latency", succ["latency"], "request_latency", "time_to_first_token", "time_per_output_token",
		"inter_token_latency", "normalized_time_per_output_token")
	near(t, "request_latency.min", wantDist(t, "request_latency", lat["request_latency"])["min"], 0.15)
	ttft := wantDist(t, "time_to_first_token", lat["time_to_first_token"])
	near(t, "time_to_first_token.min", ttft["min"], 0.1)
	near(t, "time_to_first_token.max", ttft["max"], 0.3)
	near(t, "time_to_first_token.median", ttft["median"], 0.1)
	tpot := wantDist(t, "time_per_output_token", lat["time_per_output_token"])
	near(t, "time_per_output_token.min", tpot["min"], 0.02)
	near(t, "time_per_output_token.max", tpot["max"], 0.1)
	ntpot := wantDist(t, "normalized_time_per_output_token", lat["normalized_time_per_output_token"])
	near(t, "normalized_time_per_output_token.min", ntpot["min"], 0.05)
	near(t, "normalized_time_per_output_token.max", ntpot["max"], 0.25)
	itl := wantDist(t, "inter_token_latency", lat["inter_token_latency"])
	near(t, "inter_token_latency.mean", itl["mean"], (0.02+0.02+0.1+0.05)/4)

	tp := wantKeys(t, "throughput", succ["throughput"], "input_tokens_per_sec", "output_tokens_per_sec", "total_tokens_per_sec",
		"requests_per_sec", "images_per_sec", "videos_per_sec", "audios_per_sec")
	near(t, "input_tokens_per_sec", tp["input_tokens_per_sec"], 60/1.3)
	near(t, "output_tokens_per_sec", tp["output_tokens_per_sec"], 7/1.3)
	near(t, "total_tokens_per_sec", tp["total_tokens_per_sec"], 67/1.3)
	near(t, "requests_per_sec", tp["requests_per_sec"], 3/1.3)
	pt := succ["prompt_tokens"].(map[string]any)
	near(t, "prompt_tokens.total", pt["total"], 60)
	near(t, "prompt_tokens.cached", pt["cached"], 4)
	near(t, "prompt_tokens.uncached", pt["uncached"], 56)
	near(t, "output_tokens.total", succ["output_tokens"].(map[string]any)["total"], 7)

	// Goodput: global TTFT ≤ 0.2 s; the third request's own 0.05 s overrides it. Good: the first only.
	g := wantKeys(t, "goodput_metrics", succ["goodput_metrics"], "goodput_percentage", "request_goodput", "token_goodput",
		"good_requests", "total_requests", "ttft_attainment_percentage")
	near(t, "good_requests", g["good_requests"], 1)
	near(t, "goodput_percentage", g["goodput_percentage"], 100.0/3)
	near(t, "request_goodput", g["request_goodput"], 1/1.2)
	near(t, "token_goodput", g["token_goodput"], 13/1.2)

	fail := wantKeys(t, "failures", sum["failures"], "count", "request_latency", "prompt_tokens", "by_label")
	near(t, "failures.count", fail["count"], 2)
	by := wantKeys(t, "by_label", fail["by_label"], "429 - Rate Limit", "Connection Error")
	rl := by["429 - Rate Limit"].(map[string]any)
	near(t, "429 count", rl["count"], 1)
	if m := rl["messages"].([]any)[0].(map[string]any)["message"]; m != "shed: pool saturated" {
		t.Fatalf("429 message %q, want the JSON body's inner message", m)
	}

	st := wantKeys(t, "stage 1", readJSON(t, filepath.Join(dir, "stage_1_lifecycle_metrics.json")),
		"benchmark_time_seconds", "load_summary", "successes", "failures")
	sl := wantKeys(t, "stage 1 load_summary", st["load_summary"], "count", "schedule_delay", "send_duration", "requested_rate", "achieved_rate")
	near(t, "requested_rate", sl["requested_rate"], 4)
	near(t, "send_duration", sl["send_duration"], 0.2)
	near(t, "achieved_rate", sl["achieved_rate"], 3/0.2)
	st0 := readJSON(t, filepath.Join(dir, "stage_0_lifecycle_metrics.json")).(map[string]any)
	if _, ok := st0["successes"].(map[string]any)["goodput_metrics"]; !ok {
		t.Fatal("stage 0: no goodput_metrics under the global constraint")
	}

	per, ok := readJSON(t, filepath.Join(dir, PerRequestFile)).([]any)
	if !ok || len(per) != 5 {
		t.Fatalf("per-request file: %T of %d entries, want 5", per, len(per))
	}
	e := wantKeys(t, "per_request[0]", per[0], "start_time", "end_time", "request", "response", "info", "error")
	near(t, "end_time", e["end_time"], 0.15)
	if e["request"] != `{"prompt":"ab"}` || e["response"] != nil || e["error"] != nil {
		t.Fatalf("per_request[0] request/response/error = %v / %v / %v", e["request"], e["response"], e["error"])
	}
	info := wantKeys(t, "info", e["info"], "request_metrics", "response_metrics", "extra_info", "lora_adapter", "labels", "input_tokens")
	rm := wantKeys(t, "request_metrics", info["request_metrics"], "text", "image", "video", "audio")
	near(t, "text.input_tokens", wantKeys(t, "text", rm["text"], "input_tokens")["input_tokens"], 10)
	resp := wantKeys(t, "response_metrics", info["response_metrics"], "output_tokens", "server_usage", "response_chunks",
		"chunk_times", "output_token_times")
	usage := wantKeys(t, "server_usage", resp["server_usage"], "prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details")
	near(t, "cached_tokens", usage["prompt_tokens_details"].(map[string]any)["cached_tokens"], 4)
	if la := per[1].(map[string]any)["info"].(map[string]any)["lora_adapter"]; la != "lora-a" {
		t.Fatalf("lora_adapter = %v", la)
	}
	errEntry := wantKeys(t, "per_request[3].error", per[3].(map[string]any)["error"], "error_type", "error_msg")
	if errEntry["error_type"] != "HTTP Error 429" {
		t.Fatalf("error_type = %v", errEntry["error_type"])
	}

	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil || cfg["load"] == nil {
		t.Fatalf("config.yaml: %v %v", cfg, err)
	}
}

// TestSummarizeMatchesInferencePerfsOwnShapeTest replays the numbers of inference-perf's
// tests/required/reportgen/test_lifecycle_report_shape.py (three text-only requests, percentile
// 50, stage rate 1.0) and checks what that test asserts of the text fields.
func TestSummarizeMatchesInferencePerfsOwnShapeTest(t *testing.T) {
	reqs := []Request{
		{Start: 0, End: 0.5, Scheduled: -0.001, InputTokens: 200, OutputTokens: 60, RequestData: string(make([]byte, 50000)), Streamed: true, TokenTimes: []float64{0.03, 0.2, 0.4, 0.5}},
		{Start: 1, End: 1.49, Scheduled: 0.999, InputTokens: 205, OutputTokens: 64, RequestData: string(make([]byte, 180000)), Streamed: true, TokenTimes: []float64{1.03, 1.2, 1.4, 1.49}},
		{Start: 2, End: 2.48, Scheduled: 2.001, InputTokens: 196, OutputTokens: 36, RequestData: string(make([]byte, 1800000)), Streamed: true, TokenTimes: []float64{2.04, 2.2, 2.4, 2.48}},
	}
	rate := 1.0
	s := SummarizeRequests(reqs, []float64{50}, &rate, 0, nil)
	if s.BenchmarkTimeSeconds <= 0 || s.LoadSummary["count"] != 3 || s.LoadSummary["requested_rate"] != 1.0 {
		t.Fatalf("load summary %v, time %v", s.LoadSummary, s.BenchmarkTimeSeconds)
	}
	if s.LoadSummary["send_duration"].(float64) <= 0 || s.LoadSummary["achieved_rate"].(float64) <= 0 {
		t.Fatalf("load summary %v", s.LoadSummary)
	}
	size := s.Successes["request_size_bytes"].(Dist)
	if size["min"] != 50000 || size["max"] != 1800000 || size["median"] != 180000 {
		t.Fatalf("request_size_bytes %v", size)
	}
	for _, k := range []string{"request_latency", "time_to_first_token", "time_per_output_token", "inter_token_latency", "normalized_time_per_output_token"} {
		d := s.Successes["latency"].(map[string]any)[k].(Dist)
		for _, q := range []string{"mean", "min", "median", "max"} {
			if _, ok := d[q]; !ok {
				t.Fatalf("%s lacks %s: %v", k, q, d)
			}
		}
	}
	if s.Failures["count"] != 0 || s.Failures["request_latency"].(Dist) != nil {
		t.Fatalf("failures %v", s.Failures)
	}
}

func TestPercentileKey(t *testing.T) {
	for p, want := range map[float64]string{0.1: "p0.1", 1: "p1", 50: "median", 90: "p90", 99.9: "p99.9"} {
		if got := PercentileKey(p); got != want {
			t.Errorf("PercentileKey(%v) = %q, want %q", p, got, want)
		}
	}
}

func TestConciseLabel(t *testing.T) {
	for _, c := range []struct {
		e    *Error
		msg  string
		want string
	}{
		{HTTPError(503, ""), "no endpoints", "503 - Service Unavailable"},
		{HTTPError(400, ""), "field \"model\" is required", "400 - other"},
		{HTTPError(400, ""), "Invalid JSON body", "400 - Invalid JSON"},
		{&Error{Type: "TimeoutError"}, "Request timed out", "Timeout"},
		{&Error{Type: "StreamError"}, "stream ended without [DONE]", "streamerror"},
	} {
		if got := ConciseLabel(c.e, c.msg); got != c.want {
			t.Errorf("ConciseLabel(%v, %q) = %q, want %q", c.e, c.msg, got, c.want)
		}
	}
}
