package extproc

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestE2ERatios: the end-to-end percentiles are summarize's (linear interpolation) and each
// target's ratio is its percentile ÷ the null result's; a target that did not run or completed
// nothing gets no ratio, and without a null result there is none at all.
func TestE2ERatios(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		var out []time.Duration
		for _, v := range vs {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	// 1..100 ms: p50 50.5, p95 95.05, p99 99.01; twice that for the reference.
	var null, ref []int
	for i := 100; i >= 1; i-- {
		null = append(null, i)
		ref = append(ref, 2*i)
	}
	results := []E2EResult{
		{Target: TargetNull, Requests: 100, LatencyMs: summarize(ms(null...))},
		{Target: TargetReference, Requests: 100, LatencyMs: summarize(ms(ref...))},
		{Target: TargetUpstream, Error: "not ready"},
		{Target: TargetLLMDRouter, Requests: 0, Errors: 3},
	}
	if d := cmp.Diff(LatencySummaryMs{P50: 50.5, P90: 90.1, P95: 95.05, P99: 99.01, P999: 99.901, Max: 100, Mean: 50.5}, results[0].LatencyMs, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Fatalf("summarize (-want +got):\n%s", d)
	}
	want := []E2ERatio{{Target: TargetReference, P50: 2, P95: 2, P99: 2}}
	if d := cmp.Diff(want, E2ERatios(results), cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("E2ERatios (-want +got):\n%s", d)
	}
	if got := E2ERatios(results[1:]); got != nil {
		t.Errorf("E2ERatios without a null result = %v, want nil", got)
	}
	rep := &E2EReport{Streams: 4, BodyBytes: 2048, Endpoints: 2, Results: results, RatiosOverNull: E2ERatios(results)}
	var sb strings.Builder
	PrintE2E(&sb, rep)
	for _, s := range []string{"÷ null", "reference        2.00      2.00      2.00", "upstream     error: not ready"} {
		if !strings.Contains(sb.String(), s) {
			t.Errorf("PrintE2E lacks %q:\n%s", s, sb.String())
		}
	}
	if err := ErrE2E(rep); err != nil {
		t.Errorf("ErrE2E with a ratio = %v", err)
	}
	if err := ErrE2E(&E2EReport{Results: results[2:]}); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("ErrE2E without ratios = %v, want one naming why", err)
	}
}

// TestE2EBodies: every body is exactly the asked size, valid JSON, and its prompt differs from
// the first bytes; the n-th body is the same for equal seeds.
func TestE2EBodies(t *testing.T) {
	for _, size := range []int{MinE2EBodyBytes, 2048, DefaultE2EBodyBytes} {
		b, err := newE2EBodies("meta-llama/Llama-3.1-8B-Instruct", size, 7)
		if err != nil {
			t.Fatal(err)
		}
		b2, _ := newE2EBodies("meta-llama/Llama-3.1-8B-Instruct", size, 7)
		seen := map[string]bool{}
		for n := uint64(1); n <= 12; n++ {
			body := b.body(n)
			if len(body) != size {
				t.Fatalf("body %d of size %d has %d bytes", n, size, len(body))
			}
			var v struct {
				Model     string `json:"model"`
				Prompt    string `json:"prompt"`
				MaxTokens int    `json:"max_tokens"`
			}
			if err := json.Unmarshal(body, &v); err != nil || v.MaxTokens != e2eMaxTokens || v.Model == "" {
				t.Fatalf("body %d: %v, %+v", n, err, v)
			}
			head := v.Prompt[:16]
			if seen[head] {
				t.Fatalf("body %d repeats the first 16 prompt bytes %q", n, head)
			}
			seen[head] = true
			if string(b2.body(n)) != string(body) {
				t.Fatalf("body %d differs between equal seeds", n)
			}
		}
	}
	if _, err := newE2EBodies(strings.Repeat("m", 300), MinE2EBodyBytes, 1); err == nil || !strings.Contains(err.Error(), "--e2e-body-bytes") {
		t.Errorf("a body too small for its model name: %v, want an error naming --e2e-body-bytes", err)
	}
}

func TestValidateE2E(t *testing.T) {
	base := MatrixOptions{Targets: []string{"reference"}, RefreshInterval: time.Second,
		E2E: E2EOptions{Streams: 4, BodyBytes: 2048, Endpoints: 2}}
	m := base
	if err := m.ValidateE2E(); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{TargetNull, TargetReference}, m.Targets); d != "" {
		t.Errorf("targets (-want +got):\n%s", d)
	}
	m = base
	m.Targets = []string{"reference", "null"}
	if err := m.ValidateE2E(); err != nil || m.Targets[0] != TargetNull || len(m.Targets) != 2 {
		t.Errorf("null listed last: %v, targets %v; want it moved first", err, m.Targets)
	}
	for _, tc := range []struct {
		mutate func(*MatrixOptions)
		want   string
	}{
		{func(m *MatrixOptions) { m.E2E.Streams = 0 }, "--e2e-streams"},
		{func(m *MatrixOptions) { m.E2E.BodyBytes = 10 }, "--e2e-body-bytes"},
		{func(m *MatrixOptions) { m.E2E.Endpoints = 251 }, "--e2e-endpoints"},
		{func(m *MatrixOptions) { m.Rates = []float64{10} }, "--rates"},
		{func(m *MatrixOptions) { m.Bench.ChunkSize = 2 << 20 }, "--body-chunk-size"},
		{func(m *MatrixOptions) { m.Targets = []string{"null"} }, "--targets"},
		{func(m *MatrixOptions) { m.Targets = []string{"nginx"} }, "--targets"},
	} {
		m := base
		m.Targets = slicesClone(base.Targets)
		tc.mutate(&m)
		if err := m.ValidateE2E(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateE2E = %v, want an error naming %s", err, tc.want)
		}
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
