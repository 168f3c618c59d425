package framework

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// indexedScorer scores by position through ScoreIndexed (position+1)/10 and by key through
// Score (a fixed map), and counts which path the scheduler took.
type indexedScorer struct {
	fixedScorer
	indexedCalls, mapCalls int
}

func (s *indexedScorer) Score(ctx context.Context, c *CycleState, r *LLMRequest, eps []*Endpoint) map[string]float64 {
	s.mapCalls++
	return s.fixedScorer.Score(ctx, c, r, eps)
}

func (s *indexedScorer) ScoreIndexed(_ context.Context, _ *CycleState, _ *LLMRequest, eps []*Endpoint, out []float64) {
	s.indexedCalls++
	for i := range eps {
		out[i] = float64(i+1) / 10
	}
}

// TestSchedulerIndexedScorer checks that the scheduler uses ScoreIndexed when the candidates'
// keys are distinct (in sorted order or not) and falls back to Score when two share a key.
func TestSchedulerIndexedScorer(t *testing.T) {
	eps := testEndpoints(3)
	dup := []*Endpoint{eps[0], eps[1], NewEndpoint(eps[1].Metadata, nil)}
	tests := []struct {
		name      string
		endpoints []*Endpoint
		indexed   bool
		want      []float64
	}{
		{"sorted distinct keys", eps, true, []float64{0.2, 0.4, 0.6}},
		{"unsorted distinct keys", []*Endpoint{eps[2], eps[0], eps[1]}, true, []float64{0.2, 0.4, 0.6}},
		{"duplicate keys use Score", dup, false, []float64{0, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &indexedScorer{fixedScorer: fixedScorer{base: base{TypedName{"indexed-scorer", "a"}},
				scores: map[string]float64{eps[1].Key(): 0.5}}}
			r, err := NewRuntime(cfgWith([]PluginSpec{{Name: "a", Type: "indexed-scorer"}},
				ProfileSpec{Name: "p", Plugins: []ProfilePluginRef{{PluginRef: "a", Weight: ptr(2.0)}}}),
				testRegistry(t, s), RuntimeOptions{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.RunScheduling(context.Background(), &LLMRequest{RequestID: "r"}, tc.endpoints); err != nil {
				t.Fatal(err)
			}
			if got := s.indexedCalls == 1 && s.mapCalls == 0; got != tc.indexed {
				t.Fatalf("indexed calls %d, map calls %d; want the indexed path: %v", s.indexedCalls, s.mapCalls, tc.indexed)
			}
			var got []float64
			for _, se := range r.Profiles()["p"].Picker.(*maxPicker).seen[0] {
				got = append(got, se.Score)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("totals (-want +got):\n%s", diff)
			}
		})
	}
}
