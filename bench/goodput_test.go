package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseGoodput(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    SLOs
		wantErr string
	}{
		{in: "", want: SLOs{}},
		{in: "ttft:500 tpot:50", want: SLOs{TTFTMs: 500, TPOTMs: 50}},
		{in: "e2el:2000,ttft:250.5", want: SLOs{TTFTMs: 250.5, E2ELMs: 2000}},
		{in: "ttft=500", wantErr: `"ttft=500" is not KEY:VALUE`},
		{in: "ttft:0", wantErr: "ttft must be a positive number"},
		{in: "ttft:1 ttft:2", wantErr: "ttft given twice"},
		{in: "itl:5", wantErr: `unknown metric "itl"`},
	} {
		got, err := ParseGoodput(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--goodput") {
				t.Errorf("ParseGoodput(%q) error = %v, want one naming --goodput and containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseGoodput(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if back, err := ParseGoodput(got.String()); err != nil || back != got {
			t.Errorf("ParseGoodput(%q.String() = %q) = %+v, %v", tc.in, got.String(), back, err)
		}
	}
}

// TestGoodputCountsRequestsMeetingEverySLO follows vLLM's calculate_metrics: a request counts only
// when it completed and every configured metric is at most its SLO; a one-token request's TPOT is 0.
func TestGoodputCountsRequestsMeetingEverySLO(t *testing.T) {
	ok := func(ttft, e2e float64, out int) Outcome {
		return Outcome{Status: 200, TTFTMs: ttft, E2EMs: e2e, OutputTokens: out}
	}
	outs := []Outcome{
		ok(100, 410, 32), // TPOT 10: good
		ok(100, 720, 32), // TPOT 20: misses tpot
		ok(600, 900, 32), // misses ttft
		ok(200, 200, 1),  // one token: TPOT 0, good
		ok(500, 810, 32), // TTFT exactly the SLO, TPOT exactly 10: good
		{Status: 429, Error: "HTTP 429", TTFTMs: 1, E2EMs: 1}, // failed: never good
	}
	slo := SLOs{TTFTMs: 500, TPOTMs: 10}
	good, rate := Goodput(outs, slo, 2)
	if good != 3 || rate != 1.5 {
		t.Errorf("Goodput = %d, %v/s; want 3, 1.5/s", good, rate)
	}
	if g, r := Goodput(outs, SLOs{}, 2); g != 0 || r != 0 {
		t.Errorf("Goodput without SLOs = %d, %v; want 0, 0", g, r)
	}
	if g, _ := Goodput(outs, SLOs{E2ELMs: 800}, 2); g != 3 {
		t.Errorf("Goodput with e2el:800 = %d, want 3", g)
	}
}

func TestServingBlockPrintsGoodputAfterThroughput(t *testing.T) {
	var b bytes.Buffer
	g := 12.345
	PrintServingBlock(&b, Metrics{RequestThroughput: 20}, BlockOptions{Goodput: &g})
	out := b.String()
	i, j := strings.Index(out, "Request throughput (req/s):"), strings.Index(out, "Request goodput (req/s):                 12.35")
	if i < 0 || j < i {
		t.Errorf("goodput line missing or before the throughput line:\n%s", out)
	}
	b.Reset()
	PrintServingBlock(&b, Metrics{}, BlockOptions{})
	if strings.Contains(b.String(), "goodput") {
		t.Errorf("goodput printed without --goodput:\n%s", b.String())
	}
}
