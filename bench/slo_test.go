package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSLOMixTagsAFractionAndKeepsThePrompts: with SLOFraction 0.3, about 30% of 2,000 requests
// are interactive (binomial sd ≈ 10 requests; the bound ±80 fails with probability < 1e-14 for
// a fair generator), each carrying the spec's SLO; the prompts equal those without a mix, and
// equal seeds give equal tags.
func TestSLOMixTagsAFractionAndKeepsThePrompts(t *testing.T) {
	const seed, n = 5, 2000
	plain := Spec{Name: WorkloadSharedPrefix, Seed: seed, Groups: 4, PromptsPerGroup: 4, SystemPromptLen: 32, QuestionLen: 8, OutputLen: 4}
	mixed := plain
	mixed.SLOFraction, mixed.SLO = 0.3, SLOs{TTFTMs: 300, TPOTMs: 40}
	a, err := Generate(plain, n)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(mixed, n)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Generate(mixed, n)
	inter := 0
	for i := range b {
		if a[i].Prompt != b[i].Prompt || a[i].OutputTokens != b[i].OutputTokens {
			t.Fatalf("seed %d request %d: the SLO mix changed the prompt or output length", seed, i)
		}
		if a[i].SLO != nil {
			t.Fatalf("seed %d request %d: an SLO without a mix", seed, i)
		}
		if (b[i].SLO == nil) != (again[i].SLO == nil) {
			t.Fatalf("seed %d request %d: equal specs tagged differently", seed, i)
		}
		if b[i].SLO != nil {
			inter++
			if *b[i].SLO != mixed.SLO || b[i].Class() != ClassInteractive {
				t.Fatalf("seed %d request %d: SLO %+v class %s, want %+v interactive", seed, i, *b[i].SLO, b[i].Class(), mixed.SLO)
			}
		}
	}
	if inter < 600-80 || inter > 600+80 {
		t.Errorf("seed %d: %d of %d interactive, want 600 ± 80", seed, inter, n)
	}
}

func TestSLOMixValidation(t *testing.T) {
	base := Spec{Name: WorkloadRandom, InputLen: 8, OutputLen: 2}
	for _, tc := range []struct {
		mutate func(*Spec)
		want   string
	}{
		{func(s *Spec) { s.SLOFraction = 1.5 }, "slo_fraction must be in [0,1]"},
		{func(s *Spec) { s.SLOFraction = 0.5 }, "needs an slo with ttft or tpot"},
		{func(s *Spec) { s.SLOFraction, s.SLO = 0.5, SLOs{E2ELMs: 100, TTFTMs: 1} }, "e2el has no request header"},
	} {
		s := base
		tc.mutate(&s)
		if _, err := Generate(s, 1); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Generate error = %v, want %q", err, tc.want)
		}
	}
	for _, tc := range []struct {
		o    ServeOptions
		want string
	}{
		{ServeOptions{SLOFraction: 0.5}, "--slo-fraction 0.5 needs --slo"},
		{ServeOptions{SLOFraction: 0.5, SLO: "ttft"}, "--slo"},
		{ServeOptions{SLOFraction: 0.5, SLO: "e2el:100"}, "e2el has no request header"},
		{ServeOptions{SLOFraction: -1, SLO: "ttft:1"}, "--slo-fraction must be in [0,1]"},
		{ServeOptions{SLOFraction: math.NaN(), SLO: "ttft:1"}, "--slo-fraction must be in [0,1]"},
		{ServeOptions{SLO: "ttft:300"}, `--slo "ttft:300" needs --slo-fraction`},
		{ServeOptions{Goodput: "ttft:x"}, "--goodput"},
	} {
		o := tc.o
		o.Workload, o.Rate, o.Duration = WorkloadRandom, "1", time.Second
		if _, err := o.RunConfig(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RunConfig(%+v) error = %v, want %q", tc.o, err, tc.want)
		}
	}
}

// TestLoadGeneratorSendsSLOHeaders: an interactive request reaches the server with
// x-slo-ttft-ms and x-slo-tpot-ms, a batch request with neither, and each outcome keeps its SLO.
func TestLoadGeneratorSendsSLOHeaders(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][2]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body completionBody
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		seen[body.Prompt] = [2]string{r.Header.Get(HeaderTTFTSLO), r.Header.Get(HeaderTPOTSLO)}
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t\"}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	slo := &SLOs{TTFTMs: 250, TPOTMs: 12.5}
	reqs := []Request{{ID: 0, Prompt: "interactive", OutputTokens: 1, SLO: slo}, {ID: 1, Prompt: "batch", OutputTokens: 1}}
	load, err := RunLoad(context.Background(), LoadConfig{BaseURL: srv.URL, Model: "m", Requests: reqs, Arrivals: []Arrival{{}, {}}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{"interactive": {"250", "12.5"}, "batch": {"", ""}}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("SLO headers seen by the server (-want +got):\n%s", diff)
	}
	if load.Outcomes[0].SLO == nil || *load.Outcomes[0].SLO != *slo || load.Outcomes[1].SLO != nil {
		t.Errorf("outcome SLOs %v, %v; want %+v and nil", load.Outcomes[0].SLO, load.Outcomes[1].SLO, *slo)
	}
}

// TestSLOClassesAndGoodputComparison: attainment per class, goodput per step, and the
// comparison's goodput ratio and interactive p50 reduction.
func TestSLOClassesAndGoodputComparison(t *testing.T) {
	slo := &SLOs{TTFTMs: 100}
	mk := func(ttfts ...float64) []Outcome {
		var outs []Outcome
		for i, v := range ttfts {
			o := Outcome{ID: i, Status: 200, OutputTokens: 1, TTFTMs: v, E2EMs: v}
			if i%2 == 0 {
				o.SLO = slo
			}
			outs = append(outs, o)
		}
		return outs
	}
	// Interactive (even ids): 50, 90, 300 → 2 of 3 meet 100 ms; batch: 80, 500 → 1 of 2 meets
	// the --goodput ttft:200.
	outs := mk(50, 80, 90, 500, 300)
	cls := SLOClasses(outs, SLOs{TTFTMs: 200})
	if len(cls) != 2 || cls[0].Class != ClassInteractive || cls[0].Met != 2 || cls[0].Requests != 3 ||
		cls[1].Class != ClassBatch || cls[1].Met != 1 || cls[1].Attainment != 0.5 {
		t.Fatalf("classes %+v", cls)
	}
	if cls := SLOClasses(outs, SLOs{}); cls[1].Attainment != -1 {
		t.Errorf("batch without --goodput: attainment %v, want -1 (n/a)", cls[1].Attainment)
	}
	if SLOClasses(mk(1, 2)[1:], SLOs{}) != nil {
		t.Error("classes of a run without interactive requests, want nil")
	}
	result := func(target string, ttfts ...float64) *Result {
		r := &Result{Target: target, Outcomes: mk(ttfts...)}
		r.Overall = ComputeMetrics(r.Outcomes, nil)
		r.Steps = []StepResult{{Index: 0, Rate: 1, Sustained: true, Valid: true, Metrics: r.Overall}}
		SetGoodput(r, SLOs{TTFTMs: 200})
		return r
	}
	base, better := result("reference", 150, 80, 150, 500, 300), result("predicted-latency", 50, 80, 90, 500, 150)
	c := &Comparison{Results: []*Result{base, better}}
	c.build()
	var out bytes.Buffer
	PrintComparison(&out, c)
	b := c.Rows[1]
	// Goodput ttft:200: base 3 of 5 good, better 4 of 5 → ratio 4/3; interactive p50 150 → 90.
	if diff := b.GoodputRatio - 4.0/3; diff > 1e-9 || diff < -1e-9 || b.InteractiveP50TTFTMs != 90 || b.InteractiveP50Reduction != 0.4 {
		t.Errorf("row %+v: want goodput ratio 1.33, interactive p50 90 ms, 40%% lower", b)
	}
	for _, want := range []string{"Goodput (--goodput ttft:200) and the interactive class's SLO attainment", "1.33x", "40.0%", "66.7%"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("comparison output lacks %q:\n%s", want, out.String())
		}
	}
}
