package tests

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// Sizes of the request EPPBodyStreamedBack sends: three chunks of 4 KiB (the last shorter), so
// an EPP that answers only the last chunk, or only the headers, is seen.
const (
	streamedBodyChunk = 4096
	streamedBodyBytes = 2*streamedBodyChunk + 1000
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPBodyStreamedBack",
		Description: "In FULL_DUPLEX_STREAMED mode the EPP MUST answer the request body and the response body as streams: " +
			"request_body chunks with streamed_response body mutations up to one with end_of_stream, whether or not it " +
			"changed the body, and likewise the response_body chunks; an EPP that answers only the headers (or only a changed " +
			"body, as in BUFFERED mode) stalls every request with a body.",
		Level:         conformance.LevelMUST,
		Profile:       conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol): \"The EPP MUST support streaming mode for " +
			"inference requests and responses\" (GIE #2514, v1.6.0); Envoy ext_proc FULL_DUPLEX_STREAMED " +
			"(api/envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto: the server sends back streamed_response " +
			"body mutations); SPEC §5.1",
		Run: runEPPBodyStreamedBack,
	})
}

func runEPPBodyStreamedBack(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	var prompt strings.Builder
	prompt.WriteString(uniquePrompt(s, t, r, 0))
	for prompt.Len() < streamedBodyBytes-100 {
		prompt.WriteString(" " + vocabulary[r.IntN(len(vocabulary))])
	}
	req := chatRequest(s, prompt.String(), nil)
	req.ChunkSize = streamedBodyChunk
	chunks := (len(req.Body) + streamedBodyChunk - 1) / streamedBodyChunk
	st := openStream(t, s, c)
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	d, err := st.Exchange(ctx, req)
	if err != nil {
		t.Fatalf("request body of %d bytes sent in %d request_body chunks (%s): %v", len(req.Body), chunks, describe(req), err)
	}
	if d.Immediate != nil {
		t.Fatalf("EPP refused a valid request (%s) with ImmediateResponse %d: %s", describe(req), d.Immediate.Status, strings.TrimSpace(string(d.Immediate.Body)))
	}
	if len(d.Body) == 0 {
		t.Fatalf("the EPP answered the %d request_body chunks with %d streamed responses that carry no data (%s): the data "+
			"plane forwards what the EPP streams back, so the request would reach the model server without its body", chunks, d.BodyChunks, describe(req))
	}
	t.Logf("request: %d chunks sent, %d streamed body responses, %d bytes back", chunks, d.BodyChunks, len(d.Body))

	// The response phases: an SSE body in three chunks.
	body := fmt.Sprintf(servedSSEBody, s.ModelName, s.ModelName)
	third := len(body) / 3
	resp := extprocclient.Response{
		Headers: []extprocclient.Header{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "text/event-stream"}},
		Chunks:  [][]byte{[]byte(body[:third]), []byte(body[third : 2*third]), []byte(body[2*third:])},
	}
	if pick := d.Pick(); pick != "" {
		resp.Served = splitPick(pick)[0]
	}
	rctx, rcancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer rcancel()
	rr, err := st.Respond(rctx, resp)
	if err != nil {
		t.Fatalf("response body of %d bytes sent in %d response_body chunks: %v", len(body), len(resp.Chunks), err)
	}
	if rr.Immediate != nil {
		t.Fatalf("EPP answered the response phases with ImmediateResponse %d: %s", rr.Immediate.Status, rr.Immediate.Body)
	}
	if len(rr.Body) == 0 {
		t.Fatalf("the EPP answered the %d response_body chunks with %d streamed responses that carry no data: the client "+
			"would get the response without its body", len(resp.Chunks), rr.BodyChunks)
	}
	t.Logf("response: %d chunks sent, %d streamed body responses, %s bytes back", len(resp.Chunks), rr.BodyChunks, strconv.Itoa(len(rr.Body)))
}
