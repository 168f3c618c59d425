package tests

import (
	"context"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPResponseStreamedPerChunk",
		Description: "In streaming mode the EPP MUST pass a streamed (SSE) response on as it arrives: each response body chunk " +
			"the data plane sends is answered, with its events, before the data plane sends the next one.",
		Level:         conformance.LevelMUST,
		Profile:       conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model", "no model rewrite applies to the pool's base model"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol) as of GIE v1.6.2: \"The EPP MUST support streaming " +
			"mode for inference requests and responses. Streaming mode enables full-duplex communication ... allowing real-time " +
			"token-by-token response delivery\" (GIE PR #2514, GIE v1.6.0). A reading: an EPP that holds a streamed response back " +
			"until it ends delivers no token in real time; each chunk has the request timeout to come back.",
		Run: runEPPResponseStreamedPerChunk,
	})
}

func runEPPResponseStreamedPerChunk(t harness.TestingT, s *harness.Suite) {
	requireEndpoints(t, s, 1)
	c := s.ExtProc(t)
	r := s.Rand(t)
	for round := 0; round < 3; round++ {
		st := openStream(t, s, c)
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		mustRoute(t, s, exchangeOn(t, s, st, req), req)

		// One SSE event per chunk, as a model server streams tokens.
		body := streamedResponseBody(s.ModelName, true, 6)
		events := sseData(body)
		chunks := splitEvents(body)
		if err := st.SendResponseHeaders([]extprocclient.Header{{Key: ":status", Value: "200"},
			{Key: "content-type", Value: "text/event-stream"}}, false, extprocclient.Metadata{}); err != nil {
			t.Fatalf("send the response headers: %v", err)
		}
		rr := &extprocclient.ResponseResult{}
		gotHeaders, ended := false, false
		for i, chunk := range chunks {
			last := i == len(chunks)-1
			if err := st.SendResponseBody(chunk, last, extprocclient.Metadata{}); err != nil {
				t.Fatalf("send response chunk %d of %d: %v", i+1, len(chunks), err)
			}
			// Before the next chunk goes out, the client must have every event sent so far.
			ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
			for len(sseData(rr.Body)) < i+1 && !ended {
				msg, err := st.Recv(ctx)
				if err != nil {
					cancel()
					t.Fatalf("response chunk %d of %d (event %d) was sent; within %v the EPP passed on %d of the %d events sent so far "+
						"(%d streamed responses): %v", i+1, len(chunks), i+1, s.Timeouts.Request.D(), len(sseData(rr.Body)), i+1, rr.BodyChunks, err)
				}
				done, err := rr.Add(msg, &gotHeaders, false)
				if err != nil {
					cancel()
					t.Fatalf("response chunk %d of %d: %v", i+1, len(chunks), err)
				}
				if rr.Immediate != nil {
					cancel()
					t.Fatalf("EPP answered response chunk %d with ImmediateResponse %d: %s", i+1, rr.Immediate.Status, rr.Immediate.Body)
				}
				ended = ended || done
			}
			cancel()
			if ended && !last {
				t.Fatalf("the EPP ended the streamed response (end_of_stream) after chunk %d of %d", i+1, len(chunks))
			}
		}
		if got := sseData(rr.Body); len(got) != len(events) {
			t.Fatalf("%d events sent, %d passed on", len(events), len(got))
		}
		if err := sameSSE(body, rr.Body); err != nil {
			t.Fatalf("the events the client gets are not the events sent: %v", err)
		}
	}
}

// splitEvents cuts an SSE body after each blank line: one chunk per event.
func splitEvents(body []byte) [][]byte {
	var out [][]byte
	start := 0
	for i := 0; i+1 < len(body); i++ {
		if body[i] == '\n' && body[i+1] == '\n' {
			out = append(out, body[start:i+2])
			start = i + 2
			i++
		}
	}
	if start < len(body) {
		out = append(out, body[start:])
	}
	return out
}
