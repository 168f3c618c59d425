package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// Rule constants of QueueAwareness (SPEC §6).
const (
	// queueDeep is the least waiting-queue depth pinned on the loaded endpoint (others: 0).
	queueDeep = 20
	// queueRuleRate is the rule's bound on the loaded endpoint's share of new requests.
	queueRuleRate = 0.05
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "QueueAwareness",
		Description: "An endpoint whose waiting queue is deep (≥ 20 while every other endpoint's is 0) MUST receive at most 5% " +
			"of new requests with unique prompts.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureQueueAwareness},
		Preconditions: []string{"the EPP scrapes vllm:num_requests_waiting from the model servers' /metrics (e.g. queue-scorer)",
			"the EPP observes new metrics within metricsPropagation"},
		Source: "SPEC §3 queue-scorer and §6 QueueAwareness (upstream v1.5.0 pkg/epp/scheduling/framework/plugins/scorer/queue.go)",
		Run:    runQueueAwareness,
	})
}

func runQueueAwareness(t conformance.TestingT, s *conformance.Suite) {
	pool := requireEndpoints(t, s, 2)
	r := s.Rand(t)
	plan := conformance.MustPlan(t, conformance.Shape{
		Outcome: "requests sent to the endpoint with the deep queue", Tail: conformance.AtMost,
		Compliant: conformance.Exploration, Random: 1 / float64(len(pool)), RuleRate: queueRuleRate,
	})
	loaded := pool[r.IntN(len(pool))]
	mk := func() (string, []byte) {
		return pathCompletions, completionBody(s.ModelName, uniquePrompt(s, t, r, 24), nil)
	}
	// Registered before the pins, so it runs after they are undone (Cleanup is last-in first-out).
	t.Cleanup(func() { restoreRouting(t, s, loaded, mk) })

	pins := map[string]vllm.FakeMetrics{}
	for _, a := range pool {
		pins[a] = vllm.FakeMetrics{RunningRequests: 2, WaitingRequests: 0, KVCacheUsage: 0.1}
	}
	pins[loaded] = vllm.FakeMetrics{RunningRequests: 2, WaitingRequests: int64(queueDeep + r.IntN(10)), KVCacheUsage: 0.1}
	pinAll(t, s, pins)
	awaitObserved(t, s, "the deep queue on "+loaded, mk, func(ep string) bool { return ep != loaded })

	eps := sendAll(t, s, plan.N, func(int) (string, []byte) { return mk() })
	t.Logf("loaded endpoint %s; picks: %v", loaded, histogram(eps))
	plan.Check(t, s, count(eps, loaded), len(eps))
}
