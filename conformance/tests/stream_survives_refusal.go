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
		Features:      []conformance.Feature{conformance.FeatureStreamSurvivesRefusal},
		Preconditions: []string{"the EPP refuses a request whose subset hint is present but empty with ImmediateResponse 503 (EPPEmptySubset503's rule)"},
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
	// Refusals every EPP makes (an empty subset hint, 503), and a malformed body, which an EPP
	// that parses bodies refuses with 400 (checked only when it does: the protocol does not ask
	// an EPP to parse bodies).
	refusals := []struct {
		name, path string
		malformed  bool
	}{{"chat with an empty subset hint", pathChat, false}, {"completion with an empty subset hint", pathCompletions, false},
		{"malformed JSON body", pathChat, true}}
	checked := 0
	for _, rc := range refusals {
		prompt := uniquePrompt(s, t, r, 12)
		body := chatBody(s.ModelName, prompt)
		if rc.path == pathCompletions {
			body = completionBody(s.ModelName, prompt, nil)
		}
		bad := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", rc.path, authority, body, nil), Body: body, SubsetHint: []string{}}
		want := http.StatusServiceUnavailable
		if rc.malformed {
			body = body[:len(body)-3]
			bad = extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", rc.path, authority, body, nil), Body: body}
			want = http.StatusBadRequest
		}
		d := exchangeOn(t, s, st, bad)
		if rc.malformed && d.Immediate == nil {
			t.Logf("%s: the EPP routed it (it does not parse bodies): nothing to check", rc.name)
			continue
		}
		if d.Immediate == nil || d.Immediate.Status != want {
			t.Fatalf("%s: want ImmediateResponse %d (got pick %q, immediate %+v)", rc.name, want, d.Pick(), d.Immediate)
		}
		checked++
		ok := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		d, err := tryExchangeOn(s, st, ok)
		if err != nil {
			t.Fatalf("%s: after the refusal (%d), the next request on the same ext_proc stream got no answer: %v (the EPP must keep "+
				"the stream open after an ImmediateResponse and route what comes next)", rc.name, want, err)
		}
		addrs := mustRoute(t, s, d, ok)
		// Finish the routed request (response phases) before the next one, as a gateway would.
		resp := fmt.Sprintf(servedJSONBody, s.ModelName)
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		rr, err := st.Respond(ctx, extprocclient.Response{
			Headers: []extprocclient.Header{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "application/json"}},
			Chunks:  [][]byte{[]byte(resp)}, Served: addrs[0]})
		cancel()
		if err != nil || rr.Immediate != nil {
			t.Fatalf("%s: response phases of the routed request: err %v, immediate %+v", rc.name, err, rr.Immediate)
		}
	}
	t.Logf("%d refusals and %d routed requests on one stream", checked, checked)
}

// tryExchangeOn is exchangeOn that returns the error.
func tryExchangeOn(s *harness.Suite, st *extprocclient.Stream, req extprocclient.Request) (*extprocclient.Decision, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	return st.Exchange(ctx, req)
}
