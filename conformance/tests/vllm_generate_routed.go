package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:     "VLLMGenerateRouted",
		Description:   "A POST to vLLM's /inference/v1/generate with a model and a non-empty token_ids array MUST be routed with its body forwarded unchanged.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP recognises the generate path (llm-d-router v0.10.0's vllmhttp-parser claims it)"},
		Source:        "SPEC §10 (llm-d-router v0.10.0 pkg/epp/framework/plugins/requesthandling/parsers/vllmhttp/vllmhttp.go parseGenerateRequest (token_ids required))",
		Run:           runVLLMGenerateRouted,
	})
}

func runVLLMGenerateRouted(t harness.TestingT, s *harness.Suite) {
	routeExtProc(t, s, []surfaceCase{
		{"token ids", pathGenerate, apiBody(s.ModelName, map[string]any{"token_ids": tokenIDs(uint64(len(s.Nonce(t))), 64), "sampling_params": map[string]any{"max_tokens": 4}}, nil)},
		{"token ids, stream", pathGenerate, apiBody(s.ModelName, map[string]any{"token_ids": tokenIDs(7, 16), "stream": true}, nil)},
	})
}
