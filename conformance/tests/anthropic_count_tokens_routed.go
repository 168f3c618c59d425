package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:     "AnthropicCountTokensRouted",
		Description:   "A POST to Anthropic's /v1/messages/count_tokens MUST be routed with its body forwarded unchanged, with or without a model field (upstream forwards it as a raw payload).",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP recognises the count_tokens path (llm-d-router v0.10.0's anthropic-parser claims it)"},
		Source:        "SPEC §10 (llm-d-router v0.10.0 pkg/epp/framework/plugins/requesthandling/parsers/anthropic/anthropic.go ParseRequest (count_tokens: RawPayload, no model check, SkipResponseProcessing))",
		Run:           runAnthropicCountTokensRouted,
	})
}

func runAnthropicCountTokensRouted(t harness.TestingT, s *harness.Suite) {
	routeExtProc(t, s, []surfaceCase{
		{"with a model", pathCountTokens, apiBody(s.ModelName, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "count me " + s.Nonce(t)}}}, nil)},
		{"without a model", pathCountTokens, jsonBody(map[string]any{"system": "be brief", "messages": []any{map[string]any{"role": "user", "content": "count me too " + s.Nonce(t)}}})},
	})
}
