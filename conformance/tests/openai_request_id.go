package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// requestIDHeader is the request id header (SPEC §5.2).
const requestIDHeader = "x-request-id"

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIRequestID",
		Description: "For a routed request without an x-request-id header the EPP MUST set a non-empty x-request-id, different for " +
			"every request, in its request header mutation, and MUST NOT replace the x-request-id of a request that carries one.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP parses OpenAI completions and chat completions bodies"},
		Source: "llm-d-router v0.10.0 pkg/epp/handlers/server.go Process (a missing x-request-id gets a UUIDv4) and " +
			"pkg/epp/handlers/request.go generateHeaders (sets it back, a client's id unchanged); same in GIE " +
			"v1.5.0. SPEC §5.2.",
		Run: runOpenAIRequestID,
	})
}

func runOpenAIRequestID(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	seen := map[string]int{}
	const n = 6
	for i := 0; i < n; i++ {
		// Without an id: the EPP sets one, unique per request.
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		if i%2 == 1 {
			body := completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil)
			req = extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", pathCompletions, authority, body, nil), Body: body}
		}
		d := exchange(t, s, c, req)
		mustRoute(t, s, d, req)
		id := d.Headers[requestIDHeader]
		if id == "" {
			t.Fatalf("request %d without %s (%s): the EPP's header mutation sets no %s (set headers: %v)", i+1, requestIDHeader, describe(req), requestIDHeader, d.Headers)
		}
		if prev, dup := seen[id]; dup {
			t.Fatalf("requests %d and %d without %s both got %s=%q", prev, i+1, requestIDHeader, requestIDHeader, id)
		}
		seen[id] = i + 1

		// With an id: the EPP keeps it (sets nothing, or the same value).
		mine := s.Nonce(t)
		body := chatBody(s.ModelName, uniquePrompt(s, t, r, 12))
		withID := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", pathChat, authority, body, map[string]string{requestIDHeader: mine}), Body: body}
		d = exchange(t, s, c, withID)
		mustRoute(t, s, d, withID)
		if got, set := d.Headers[requestIDHeader]; set && got != mine {
			t.Fatalf("request with %s=%q: the EPP replaced it with %q", requestIDHeader, mine, got)
		}
	}
	t.Logf("%d requests without %s got %d distinct generated ids; %d requests with one kept theirs", n, requestIDHeader, len(seen), n)
}
