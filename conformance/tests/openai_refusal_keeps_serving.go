package tests

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIRefusalKeepsServing",
		Description: "After refusing a request with an ImmediateResponse 400 the EPP MUST end that ext_proc stream cleanly (gRPC status OK) " +
			"or keep serving it, and MUST keep serving every other stream, including streams opened before the refusal.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP parses OpenAI bodies (a malformed body is refused with 400)"},
		// SPEC §5.2/§5.3 ask that the same stream keep serving; upstream v1.5.0 ends the stream
		// with status OK after the ImmediateResponse (pkg/epp/handlers/server.go), which Envoy
		// tolerates since it opens one stream per HTTP request. Both pass here; a stream that
		// outlives a refusal is tested in the Reference profile (StreamSurvivesRefusal).
		Source: "llm-d-router v0.10.0 pkg/epp/handlers/server.go Process: after an ImmediateResponse the stream " +
			"returns nil (gRPC OK), other streams are untouched; same in GIE v1.5.0. SPEC §5.2, §5.3.",
		Run: runOpenAIRefusalKeepsServing,
	})
}

func runOpenAIRefusalKeepsServing(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	for _, bc := range badRequestCases(s.ModelName) {
		// A stream opened before the refusal, idle while it happens.
		before := openStream(t, s, c)
		bad := openStream(t, s, c)
		body := []byte(bc.body)
		req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", bc.path, authority, body, nil), Body: body}
		d := exchangeOn(t, s, bad, req)
		if d.Immediate == nil || d.Immediate.Status != http.StatusBadRequest {
			t.Fatalf("%s: want ImmediateResponse 400 (got pick %q, immediate %+v)", bc.name, d.Pick(), d.Immediate)
		}
		// The refused stream ends cleanly: after the gateway half-closes it, the EPP's side ends
		// with io.EOF (status OK), whether it had ended the stream itself or kept it open.
		if err := bad.CloseSend(); err != nil {
			t.Fatalf("%s: half-close the refused stream: %v", bc.name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		msg, err := bad.Recv(ctx)
		cancel()
		switch {
		case err == nil:
			t.Fatalf("%s: after the refusal and the half-close, the EPP sent an unexpected %T", bc.name, msg.GetResponse())
		case !errors.Is(err, io.EOF):
			t.Fatalf("%s: after the refusal the stream ended with an error, not cleanly: %v", bc.name, err)
		}
		// The stream opened before the refusal still routes, and so does a new one.
		ok := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		mustRoute(t, s, exchangeOn(t, s, before, ok), ok)
		ok = chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		mustRoute(t, s, exchange(t, s, c, ok), ok)
		t.Logf("%s: 400, the stream ended cleanly, an earlier stream and a new stream were routed", bc.name)
	}
}
