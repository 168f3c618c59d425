package extproc_test

import (
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestProtocolViolationsEndTheStream: an ext_proc message the protocol does not allow ends the
// stream with InvalidArgument and a precise message (the gateway is not left waiting for its
// message timeout), and the server keeps serving other streams.
func TestProtocolViolationsEndTheStream(t *testing.T) {
	f := newFixture(t)
	bodyChunk := func(s *stream, b string, eos bool) {
		s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}})
	}
	for _, tc := range []struct {
		name    string
		script  func(s *stream)
		wantMsg string
	}{
		{"body before headers", func(s *stream) { bodyChunk(s, `{"model":"m"}`, true) }, "request_body before request_headers"},
		{"empty ProcessingRequest", func(s *stream) { s.send(&extprocv3.ProcessingRequest{}) }, "ProcessingRequest without a request"},
		{"body chunk after end_of_stream", func(s *stream) {
			s.headers(reqHeaders(completionsPath), false, nil)
			s.body(completionBody("m", "x"), 100)
			s.readRouting(true)
			bodyChunk(s, "more", false)
		}, "request_body after the request body ended"},
		{"body after headers with end_of_stream", func(s *stream) {
			h := reqHeaders("/v1/models")
			h[":method"] = "GET"
			s.headers(h, true, nil)
			s.readRouting(false)
			bodyChunk(s, "x", true)
		}, "request_body after request_headers with end_of_stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := f.open()
			s.t = t
			tc.script(s)
			_, err := s.s.Recv()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
				t.Fatalf("stream ended with %v, want InvalidArgument containing %q", err, tc.wantMsg)
			}
			// The server still serves a well-formed request on a new stream.
			ok := f.open()
			ok.t = t
			ok.headers(reqHeaders(completionsPath), false, nil)
			ok.body(completionBody("m", "x"), 100)
			if got := ok.readRouting(true); got.immediate != nil || got.metadataDst == "" {
				t.Fatalf("request after a protocol violation on another stream: %+v", got)
			}
			ok.closeAndDrain()
			if n := f.rt.PluginState().Len(); n != 0 {
				t.Fatalf("plugin state holds %d requests after the streams ended", n)
			}
		})
	}
}
