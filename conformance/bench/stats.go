package bench

import (
	"math"
	"slices"
	"strconv"
)

// Percentile returns the p-th percentile (p in [0,100]) of xs with linear interpolation between
// closest ranks: the value at fractional index p/100 × (n−1) of the sorted sample, as numpy's
// default percentile (method "linear"), which vLLM's benchmark uses (vllm/benchmarks/serve.py
// calculate_metrics: np.percentile). An empty sample gives 0. xs is not modified.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return percentileSorted(s, p)
}

func percentileSorted(s []float64, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	p = min(max(p, 0), 100)
	idx := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(idx))
	hi := min(lo+1, len(s)-1)
	frac := idx - float64(lo)
	return s[lo] + (s[hi]-s[lo])*frac
}

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
		d.Median = percentileSorted(s, 50)
	}
	for _, p := range percentiles {
		d.Percentiles[PercentileKey(p)] = percentileSorted(s, p)
	}
	return d
}

// PercentileKey names percentile p as vLLM's JSON does ("p99", "p99.9").
func PercentileKey(p float64) string {
	return "p" + trimFloat(p)
}

func trimFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
