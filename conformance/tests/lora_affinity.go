package tests

import (
	"strconv"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/vllm"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "LoRAAffinity",
		Description: "Requests for a LoRA adapter that is running on exactly one endpoint, which has capacity, MUST go to that " +
			"endpoint; model servers without LoRA, which export no vllm:lora_requests_info, MUST still be routed by their load " +
			"(an endpoint with a deep waiting queue gets at most 5% of new requests).",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureLoRAAffinity},
		Preconditions: []string{"the EPP scores LoRA affinity from vllm:lora_requests_info (e.g. lora-affinity-scorer)",
			"the EPP observes new metrics within metricsPropagation",
			"the run's fleet has LoRA on: every fake serves " + strconv.Itoa(harness.DefaultAdaptersPerServer) + " adapters of its own",
			"a second pool of " + strconv.Itoa(variantPods) + " fakes with LoRA off (vLLM without --enable-lora: no " +
				"vllm:lora_requests_info family) and its own instance of the EPP (the run's config) gets base-model requests " +
				"while one endpoint has a deep waiting queue, so the EPP must also be queue-aware (e.g. queue-scorer); the address " +
				"and cluster targets, which run one EPP, check only the run's fleet (the log says so)"},
		Source: "llm-d-router v0.10.0 pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/lora_affinity.go Score " +
			"(Beta, not in the default config of pkg/epp/config/loader/defaults.go) and " +
			"pkg/epp/framework/plugins/datalayer/extractor/metrics/loraspec.go getLatestMetric (a missing " +
			"vllm:lora_requests_info family is skipped silently, llm-d-router #926). GIE v1.5.0 same scorer " +
			"(pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/lora_affinity.go); its loraspec.go " +
			"reported the missing family as an extract error. vLLM registers the family only with LoRA " +
			"(vllm/v1/metrics/loggers.py).",
		Run: runLoRAAffinity,
	})
}

func runLoRAAffinity(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 2)
	r := s.Rand(t)
	plan := harness.MustPlan(t, harness.Shape{
		Outcome: "adapter requests sent to the endpoint running the adapter", Tail: harness.AtLeast,
		Compliant: 1 - harness.Exploration, Random: 1 / float64(len(pool)),
	})
	// The harness gives each member adapters whose names are unique across the fleet, so only
	// this member serves the adapter (another member would answer 404). The fakes' adapter slots
	// are all taken by the harness (max-cpu-loras), so the test uses one of them rather than
	// loading a new one.
	e := r.IntN(len(pool))
	if len(s.LoRAAdapters) != len(pool) || len(s.LoRAAdapters[e]) == 0 {
		t.Fatalf("precondition: the harness serves no LoRA adapter on member %d (adapters %v)", e, s.LoRAAdapters)
	}
	home, adapter := pool[e], s.LoRAAdapters[e][r.IntN(len(s.LoRAAdapters[e]))]

	now := float64(time.Now().Unix())
	pins := map[string]vllm.FakeMetrics{}
	for _, a := range pool {
		pins[a] = vllm.FakeMetrics{RunningRequests: 1, KVCacheUsage: 0.1, Loras: []vllm.LoraMetrics{{Timestamp: now}}}
	}
	pins[home] = vllm.FakeMetrics{RunningRequests: 1, KVCacheUsage: 0.1, Loras: []vllm.LoraMetrics{{Running: adapter, Timestamp: now}}}
	pinAll(t, s, pins)
	t.Logf("adapter %s runs on %s", adapter, home)

	mk := func() (string, []byte) {
		return pathCompletions, completionBody(adapter, uniquePrompt(s, t, r, 24), nil)
	}
	awaitObserved(t, s, "adapter "+adapter+" running on "+home, mk, func(ep string) bool { return ep == home })
	eps := sendAll(t, s, plan.N, func(int) (string, []byte) { return mk() })
	t.Logf("picks: %v", histogram(eps))
	plan.Check(t, s, count(eps, home), len(eps))

	if why := s.SidePoolUnsupported(); why != "" {
		t.Logf("servers without LoRA (no vllm:lora_requests_info) not checked: %s", why)
		return
	}
	noLoRA := s.StartVariantPool(t, harness.FleetVariant{Name: "no-lora", Pods: variantPods})
	t.Logf("pool with LoRA off (no vllm:lora_requests_info): %v", noLoRA.Endpoints())
	runLoadedEndpointAvoided(t, noLoRA, "the deep queue (servers without LoRA)", queueRuleRate, deepQueuePin)
}
