package interceptor

import (
	"context"
	"testing"
	"time"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
	"github.com/eppkit/eppkit/selfcheck/mutant"
)

// protocolCases are TestEachMutantBreaksItsRule's cases for the mutants of rules_protocol.go.
var protocolCases = map[mutant.Name]func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server){
	mutant.StreamedBodyDropped: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
		d := exchange(t, st, request("a body", nil, nil))
		if d.Pick() == "" || d.BodyChunks == 0 || len(d.Body) != 0 {
			t.Errorf("request phase: pick %q, %d body chunks, body %q; want a pick and empty streamed chunks", d.Pick(), d.BodyChunks, d.Body)
		}
		rr := respond(t, st, d.Pick(), "data: {}\n\n", "data: [DONE]\n\n")
		if rr.BodyChunks != 2 || len(rr.Body) != 0 {
			t.Errorf("response: %d chunks, body %q; want two empty chunks", rr.BodyChunks, rr.Body)
		}
	},
	mutant.ResponseHeldToEnd: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
		d := exchange(t, st, request("a", nil, nil))
		if err := st.SendResponseHeaders([]extprocclient.Header{{Key: ":status", Value: "200"}}, false, extprocclient.Metadata{Served: d.Pick()}); err != nil {
			t.Fatal(err)
		}
		if err := st.SendResponseBody([]byte("data: {}\n\n"), false, extprocclient.Metadata{}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if msg, err := st.Recv(ctx); err != nil || msg.GetResponseHeaders() == nil {
			t.Fatalf("first answer %v, %v; want the response_headers response", msg, err)
		}
		if msg, err := st.RecvWithin(ctx, 300*time.Millisecond); err == nil {
			t.Fatalf("the first chunk's answer came before the response ended: %v", msg)
		}
		if err := st.SendResponseBody([]byte("data: [DONE]\n\n"), true, extprocclient.Metadata{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if msg, err := st.Recv(ctx); err != nil || msg.GetResponseBody() == nil {
				t.Fatalf("answer %d after the end: %v, %v; want both chunks' answers", i, msg, err)
			}
		}
	},
	mutant.HintFirstEntryOnly: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
		exchange(t, st, request("a", []string{pickB, pickA}, nil))
		if hint, ok := extproctest.SubsetHint(up.Seen()[0].RequestMetadata); !ok || len(hint) != 1 || hint[0] != pickB {
			t.Errorf("the EPP saw the hint %v, want [%s]", hint, pickB)
		}
	},
	mutant.HintTrustedOverReadiness: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
		// The scripted EPP refuses a hint whose first entry is 10.9.9.9:8000 with 503.
		d := exchange(t, st, request("the body", []string{"10.9.9.9:8000"}, nil))
		if d.Immediate != nil || d.PickHeader != "10.9.9.9:8000" || d.PickMetadata != "10.9.9.9:8000" || string(d.Body) != "the body" {
			t.Errorf("refusal became %+v (pick %q/%q, body %q), want a pick of the hint with the body", d.Immediate, d.PickHeader, d.PickMetadata, d.Body)
		}
		if d := exchange(t, st, request("bad", nil, nil)); d.Immediate == nil || d.Immediate.Status != 400 {
			t.Errorf("a 400 without a hint became %+v", d.Immediate)
		}
	},
	mutant.HintBeyondPool: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
		if d := exchange(t, st, request("a", []string{"10.1.1.1:9000", pickA}, nil)); d.PickHeader != "10.1.1.1:9000" || d.PickMetadata != "10.1.1.1:9000" {
			t.Errorf("pick %q/%q, want the hint's first entry", d.PickHeader, d.PickMetadata)
		}
		if d := exchange(t, st, request("a", nil, nil)); d.Pick() != pickB {
			t.Errorf("without a hint the pick is %q, want the EPP's %s", d.Pick(), pickB)
		}
	},
}

// respond runs the response phases with the given body chunks.
func respond(t *testing.T, st *extprocclient.Stream, served string, chunks ...string) *extprocclient.ResponseResult {
	t.Helper()
	var cs [][]byte
	for _, c := range chunks {
		cs = append(cs, []byte(c))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	rr, err := st.Respond(ctx, extprocclient.Response{Headers: []extprocclient.Header{{Key: ":status", Value: "200"}}, Chunks: cs, Served: served})
	if err != nil {
		t.Fatal(err)
	}
	return rr
}
