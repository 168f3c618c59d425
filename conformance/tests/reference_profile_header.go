package tests

import (
	"context"
	"fmt"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// profileHeader is the response header naming the primary scheduling profile [eppkit].
const profileHeader = "x-eppkit-profile"

// profileHeaderTrials is how many requests of the same kind must all carry the same profile.
const profileHeaderTrials = 8

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "ReferenceProfileHeader",
		Description: "The response-headers mutation of a routed request MUST set x-eppkit-profile to the name of the primary " +
			"scheduling profile that ran: non-empty, and the same for requests of the same kind.",
		Level:   conformance.LevelEppkit,
		Profile: conformance.ProfileReference,
		Preconditions: []string{"requests without SLO headers all run the same primary profile (reference: \"default\" with " +
			"manifests/epp-configs/conformance.yaml or the default config)"},
		// Upstream v1.5.0 sets no such header; it is eppkit's (issue 6 item 5).
		Source: "SPEC §5.4 Observability (x-eppkit-profile), §3 profile handlers; issue 6 item 5; eppkit reference/extproc responseHeaders",
		Run:    runReferenceProfileHeader,
	})
}

func runReferenceProfileHeader(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	st := openStream(t, s, c)
	var first string
	for i := 0; i < profileHeaderTrials; i++ {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		addrs := mustRoute(t, s, exchangeOn(t, s, st, req), req)
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		rr, err := st.Respond(ctx, extprocclient.Response{
			Headers: []extprocclient.Header{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "application/json"}},
			Chunks:  [][]byte{[]byte(fmt.Sprintf(servedJSONBody, s.ModelName))}, Served: addrs[0]})
		cancel()
		if err != nil || rr.Immediate != nil {
			t.Fatalf("request %d/%d: response phases: err %v, immediate %+v", i+1, profileHeaderTrials, err, rr.Immediate)
		}
		got := rr.Headers[profileHeader]
		switch {
		case got == "":
			t.Fatalf("request %d/%d: the response-headers mutation sets no %s (set: %v)", i+1, profileHeaderTrials, profileHeader, rr.Headers)
		case i == 0:
			first = got
		case got != first:
			t.Fatalf("request %d/%d: %s is %q, the first request of the same kind got %q", i+1, profileHeaderTrials, profileHeader, got, first)
		}
	}
	t.Logf("%d routed requests, %s %q on each", profileHeaderTrials, profileHeader, first)
}
