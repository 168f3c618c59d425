package tests

import (
	"net/http"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIBadRequest400",
		Description: "The EPP MUST refuse a request whose body is malformed JSON, has no model, or (chat) has an empty messages " +
			"list with an ImmediateResponse of HTTP status 400, and MUST keep serving requests afterwards.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP parses OpenAI completions and chat completions bodies"},
		Source: "llm-d-router v0.10.0 pkg/epp/framework/plugins/requesthandling/parsers/openai/openai.go ParseRequest " +
			"and extractRequestBody (bad JSON, empty messages), pkg/epp/requestcontrol/director.go " +
			"modelRewriteIfNeeded (no model), 400 via pkg/common/error/error.go BuildErrResponse. GIE v1.5.0 " +
			"pkg/epp/requestcontrol/director.go processRequestBody/mutateModel: the same 400s, the model check " +
			"before any rewrite. SPEC §5.2, §5.3.",
		Run: runOpenAIBadRequest400,
	})
}

// badRequestCases are the bodies every OpenAI-parsing EPP must refuse with 400.
func badRequestCases(model string) []struct{ name, path, body string } {
	return []struct{ name, path, body string }{
		{"malformed JSON", pathChat, `{"model": "` + model + `", "messages": [{"role": "user", "content": "hi"}`},
		{"not an object", pathCompletions, `["model", "prompt"]`},
		{"chat without model", pathChat, `{"messages": [{"role": "user", "content": "hello"}], "max_tokens": 1}`},
		{"completion without model", pathCompletions, `{"prompt": "hello", "max_tokens": 1}`},
		{"chat with empty messages", pathChat, `{"model": "` + model + `", "messages": [], "max_tokens": 1}`},
	}
}

func runOpenAIBadRequest400(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	for _, bc := range badRequestCases(s.ModelName) {
		body := []byte(bc.body)
		req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", bc.path, authority, body, nil), Body: body}
		d := exchange(t, s, c, req)
		if d.Immediate == nil {
			t.Fatalf("%s (%s): want ImmediateResponse 400, EPP routed to %q", bc.name, describe(req), d.Pick())
		}
		if d.Immediate.Status != http.StatusBadRequest {
			t.Fatalf("%s (%s): want ImmediateResponse 400, got %d: %s", bc.name, describe(req), d.Immediate.Status, d.Immediate.Body)
		}
		// The EPP keeps serving: the next valid request, on a new stream as Envoy opens one per
		// HTTP request, gets a pick.
		ok := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		mustRoute(t, s, exchange(t, s, c, ok), ok)
		t.Logf("%s: 400, then a valid request was routed", bc.name)
	}
}
