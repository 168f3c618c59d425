package bench

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/eppkit/eppkit/bench/inferenceperf"
)

// TestInferencePerfRunConvertsOutcomes: milliseconds from the run's start become Unix seconds,
// each chunk a token time, the usage chunk server usage, a refusal an HTTP error, the request's
// SLO and --goodput constraints seconds.
func TestInferencePerfRunConvertsOutcomes(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	r := &Result{Target: "reference (x)", StartedAt: start, Steps: []StepResult{{Rate: 8, DurationS: 2}},
		Goodput: &GoodputResult{SLOs: SLOs{TTFTMs: 300, E2ELMs: 2000}},
		Outcomes: []Outcome{
			{ID: 0, ScheduledMs: 100, SentMs: 101, TTFTMs: 50, E2EMs: 80, ITLMs: []float64{10, 20}, PromptTokens: 40,
				OutputTokens: 3, CachedTokens: 32, Status: 200, SLO: &SLOs{TTFTMs: 200}},
			{ID: 1, ScheduledMs: 200, SentMs: 200, E2EMs: 3, Status: 429, Error: `{"error":{"message":"shed"}}`},
		}}
	reqs := []Request{{Prompt: "ab cd", OutputTokens: 3, Model: "lora-a"}, {Prompt: "ef", OutputTokens: 3}}
	run := InferencePerfRun(r, reqs)
	q := run.Requests[0]
	eq := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6 {
			t.Fatalf("%s = %v, want %v", name, got, want)
		}
	}
	eq("scheduled", q.Scheduled, 1_000_000.100)
	eq("start", q.Start, 1_000_000.101)
	eq("end", q.End, 1_000_000.181)
	if len(q.TokenTimes) != 3 {
		t.Fatalf("token times %v", q.TokenTimes)
	}
	eq("first token", q.TokenTimes[0], 1_000_000.151)
	eq("last token", q.TokenTimes[2], 1_000_000.181)
	if q.Usage == nil || *q.Usage.CachedTokens != 32 || q.Usage.TotalTokens != 43 || q.LoRAAdapter != "lora-a" || q.Error != nil {
		t.Fatalf("request 0: %+v usage %+v", q, q.Usage)
	}
	eq("ttft slo", *q.TTFTSLOSec, 0.2)
	if q.RequestData == "" || run.Requests[1].Error == nil || run.Requests[1].Error.Type != "HTTP Error 429" {
		t.Fatalf("request data %q, error %+v", q.RequestData, run.Requests[1].Error)
	}
	eq("goodput ttft", run.Goodput["ttft"], 0.3)
	eq("goodput request_latency", run.Goodput["request_latency"], 2)
	if _, ok := run.Goodput["tpot"]; ok || len(run.Stages) != 1 || run.Stages[0].Rate != 8 {
		t.Fatalf("goodput %v, stages %v", run.Goodput, run.Stages)
	}
	files, err := WriteInferencePerf(t.TempDir(), []*Result{r}, reqs)
	if err != nil || len(files) != 4 || filepath.Base(filepath.Dir(files[0])) != "reference--x-" ||
		filepath.Base(files[0]) != inferenceperf.SummaryFile {
		t.Fatalf("files %v, %v", files, err)
	}
}

func TestParseReportFormats(t *testing.T) {
	if f, err := ParseReportFormats("eppkit, inference-perf,eppkit"); err != nil || len(f) != 2 {
		t.Fatalf("%v %v", f, err)
	}
	if _, err := ParseReportFormats("inference-pref"); err == nil {
		t.Fatal("a misspelt format was accepted")
	}
}
