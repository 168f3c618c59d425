package tests

import (
	"github.com/eppkit/eppkit/conformance/harness"
)

// Paths of llm-d-router v0.10.0's default parsers that eppkit's other tests do not send
// (pkg/epp/framework/plugins/requesthandling/parsers: openai, anthropic, vllmhttp; SPEC §10).
const (
	pathConversations    = "/v1/conversations"
	pathChatRender       = "/v1/chat/completions/render"
	pathCompletionRender = "/v1/completions/render"
	pathImages           = "/v1/images/generations"
	pathCountTokens      = "/v1/messages/count_tokens"
	pathGenerate         = "/inference/v1/generate"
)

// routeExtProc exchanges every case on its own stream and requires each to be routed with its
// body forwarded intact (mustRouteIntact). The fake vLLM does not serve these paths, so unlike
// routeForms the requests do not go on to a model server.
func routeExtProc(t harness.TestingT, s *harness.Suite, cases []surfaceCase) {
	t.Helper()
	c := s.ExtProc(t)
	for _, tc := range cases {
		req := surfaceRequest(tc.path, tc.body, nil)
		d := exchange(t, s, c, req)
		if d.Immediate != nil {
			t.Fatalf("%s: the EPP refused a valid %s request with %d: %s", tc.name, tc.path, d.Immediate.Status, d.Immediate.Body)
		}
		addrs := mustRouteIntact(t, s, d, req)
		t.Logf("%s: POST %s routed to %v with its body intact", tc.name, tc.path, addrs)
	}
}
