package percentile

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPercentileMatchesNumpyLinear(t *testing.T) {
	// Expected values are numpy.percentile(xs, p) (method "linear").
	for _, tc := range []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, 90, 3.7},
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{15, 20, 35, 40, 50}, 40, 29},
		{[]float64{50, 15, 40, 20, 35}, 40, 29}, // unsorted input
		{[]float64{3, 1, 2}, 0, 1},
		{[]float64{3, 1, 2}, 100, 3},
		{[]float64{7}, 99, 7},
		{nil, 50, 0},
		{[]float64{10, 20}, 99, 19.9},
	} {
		if got := Of(tc.xs, tc.p); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Of(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
		}
	}
	xs := []float64{3, 1, 2}
	Of(xs, 50)
	if !cmp.Equal(xs, []float64{3, 1, 2}) {
		t.Fatalf("Percentile sorted its input: %v", xs)
	}
}

func TestDurations(t *testing.T) {
	ds := []time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}
	if got := Durations(ds, 90); got != 3700*time.Microsecond {
		t.Errorf("Durations p90 = %v, want 3.7ms", got)
	}
	if got := Durations(nil, 50); got != 0 {
		t.Errorf("Durations of nothing = %v", got)
	}
}
