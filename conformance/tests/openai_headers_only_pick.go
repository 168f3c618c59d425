package tests

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIHeadersOnlyPick",
		Description: "For a request without a body (request_headers with end_of_stream) the EPP MUST answer at the headers phase " +
			"with a pick of a pool endpoint.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP routes requests without a body (e.g. GET /v1/models)"},
		Source: "llm-d-router v0.10.0 pkg/epp/handlers/request.go HandleRequestHeaders/fallbackToRandomEndpoint: a " +
			"request whose headers end the stream gets a random datastore endpoint " +
			"(pkg/epp/requestcontrol/director.go GetRandomEndpoint) at the headers phase; same in GIE v1.5.0 " +
			"pkg/epp/handlers/request.go HandleRequestHeaders. SPEC §5.2.",
		Run: runOpenAIHeadersOnlyPick,
	})
}

func runOpenAIHeadersOnlyPick(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	for _, hr := range []struct{ method, path string }{{"GET", "/v1/models"}, {"POST", pathCompletions}} {
		req := extprocclient.Request{Headers: extprocclient.RequestHeaders(hr.method, hr.path, authority, nil, nil)}
		d := exchange(t, s, c, req)
		addrs := mustRoute(t, s, d, req)
		if d.Body != nil {
			t.Fatalf("%s: the EPP returned a request body for a request without one", describe(req))
		}
		t.Logf("%s %s without a body: picked %v", hr.method, hr.path, addrs)
	}
}
