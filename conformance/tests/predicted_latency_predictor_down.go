package tests

import (
	"strconv"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

// pdRequests is how many requests of each kind (with and without an SLO) must be served while
// the predictor is down; the rule is deterministic, so every one must succeed.
const pdRequests = 20

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "PredictedLatencyPredictorDown",
		Description: "When the latency predictor the EPP uses is killed, requests with and without SLO headers MUST still be " +
			"routed into the pool: no request fails because the predictor is down.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeaturePredictedLatency},
		Preconditions: []string{
			"the EPP uses the latency predictor sidecar the harness runs ({{.PredictorURL}}; the reference: --predictor-url); " +
				"an EPP with an in-process predictor passes trivially",
		},
		Source: "llm-d-router v0.10.0 pkg/epp/framework/plugins/scheduling/scorer/latency/plugin.go Score (composite " +
			"fallback without predictions), filter/sloheadroomtier Filter (keeps all) and " +
			"requestcontrol/dataproducer/predictedlatency Produce (a failed prediction stores nothing, no error); " +
			"same in GIE v1.5.0. SPEC §4.3.",
		Run: runPredictedLatencyPredictorDown,
	})
}

func runPredictedLatencyPredictorDown(t harness.TestingT, s *harness.Suite) {
	requireEndpoints(t, s, 1)
	r := s.Rand(t)
	slo := map[string]string{"x-slo-ttft-ms": strconv.Itoa(100)}
	mk := func(stream bool) (string, []byte) {
		extra := map[string]any{"max_tokens": 2}
		if stream {
			extra["stream"] = true
			extra["stream_options"] = map[string]any{"include_usage": true}
		}
		return pathCompletions, completionBody(s.ModelName, uniquePrompt(s, t, r, 16), extra)
	}
	// Before: the predictor runs.
	sendAllWithHeaders(t, s, 8, slo, func(i int) (string, []byte) { return mk(i%2 == 0) })
	if !s.StopPredictor(t) {
		t.Logf("the harness runs no predictor sidecar; checking that requests are served anyway")
	} else {
		t.Logf("killed the predictor sidecar at %s", s.PredictorURL())
	}
	eps := sendAllWithHeaders(t, s, pdRequests, slo, func(i int) (string, []byte) { return mk(i%2 == 0) })
	eps = append(eps, sendAllWithHeaders(t, s, pdRequests, nil, func(i int) (string, []byte) { return mk(i%2 == 0) })...)
	t.Logf("%d requests with and without SLO served while the predictor was down; picks: %v", len(eps), histogram(eps))
}
