package tests

import (
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// pickTimingBodyBytes is the size of the long request EPPPickBeforeRouting sends: above two
// 62,000-byte chunks, so an EPP that streams the body back in chunks answers with several body
// responses, and a pick on a later one is caught.
const pickTimingBodyBytes = 150_000

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPPickBeforeRouting",
		Description: "The EPP MUST deliver its pick by the time Envoy's router chooses the upstream host: as the " +
			"request_headers response's header mutation, or as dynamic metadata on that response or, when the whole body " +
			"was sent before it answered, on the first streamed body response; a pick set on a later body response, or as " +
			"a header on any body response, is never routed on.",
		Level:         conformance.LevelMUST,
		Profile:       conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model", "bodies in FULL_DUPLEX_STREAMED mode"},
		Source: "GIE proposal 004 (Destination Endpoint); Envoy source/extensions/filters/http/ext_proc: " +
			"processor_state.cc handleHeadersResponse (headers continue at the headers response) and " +
			"handleDuplexStreamedBodyResponse (no header mutation on body responses), ext_proc.cc onReceiveMessage " +
			"(metadata set before each message is handled), source/common/http/filter_manager.cc " +
			"injectDecodedDataToFilterChain (the first injected body chunk continues the headers); SPEC §5.1",
		Run: runEPPPickBeforeRouting,
	})
}

func runEPPPickBeforeRouting(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	var long strings.Builder
	long.WriteString(uniquePrompt(s, t, r, 0))
	for long.Len() < pickTimingBodyBytes {
		long.WriteString(" " + vocabulary[r.IntN(len(vocabulary))])
	}
	short := uniquePrompt(s, t, r, 12)
	for _, req := range []extprocclient.Request{chatRequest(s, short, nil), chatRequest(s, long.String(), nil)} {
		d := exchange(t, s, c, req)
		mustRoute(t, s, d, req)
		rt, err := d.Routing(extprocclient.SemanticsEnvoyExtProc)
		if err != nil {
			t.Fatalf("Envoy would reject the EPP's request_headers header mutation (%s): %v", describe(req), err)
		}
		bodyResponses := max(len(d.Responses)-1, 0)
		if got, want := rt.Pick(), d.Pick(); got != want {
			where := "no request_headers response and no streamed body chunk released the headers"
			if rt.Released {
				where = "it was not set by the request_headers response nor by the dynamic metadata received by the first streamed body chunk"
			}
			t.Fatalf("the EPP's pick %q reaches Envoy's router too late (%s): the router routes on %q; %s "+
				"(%d body responses, %d of them with a header mutation, which Envoy ignores in FULL_DUPLEX_STREAMED mode)",
				want, describe(req), got, where, bodyResponses, d.LateHeaderMutations)
		}
		t.Logf("%s: pick %q in place when the headers are released (message %d of %d)", describe(req), rt.Pick(), d.ReleasedAt+1, len(d.Responses))
	}
}
