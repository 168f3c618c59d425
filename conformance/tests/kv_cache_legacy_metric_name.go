package tests

import (
	"strconv"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/vllm"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:   "KVCacheLegacyMetricName",
		FormerNames: []string{"ReferenceKVCacheLegacyMetricName"}, // in the Reference profile until issue 32
		Description: "With the model servers exporting the KV-cache gauge only under vLLM's name before v0.10 " +
			"(vllm:gpu_cache_usage_perc), an endpoint whose KV cache is nearly full (use ≥ 0.95 while every other " +
			"endpoint's is ≤ 0.2) MUST receive at most 5% of new requests with unique prompts.",
		Level:    conformance.LevelEppkit,
		Profile:  conformance.ProfileEPPProduction,
		Features: []conformance.Feature{conformance.FeatureLegacyKVCacheMetric, conformance.FeatureKVCacheAwareness},
		Preconditions: []string{
			"the harness starts a second pool of " + strconv.Itoa(variantPods) + " fakes with --metrics-names legacy " +
				"(vllm:gpu_cache_usage_perc only, LoRA on; nothing else differs from the run's fleet) and its own instance of " +
				"the EPP (the run's config): the reference and command targets; the address and cluster targets skip",
			"the EPP reads the KV-cache gauge under vllm:gpu_cache_usage_perc when vllm:kv_cache_usage_perc is missing " +
				"(reference: the default KV-cache fallback name) and is KV-aware (e.g. kv-cache-utilization-scorer)",
			"the EPP observes new metrics within metricsPropagation",
		},
		// Upstream v1.5.0's default engine config reads only vllm:kv_cache_usage_perc, so on this
		// pool every endpoint's KV use stays 0; reading the legacy name too is eppkit's
		// (reference/datalayer names.go KVCacheUsageFallback).
		Source: "SPEC §6 KVCacheAwareness and §7.1 metric-name generations; GIE PR #1905 renamed the gauge's default; " +
			"upstream v1.5.0 pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go defaultEngineConfigs; vLLM " +
			"vllm/engine/metrics.py (v0) and vllm/v1/metrics/loggers.py",
		Run: runKVCacheLegacyMetricName,
	})
}

// runKVCacheLegacyMetricName runs KVCacheAwareness's rule (n and bound from the same
// plan, harness.Shape in runLoadedEndpointAvoided) on a variant pool of legacy-named fakes.
func runKVCacheLegacyMetricName(t harness.TestingT, s *harness.Suite) {
	if why := s.SidePoolUnsupported(); why != "" {
		harness.Skip(t, "%s", why)
	}
	legacy := s.StartVariantPool(t, harness.FleetVariant{Name: "legacy-metrics", Pods: variantPods,
		Configure: func(_ int, c *vllm.Config) {
			c.MetricsNames = vllm.MetricsLegacy
			c.EnableLoRA = true // only the names differ from the run's fleet
		}})
	t.Logf("pool with vLLM's legacy metric names (vllm:gpu_cache_usage_perc only): %v", legacy.Endpoints())
	runLoadedEndpointAvoided(t, legacy, "the full KV cache (legacy names)", kvRuleRate, fullKVPin)
}
