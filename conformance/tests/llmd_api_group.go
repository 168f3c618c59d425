package tests

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/vllm"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "LLMDAPIGroup",
		Description: "With InferenceObjective and InferenceModelRewrite served in both API groups, the EPP MUST read them from " +
			"llm-d.ai/v1alpha2 and ignore the legacy inference.networking.x-k8s.io/v1alpha2 objects: a model rewrite in llm-d.ai " +
			"applies over a legacy one of the same alias and a legacy-only rewrite does not apply; under saturation a request " +
			"naming an llm-d.ai objective of priority -1 is shed, and one naming a legacy-only objective of priority -1, or an " +
			"objective that is 0 in llm-d.ai and -1 in the legacy group, is routed.",
		Level:          conformance.LevelUpstream,
		Profile:        conformance.ProfileEPPRouting,
		Features:       []conformance.Feature{conformance.FeatureRequestShedding, conformance.FeatureOpenAIRequestParsing},
		EndpointSource: "apiserver",
		Preconditions: []string{
			"the apiserver endpoint source: both groups' CRDs installed before the EPP starts, and the objects of " +
				"harness.GroupObjectives and harness.GroupModelRewrites, which only it writes (on a static pool or a cluster the suite only reads, the test does not apply)",
			"the EPP reads the pool's InferenceObjectives and InferenceModelRewrites from the API server",
			"the saturation detector uses thresholds below waiting 50 and KV-cache use 0.99 (as RequestShedding)",
		},
		Source: "SPEC §10 (llm-d-router v0.10.0 pkg/epp/server/controller_config.go populateWithDiscovery; apix/v1alpha2 " +
			"GroupName llm-d.ai; config/crd/bases/llm-d.ai_inferenceobjectives.yaml, llm-d.ai_inferencemodelrewrites.yaml)",
		Run: runLLMDAPIGroup,
	})
}

// forwardedModel exchanges a completion for model and returns the model of the body the EPP
// forwards (the sent one when it returned no body).
func forwardedModel(t harness.TestingT, s *harness.Suite, c *extprocclient.Client, model string) string {
	t.Helper()
	r := s.Rand(t)
	body := completionBody(model, uniquePrompt(s, t, r, 8), nil)
	req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", pathCompletions, authority, body, nil), Body: body}
	d := exchange(t, s, c, req)
	mustRoute(t, s, d, req)
	if d.Body == nil {
		return model
	}
	var b struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(d.Body, &b); err != nil {
		t.Fatalf("%s: the forwarded body is not JSON: %v", describe(req), err)
	}
	return b.Model
}

func runLLMDAPIGroup(t harness.TestingT, s *harness.Suite) {
	if s.Source.Kubeconfig == "" {
		harness.Skip(t, "the llm-d.ai group test needs the apiserver endpoint source (API groups exist only on an API server)")
	}
	if !s.Source.GroupObjects {
		harness.Skip(t, "the endpoint source did not write the test's InferenceObjectives and InferenceModelRewrites in both API groups "+
			"before the EPP started (only the apiserver source does; use --endpoint-source apiserver)")
	}
	pool := requireEndpoints(t, s, 1)
	c := s.ExtProc(t)
	r := s.Rand(t)

	// Model rewrites: the llm-d.ai rule wins over the legacy one of the same alias; a legacy-only
	// rule is ignored.
	want := harness.AdapterName(1, 0)
	harness.MustEventually(t, s, s.Timeouts.EndpointChange.D(), 1, func() error {
		if got := forwardedModel(t, s, c, harness.SplitRewriteAlias); got != want {
			return fmt.Errorf("model %s forwarded as %q, want %q (its llm-d.ai InferenceModelRewrite; the legacy one says %s)",
				harness.SplitRewriteAlias, got, want, harness.AdapterName(2, 0))
		}
		return nil
	})
	if got := forwardedModel(t, s, c, harness.LegacyRewriteAlias); got != harness.LegacyRewriteAlias {
		t.Fatalf("model %s forwarded as %q: the legacy-only InferenceModelRewrite applied although llm-d.ai is served", harness.LegacyRewriteAlias, got)
	}
	t.Logf("rewrites: %s → %s (llm-d.ai), %s unchanged (legacy only)", harness.SplitRewriteAlias, want, harness.LegacyRewriteAlias)

	// Objectives, under saturation.
	body := func() []byte { return completionBody(s.ModelName, uniquePrompt(s, t, r, 16), nil) }
	shedWith := func(name string) map[string]string { return map[string]string{hdrObjective: name} }
	t.Cleanup(func() {
		err := harness.Eventually(s.Timeouts.MetricsPropagation.D(), s.Timeouts.Poll.D(), 1, func() error {
			if status, _, err := sendForStatus(s, body(), shedWith(harness.LLMDSheddableObjective)); err != nil || status == http.StatusTooManyRequests {
				return fmt.Errorf("sheddable requests are still refused (%d, %v)", status, err)
			}
			return nil
		})
		if err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	pins := map[string]vllm.FakeMetrics{}
	for _, a := range pool {
		pins[a] = vllm.FakeMetrics{RunningRequests: 16, WaitingRequests: 50, KVCacheUsage: 0.99}
	}
	pinAll(t, s, pins)
	harness.MustEventually(t, s, s.Timeouts.MetricsPropagation.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		status, ep, err := sendForStatus(s, body(), shedWith(harness.LLMDSheddableObjective))
		if err != nil {
			return err
		}
		if status != http.StatusTooManyRequests {
			return fmt.Errorf("a request naming %s (llm-d.ai, priority -1) on the saturated pool got %d (routed to %q), want 429",
				harness.LLMDSheddableObjective, status, ep)
		}
		return nil
	})
	for _, name := range []string{harness.LegacySheddableObjective, harness.SplitObjective} {
		status, ep, err := sendForStatus(s, body(), shedWith(name))
		if err != nil {
			t.Fatalf("a request naming %s: %v", name, err)
		}
		if ep == "" {
			t.Fatalf("a request naming %s was refused with %d on the saturated pool: the EPP read the legacy group's priority -1 "+
				"although llm-d.ai is served (seed %d)", name, status, s.Seed)
		}
	}
	t.Logf("objectives: %s shed; %s and %s routed (legacy priorities ignored)", harness.LLMDSheddableObjective,
		harness.LegacySheddableObjective, harness.SplitObjective)
}
