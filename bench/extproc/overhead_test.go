package extproc

import (
	"path/filepath"
	"strings"
	"testing"
)

func cell(target string, rate, dps, p95 float64, errs int) MatrixCell {
	return MatrixCell{Target: target, Pages: PagesMinimal, Endpoints: 100, PromptBytes: 2048, Rate: rate,
		Report: &Report{Decisions: int(dps * 10), DecisionsPerSec: dps, Errors: errs, LatencyMs: LatencySummaryMs{P95: p95}, EPPCPUPerDecisionMs: 0.2, EPPRSSBytes: 64 << 20}}
}

// TestSustainedRates: the highest rate with no error or drop, ≥ 90% decided and P95 within the
// bound; the reference against llm-d-router at its highest sustained rate.
func TestSustainedRates(t *testing.T) {
	cells := []MatrixCell{
		cell(TargetReference, 100, 99, 2, 0), cell(TargetReference, 200, 199, 4, 0), cell(TargetReference, 400, 390, 8, 0),
		cell(TargetReference, 800, 600, 9, 0), // decided 75% of the rate: not sustained
		cell(TargetLLMDRouter, 100, 99, 10, 0), cell(TargetLLMDRouter, 200, 195, 40, 0),
		cell(TargetLLMDRouter, 400, 395, 60, 0),                            // P95 above 50 ms
		cell(TargetNull, 100, 100, 1, 0), cell(TargetNull, 200, 200, 1, 3), // errors
	}
	rows := SustainedRates(cells, 50)
	want := map[string]float64{TargetReference: 400, TargetLLMDRouter: 200, TargetNull: 100}
	if len(rows) != 3 {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if r.MaxRate != want[r.Target] {
			t.Errorf("%s: max sustained %v, want %v", r.Target, r.MaxRate, want[r.Target])
		}
	}
	ratios := ReferenceOverLLMDRouter(cells, rows)
	if len(ratios) != 1 || ratios[0].SustainedRateRatio != 2 || ratios[0].LLMDRouterMaxRate != 200 || ratios[0].P95RatioAtItsMax != 0.1 {
		t.Fatalf("ratios %+v", ratios)
	}
	rep := &MatrixReport{Cells: cells, P95BoundMs: 50, Sustained: rows, RatiosReferenceLLMDRouter: ratios}
	var out strings.Builder
	PrintOverhead(&out, rep)
	if got := lastLineFields(out.String()); strings.Join(got, " ") != "minimal 100 2048 2.00 200 0.1" || strings.Contains(out.String(), "sustained no step") {
		t.Fatalf("printed:\n%s", out.String())
	}
	files, err := WriteOverheadPlots(t.TempDir(), rep)
	if err != nil || len(files) != 2 || filepath.Base(files[0]) != "overhead_p95_minimal_100ep_2048B.png" {
		t.Fatalf("plots %v, %v", files, err)
	}
}

// TestLLMDRouterSustainsNone: when llm-d-router sustains no step, the rate ratio is a lower bound
// (the reference's highest sustained rate ÷ the lowest step), printed "≥", and the P95s are
// compared at the lowest step; with the reference sustaining none too, the ratio is unknown.
func TestLLMDRouterSustainsNone(t *testing.T) {
	cells := []MatrixCell{
		cell(TargetReference, 50, 50, 8, 0), cell(TargetReference, 2000, 1990, 9, 0),
		cell(TargetLLMDRouter, 50, 50, 940, 0), cell(TargetLLMDRouter, 2000, 300, 4000, 12),
	}
	rows := SustainedRates(cells, 50)
	ratios := ReferenceOverLLMDRouter(cells, rows)
	want := LLMDRouterRatios{Pages: PagesMinimal, Endpoints: 100, PromptBytes: 2048, SustainedRateRatio: 40, SustainedRateLowerBound: true,
		P95Rate: 50, P95RatioAtItsMax: 8.0 / 940}
	if len(ratios) != 1 || ratios[0] != want {
		t.Fatalf("ratios %+v, want %+v", ratios, want)
	}
	var out strings.Builder
	PrintOverhead(&out, &MatrixReport{Cells: cells, P95BoundMs: 50, Sustained: rows, RatiosReferenceLLMDRouter: ratios})
	if !strings.Contains(out.String(), "≥ 40.00") || !strings.Contains(out.String(), "0.008511") || !strings.Contains(out.String(), "llm-d-router sustained no step") {
		t.Fatalf("printed:\n%s", out.String())
	}

	cells[1] = cell(TargetReference, 2000, 1000, 90, 0)
	cells[0] = cell(TargetReference, 50, 50, 80, 0)
	rows = SustainedRates(cells, 50)
	ratios = ReferenceOverLLMDRouter(cells, rows)
	if len(ratios) != 1 || ratios[0].SustainedRateRatio != 0 || ratios[0].SustainedRateLowerBound || ratios[0].P95Rate != 50 {
		t.Fatalf("neither sustains: ratios %+v", ratios)
	}
	out.Reset()
	PrintOverhead(&out, &MatrixReport{Cells: cells, P95BoundMs: 50, Sustained: rows, RatiosReferenceLLMDRouter: ratios})
	if got := lastLineFields(out.String()); strings.Join(got, " ") != "minimal 100 2048 - 50 0.08511" || strings.Contains(out.String(), "sustained no step") {
		t.Fatalf("printed:\n%s", out.String())
	}
}

// lastLineFields is the fields of the last non-empty line of s.
func lastLineFields(s string) []string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Fields(lines[len(lines)-1])
}
