package bench

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

func TestSummarise(t *testing.T) {
	d := Summarise([]float64{2, 4, 4, 4, 5, 5, 7, 9}, []float64{90, 99.9})
	want := Dist{N: 8, Mean: 5, Median: 4.5, Std: 2, Percentiles: map[string]float64{"p90": 7.6, "p99.9": 8.986}}
	if d := cmp.Diff(want, d, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Fatalf("Summarise (-want +got):\n%s", d)
	}
	if e := Summarise(nil, []float64{50}); e.N != 0 || e.Mean != 0 || e.Percentiles["p50"] != 0 {
		t.Fatalf("empty sample: %+v", e)
	}
}

func TestOracleBoundByHand(t *testing.T) {
	m := LatencyModel{PrefillOverhead: 30 * time.Millisecond, PrefillTimePerToken: 250 * time.Microsecond, BlockSize: 16}
	a := wordsN(40, "a")
	b := wordsN(32, "a") + wordsN(8, "b")
	reqs := []Request{
		{Prompt: a},                 // cold: 40 uncached → 30 + 10 = 40 ms
		{Prompt: b},                 // shares 32 tokens = 2 blocks → 30 + 8×0.25 = 32 ms
		{Prompt: a},                 // 40 tokens seen, 2 full blocks, cap (39)/16 = 2 → 32 ms
		{Prompt: wordsN(32, "a")},   // 2 full blocks seen, cap (31)/16 = 1 block → 30 + 16×0.25 = 34 ms
		{Prompt: a, Model: "lora1"}, // another model: nothing cached → 40 ms
		{Prompt: "x "},              // 1 token, nothing cacheable → 30.25 ms
	}
	o, err := OracleBound(reqs, m)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{40, 32, 32, 34, 40, 30.25}
	if d := cmp.Diff(want, o.PerRequestMs, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Fatalf("per-request bounds (-want +got):\n%s", d)
	}
	if mean := (40 + 32 + 32 + 34 + 40 + 30.25) / 6; math.Abs(o.MeanTTFTMs-mean) > 1e-9 {
		t.Fatalf("mean %v, want %v", o.MeanTTFTMs, mean)
	}
	if cached := float64(32+32+16) / float64(40+40+40+32+40+1); math.Abs(o.CachedTokenFraction-cached) > 1e-9 {
		t.Fatalf("cached fraction %v, want %v", o.CachedTokenFraction, cached)
	}
	if _, err := OracleBound(reqs, LatencyModel{BlockSize: 10}); err == nil || !strings.Contains(err.Error(), "BlockSize") {
		t.Fatalf("block size 10: err %v", err)
	}
	if _, err := OracleBound(reqs, LatencyModel{BlockSize: 16, PrefillOverhead: -1}); err == nil {
		t.Fatal("negative overhead accepted")
	}
}

// TestOracleEqualsTheFakeOneRequestAtATime runs a shared-prefix workload through the fake's
// engine (fakes/vllm/engine, frozen profile, a fake clock) one request at a time with a cache
// large enough never to evict: then nothing queues, the load factor is 1, and every TTFT must equal
// its oracle bound exactly.
func TestOracleEqualsTheFakeOneRequestAtATime(t *testing.T) {
	spec := Spec{Name: WorkloadSharedPrefix, Seed: 8, Groups: 3, PromptsPerGroup: 2, SystemPromptLen: 100, QuestionLen: 20, OutputLen: 2}
	reqs, err := Generate(spec, 30)
	if err != nil {
		t.Fatal(err)
	}
	reqs[7].Model = "lora-a" // an adapter has its own cache
	o, err := OracleBound(reqs, FrozenLatencyModel())
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	cfg := engine.DefaultConfig()
	cfg.MaxNumSeqs, cfg.KVCacheSize, cfg.MaxModelLen, cfg.EnablePrefixCaching = FrozenMaxNumSeqs, 4096, 4096, true
	cfg.PrefillOverhead, cfg.PrefillTimePerToken, cfg.TimeFactorUnderLoad = FrozenPrefillOverhead, FrozenPrefillTimePerToken, FrozenTimeFactorUnderLoad
	cfg.InterTokenLatency, cfg.Clock = FrozenInterTokenLatency, clk
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	for i, r := range reqs {
		seq, err := e.Submit(ctx, engine.Request{Model: "base", LoRA: r.Model, Prompt: r.Prompt, MaxTokens: r.OutputTokens})
		if err != nil {
			t.Fatal(err)
		}
		clk.Step(10 * time.Second)
		for {
			ev, err := seq.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Final {
				break
			}
		}
		if got := ms(seq.TTFT()); math.Abs(got-o.PerRequestMs[i]) > 1e-6 {
			t.Fatalf("seed 8 request %d (group %d, model %q): fake TTFT %v ms, oracle bound %v ms; they must be equal",
				i, r.Group, r.Model, got, o.PerRequestMs[i])
		}
		seq.Close()
	}
	if o.PerRequestMs[0] != 30+120*0.25 {
		t.Fatalf("first request: %v ms, want cold 60 ms", o.PerRequestMs[0])
	}
}

func TestComputeMetrics(t *testing.T) {
	outs := []Outcome{
		{SentMs: 0, TTFTMs: 100, E2EMs: 600, ITLMs: []float64{100, 100}, PromptTokens: 10, OutputTokens: 3, CachedTokens: 5, Status: 200, Endpoint: "a"},
		{SentMs: 500, TTFTMs: 50, E2EMs: 1500, ITLMs: []float64{1450}, PromptTokens: 20, OutputTokens: 2, Status: 200, Endpoint: "b"},
		{SentMs: 600, E2EMs: 10, Status: 429, Error: "HTTP 429"},
	}
	m := ComputeMetrics(outs, []float64{99})
	if m.Completed != 2 || m.Failed != 1 {
		t.Fatalf("completed/failed %d/%d, want 2/1", m.Completed, m.Failed)
	}
	if m.DurationS != 2.0 { // 0 → 500 + 1500
		t.Fatalf("duration %v s, want 2", m.DurationS)
	}
	if m.OutputThroughput != 2.5 || m.RequestThroughput != 1 || m.TotalTokenThroughput != 17.5 {
		t.Fatalf("throughputs %v tok/s, %v req/s, %v total tok/s; want 2.5, 1, 17.5", m.OutputThroughput, m.RequestThroughput, m.TotalTokenThroughput)
	}
	if m.TTFT.Mean != 75 || m.TPOT.Mean != (250+1450)/2.0 || m.ITL.N != 3 || m.E2EL.Mean != 1050 {
		t.Fatalf("TTFT %+v TPOT %+v ITL %+v E2EL %+v", m.TTFT, m.TPOT, m.ITL, m.E2EL)
	}
	// Request 1 runs 0–600 ms, request 2 500–2000 ms: 2 at once; the failed request 3 is not
	// counted.
	if m.MaxConcurrentRequests != 2 {
		t.Fatalf("max concurrent %d, want 2", m.MaxConcurrentRequests)
	}
	// Tokens at 100, 200, 300 ms (second 0), 550 (second 0), 2000 (second 2): 4 in second 0.
	if m.MaxOutputTokensPerS != 4 {
		t.Fatalf("peak tokens/s %v, want 4", m.MaxOutputTokensPerS)
	}
	if m.CachedTokenFraction != 5.0/30 {
		t.Fatalf("cached fraction %v", m.CachedTokenFraction)
	}
}

func TestBuildResultStepsAndEndpoints(t *testing.T) {
	steps := []Step{{Rate: 1, Duration: time.Second}, {Rate: 2, Duration: time.Second}}
	load := &Load{
		Outcomes: []Outcome{
			{Step: 0, SentMs: 10, TTFTMs: 5, E2EMs: 20, OutputTokens: 2, PromptTokens: 10, CachedTokens: 10, Status: 200, Endpoint: "e0"},
			{Step: 1, SentMs: 1100, TTFTMs: 5, E2EMs: 20, OutputTokens: 2, PromptTokens: 10, Status: 200, Endpoint: "e1"},
			{Step: 1, SentMs: 1200, Status: 503, Error: "HTTP 503", Endpoint: "e1"},
		},
		Samples: []Sample{
			{AtMs: 0, CPUBusy: 0, CPUTotal: 100, Endpoints: map[string]EndpointSample{"e0": {Waiting: 0, OK: true, PrefixQueries: 0}, "e1": {Waiting: 0, OK: true}}},
			{AtMs: 900, CPUBusy: 50, CPUTotal: 200, Endpoints: map[string]EndpointSample{"e0": {Waiting: 1, OK: true, PrefixQueries: 10, PrefixHits: 10}, "e1": {Waiting: 1, OK: true}}},
			{AtMs: 1100, CPUBusy: 140, CPUTotal: 300, Endpoints: map[string]EndpointSample{"e0": {Waiting: 3, OK: true, PrefixQueries: 10, PrefixHits: 10}, "e1": {Waiting: 5, OK: true}}},
			{AtMs: 1900, CPUBusy: 230, CPUTotal: 400, Endpoints: map[string]EndpointSample{"e0": {Waiting: 3, OK: true, PrefixQueries: 10, PrefixHits: 10}, "e1": {Waiting: 4, OK: true}}},
		},
	}
	r := BuildResult("x", Spec{}, steps, load, nil)
	if s := r.Steps[0]; s.CPUPercent != 50 || !s.Valid || s.MedianQueue != 0.5 || !s.Sustained {
		t.Fatalf("step 0: %+v; want CPU 50%%, valid, median queue 0.5, sustained", s)
	}
	if s := r.Steps[1]; s.CPUPercent != 90 || s.Valid || s.MedianQueue != 3.5 || s.Sustained || s.Metrics.Failed != 1 {
		t.Fatalf("step 1: %+v; want CPU 90%%, not valid, median queue 3.5, not sustained, 1 failed", s)
	}
	// Step 1's samples: e0 waits 3, 3 (median 3); e1 waits 5, 4 (median 4.5).
	if s0, s1 := r.Steps[0].WorstEndpointMedianQueue, r.Steps[1].WorstEndpointMedianQueue; s0 != 0.5 || s1 != 4.5 {
		t.Fatalf("worst endpoint median queue %v, %v; want 0.5 (both endpoints 0, 1) and 4.5 (e1: 5, 4)", s0, s1)
	}
	want := []EndpointRow{
		{Name: "e0", Requests: 1, Share: 1.0 / 3, CachedTokenFraction: 1, EngineHitRate: 1, MeanTTFTMs: 5, MedianWaiting: 2, MaxWaiting: 3},
		{Name: "e1", Requests: 2, Share: 2.0 / 3, MeanTTFTMs: 5, MedianWaiting: 2.5, MaxWaiting: 5},
	}
	if d := cmp.Diff(want, r.Endpoints, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Fatalf("endpoints (-want +got):\n%s", d)
	}
}

func TestParseCPULine(t *testing.T) {
	busy, total, err := parseCPULine("cpu  100 5 50 800 20 3 2 10 7 1")
	if err != nil || total != 990 || busy != 170 {
		t.Fatalf("busy %d total %d err %v; want 170 of 990 (guest fields not added)", busy, total, err)
	}
	if _, _, err := parseCPULine("cpu 1 2 x 4"); err == nil {
		t.Fatal("malformed line accepted")
	}
	if b, tot, err := ReadProcStat(); err != nil || tot == 0 || b > tot {
		t.Fatalf("ReadProcStat: %d/%d %v", b, tot, err)
	}
}

func TestServingBlockLayout(t *testing.T) {
	var buf bytes.Buffer
	m := ComputeMetrics([]Outcome{{SentMs: 0, TTFTMs: 10, E2EMs: 1000, ITLMs: []float64{990}, PromptTokens: 5, OutputTokens: 2, Status: 200}}, nil)
	PrintServingBlock(&buf, m, BlockOptions{RequestRate: 8, Percentiles: []float64{90, 99}, PercentileMetrics: []string{"ttft", "tpot", "itl", "e2el"}})
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	for _, want := range []string{
		"============ Serving Benchmark Result ============",
		"Successful requests:                     1         ",
		"Failed requests:                         0         ",
		"Request rate configured (RPS):           8.00      ",
		"Benchmark duration (s):                  1.00      ",
		"Total input tokens:                      5         ",
		"Total generated tokens:                  2         ",
		"Request throughput (req/s):              1.00      ",
		"Output token throughput (tok/s):         2.00      ",
		"---------------Time to First Token----------------",
		"Mean TTFT (ms):                          10.00     ",
		"P90 TTFT (ms):                           10.00     ",
		"P99 TTFT (ms):                           10.00     ",
		"-----Time per Output Token (excl. 1st token)------",
		"---------------Inter-token Latency----------------",
		"Median ITL (ms):                         990.00    ",
		"----------------End-to-end Latency----------------",
		"==================================================",
	} {
		found := false
		for _, l := range lines {
			if l == want {
				found = true
			}
		}
		if !found {
			t.Errorf("missing line %q in:\n%s", want, buf.String())
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "=") || strings.HasPrefix(l, "-") {
			if len(l) != 50 {
				t.Errorf("header %q is %d characters, want 50", l, len(l))
			}
		}
	}
}

// wordsN returns n one-token words "<tag>0 <tag>1 …".
func wordsN(n int, tag string) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(tag)
		b.WriteString(strings.Repeat("x", i%5+1))
		b.WriteString(" ")
	}
	return b.String()
}

func TestParseSelfStat(t *testing.T) {
	got, err := parseSelfStat("1234 (eppkit (x) y) S 1 2 3 4 5 6 7 8 9 10 250 30 0 0 20 0")
	if err != nil || got != 280 {
		t.Fatalf("parseSelfStat: %d, %v; want utime 250 + stime 30", got, err)
	}
	if _, err := parseSelfStat("1234 eppkit S 1"); err == nil {
		t.Fatal("malformed line accepted")
	}
	if v, err := readSelfCPU(); err != nil || v > 1<<40 {
		t.Fatalf("readSelfCPU: %d, %v", v, err)
	}
}
