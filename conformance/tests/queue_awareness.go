package tests

import (
	"math/rand/v2"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
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
		Source: "llm-d-router v0.10.0 pkg/epp/framework/plugins/scheduling/scorer/queuedepth/queue.go Score " +
			"(vllm:num_requests_waiting, min-max normalised); same in GIE v1.5.0. SPEC §3, §6.",
		Run: runQueueAwareness,
	})
}

func runQueueAwareness(t harness.TestingT, s *harness.Suite) {
	runLoadedEndpointAvoided(t, s, "the deep queue", queueRuleRate, deepQueuePin)
}

// deepQueuePin pins the loaded endpoint's waiting queue to queueDeep or more and every other's
// to 0, with equal running counts and KV use.
func deepQueuePin(r *rand.Rand, isLoaded bool) vllm.FakeMetrics {
	if isLoaded {
		return vllm.FakeMetrics{RunningRequests: 2, WaitingRequests: int64(queueDeep + r.IntN(10)), KVCacheUsage: 0.1}
	}
	return vllm.FakeMetrics{RunningRequests: 2, WaitingRequests: 0, KVCacheUsage: 0.1}
}
