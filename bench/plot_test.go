package bench

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func syntheticResult(name string, ttft float64) *Result {
	steps := []Step{{Rate: 1, Duration: 1e9}, {Rate: 2, Duration: 1e9}}
	var outs []Outcome
	for i := range 20 {
		outs = append(outs, Outcome{ID: i, Step: i / 10, SentMs: float64(i * 100), TTFTMs: ttft + float64(i), E2EMs: 200,
			ITLMs: []float64{50, 50}, PromptTokens: 10, OutputTokens: 3, Status: 200, Endpoint: []string{"e0", "e1"}[i%2]})
	}
	r := BuildResult(name, Spec{Name: WorkloadRandom}, steps, &Load{Outcomes: outs}, nil)
	o, _ := OracleBound([]Request{{Prompt: "a b c "}}, FrozenLatencyModel())
	r.Oracle = &o
	return r
}

func TestWriteOutputsWritesImagesAndJSON(t *testing.T) {
	dir := t.TempDir()
	files, err := WriteOutputs(dir, []*Result{syntheticResult("round-robin", 100), syntheticResult("reference (x)", 20)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"results.json", "vllm_round-robin.json", "vllm_reference--x-.json", "ttft_cdf.png", "ttft_cdf.svg",
		"ladder_throughput.png", "ladder_p90_ttft.svg", "endpoints_round-robin.png", "endpoints_reference--x-.svg"}
	for _, w := range want {
		found := false
		for _, f := range files {
			if filepath.Base(f) == w {
				found = true
			}
		}
		if !found {
			t.Errorf("%s not written (files: %v)", w, files)
		}
	}
	for _, f := range files {
		switch filepath.Ext(f) {
		case ".png":
			fh, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(fh)
			fh.Close()
			if err != nil || img.Bounds().Dx() < 100 {
				t.Errorf("%s: not a PNG image: %v", f, err)
			}
		case ".svg":
			b, _ := os.ReadFile(f)
			if !strings.Contains(string(b), "<svg") {
				t.Errorf("%s: no <svg>", f)
			}
		}
	}
	var v map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "vllm_round-robin.json"))
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"completed", "duration", "total_output_tokens", "output_throughput", "mean_ttft_ms", "median_ttft_ms",
		"p99_ttft_ms", "std_itl_ms", "p90_e2el_ms", "ttfts", "itls", "input_lens"} {
		if _, ok := v[k]; !ok {
			t.Errorf("vllm JSON lacks %q", k)
		}
	}
	if v["completed"].(float64) != 20 || v["mean_ttft_ms"].(float64) != 109.5 {
		t.Errorf("completed %v, mean_ttft_ms %v; want 20 and 109.5", v["completed"], v["mean_ttft_ms"])
	}
}

// TestWriteOutputsWithNoSuccessfulRequest: a run where every request failed (an EPP that
// refuses everything, a duration shorter than one arrival) still writes every file; the TTFT
// CDF's log axis used to panic on the empty range.
func TestWriteOutputsWithNoSuccessfulRequest(t *testing.T) {
	steps := []Step{{Rate: 1, Duration: 1e9}}
	outs := []Outcome{{ID: 0, Step: 0, Status: 503, Error: "refused"}, {ID: 1, Step: 0, Status: 503, Error: "refused"}}
	failed := BuildResult("refuses-all", Spec{Name: WorkloadRandom}, steps, &Load{Outcomes: outs}, nil)
	empty := BuildResult("no-requests", Spec{Name: WorkloadRandom}, steps, &Load{}, nil)
	for _, cmpStep := range []int{-1, 0} {
		files, err := WriteOutputs(t.TempDir(), []*Result{failed, empty}, cmpStep)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range files {
			if strings.HasPrefix(filepath.Base(f), "ttft_cdf.") {
				n++
			}
		}
		if n != 2 {
			t.Errorf("cmpStep %d: %d ttft_cdf files written, want 2 (files %v)", cmpStep, n, files)
		}
	}
}

// TestWriteOutputsGoodputPlots: with --goodput and an SLO mix the ladder gains the goodput and
// interactive-attainment plots; without them neither is written.
func TestWriteOutputsGoodputPlots(t *testing.T) {
	mixed := func(name string, ttft float64) *Result {
		r := syntheticResult(name, ttft)
		for i := range r.Outcomes {
			if i%2 == 0 {
				r.Outcomes[i].SLO = &SLOs{TTFTMs: 110}
			}
		}
		SetGoodput(r, SLOs{TTFTMs: 105})
		return r
	}
	dir := t.TempDir()
	files, err := WriteOutputs(dir, []*Result{mixed("round-robin", 100), mixed("reference", 20)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range files {
		names[filepath.Base(f)] = true
	}
	for _, w := range []string{"ladder_goodput.png", "ladder_goodput.svg", "ladder_slo_attainment.png", "ladder_slo_attainment.svg"} {
		if !names[w] {
			t.Errorf("%s not written (files: %v)", w, files)
		}
	}
	files, err = WriteOutputs(t.TempDir(), []*Result{syntheticResult("round-robin", 100)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.Contains(f, "ladder_goodput") || strings.Contains(f, "ladder_slo_attainment") {
			t.Errorf("%s written for a run without --goodput or an SLO mix", f)
		}
	}
}
