package tests

import (
	"context"
	"fmt"
	"net/http"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:   "StreamSurvivesRefusal",
		FormerNames: []string{"ReferenceStreamSurvivesRefusal"}, // in the Reference profile until issue 32
		Description: "After refusing a request with an ImmediateResponse, the EPP MUST keep the ext_proc stream open and route " +
			"the next request sent on the same stream.",
		Level:         conformance.LevelEppkit,
		Profile:       conformance.ProfileEPPProduction,
		Features:      []conformance.Feature{conformance.FeatureStreamSurvivesRefusal, conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP parses OpenAI bodies (a malformed body is refused with 400)"},
		// Upstream v1.5.0 ends the stream after an ImmediateResponse (pkg/epp/handlers/server.go
		// returns from Process once the error response is sent), which Envoy tolerates because it
		// opens one stream per HTTP request; a stream that outlives a refusal is eppkit's.
		Source: "SPEC §5.2 / §5.3 (\"A refused request never breaks the stream or the process\"); eppkit reference/extproc",
		Run:    runStreamSurvivesRefusal,
	})
}

func runStreamSurvivesRefusal(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	st := openStream(t, s, c)
	for _, bc := range badRequestCases(s.ModelName) {
		body := []byte(bc.body)
		bad := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", bc.path, authority, body, nil), Body: body}
		d := exchangeOn(t, s, st, bad)
		if d.Immediate == nil || d.Immediate.Status != http.StatusBadRequest {
			t.Fatalf("%s: want ImmediateResponse 400 (got pick %q, immediate %+v)", bc.name, d.Pick(), d.Immediate)
		}
		ok := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		addrs := mustRoute(t, s, exchangeOn(t, s, st, ok), ok)
		// Finish the routed request (response phases) before the next one, as a gateway would.
		resp := fmt.Sprintf(servedJSONBody, s.ModelName)
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		rr, err := st.Respond(ctx, extprocclient.Response{
			Headers: []extprocclient.Header{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "application/json"}},
			Chunks:  [][]byte{[]byte(resp)}, Served: addrs[0]})
		cancel()
		if err != nil || rr.Immediate != nil {
			t.Fatalf("%s: response phases of the routed request: err %v, immediate %+v", bc.name, err, rr.Immediate)
		}
	}
	t.Logf("%d refusals and %d routed requests on one stream", len(badRequestCases(s.ModelName)), len(badRequestCases(s.ModelName)))
}
