package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIResponsesRouted",
		Description: "A POST to /v1/responses (OpenAI Responses, served by vLLM) with a string input or an array of input items, " +
			"with or without instructions, MUST be routed with its body forwarded unchanged.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP recognises the Responses API by its path"},
		Source: "llm-d-router v0.10.0 pkg/epp/framework/plugins/requesthandling/parsers/openai/openai.go " +
			"determineAPITypeFromPath/extractRequestBody (responses: any non-null input); same in GIE v1.5.0. " +
			"SPEC §9.1.",
		Run: runOpenAIResponsesRouted,
	})
}

func runOpenAIResponsesRouted(t harness.TestingT, s *harness.Suite) {
	r := s.Rand(t)
	body := func(extra map[string]any) []byte {
		return apiBody(s.ModelName, map[string]any{"max_output_tokens": 16}, extra)
	}
	routeForms(t, s, []surfaceCase{
		{"string input", pathResponses, body(map[string]any{"input": uniquePrompt(s, t, r, 20)})},
		{"string input with instructions", pathResponses, body(map[string]any{"input": uniquePrompt(s, t, r, 20), "instructions": "Answer briefly."})},
		{"input items", pathResponses, body(map[string]any{"instructions": "Answer briefly.", "input": []any{
			map[string]any{"role": "user", "content": uniquePrompt(s, t, r, 10)},
			map[string]any{"type": "message", "role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": uniquePrompt(s, t, r, 10)},
				map[string]any{"type": "input_image", "image_url": "https://img.example/" + s.Nonce(t) + ".png"},
			}},
		}})},
		{"streamed", pathResponses, body(map[string]any{"input": uniquePrompt(s, t, r, 10), "stream": true})},
	})
}
