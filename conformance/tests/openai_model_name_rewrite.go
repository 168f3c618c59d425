package tests

import (
	"encoding/json"
	"strconv"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// modelRewriteHeader names the model the request must be sent to (SPEC §5.2).
const modelRewriteHeader = "x-gateway-model-name-rewrite"

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIModelNameRewrite",
		Description: "When a request carries x-gateway-model-name-rewrite naming another model, the EPP MUST return the body with " +
			"its model field set to that name, every other field unchanged, and Content-Length set to the returned body's length.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP parses OpenAI completions and chat completions bodies", "the rewrite target is a model the pool serves (a LoRA adapter of the fleet)"},
		Source: "llm-d-router v0.10.0 pkg/epp/handlers/request.go HandleRequestHeaders (x-llm-d-model-name-rewrite, " +
			"alias x-gateway-model-name-rewrite) and pkg/epp/requestcontrol/director.go " +
			"modelRewriteIfNeeded/repackage. GIE v1.5.0 pkg/epp/requestcontrol/director.go mutateModel, header " +
			"x-gateway-model-name-rewrite only. SPEC §5.2.",
		Run: runOpenAIModelNameRewrite,
	})
}

func runOpenAIModelNameRewrite(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	if len(s.LoRAAdapters) == 0 || len(s.LoRAAdapters[0]) == 0 {
		t.Fatalf("precondition: the fleet serves no LoRA adapter to rewrite to")
	}
	for i := 0; i < 4; i++ {
		member := r.IntN(len(s.LoRAAdapters))
		target := s.LoRAAdapters[member][r.IntN(len(s.LoRAAdapters[member]))]
		path, body := pathChat, chatBody(s.ModelName, uniquePrompt(s, t, r, 12))
		if i%2 == 1 {
			path, body = pathCompletions, completionBody(s.ModelName, uniquePrompt(s, t, r, 12), map[string]any{"temperature": 0.5})
		}
		req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", path, authority, body, map[string]string{modelRewriteHeader: target}), Body: body}
		d := exchange(t, s, c, req)
		mustRoute(t, s, d, req)
		if d.Body == nil {
			t.Fatalf("%s with %s: %s: the EPP returned no body, so the model was not rewritten", describe(req), modelRewriteHeader, target)
		}
		var sent, got map[string]any
		_ = json.Unmarshal(body, &sent)
		if err := json.Unmarshal(d.Body, &got); err != nil {
			t.Fatalf("%s: the returned body is not a JSON object: %v", describe(req), err)
		}
		if got["model"] != target {
			t.Fatalf("%s with %s: %s: the returned body's model is %v, want %q", describe(req), modelRewriteHeader, target, got["model"], target)
		}
		sent["model"] = target
		if diff := cmp.Diff(sent, got); diff != "" {
			t.Fatalf("%s: apart from the model, the returned body differs from the sent one (-sent +returned):\n%s", describe(req), diff)
		}
		if d.ContentLength != strconv.Itoa(len(d.Body)) {
			t.Fatalf("%s: Content-Length header %q, returned body %d bytes", describe(req), d.ContentLength, len(d.Body))
		}
		t.Logf("%s: model %s rewritten to %s (%d → %d bytes)", path, s.ModelName, target, len(body), len(d.Body))
	}
}
