package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// Step is one rung of a rate ladder: open-loop arrivals at Rate requests per second for Duration.
type Step struct {
	// Rate is the mean arrival rate in requests per second (> 0).
	Rate float64 `json:"rate"`
	// Duration is how long arrivals continue at Rate.
	Duration time.Duration `json:"duration_ns"`
}

// ParseLadder parses --rate: one rate ("8") or a comma-separated ladder ("4,8,12"), each a
// positive number of requests per second; total is split evenly over the steps. Errors name
// --rate.
func ParseLadder(s string, total time.Duration) ([]Step, error) {
	if total <= 0 {
		return nil, fmt.Errorf("--duration must be positive, got %v", total)
	}
	var steps []Step
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			return nil, fmt.Errorf("--rate %q: every step must be a positive number of requests per second, got %q", s, f)
		}
		steps = append(steps, Step{Rate: r})
	}
	for i := range steps {
		steps[i].Duration = total / time.Duration(len(steps))
	}
	return steps, nil
}

// Arrival is one scheduled send.
type Arrival struct {
	// At is the send time from the start of the run.
	At time.Duration
	// Step is the index of the ladder step the arrival belongs to.
	Step int
}

// Arrivals draws the send times of an open-loop run over the ladder. Inter-arrival gaps are
// gamma distributed with shape burstiness and mean 1/rate, as vLLM's benchmark does
// (vllm/benchmarks/serve.py get_request: theta = 1/(rate × burstiness), gamma(shape=burstiness,
// scale=theta)); burstiness 1 is a Poisson process, < 1 burstier, > 1 more regular. Steps follow
// each other; arrivals of a step fall inside it.
func Arrivals(steps []Step, burstiness float64, seed int64) ([]Arrival, error) {
	if burstiness <= 0 || math.IsNaN(burstiness) || math.IsInf(burstiness, 0) {
		return nil, fmt.Errorf("--burstiness must be a positive number, got %v", burstiness)
	}
	src := rand.NewPCG(uint64(seed), 0x617272697661) // "arriva"
	var out []Arrival
	var start time.Duration
	for i, st := range steps {
		if st.Rate <= 0 || st.Duration <= 0 {
			return nil, fmt.Errorf("rate ladder step %d: rate and duration must be positive, got %v req/s for %v", i, st.Rate, st.Duration)
		}
		g := distuv.Gamma{Alpha: burstiness, Beta: st.Rate * burstiness, Src: src}
		t := 0.0
		for {
			t += g.Rand()
			at := time.Duration(t * float64(time.Second))
			if at >= st.Duration {
				break
			}
			out = append(out, Arrival{At: start + at, Step: i})
		}
		start += st.Duration
	}
	return out, nil
}
