package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIEmbeddingsRouted",
		Description: "A POST to /v1/embeddings whose input is a string, an array of strings, an array of token ids or an array of " +
			"token-id arrays MUST be routed (not parsed as a completions request and refused) with its body forwarded unchanged.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP recognises the embeddings API by its path"},
		Source: "llm-d-router v0.10.0 pkg/epp/framework/plugins/requesthandling/parsers/openai/openai.go " +
			"determineAPITypeFromPath/extractRequestBody with " +
			"pkg/epp/framework/interface/requesthandling/types.go EmbeddingsInput.UnmarshalJSON/parseArrayInput: " +
			"string, []string and []int are accepted, [][]int is refused 400. GIE v1.5.0 " +
			"pkg/epp/framework/interface/scheduling/types.go EmbeddingsRequest (Input any): every input form " +
			"routed. SPEC §9.1; OpenAI embeddings API.\" (If the `[][]int` case is removed from the test — §C — " +
			"drop the \"[][]int is refused\" clause.)",
		Run: runOpenAIEmbeddingsRouted,
	})
}

func runOpenAIEmbeddingsRouted(t harness.TestingT, s *harness.Suite) {
	r := s.Rand(t)
	body := func(input any) []byte {
		return jsonBody(map[string]any{"model": s.ModelName, "input": input, "encoding_format": "float"})
	}
	routeForms(t, s, []surfaceCase{
		{"input string", pathEmbeddings, body(uniquePrompt(s, t, r, 20))},
		{"input []string", pathEmbeddings, body([]string{uniquePrompt(s, t, r, 5), uniquePrompt(s, t, r, 8)})},
		{"input []int", pathEmbeddings, body(tokenIDs(r.Uint64(), 25))},
		{"input [][]int", pathEmbeddings, body([][]int{tokenIDs(r.Uint64(), 6), tokenIDs(r.Uint64(), 4)})},
	})
}
