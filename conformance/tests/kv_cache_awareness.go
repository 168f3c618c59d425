package tests

import (
	"math/rand/v2"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// Rule constants of KVCacheAwareness (SPEC §6), shared by KVCacheLegacyMetricName.
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
			"at most 5% of new requests with unique prompts, with the model servers exporting the KV-cache gauge under " +
			"current vLLM's name (vllm:kv_cache_usage_perc).",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureKVCacheAwareness},
		Preconditions: []string{"the EPP scrapes the KV-cache gauge from the model servers' /metrics (e.g. kv-cache-utilization-scorer)",
			"the EPP observes new metrics within metricsPropagation",
			"the run's fleet exports current vLLM names (--metrics-names current: vllm:kv_cache_usage_perc only), so an EPP " +
				"that reads only the name of vLLM before v0.10 fails; the legacy name is KVCacheLegacyMetricName's"},
		Source: "llm-d-router v0.10.0 " +
			"pkg/epp/framework/plugins/scheduling/scorer/kvcacheutilization/kvcache_utilization.go Score (1 − KV " +
			"use) with the gauge vllm:kv_cache_usage_perc from " +
			"pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go defaultEngineConfigs; same in GIE " +
			"v1.5.0 (renamed default: GIE PR #1905). SPEC §3, §6, §7.1; vLLM vllm/v1/metrics/loggers.py.",
		Run: runKVCacheAwareness,
	})
}

func runKVCacheAwareness(t harness.TestingT, s *harness.Suite) {
	runLoadedEndpointAvoided(t, s, "the full KV cache", kvRuleRate, fullKVPin)
}

// fullKVPin pins the loaded endpoint's KV use to kvFull or more and every other's to kvLowMax
// or less, with equal running counts and empty queues.
func fullKVPin(r *rand.Rand, isLoaded bool) vllm.FakeMetrics {
	if isLoaded {
		return vllm.FakeMetrics{RunningRequests: 2, KVCacheUsage: kvFull + (1-kvFull)*r.Float64()}
	}
	return vllm.FakeMetrics{RunningRequests: 2, KVCacheUsage: kvLowMax * r.Float64()}
}
