package engine

import (
	"math/rand/v2"
	"time"
)

// loadFactor is the latency multiplier with running requests in flight (this one included):
// 1 + (f − 1)(running − 1)/(maxNumSeqs − 1), and 1 when maxNumSeqs ≤ 1.
// Source: llm-d-inference-sim pkg/llm-d-inference-sim/latencies.go getCurrLoadFactor.
func loadFactor(f float64, running, maxNumSeqs int) float64 {
	if maxNumSeqs <= 1 {
		return 1
	}
	return 1 + (f-1)*float64(running-1)/float64(maxNumSeqs-1)
}

// scale multiplies d by factor, in nanoseconds.
func scale(d time.Duration, factor float64) time.Duration {
	return time.Duration(float64(d) * factor)
}

// jitter draws a duration from a normal distribution with the given mean and standard deviation
// and clamps it to [0.3 × mean, 1.7 × mean], which also keeps it non-negative. With stddev 0 it
// returns mean and draws nothing, so a jitter-free engine's source is untouched.
// Source: llm-d-inference-sim pkg/common/utils.go RandomNormTruncated (same clamp; the simulator
// works in whole milliseconds, this works in nanoseconds).
func jitter(rng *rand.Rand, mean, stddev time.Duration) time.Duration {
	if stddev <= 0 || mean <= 0 {
		return max(mean, 0)
	}
	v := rng.NormFloat64()*float64(stddev) + float64(mean)
	lo, hi := 0.3*float64(mean), 1.7*float64(mean)
	v = min(max(v, lo), hi)
	return time.Duration(v)
}
