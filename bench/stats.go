package bench

import (
	"math"
	"slices"
	"strconv"

	"github.com/eppkit/eppkit/internal/percentile"
)

// Dist summarises a sample (units as the sample's: ms for latencies).
type Dist struct {
	// N is the sample size.
	N int `json:"n"`
	// Mean, Median (50th percentile), Std (population standard deviation, numpy's np.std) and
	// the percentiles of Percentiles.
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	Std    float64 `json:"std"`
	// Percentiles maps "p90", "p99", … to values.
	Percentiles map[string]float64 `json:"percentiles"`
}

// Summarise computes a Dist with the given percentiles (0–100). An empty sample gives zeros.
func Summarise(xs []float64, percentiles []float64) Dist {
	d := Dist{N: len(xs), Percentiles: map[string]float64{}}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) > 0 {
		var sum float64
		for _, x := range s {
			sum += x
		}
		d.Mean = sum / float64(len(s))
		var ss float64
		for _, x := range s {
			ss += (x - d.Mean) * (x - d.Mean)
		}
		d.Std = math.Sqrt(ss / float64(len(s)))
		d.Median = percentile.Sorted(s, 50)
	}
	for _, p := range percentiles {
		d.Percentiles[PercentileKey(p)] = percentile.Sorted(s, p)
	}
	return d
}

// PercentileKey names percentile p as vLLM's JSON does ("p99", "p99.9").
func PercentileKey(p float64) string {
	return "p" + trimFloat(p)
}

func trimFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
