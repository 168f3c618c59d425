package tests

import (
	"context"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "ReferenceModelNameRestoredAcrossChunks",
		Description: "When a request's model was rewritten, the EPP MUST give the client's model name back in the response body " +
			"however the gateway splits the body into ext_proc chunks: a \"model\" member split across two chunks, in an SSE " +
			"event or a JSON body, is restored like any other, and the rest of the body is returned byte for byte.",
		Level:         conformance.LevelEppkit,
		Profile:       conformance.ProfileReference,
		Preconditions: []string{"the EPP processes response bodies in FULL_DUPLEX_STREAMED mode"},
		// llm-d-router v0.10.0 replaces `"model":"<target>"` within each streamed chunk
		// (pkg/epp/handlers/server.go rewriteModelName, called per chunk in Process), so a
		// member split across chunks reaches the client with the target's name.
		Source: "docs/request-surface.md §3; eppkit (llm-d-router v0.10.0 pkg/epp/handlers/server.go rewriteModelName is per chunk)",
		Run:    runReferenceModelNameRestoredAcrossChunks,
	})
}

// splitAround cuts body into three chunks: before, inside and after the first occurrence of
// needle, the cuts falling inside needle.
func splitAround(body, needle string) [][]byte {
	i := strings.Index(body, needle)
	a, b := i+len(needle)/3, i+2*len(needle)/3
	return [][]byte{[]byte(body[:a]), []byte(body[a:b]), []byte(body[b:])}
}

func runReferenceModelNameRestoredAcrossChunks(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	const target = "eppkit-conformance-rewrite-target-model"
	cases := []struct {
		name, contentType, body string
		stream                  bool
	}{
		{"SSE", "text/event-stream",
			`data: {"id":"c1","object":"text_completion","model":"` + target + `","choices":[{"index":0,"text":"hel"}]}` + "\n\n" +
				`data: {"id":"c1","object":"text_completion","model":"` + target + `","choices":[{"index":0,"text":"lo","finish_reason":"stop"}]}` + "\n\n" +
				"data: [DONE]\n\n", true},
		{"JSON", "application/json",
			`{"id":"c2","object":"text_completion","created":1,"model":"` + target + `","choices":[{"index":0,"text":"hello","finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, false},
	}
	for _, tc := range cases {
		st := openStream(t, s, c)
		body := completionBody(s.ModelName, uniquePrompt(s, t, r, 8), map[string]any{"stream": tc.stream})
		req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", pathCompletions, authority, body,
			map[string]string{hdrRewrite: target}), Body: body}
		d := exchangeOn(t, s, st, req)
		if d.Immediate != nil {
			t.Fatalf("%s: the request was refused with %d: %s", tc.name, d.Immediate.Status, d.Immediate.Body)
		}
		chunks := splitAround(tc.body, `"model":"`+target+`"`)
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		rr, err := st.Respond(ctx, extprocclient.Response{Served: d.Pick(), Chunks: chunks, Headers: []extprocclient.Header{
			{Key: ":status", Value: "200"}, {Key: "content-type", Value: tc.contentType}}})
		cancel()
		if err != nil {
			t.Fatalf("%s: response phases: %v", tc.name, err)
		}
		if rr.Immediate != nil {
			t.Fatalf("%s: the EPP answered the response with ImmediateResponse %d", tc.name, rr.Immediate.Status)
		}
		want := strings.ReplaceAll(tc.body, `"model":"`+target+`"`, `"model":"`+s.ModelName+`"`)
		if string(rr.Body) != want {
			t.Fatalf("%s: the body sent in %d chunks (cut inside \"model\":%q) came back as\n%s\nwant\n%s", tc.name, len(chunks), target, rr.Body, want)
		}
		t.Logf("%s: %d chunks cut inside the model member, restored to %q in %d body responses", tc.name, len(chunks), s.ModelName, rr.BodyChunks)
	}
}
