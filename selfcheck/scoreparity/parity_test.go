package scoreparity

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
		md, n := Summarize(c.trials, Options{Trials: 1, Seed: 3}, Prefix)
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
	a, b := Prefix.Workload(42, 3), Prefix.Workload(42, 3)
	if !slices.Equal(a, b) || len(a) != 3*len(Prefix.Classes) {
		t.Fatalf("Prefix.Workload(42, 3) is not deterministic or has %d trials", len(a))
	}
	if slices.Equal(a, Prefix.Workload(43, 3)) {
		t.Errorf("Workload ignores its seed")
	}
	for _, tr := range a {
		tr.Setup = [fleetSize]float64{0.25, 0.5, 0.75, 1}
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

// TestRelativeStudiesCancelATermCommonToEveryEndpoint: the load studies compare scores less the
// best score, so a constant offset (the probe's own tokens) is no difference, while one endpoint
// counted apart is.
func TestRelativeStudiesCancelATermCommonToEveryEndpoint(t *testing.T) {
	offset := Trial{Class: "load-completions-text", Scores: [2][fleetSize]float64{{0.99, 0.95, 0.90, 0.99}, {0.98, 0.94, 0.89, 0.98}}}
	apart := Trial{Class: "load-completions-text", Index: 1, Scores: [2][fleetSize]float64{{0.99, 0.95, 0.90, 0.99}, {0.98, 0.93, 0.89, 0.98}}}
	if TokenLoad.compared(offset).Differs() {
		t.Errorf("a constant offset differs after comparison: %v", TokenLoad.compared(offset).Scores)
	}
	if !offset.Differs() || Prefix.compared(offset).Differs() != offset.Differs() {
		t.Errorf("an absolute study must compare the scores themselves")
	}
	if _, n := Summarize([]Trial{offset, apart}, Options{Trials: 2, Seed: 1}, TokenLoad); n != 1 {
		t.Errorf("token-load summary: %d unexplained, want 1 (the endpoint counted apart)", n)
	}
}

// TestLoadWorkload: every request of a load trial is its own prompt (nothing is cached), and the
// same for both EPPs.
func TestLoadWorkload(t *testing.T) {
	trials := TokenLoad.Workload(9, 2)
	if len(trials) != 2*len(TokenLoad.Classes) {
		t.Fatalf("%d trials", len(trials))
	}
	seen := map[string]bool{}
	for _, tr := range trials {
		for k := -1; k < 12; k++ {
			q := loadRequest(tr, 9, k, "m")
			if seen[string(q.body)] {
				t.Fatalf("%s trial %d request %d repeats a prompt", tr.Class, tr.Index, k)
			}
			seen[string(q.body)] = true
			if string(loadRequest(tr, 9, k, "m").body) != string(q.body) {
				t.Fatalf("request %d is not deterministic", k)
			}
		}
	}
}
