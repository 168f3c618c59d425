package tests

import (
	"net/http"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// malformedSLOCases are SLO headers whose value is not a latency in milliseconds (a finite
// number >= 0; SPEC §4.1, eppkit reference/plugins/latency ParseSLO).
var malformedSLOCases = []struct{ header, value string }{
	{"x-slo-ttft-ms", "fast"},
	{"x-slo-tpot-ms", "-3"},
	{"x-slo-ttft-ms", "NaN"},
}

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:   "MalformedSLOHeader400",
		FormerNames: []string{"ReferenceMalformedSLOHeader400"}, // in the Reference profile until issue 32
		Description: "A request whose x-slo-ttft-ms or x-slo-tpot-ms is not a finite number >= 0 MUST be refused with an " +
			"ImmediateResponse 400 whose body names the header, and the EPP MUST keep routing valid requests.",
		Level:         conformance.LevelEppkit,
		Profile:       conformance.ProfileEPPProduction,
		Features:      []conformance.Feature{conformance.FeatureSLOHeaderValidation},
		Preconditions: []string{"the EPP runs predicted-latency plugins that read the SLO headers (reference: manifests/epp-configs/conformance.yaml)"},
		// Upstream v1.5.0 parses the SLO headers leniently and treats an unparsable value as 0
		// (no SLO); refusing it is eppkit's.
		Source: "SPEC §4.1 (eppkit: upstream treated it as 0); eppkit reference/plugins/latency ParseSLO",
		Run:    runMalformedSLOHeader400,
	})
}

func runMalformedSLOHeader400(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	for _, tc := range malformedSLOCases {
		body := chatBody(s.ModelName, uniquePrompt(s, t, r, 12))
		bad := extprocclient.Request{
			Headers: extprocclient.RequestHeaders("POST", pathChat, authority, body, map[string]string{tc.header: tc.value}),
			Body:    body,
		}
		d := exchange(t, s, c, bad)
		if d.Immediate == nil || d.Immediate.Status != http.StatusBadRequest {
			t.Fatalf("%s: %q: want ImmediateResponse 400 (got pick %q, immediate %+v)", tc.header, tc.value, d.Pick(), d.Immediate)
		}
		if !strings.Contains(string(d.Immediate.Body), tc.header) {
			t.Fatalf("%s: %q: the 400 body does not name the header: %s", tc.header, tc.value, d.Immediate.Body)
		}
		ok := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		mustRoute(t, s, exchange(t, s, c, ok), ok)
	}
	t.Logf("%d malformed SLO headers refused with 400, each followed by a routed request", len(malformedSLOCases))
}
