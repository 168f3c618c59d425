package tests

import (
	"net/http"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPEmptySubset503",
		Description: "When the subset hint x-gateway-destination-endpoint-subset is present but empty, the EPP MUST answer " +
			"with an ImmediateResponse of HTTP status 503.",
		Level:         conformance.LevelMUST,
		Profile:       conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model"},
		Source:        "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol), Endpoint Subset: \"If ... the list is empty, then the EPP MUST return a ImmediateResponse with 503\"; SPEC §5.1",
		Run:           runEPPEmptySubset503,
	})
}

func runEPPEmptySubset503(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	// Chat and completions; each on its own stream. A control request without a hint first shows
	// the 503 comes from the hint, not from a broken EPP.
	control := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
	mustRoute(t, s, exchange(t, s, c, control), control)
	for i := 0; i < 4; i++ {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), []string{})
		if i%2 == 1 {
			body := completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil)
			req = extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", pathCompletions, authority, body, nil), Body: body, SubsetHint: []string{}}
		}
		mustRefuse(t, s, exchange(t, s, c, req), req, http.StatusServiceUnavailable)
	}
}

// mustRefuse fails the test unless the EPP answered with an ImmediateResponse of status want.
func mustRefuse(t harness.TestingT, s *harness.Suite, d *extprocclient.Decision, req extprocclient.Request, want int) {
	t.Helper()
	if d.Immediate == nil {
		t.Fatalf("%s: want ImmediateResponse %d, EPP routed to %q (header %q, metadata %q) (seed %d)",
			describe(req), want, d.Pick(), d.PickHeader, d.PickMetadata, s.Seed)
	}
	if d.Immediate.Status != want {
		t.Fatalf("%s: want ImmediateResponse %d, got %d: %s", describe(req), want, d.Immediate.Status, strings.TrimSpace(string(d.Immediate.Body)))
	}
}
