package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:     "OpenAIConversationsRouted",
		Description:   "A POST to /v1/conversations (OpenAI Conversations) with a model and a non-empty items array MUST be routed with its body forwarded unchanged.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP recognises the Conversations API by its path (llm-d-router v0.10.0's openai-parser claims it)"},
		Source:        "SPEC §10 (llm-d-router v0.10.0 pkg/epp/framework/plugins/requesthandling/parsers/openai/openai.go determineAPITypeFromPath, extractRequestBody (conversationsAPI: items non-empty))",
		Run:           runOpenAIConversationsRouted,
	})
}

func runOpenAIConversationsRouted(t harness.TestingT, s *harness.Suite) {
	routeExtProc(t, s, []surfaceCase{
		{"one message item", pathConversations, apiBody(s.ModelName, map[string]any{"items": []any{map[string]any{"type": "message", "role": "user", "content": "hello " + s.Nonce(t)}}}, nil)},
		{"metadata and two items", pathConversations, apiBody(s.ModelName, map[string]any{"metadata": map[string]any{"topic": "x"}, "items": []any{
			map[string]any{"type": "message", "role": "system", "content": "be brief"},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "hi " + s.Nonce(t)}}}}}, nil)},
	})
}
