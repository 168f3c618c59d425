package tests

import (
	"math/rand/v2"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:   "AnthropicMessagesRouted",
		FormerNames: []string{"ReferenceAnthropicMessagesRouted"}, // in the Reference profile until issue 32
		Description: "A POST to /v1/messages (Anthropic Messages, served by vLLM) with a system prompt as a string or as blocks and " +
			"messages with string or block content MUST be routed with its body forwarded unchanged; a body without a model, " +
			"without messages or with a message without content or of the wrong shape MUST be refused with 400; and the system " +
			"prompt MUST take part in the prefix hash (two requests that differ only in it do not score as a full match).",
		Level:    conformance.LevelEppkit,
		Profile:  conformance.ProfileEPPProduction,
		Features: []conformance.Feature{conformance.FeatureAnthropicMessages},
		Preconditions: []string{"for the system-prompt part: a full prefix match outweighs a deep waiting queue and a small match does not " +
			"(the reference's default weights: prefix-cache 3, queue 2); the EPP observes pinned metrics within metricsPropagation"},
		Source: "SPEC §9.1 (/v1/messages; Anthropic's Messages API as vLLM serves it); upstream v1.5.0 does not know the path",
		Run:    runAnthropicMessagesRouted,
	})
}

func runAnthropicMessagesRouted(t harness.TestingT, s *harness.Suite) {
	r := s.Rand(t)
	body := func(extra map[string]any) []byte {
		return apiBody(s.ModelName, map[string]any{"max_tokens": 16}, extra)
	}
	routeForms(t, s, []surfaceCase{
		{"string content", pathMessages, body(map[string]any{"messages": []any{map[string]any{"role": "user", "content": uniquePrompt(s, t, r, 20)}}})},
		{"system string, block content", pathMessages, body(map[string]any{"system": "Be brief.", "messages": []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": uniquePrompt(s, t, r, 20)}}}}})},
		{"system blocks, several turns, streamed", pathMessages, body(map[string]any{"stream": true,
			"system": []any{map[string]any{"type": "text", "text": "Be brief."}},
			"messages": []any{
				map[string]any{"role": "user", "content": uniquePrompt(s, t, r, 8)},
				map[string]any{"role": "assistant", "content": "Sure."},
				map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "text", "text": uniquePrompt(s, t, r, 8)},
					map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
				}},
			}})},
	})
	c := s.ExtProc(t)
	for _, bad := range []surfaceCase{
		{"no model", pathMessages, jsonBody(map[string]any{"max_tokens": 1, "messages": []any{map[string]any{"role": "user", "content": "x"}}})},
		{"content of the wrong type", pathMessages, body(map[string]any{"messages": []any{map[string]any{"role": "user", "content": 7}}})},
		{"message without content", pathMessages, body(map[string]any{"messages": []any{map[string]any{"role": "user"}}})},
		{"block without a type", pathMessages, body(map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"text": "x"}}}}})},
		{"no messages", pathMessages, body(map[string]any{"prompt": "x"})},
	} {
		req := surfaceRequest(bad.path, bad.body, nil)
		mustRefuse(t, s, exchange(t, s, c, req), req, 400)
		t.Logf("%s: refused with 400", bad.name)
	}
	// The system prompt is part of the prompt: a request that differs only in it is not a full
	// match (an EPP that parses the body as chat drops "system").
	runPrefixPressure(t, s, func(r *rand.Rand, i int) pressureTrial {
		turn := uniquePrompt(s, t, r, 60)
		req := func(system string) extprocclient.Request {
			return surfaceRequest(pathMessages, body(map[string]any{"system": system,
				"messages": []any{map[string]any{"role": "user", "content": turn}}}), nil)
		}
		return pressureTrial{name: "system prompt", base: req("You are terse. " + s.Nonce(t)), variant: req("You are chatty. " + s.Nonce(t))}
	})
}
