package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:     "OpenAIImagesGenerationsRouted",
		Description:   "A POST to /v1/images/generations with a model and a non-empty prompt MUST be routed with its body forwarded unchanged.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP recognises the image generation API by its path (llm-d-router v0.10.0's openai-parser claims it)"},
		Source:        "SPEC §10 (llm-d-router v0.10.0 pkg/epp/framework/plugins/requesthandling/parsers/openai/openai.go extractRequestBody (imagesGenerationsAPI: prompt non-empty))",
		Run:           runOpenAIImagesGenerationsRouted,
	})
}

func runOpenAIImagesGenerationsRouted(t harness.TestingT, s *harness.Suite) {
	routeExtProc(t, s, []surfaceCase{
		{"prompt", pathImages, apiBody(s.ModelName, map[string]any{"prompt": "a lighthouse at dusk " + s.Nonce(t)}, nil)},
		{"prompt, n, size, steps", pathImages, apiBody(s.ModelName, map[string]any{"prompt": "a red fox " + s.Nonce(t), "n": 1, "size": "256x256", "num_inference_steps": 4}, nil)},
	})
}
