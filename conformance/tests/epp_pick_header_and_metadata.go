package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// pickFormatTrials is how many requests EPPPickHeaderAndMetadata sends: chat and completions
// alternately, each with its own prompt, so that an EPP whose answer depends on the request is
// seen more than once.
const pickFormatTrials = 12

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPPickHeaderAndMetadata",
		Description: "For every routed request the EPP MUST return the pick as the header x-gateway-destination-endpoint " +
			"and/or the dynamic metadata envoy.lb/x-gateway-destination-endpoint, a comma list of ip:port, " +
			"and MUST NOT set two different values.",
		Level:         conformance.LevelMUST,
		Profile:       conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model"},
		Source:        "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol), Destination Endpoint; SPEC §5.1",
		Run:           runEPPPickHeaderAndMetadata,
	})
}

func runEPPPickHeaderAndMetadata(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	both, headerOnly, metadataOnly := 0, 0, 0
	for i := 0; i < pickFormatTrials; i++ {
		prompt := uniquePrompt(s, t, r, 12)
		req := chatRequest(s, prompt, nil)
		if i%2 == 1 {
			body := completionBody(s.ModelName, prompt, nil)
			req = extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", pathCompletions, authority, body, nil), Body: body}
		}
		d := exchange(t, s, c, req)
		mustRoute(t, s, d, req) // present, equal when both, ip:port list inside the pool
		switch {
		case d.PickHeader != "" && d.PickMetadata != "":
			both++
		case d.PickHeader != "":
			headerOnly++
		default:
			metadataOnly++
		}
	}
	t.Logf("%d requests: pick in header and metadata %d, header only %d, metadata only %d", pickFormatTrials, both, headerOnly, metadataOnly)
}
