package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:     "OpenAIRenderRouted",
		Description:   "A POST to vLLM's render endpoints /v1/chat/completions/render (a chat body) and /v1/completions/render (a completions body) MUST be routed with its body forwarded unchanged.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP recognises the render paths (llm-d-router v0.10.0's openai-parser parses them as chat completions and completions)"},
		Source:        "SPEC §10 (llm-d-router v0.10.0 pkg/epp/framework/plugins/requesthandling/parsers/openai/openai.go (claimed paths chat/completions/render, completions/render; determineAPITypeFromPath))",
		Run:           runOpenAIRenderRouted,
	})
}

func runOpenAIRenderRouted(t harness.TestingT, s *harness.Suite) {
	routeExtProc(t, s, []surfaceCase{
		{"chat render", pathChatRender, chatBody(s.ModelName, "render me "+s.Nonce(t))},
		{"completions render", pathCompletionRender, completionBody(s.ModelName, "render me "+s.Nonce(t), nil)},
	})
}
