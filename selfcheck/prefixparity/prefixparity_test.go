package prefixparity

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// TestSummarizeCountsOnlyDifferencesTheRulesDoNotExplain: a difference in a class whose scores
// must agree is unexplained (the check fails); one in a class with a named rule is not.
func TestSummarizeCountsOnlyDifferencesTheRulesDoNotExplain(t *testing.T) {
	same := Trial{Class: "completions-text", Scores: [2][fleetSize]float64{{0.5, 0, 1, 0}, {0.5, 0, 1, 0}}}
	off := Trial{Class: "completions-text", Index: 1, Scores: [2][fleetSize]float64{{0.5, 0, 1, 0}, {0.5, 0, 0.9, 0}}}
	chat := Trial{Class: "chat", Scores: [2][fleetSize]float64{{0.45, 0, 0, 0}, {0.4211, 0, 0, 0}}}
	for _, c := range []struct {
		trials []Trial
		want   int
	}{
		{[]Trial{same, chat}, 0},
		{[]Trial{same, off, chat}, 1},
	} {
		md, n := Summarize(c.trials, Options{Trials: 1, Seed: 3})
		if n != c.want {
			t.Errorf("%d trials: %d unexplained, want %d\n%s", len(c.trials), n, c.want, md)
		}
		if c.want > 0 && !strings.Contains(md, "**UNEXPLAINED**") {
			t.Errorf("the summary does not mark the unexplained class:\n%s", md)
		}
		if !strings.Contains(md, "| chat | 1 | 1 | 0 |") || !strings.Contains(md, "differ, as the rule says") {
			t.Errorf("the chat difference is not attributed to its rule:\n%s", md)
		}
	}
}

// TestWorkloadIsTheSameForBothEPPs: the trials and every request's bytes derive from the seed
// alone, and every class sends a probe that extends each share.
func TestWorkloadIsTheSameForBothEPPs(t *testing.T) {
	a, b := Workload(42, 3), Workload(42, 3)
	if !slices.Equal(a, b) || len(a) != 3*len(Classes) {
		t.Fatalf("Workload(42, 3) is not deterministic or has %d trials", len(a))
	}
	if slices.Equal(a, Workload(43, 3)) {
		t.Errorf("Workload ignores its seed")
	}
	for _, tr := range a {
		tr.Shares = [fleetSize]float64{0.25, 0.5, 0.75, 1}
		s1, p1 := trialRequests(tr, 42, "m")
		s2, p2 := trialRequests(tr, 42, "m")
		if string(p1.body) != string(p2.body) {
			t.Fatalf("%s: the probe differs between two builds", tr.Class)
		}
		for j := range s1 {
			if s1[j] == nil || string(s1[j].body) != string(s2[j].body) || s1[j].path != p1.path {
				t.Fatalf("%s: share %d missing or not the same", tr.Class, j)
			}
			if !json.Valid(s1[j].body) {
				t.Fatalf("%s: share %d is not JSON", tr.Class, j)
			}
		}
	}
}

func TestScores(t *testing.T) {
	md, _ := structpb.NewStruct(map[string]any{"envoy.lb": map[string]any{
		ScoresKey: map[string]any{"127.0.10.1:8000": 0.5, "127.0.10.2:8000": 0.0}}})
	s, err := Scores(md)
	if err != nil || s["127.0.10.1:8000"] != 0.5 || len(s) != 2 {
		t.Errorf("Scores = %v, %v", s, err)
	}
	empty, _ := structpb.NewStruct(map[string]any{"envoy.lb": map[string]any{}})
	if _, err := Scores(empty); err == nil || !strings.Contains(err.Error(), "--emit-endpoint-scores") {
		t.Errorf("without scores: %v, want an error naming --emit-endpoint-scores", err)
	}
}

func TestBestDiffers(t *testing.T) {
	tie := Trial{Scores: [2][fleetSize]float64{{0.5, 0.5, 0, 0}, {0.5, 0.4, 0, 0}}}
	same := Trial{Scores: [2][fleetSize]float64{{0.9, 0.5, 0, 0}, {0.89, 0.52, 0, 0}}}
	if !tie.BestDiffers() || same.BestDiffers() {
		t.Errorf("BestDiffers: a broken tie %v, the same leader %v; want true, false", tie.BestDiffers(), same.BestDiffers())
	}
}
