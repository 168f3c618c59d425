package bench

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/internal/cancelonwrite"
)

// The comparison step is the baseline's highest sustained valid step; each row carries the
// policy's p50 there and at its own highest sustained step, and PrintComparison prints both.
func TestComparisonRowsCarryMedians(t *testing.T) {
	step := func(rate, median, p90 float64, sustained bool) StepResult {
		return StepResult{Rate: rate, Valid: true, Sustained: sustained, Metrics: Metrics{OutputThroughput: rate * 10,
			TTFT: Dist{N: 10, Mean: median + 5, Median: median, Percentiles: map[string]float64{"p90": p90}}}}
	}
	c := &Comparison{Results: []*Result{
		{Target: "round-robin", Steps: []StepResult{step(8, 100, 300, true), step(16, 400, 900, false)}},
		{Target: "reference", Steps: []StepResult{step(8, 60, 90, true), step(16, 70, 120, true)}},
	}}
	c.build()
	if c.Step != 0 {
		t.Fatalf("comparison step %d, want 0 (the baseline sustains only step 0)", c.Step)
	}
	base, ref := c.Rows[0], c.Rows[1]
	if base.P50TTFTMs != 100 || ref.P50TTFTMs != 60 || ref.P90Speedup != 300.0/90 {
		t.Fatalf("rows at step 0: %+v / %+v", base, ref)
	}
	if base.MaxSustainedP50TTFTMs != 100 || ref.MaxSustainedRate != 16 || ref.MaxSustainedP50TTFTMs != 70 || ref.MaxSustainedRatio != 2 {
		t.Fatalf("highest sustained: %+v / %+v", base, ref)
	}
	var b bytes.Buffer
	PrintComparison(&b, c)
	if out := b.String(); !strings.Contains(out, "p50 TTFT (ms)") || !strings.Contains(out, "its p50 TTFT (ms)") {
		t.Fatalf("table without the p50 columns:\n%s", out)
	}
}

// TestCompareInterrupted: a comparison interrupted while its second policy starts keeps the
// finished baseline's result and row, and says which policies did not run.
func TestCompareInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := &cancelonwrite.Writer{Marker: "== second:", Cancel: cancel}
	c, err := Compare(ctx, smallRunConfig(21),
		[]CompareTarget{{Name: TargetRoundRobin}, {Name: "second"}, {Name: "third"}}, log)
	if !errors.Is(err, context.Canceled) || c == nil {
		t.Fatalf("seed 21: Compare = %v, %v; want the partial comparison and context.Canceled\nlog:\n%s", c, err, log.String())
	}
	if !c.Interrupted || c.InterruptedDuring != "second" || !slices.Equal(c.NotRun, []string{"second", "third"}) {
		t.Fatalf("seed 21: interrupted %v during %q, not run %v; want during second, not run [second third]",
			c.Interrupted, c.InterruptedDuring, c.NotRun)
	}
	if len(c.Results) != 1 || c.Results[0].Target != TargetRoundRobin || len(c.Rows) != 1 || c.Results[0].Overall.Completed == 0 {
		t.Fatalf("seed 21: %d results, %d rows; want the finished baseline only, with its requests", len(c.Results), len(c.Rows))
	}
	var b bytes.Buffer
	PrintComparison(&b, c)
	if out := b.String(); !strings.Contains(out, "round-robin") ||
		!strings.Contains(out, "INTERRUPTED (Ctrl-C or SIGTERM) during second: not run: second, third; the table covers only the 1 policies that finished") {
		t.Fatalf("table:\n%s", out)
	}
}
