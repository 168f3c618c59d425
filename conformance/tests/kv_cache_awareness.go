package tests

import (
	"math/rand/v2"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// Rule constants of KVCacheAwareness (SPEC §6).
const (
	// kvFull is the least KV-cache use pinned on the loaded endpoint, kvLowMax the most on others.
	kvFull, kvLowMax = 0.95, 0.2
	// kvRuleRate is the rule's bound on the loaded endpoint's share of new requests.
	kvRuleRate = 0.05
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "KVCacheAwareness",
		Description: "An endpoint whose KV cache is nearly full (use ≥ 0.95 while every other endpoint's is ≤ 0.2) MUST receive " +
			"at most 5% of new requests with unique prompts.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureKVCacheAwareness},
		Preconditions: []string{"the EPP scrapes vllm:kv_cache_usage_perc from the model servers' /metrics (e.g. kv-cache-utilization-scorer)",
			"the EPP observes new metrics within metricsPropagation"},
		Source: "SPEC §3 kv-cache-utilization-scorer and §6 KVCacheAwareness (upstream v1.5.0 pkg/epp/scheduling/framework/plugins/scorer/kvcache_utilization.go)",
		Run:    runKVCacheAwareness,
	})
}

func runKVCacheAwareness(t conformance.TestingT, s *conformance.Suite) {
	runLoadedEndpointAvoided(t, s, "the full KV cache", kvRuleRate, func(r *rand.Rand, isLoaded bool) vllm.FakeMetrics {
		if isLoaded {
			return vllm.FakeMetrics{RunningRequests: 2, KVCacheUsage: kvFull + (1-kvFull)*r.Float64()}
		}
		return vllm.FakeMetrics{RunningRequests: 2, KVCacheUsage: kvLowMax * r.Float64()}
	})
}
