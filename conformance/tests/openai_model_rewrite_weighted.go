package tests

import (
	"encoding/json"
	"strconv"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIModelRewriteWeighted",
		Description: "When an InferenceModelRewrite of the pool maps the requested model (an exact match) to weighted target " +
			"models, the EPP MUST forward each request with its model rewritten to one of the targets, every other field " +
			"unchanged and Content-Length set to the forwarded body's length, and the targets' shares MUST follow their weights.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP applies InferenceModelRewrites of its pool: the apiserver source creates " + harness.ModelRewriteName +
			" (" + harness.ModelRewriteAlias + " → two LoRA adapters of the fleet, weights 3 and 1); with a static pool the EPP must be " +
			"given the same rule ({{.ModelRewritesFile}}; the reference takes --model-rewrites)"},
		Source: "llm-d-router v0.10.0 pkg/epp/requestcontrol/director.go " +
			"applyWeightedModelRewrite/selectWeightedModel with pkg/epp/datastore/modelrewritestore.go getRule " +
			"(InferenceModelRewrite in llm-d.ai/v1alpha2 or, when that group is not served, " +
			"inference.networking.x-k8s.io/v1alpha2); same rule in GIE v1.5.0 (x-k8s.io group only). SPEC §9.4.",
		Run: runOpenAIModelRewriteWeighted,
	})
}

func runOpenAIModelRewriteWeighted(t harness.TestingT, s *harness.Suite) {
	targets := harness.ModelRewriteTargets()
	var total int32
	for _, tg := range targets {
		total += tg.Weight
	}
	heavy, light := targets[0], targets[len(targets)-1]
	// Two one-sided plans: the heavier target's share must not fall to what ignoring the weights
	// gives (1/len(targets)), and the lighter target must still get its share (not ~0).
	heavyPlan := harness.MustPlan(t, harness.Shape{
		Outcome: "requests rewritten to " + heavy.Model + " (weight " + strconv.Itoa(int(heavy.Weight)) + ")", Tail: harness.AtLeast,
		Compliant: float64(heavy.Weight) / float64(total), Random: 1 / float64(len(targets)),
	})
	lightPlan := harness.MustPlan(t, harness.Shape{
		Outcome: "requests rewritten to " + light.Model + " (weight " + strconv.Itoa(int(light.Weight)) + ")", Tail: harness.AtLeast,
		Compliant: float64(light.Weight) / float64(total), Random: float64(light.Weight) / float64(total) / 5,
	})
	n := max(heavyPlan.N, lightPlan.N)
	c := s.ExtProc(t)
	r := s.Rand(t)
	counts := map[string]int{}
	heavyHits, lightHits := 0, 0
	for i := 0; i < n; i++ {
		path, body := pathCompletions, completionBody(harness.ModelRewriteAlias, uniquePrompt(s, t, r, 8), map[string]any{"temperature": 0.5})
		if i%2 == 1 {
			path, body = pathChat, chatBody(harness.ModelRewriteAlias, uniquePrompt(s, t, r, 8))
		}
		req := surfaceRequest(path, body, nil)
		d := exchange(t, s, c, req)
		mustRoute(t, s, d, req)
		if d.Body == nil {
			t.Fatalf("request %d (%s, model %s): the EPP forwarded the body unchanged: the model was not rewritten", i, describe(req), harness.ModelRewriteAlias)
		}
		var sent, got map[string]any
		_ = json.Unmarshal(body, &sent)
		if err := json.Unmarshal(d.Body, &got); err != nil {
			t.Fatalf("request %d: the forwarded body is not a JSON object: %v", i, err)
		}
		model, _ := got["model"].(string)
		known := false
		for _, tg := range targets {
			known = known || tg.Model == model
		}
		if !known {
			t.Fatalf("request %d (%s): forwarded with model %v, want one of the rewrite's targets %v", i, describe(req), got["model"], targets)
		}
		sent["model"] = model
		if diff := cmp.Diff(sent, got); diff != "" {
			t.Fatalf("request %d: apart from the model, the forwarded body differs from the sent one (-sent +forwarded):\n%s", i, diff)
		}
		if d.ContentLength != strconv.Itoa(len(d.Body)) {
			t.Fatalf("request %d: Content-Length %q, forwarded body %d bytes", i, d.ContentLength, len(d.Body))
		}
		counts[model]++
		if i < heavyPlan.N && model == heavy.Model {
			heavyHits++
		}
		if i < lightPlan.N && model == light.Model {
			lightHits++
		}
	}
	t.Logf("%d requests for %s rewritten: %v", n, harness.ModelRewriteAlias, counts)
	heavyPlan.Check(t, s, heavyHits, heavyPlan.N)
	lightPlan.Check(t, s, lightHits, lightPlan.N)
}
