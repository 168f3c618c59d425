package tests

import (
	"fmt"
	"strconv"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

// Rule constants of PredictedLatency (SPEC §6).
const (
	// plFastTTFT and plSlowTTFT are the time to first token of the fast and the slow fakes; the
	// request SLO plTTFTSLO lies between them, so only the fast endpoints meet it.
	plFastTTFT = 10 * time.Millisecond
	plSlowTTFT = 300 * time.Millisecond
	plTTFTSLO  = 100 * time.Millisecond
	// plInterToken is every fake's inter-token latency; plMaxTokens the streamed output length.
	plInterToken = 2 * time.Millisecond
	plMaxTokens  = 4
	// plWarmupBatch is how many warm-up requests are sent between two routing checks.
	plWarmupBatch = 40
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "PredictedLatency",
		Description: "After warm-up traffic on a fleet where half the endpoints answer 30× slower, requests whose TTFT SLO " +
			"(x-slo-ttft-ms) only the fast endpoints meet MUST go to fast endpoints (at most the exploration rate to slow ones).",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeaturePredictedLatency},
		Preconditions: []string{
			"the EPP routes requests that carry x-slo-ttft-ms by predicted latency (e.g. predicted-latency-producer, slo-headroom-tier-filter, latency-scorer)",
			"the EPP learns from the responses it proxies (streamed SSE, include_usage) within predictorWarmup",
			"the EPP can tell endpoints of unequal speed apart under equal load (eppkit: perEndpointCalibration)",
		},
		Source: "llm-d-router v0.10.0 pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency Produce, " +
			"pkg/epp/framework/plugins/scheduling/filter/sloheadroomtier Filter and scheduling/scorer/latency " +
			"Score (header x-llm-d-slo-ttft-ms, alias x-slo-ttft-ms). GIE v1.5.0: same filter and scorer, " +
			"producer in requestcontrol/requestdataproducer/predictedlatency, header x-slo-ttft-ms. SPEC §4, §6.",
		Run: runPredictedLatency,
	})
}

func runPredictedLatency(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 2)
	r := s.Rand(t)
	order := r.Perm(len(pool))
	fast := map[string]bool{}
	for _, i := range order[:len(pool)/2] {
		fast[pool[i]] = true
	}
	for _, a := range pool {
		ttft := plSlowTTFT
		if fast[a] {
			ttft = plFastTTFT
		}
		s.SetLatency(t, a, map[string]any{
			"time-to-first-token": ttft.String(), "time-to-first-token-std-dev": "0s",
			"inter-token-latency": plInterToken.String(), "inter-token-latency-std-dev": "0s",
		})
		t.Logf("%s: time to first token %s", a, ttft)
	}
	plan := harness.MustPlan(t, harness.Shape{
		Outcome: "SLO requests sent to a slow endpoint", Tail: harness.AtMost,
		Compliant: harness.Exploration, Random: float64(len(pool)-len(fast)) / float64(len(pool)),
	})
	headers := map[string]string{"x-slo-ttft-ms": strconv.FormatInt(plTTFTSLO.Milliseconds(), 10)}
	mk := func() (string, []byte) {
		return pathCompletions, completionBody(s.ModelName, uniquePrompt(s, t, r, 24), map[string]any{
			"max_tokens": plMaxTokens, "stream": true, "stream_options": map[string]any{"include_usage": true}})
	}

	// Warm-up: batches of SLO requests, each followed by a routing check (2N sequential SLO
	// requests that must all go to fast endpoints, RequiredConsecutiveSuccesses times in a row),
	// until the check passes or predictorWarmup runs out.
	start := time.Now()
	deadline := start.Add(s.Timeouts.PredictorWarmup.D())
	sent := 0
	for {
		eps := sendAllWithHeaders(t, s, plWarmupBatch, headers, func(int) (string, []byte) { return mk() })
		sent += len(eps)
		var err error
		for run := 0; run < s.Timeouts.RequiredConsecutiveSuccesses && err == nil; run++ {
			for i := 0; i < 2*len(pool) && err == nil; i++ {
				path, body := mk()
				var ep string
				ep, err = sendWithHeaders(s, path, body, headers)
				sent++
				if err == nil && !fast[ep] {
					err = fmt.Errorf("check %d, request %d went to the slow endpoint %s", run+1, i+1, ep)
				}
			}
		}
		if err == nil {
			t.Logf("the EPP routes SLO requests to the fast endpoints after %d warm-up requests (%s)", sent, time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Logf("the EPP did not route by predicted latency within predictorWarmup %s (%d requests; last: %v); measuring anyway",
				s.Timeouts.PredictorWarmup.D(), sent, err)
			break
		}
	}

	// The measured requests go one at a time, like the checks: the rule is about where a request
	// goes when only the fast endpoints meet its SLO, and with several in flight an EPP may
	// legitimately predict a loaded fast endpoint to miss the SLO too.
	eps := make([]string, 0, plan.N)
	for i := 0; i < plan.N; i++ {
		path, body := mk()
		ep, err := sendWithHeaders(s, path, body, headers)
		if err != nil {
			t.Fatalf("measured request %d of %d: %v (seed %d)", i+1, plan.N, err, s.Seed)
		}
		eps = append(eps, ep)
	}
	slow := 0
	for _, ep := range eps {
		if !fast[ep] {
			slow++
		}
	}
	t.Logf("fast endpoints %v; picks: %v", keys(fast), histogram(eps))
	plan.Check(t, s, slow, len(eps))
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
