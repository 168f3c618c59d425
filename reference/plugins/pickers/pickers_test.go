package pickers

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
)

const testSeed int64 = 20261130

func scored(scores ...float64) []framework.ScoredEndpoint {
	out := make([]framework.ScoredEndpoint, len(scores))
	for i, s := range scores {
		out[i] = framework.ScoredEndpoint{Score: s, Endpoint: framework.NewEndpoint(
			&framework.EndpointMetadata{Name: fmt.Sprintf("p%d", i), Address: fmt.Sprintf("10.0.0.%d", i), Port: 8000}, nil)}
	}
	return out
}

func picked(r *framework.ProfileRunResult) []string {
	out := []string{}
	for _, e := range r.TargetEndpoints {
		out = append(out, e.Metadata.Name)
	}
	return out
}

func TestMaxScorePicker(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		scores []float64
		want   []string
	}{
		{"single best", 1, []float64{0.2, 0.9, 0.5}, []string{"p1"}},
		{"fallbacks ordered", 3, []float64{0.2, 0.9, 0.5, 0.1}, []string{"p1", "p2", "p0"}},
		{"more than available", 5, []float64{0.3, 0.6}, []string{"p1", "p0"}},
		{"NaN last", 2, []float64{math.NaN(), 0, 0.1}, []string{"p2", "p1"}},
		{"empty", 1, nil, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := scored(tc.scores...)
			before := picked(&framework.ProfileRunResult{TargetEndpoints: endpointsOf(in)})
			got := NewMaxScorePicker("", tc.max, testSeed).Pick(context.Background(), nil, in)
			if diff := cmp.Diff(tc.want, picked(got)); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, picked(&framework.ProfileRunResult{TargetEndpoints: endpointsOf(in)})); diff != "" {
				t.Fatalf("picker modified its input: %s", diff)
			}
		})
	}
}

func endpointsOf(s []framework.ScoredEndpoint) []*framework.Endpoint {
	out := []*framework.Endpoint{}
	for _, e := range s {
		out = append(out, e.Endpoint)
	}
	return out
}

// TestMaxScorePickerTiesSeeded: ties are broken at random, reproducibly for a seed.
func TestMaxScorePickerTiesSeeded(t *testing.T) {
	const n = 2000
	run := func(seed int64) ([]string, map[string]int) {
		p := NewMaxScorePicker("", 1, seed)
		seq := make([]string, 0, n)
		counts := map[string]int{}
		for range n {
			name := picked(p.Pick(context.Background(), nil, scored(0.9, 0.9, 0.1, 0.9)))[0]
			seq = append(seq, name)
			counts[name]++
		}
		return seq, counts
	}
	a, counts := run(testSeed)
	b, _ := run(testSeed)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("seed %d: same seed gave different tie-breaks", testSeed)
	}
	c, _ := run(testSeed + 1)
	if cmp.Equal(a, c) {
		t.Fatalf("seeds %d and %d gave identical sequences of %d tie-breaks", testSeed, testSeed+1, n)
	}
	other := NewMaxScorePicker("other-name", 1, testSeed)
	d := make([]string, 0, n)
	for range n {
		d = append(d, picked(other.Pick(context.Background(), nil, scored(0.9, 0.9, 0.1, 0.9)))[0])
	}
	if cmp.Equal(a, d) {
		t.Fatalf("two instances with seed %d and different names drew the same tie-breaks", testSeed)
	}
	// Three tied endpoints, n = 2000: each expected n/3 ≈ 667, sd ≈ 21; the bound ±6 sd (±126)
	// fails a fair tie-break with probability < 1e-8. p2 (lower score) must never win.
	sd := math.Sqrt(n * (1.0 / 3) * (2.0 / 3))
	for _, name := range []string{"p0", "p1", "p3"} {
		if d := math.Abs(float64(counts[name]) - n/3.0); d > 6*sd {
			t.Errorf("seed %d: %s won %d of %d ties; expected %.0f ± %.0f", testSeed, name, counts[name], n, n/3.0, 6*sd)
		}
	}
	if counts["p2"] != 0 {
		t.Errorf("lower score picked %d times", counts["p2"])
	}
}

func TestRandomPicker(t *testing.T) {
	const n = 3000
	p := NewRandomPicker("", 2, testSeed)
	counts := map[string]int{}
	for range n {
		got := picked(p.Pick(context.Background(), nil, scored(1, 0, 0)))
		if len(got) != 2 || got[0] == got[1] {
			t.Fatalf("got %v", got)
		}
		counts[got[0]]++
	}
	// Uniform first pick over 3, n = 3000: expected 1000, sd ≈ 25.8, bound ±6 sd.
	sd := math.Sqrt(n * (1.0 / 3) * (2.0 / 3))
	for _, name := range []string{"p0", "p1", "p2"} {
		if d := math.Abs(float64(counts[name]) - n/3.0); d > 6*sd {
			t.Errorf("seed %d: %s first %d of %d; expected %.0f ± %.0f", testSeed, name, counts[name], n, n/3.0, 6*sd)
		}
	}
}

// TestWeightedRandomPickerDistribution checks A-Res: the first pick is endpoint i with
// probability w_i/Σw. n = 20,000 picks; each count must lie within 6 standard deviations of its
// expectation (per-endpoint false-failure probability < 2e-9).
func TestWeightedRandomPickerDistribution(t *testing.T) {
	const n = 20000
	weights := []float64{0.1, 0.2, 0.3, 0.4}
	p := NewWeightedRandomPicker("", 1, testSeed)
	counts := make([]int, len(weights))
	for range n {
		name := picked(p.Pick(context.Background(), nil, scored(weights...)))[0]
		var i int
		fmt.Sscanf(name, "p%d", &i)
		counts[i]++
	}
	for i, w := range weights {
		exp := n * w // Σw = 1
		sd := math.Sqrt(n * w * (1 - w))
		if d := math.Abs(float64(counts[i]) - exp); d > 6*sd {
			t.Errorf("seed %d, n %d: endpoint %d (weight %.1f) picked %d times; expected %.0f ± %.0f (6 sd)", testSeed, n, i, w, counts[i], exp, 6*sd)
		}
	}
}

func TestWeightedRandomPickerZeroScores(t *testing.T) {
	p := NewWeightedRandomPicker("", 3, testSeed)
	firsts := map[string]int{}
	for range 500 {
		got := picked(p.Pick(context.Background(), nil, scored(0, 0.5, 0, math.NaN())))
		if len(got) != 3 || got[0] != "p1" {
			t.Fatalf("positive score not first: %v", got)
		}
		firsts[got[1]]++
	}
	if len(firsts) < 2 {
		t.Fatalf("zero-score fallbacks not in random order: %v", firsts)
	}
	// All zero: behaves as random-picker, every endpoint gets picked.
	all := map[string]int{}
	for range 300 {
		all[picked(p.Pick(context.Background(), nil, scored(0, 0, 0)))[0]]++
	}
	if len(all) != 3 {
		t.Fatalf("seed %d: all-zero picks not spread: %v", testSeed, all)
	}
}

func TestRegisterAndParameters(t *testing.T) {
	reg := framework.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		params  string
		want    int
		wantErr bool
	}{
		{``, 1, false}, {`{}`, 1, false}, {`{"maxNumOfEndpoints":3}`, 3, false}, {`{"maxNumOfEndpoints":0}`, 1, false},
		{`{"maxNumOfEndpoints":-1}`, 0, true}, {`{"maxNumOfEndpoint":2}`, 0, true}, {`{"maxNumOfEndpoints":"2"}`, 0, true},
	}
	for _, typ := range []string{MaxScorePickerType, RandomPickerType, WeightedRandomPickerType} {
		f, ok := reg.Factory(typ)
		if !ok {
			t.Fatalf("%s not registered", typ)
		}
		for _, tc := range tests {
			pl, err := f("", json.RawMessage(tc.params), nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s %s: err %v", typ, tc.params, err)
			}
			if err != nil {
				continue
			}
			if got := pl.(interface{ MaxNumOfEndpoints() int }).MaxNumOfEndpoints(); got != tc.want || pl.TypedName().Name != typ {
				t.Fatalf("%s %s: max %d name %s", typ, tc.params, got, pl.TypedName().Name)
			}
		}
	}
}

// TestMaxScorePickerSingleMatchesSort checks the one-pass path for maxNum 1 against the sorted
// path: with the same name and seed both draw the same shuffles, so the single pick must be the
// first of the full ranking, ties and NaN included. n = 200 random lists of 1–40 scores drawn from
// a few values (many ties).
func TestMaxScorePickerSingleMatchesSort(t *testing.T) {
	values := []float64{0, 0.5, 1, 2, math.NaN(), math.Inf(1)}
	one := NewMaxScorePicker("p", 1, testSeed)
	all := NewMaxScorePicker("p", 1000, testSeed)
	for i := range 200 {
		n := 1 + (i*7919)%40
		scores := make([]float64, n)
		for j := range scores {
			scores[j] = values[(i*31+j*17+j*j)%len(values)]
		}
		s := scored(scores...)
		got := picked(one.Pick(context.Background(), nil, s))
		ranking := picked(all.Pick(context.Background(), nil, s))
		if diff := cmp.Diff(ranking[:1], got); diff != "" {
			t.Fatalf("list %d (seed %d, scores %v): single pick differs from the ranking's first (-want +got):\n%s", i, testSeed, scores, diff)
		}
	}
}
