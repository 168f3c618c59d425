package tests

import (
	"net/http"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// malformedControlCases are control headers whose value the reference refuses
// (docs/request-surface.md "Malformed values"): an objective that cannot name an object, an SLO
// under llm-d-router v0.10.0's names that is not a finite number ≥ 0, an empty or undecodable
// session token, and the current name winning over a valid legacy one.
var malformedControlCases = []struct {
	headers map[string]string
	named   string
}{
	{map[string]string{hdrObjective: "Not An Objective!"}, hdrObjective},
	{map[string]string{hdrObjectiveLegacy: "under_score"}, hdrObjectiveLegacy},
	{map[string]string{hdrObjective: "UPPER", hdrObjectiveLegacy: "fine"}, hdrObjective},
	{map[string]string{hdrTTFTSLO: "-5"}, hdrTTFTSLO},
	{map[string]string{hdrTPOTSLO: "soon", hdrTPOTSLOLegacy: "10"}, hdrTPOTSLO},
	{map[string]string{sessionTokenHeader: ""}, sessionTokenHeader},
	{map[string]string{sessionTokenHeader: "%%% not base64 %%%"}, sessionTokenHeader},
}

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "ReferenceMalformedControlHeaders400",
		Description: "A request whose control header is malformed MUST be refused with an ImmediateResponse 400 whose body names the " +
			"header it came in, and the EPP MUST keep routing valid requests: an x-llm-d-inference-objective or " +
			"x-gateway-inference-objective value that is not a DNS-1123 subdomain (no InferenceObjective can be called so), an " +
			"x-llm-d-slo-ttft-ms or x-llm-d-slo-tpot-ms that is not a finite number >= 0, an x-session-token that is empty or not " +
			"standard base64; the current name is judged when both names are sent.",
		Level:   conformance.LevelEppkit,
		Profile: conformance.ProfileReference,
		Preconditions: []string{"the EPP runs plugins that read the SLO headers and a session-affinity filter or scorer " +
			"(reference: manifests/epp-configs/conformance.yaml)"},
		// llm-d-router v0.10.0 refuses none of these: an unknown or odd objective is the default
		// objective (requestcontrol/director.go getInferenceObjective), an unparsable SLO is 0
		// (dataproducer/predictedlatency parseFloatHeader), an empty or undecodable session token
		// is no session (util/sessionaffinity DecodePodName). The 400 is eppkit's (issue 31).
		Source: "docs/request-surface.md; eppkit (llm-d-router v0.10.0 pkg/epp/requestcontrol/director.go getInferenceObjective, " +
			"pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency/plugin.go parseFloatHeader, " +
			"pkg/epp/framework/plugins/scheduling/util/sessionaffinity/header.go DecodePodName ignore such values)",
		Run: runReferenceMalformedControlHeaders400,
	})
}

func runReferenceMalformedControlHeaders400(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	for _, tc := range malformedControlCases {
		body := chatBody(s.ModelName, uniquePrompt(s, t, r, 12))
		bad := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", pathChat, authority, body, tc.headers), Body: body}
		d := exchange(t, s, c, bad)
		if d.Immediate == nil || d.Immediate.Status != http.StatusBadRequest {
			t.Fatalf("%v: want ImmediateResponse 400 naming %s (got pick %q, immediate %+v)", tc.headers, tc.named, d.Pick(), d.Immediate)
		}
		if !strings.Contains(string(d.Immediate.Body), tc.named) {
			t.Fatalf("%v: the 400 body does not name the header %s: %s", tc.headers, tc.named, d.Immediate.Body)
		}
		ok := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		mustRoute(t, s, exchange(t, s, c, ok), ok)
		t.Logf("%v: 400 naming %s; the next request was routed", tc.headers, tc.named)
	}
}
