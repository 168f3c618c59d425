package tests

import (
	"strconv"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAICompletionsPromptList",
		Description: "A completions request whose prompt is an array of strings MUST be routed (not refused) with its body " +
			"forwarded unchanged.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP parses OpenAI completions bodies"},
		Source: "llm-d-router v0.10.0 pkg/epp/framework/interface/requesthandling/types.go " +
			"Prompt.UnmarshalJSON/parseArrayInput (string, []string or []int) via parsers/openai/openai.go " +
			"extractRequestBody. GIE v1.5.0 pkg/epp/framework/interface/scheduling/types.go Prompt.UnmarshalJSON: " +
			"string or []string only. SPEC §9.1; OpenAI completions API.",
		Run: runOpenAICompletionsPromptList,
	})
}

func runOpenAICompletionsPromptList(t harness.TestingT, s *harness.Suite) {
	r := s.Rand(t)
	var cases []surfaceCase
	for _, n := range []int{1, 2, 5} {
		prompts := make([]string, n)
		for i := range prompts {
			prompts[i] = uniquePrompt(s, t, r, 10)
		}
		cases = append(cases, surfaceCase{name: "prompt list of " + strconv.Itoa(n), path: pathCompletions,
			body: jsonBody(map[string]any{"model": s.ModelName, "prompt": prompts, "max_tokens": 1})})
	}
	routeForms(t, s, cases)
}
