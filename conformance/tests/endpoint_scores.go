package tests

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// scoresKey holds every candidate's score in the pick's dynamic metadata namespace envoy.lb
// (llm-d-router v0.10.0 pkg/epp/metadata/consts.go DestinationEndpointScoresKey).
const scoresKey = "x-gateway-destination-endpoint-scores"

// scoresRequests is how many requests EndpointScores checks once the EPP scores the loaded
// endpoint lower; the rule is deterministic, so every one must comply.
const scoresRequests = 12

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EndpointScores",
		Description: "Every pick's dynamic metadata MUST carry envoy.lb / x-gateway-destination-endpoint-scores as a struct whose " +
			"keys are the ip:port of every candidate that passed the primary profile's filters, picked or not (the whole pool, " +
			"or the subset hint's endpoints), and whose values are finite numbers ≥ 0; the picked endpoint's score MUST be the " +
			"highest (max-score-picker), so an endpoint with a deep waiting queue is scored below the pick.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureEndpointScores},
		Preconditions: []string{"the EPP publishes endpoint scores (llm-d-router: --emit-endpoint-scores; the reference target passes it)",
			"for requests without SLO headers the primary profile has no filter that drops a fresh endpoint, scores the waiting " +
				"queue (queue-scorer, upstream's default profile) and picks with max-score-picker",
			"the EPP observes new metrics within metricsPropagation"},
		Source: "SPEC §10 (llm-d-router v0.10.0 pkg/epp/handlers/request.go generateMetadata, pkg/epp/requestcontrol/director.go " +
			"prepareRequest (ScoredCandidates), pkg/epp/framework/interface/scheduling scheduler_profile.go runScorerPlugins; " +
			"test/integration/epp/endpoint_scores_test.go)",
		Run: runEndpointScores,
	})
}

// pickScores reads envoy.lb / x-gateway-destination-endpoint-scores from d; problem is "" when
// it is a struct of numbers.
func pickScores(d *extprocclient.Decision) (scores map[string]float64, problem string) {
	ns := d.DynamicMetadata.GetFields()[extprocclient.DestinationNamespace].GetStructValue()
	v, ok := ns.GetFields()[scoresKey]
	if !ok {
		return nil, fmt.Sprintf("the pick's dynamic metadata has no %s/%s (namespace keys %v)", extprocclient.DestinationNamespace, scoresKey, slices.Sorted(maps.Keys(ns.GetFields())))
	}
	st, ok := v.GetKind().(*structpb.Value_StructValue)
	if !ok {
		return nil, fmt.Sprintf("%s is a %T, want a struct of ip:port → number", scoresKey, v.GetKind())
	}
	scores = map[string]float64{}
	for k, e := range st.StructValue.GetFields() {
		n, ok := e.GetKind().(*structpb.Value_NumberValue)
		if !ok {
			return nil, fmt.Sprintf("%s[%s] is a %T, want a number", scoresKey, k, e.GetKind())
		}
		if math.IsNaN(n.NumberValue) || math.IsInf(n.NumberValue, 0) || n.NumberValue < 0 {
			return nil, fmt.Sprintf("%s[%s] = %v, want a finite number ≥ 0", scoresKey, k, n.NumberValue)
		}
		scores[k] = n.NumberValue
	}
	return scores, ""
}

// scoresProblem checks one pick's scores against the candidates: every candidate and nothing
// else, the pick among them with the highest score. It returns the scores and "" or the problem.
func scoresProblem(s *harness.Suite, d *extprocclient.Decision, candidates []string) (map[string]float64, string) {
	addrs, problem := pickProblem(s, d)
	if problem != "" {
		return nil, problem
	}
	scores, problem := pickScores(d)
	if problem != "" {
		return nil, problem
	}
	keys := slices.Sorted(maps.Keys(scores))
	want := slices.Clone(candidates)
	sort.Strings(want)
	if !slices.Equal(keys, want) {
		return scores, fmt.Sprintf("%s names %v, want every candidate %v (scores %v)", scoresKey, keys, want, scores)
	}
	best := math.Inf(-1)
	for _, v := range scores {
		best = max(best, v)
	}
	if scores[addrs[0]] != best {
		return scores, fmt.Sprintf("the pick %s scored %v but the highest score is %v (scores %v)", addrs[0], scores[addrs[0]], best, scores)
	}
	return scores, ""
}

func runEndpointScores(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 3)
	c := s.ExtProc(t)
	r := s.Rand(t)
	loaded := pool[r.IntN(len(pool))]
	mk := func() (string, []byte) {
		return pathCompletions, completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil)
	}
	req := func(hint []string) extprocclient.Request {
		path, body := mk()
		return extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", path, authority, body, nil), Body: body, SubsetHint: hint}
	}

	// Before any pin: the shape and the candidates, whole pool and a subset.
	for _, hint := range [][]string{nil, pool[:2]} {
		rq := req(hint)
		cands := pool
		if hint != nil {
			cands = hint
		}
		if scores, problem := scoresProblem(s, exchange(t, s, c, rq), cands); problem != "" {
			t.Fatalf("%s: %s", describe(rq), problem)
		} else {
			t.Logf("%s: scores %v", describe(rq), scores)
		}
	}

	t.Cleanup(func() { restoreRouting(t, s, loaded, mk) })
	pins := map[string]vllm.FakeMetrics{}
	for _, a := range pool {
		pins[a] = vllm.FakeMetrics{}
	}
	pins[loaded] = vllm.FakeMetrics{RunningRequests: 4, WaitingRequests: 30}
	pinAll(t, s, pins)
	harness.MustEventually(t, s, s.Timeouts.MetricsPropagation.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		d, err := tryExchange(s, c, req(nil))
		if err != nil {
			return err
		}
		scores, problem := scoresProblem(s, d, pool)
		if problem != "" {
			return fmt.Errorf("%s", problem)
		}
		for a, v := range scores {
			if a != loaded && v <= scores[loaded] {
				return fmt.Errorf("the loaded endpoint %s (waiting 30) is not scored below %s yet: %v", loaded, a, scores)
			}
		}
		return nil
	})
	for i := 0; i < scoresRequests; i++ {
		var hint []string
		cands := pool
		if i%3 == 2 {
			// A subset holding the loaded endpoint and one other.
			other := pool[(slices.Index(pool, loaded)+1+r.IntN(len(pool)-1))%len(pool)]
			hint = []string{loaded, other}
			cands = hint
		}
		rq := req(hint)
		d := exchange(t, s, c, rq)
		scores, problem := scoresProblem(s, d, cands)
		if problem != "" {
			t.Fatalf("request %d of %d (%s): %s (seed %d)", i+1, scoresRequests, describe(rq), problem, s.Seed)
		}
		if d.Pick() == loaded {
			t.Fatalf("request %d of %d (%s): picked the loaded endpoint %s although it scored lowest: %v", i+1, scoresRequests, describe(rq), loaded, scores)
		}
	}
	t.Logf("%d picks: every candidate scored, the pick the highest, the loaded endpoint %s below the rest", scoresRequests, loaded)
}
