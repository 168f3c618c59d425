package tests

import (
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// gatewayInputHeaders are the headers a gateway (or client) sends the EPP as input (SPEC §5.2).
// The model-name rewrite names the base model itself, so honouring it changes nothing.
func gatewayInputHeaders(s *harness.Suite, nonce string) map[string]string {
	return map[string]string{
		"x-gateway-inference-objective":   "conformance-objective-" + nonce,
		"x-gateway-inference-fairness-id": "conformance-fairness-" + nonce,
		"x-gateway-model-name-rewrite":    s.ModelName,
	}
}

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIInputHeadersNotEchoed",
		Description: "The EPP's request header mutation MUST NOT set the gateway's input headers x-gateway-inference-objective, " +
			"x-gateway-inference-fairness-id and x-gateway-model-name-rewrite back onto the request.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP reads the x-gateway-* request headers", "an unknown objective name means the default priority"},
		Source: "llm-d-router v0.10.0 pkg/epp/util/request/headers.go IsSystemOwnedHeader (x-llm-d-* control headers " +
			"and their x-gateway-* aliases), applied by pkg/epp/handlers/request.go generateHeaders; GIE v1.5.0 " +
			"same function with the x-gateway-* names only. SPEC §5.2.",
		Run: runOpenAIInputHeadersNotEchoed,
	})
}

func runOpenAIInputHeadersNotEchoed(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	for i := 0; i < 4; i++ {
		in := gatewayInputHeaders(s, s.Nonce(t))
		body := chatBody(s.ModelName, uniquePrompt(s, t, r, 12))
		path := pathChat
		if i%2 == 1 {
			body, path = completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil), pathCompletions
		}
		req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", path, authority, body, in), Body: body}
		d := exchange(t, s, c, req)
		mustRoute(t, s, d, req)
		for k := range d.Headers {
			if _, isInput := in[k]; isInput || (strings.HasPrefix(k, "x-gateway-") && k != extprocclient.DestinationKey) {
				t.Fatalf("%s: the EPP set the input header %s=%q back onto the request (set headers: %v)", describe(req), k, d.Headers[k], d.Headers)
			}
		}
	}
}
