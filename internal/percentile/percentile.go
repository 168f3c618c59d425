// Package percentile is eppkit's one percentile definition, used in every report (eppkit bench,
// bench compare, bench extproc, flake-check, fake-vllm loadtest): linear interpolation between
// closest ranks, the value at fractional rank p/100 × (n−1) of the sorted sample. It is numpy's
// default percentile (method "linear"), which vLLM's benchmark uses
// (vllm/benchmarks/serve.py, calculate_metrics: np.percentile), so an eppkit p99 and a
// `vllm bench serve` p99 of the same sample agree.
package percentile

import (
	"math"
	"slices"
	"time"
)

// Of returns the p-th percentile (p in [0,100], clamped) of xs; 0 for an empty sample. xs is not
// modified.
func Of(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return Sorted(s, p)
}

// Sorted is Of for a sample already sorted ascending (no copy).
func Sorted(s []float64, p float64) float64 {
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

// Durations is Of for durations (interpolated to the nanosecond); 0 for an empty sample.
func Durations(ds []time.Duration, p float64) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(math.Round(Of(xs, p)))
}
