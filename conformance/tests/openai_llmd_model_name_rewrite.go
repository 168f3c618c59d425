package tests

import (
	"encoding/json"
	"strconv"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAILLMDModelNameRewrite",
		Description: "The EPP MUST honour llm-d-router v0.10.0's request header x-llm-d-model-name-rewrite as it honours " +
			"x-gateway-model-name-rewrite (the returned body's model is the header's, every other field unchanged, Content-Length " +
			"set), and when a request carries both names the x-llm-d-* one MUST win.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP parses OpenAI completions and chat completions bodies",
			"the rewrite targets are models the pool serves (LoRA adapters of the fleet)"},
		Source: "SPEC §10 (llm-d-router v0.10.0 pkg/epp/metadata/consts.go ModelNameRewriteKey, OldModelNameRewriteKey, " +
			"GetLowerCaseHeaderValue; pkg/epp/handlers/request.go HandleRequestHeaders; pkg/epp/requestcontrol/director.go " +
			"modelRewriteIfNeeded)",
		Run: runOpenAILLMDModelNameRewrite,
	})
}

func runOpenAILLMDModelNameRewrite(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	var adapters []string
	for _, member := range s.LoRAAdapters {
		adapters = append(adapters, member...)
	}
	if len(adapters) == 0 {
		t.Fatalf("precondition: the fleet serves no LoRA adapter to rewrite to")
	}
	for i := 0; i < 6; i++ {
		target := adapters[r.IntN(len(adapters))]
		headers := map[string]string{hdrRewrite: target}
		if i%2 == 1 {
			// Both names: the legacy one names the base model, which a legacy-first EPP would keep.
			headers[hdrRewriteLegacy] = s.ModelName
		}
		path, body := pathChat, chatBody(s.ModelName, uniquePrompt(s, t, r, 12))
		if i%3 == 1 {
			path, body = pathCompletions, completionBody(s.ModelName, uniquePrompt(s, t, r, 12), map[string]any{"temperature": 0.5})
		}
		req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", path, authority, body, headers), Body: body}
		d := exchange(t, s, c, req)
		mustRoute(t, s, d, req)
		if d.Body == nil {
			t.Fatalf("%s with %v: the EPP returned no body, so the model was not rewritten to %s", describe(req), headers, target)
		}
		var sent, got map[string]any
		_ = json.Unmarshal(body, &sent)
		if err := json.Unmarshal(d.Body, &got); err != nil {
			t.Fatalf("%s: the returned body is not a JSON object: %v", describe(req), err)
		}
		if got["model"] != target {
			t.Fatalf("%s with %v: the returned body's model is %v, want %q (the %s value)", describe(req), headers, got["model"], target, hdrRewrite)
		}
		sent["model"] = target
		if diff := cmp.Diff(sent, got); diff != "" {
			t.Fatalf("%s: apart from the model, the returned body differs from the sent one (-sent +returned):\n%s", describe(req), diff)
		}
		if d.ContentLength != strconv.Itoa(len(d.Body)) {
			t.Fatalf("%s: Content-Length header %q, returned body %d bytes", describe(req), d.ContentLength, len(d.Body))
		}
		t.Logf("%s with %v: model rewritten to %s", path, headers, target)
	}
}
