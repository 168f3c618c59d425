package extproc_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/eppkit/eppkit/reference/extproc"
)

// waitBuffered waits until the server holds want buffered body bytes.
func waitBuffered(t *testing.T, srv *extproc.Server, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for srv.BufferedBodyBytes() != want {
		if time.Now().After(deadline) {
			t.Fatalf("buffered body bytes %d, want %d", srv.BufferedBodyBytes(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// partialBody sends b as one request_body chunk without end_of_stream.
func (s *stream) partialBody(b []byte) {
	s.t.Helper()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b}}})
}

// TestBufferedBodyBound: with a bound of 1,000 bytes over every stream, a request whose body
// would pass it while another stream holds 600 bytes is refused with 429 and a message naming
// the bound, the stream holding the bytes is still routed, the refused stream's next request is
// routed once the bytes are sent back, and a body abandoned mid-way is released.
func TestBufferedBodyBound(t *testing.T) {
	const bound = 1000
	f := newFixture(t, func(s *extproc.Server) { s.SetMaxBufferedBodyBytes(bound) })
	body := completionBody("m", strings.Repeat("a", 700)) // ~750 bytes: one fits, two do not
	if len(body) <= bound-600 || len(body) > bound {
		t.Fatalf("test body is %d bytes; want between %d and %d", len(body), bound-600, bound)
	}

	holder := f.open()
	holder.headers(reqHeaders(completionsPath, "x-request-id", "holder"), false, nil)
	holder.partialBody(body[:600])
	waitBuffered(t, f.srv, 600)

	other := f.open()
	other.headers(reqHeaders(completionsPath, "x-request-id", "other"), false, nil)
	other.body(body, 100)
	got := other.readRouting(true)
	if got.immediate == nil || got.immediate.GetStatus().GetCode() != 429 {
		t.Fatalf("over the bound: want ImmediateResponse 429, got %+v", got)
	}
	var eb struct {
		Error struct {
			Message, Type string
			Code          int
		} `json:"error"`
	}
	if err := json.Unmarshal(got.immediate.GetBody(), &eb); err != nil {
		t.Fatalf("refusal body %q: %v", got.immediate.GetBody(), err)
	}
	if !strings.Contains(eb.Error.Message, "1000 bytes") || !strings.Contains(eb.Error.Message, "--max-buffered-body-bytes") ||
		eb.Error.Type != "ResourceExhausted" || eb.Error.Code != 429 {
		t.Fatalf("refusal %+v: want ResourceExhausted 429 naming the bound of 1000 bytes and --max-buffered-body-bytes", eb.Error)
	}
	waitBuffered(t, f.srv, 600) // the refused request's bytes were released; the holder's stay

	holder.body(body[600:], 1000)
	if r := holder.readRouting(true); r.immediate != nil || r.metadataDst == "" {
		t.Fatalf("the request holding 600 bytes: want routed, got %+v", r)
	}
	waitBuffered(t, f.srv, 0)

	other.headers(reqHeaders(completionsPath, "x-request-id", "other-again"), false, nil)
	other.body(body, 100)
	if r := other.readRouting(true); r.immediate != nil || r.metadataDst == "" {
		t.Fatalf("after the bytes were sent back: want routed, got %+v", r)
	}

	// A body longer than the bound itself could never fit: 400 naming the bound, not a 429.
	huge := completionBody("m", strings.Repeat("c", bound))
	other.headers(reqHeaders(completionsPath, "x-request-id", "huge"), false, nil)
	other.body(huge, 300)
	got = other.readRouting(true)
	if got.immediate == nil || got.immediate.GetStatus().GetCode() != 400 ||
		!strings.Contains(string(got.immediate.GetBody()), "longer than the 1000 bytes") || !strings.Contains(string(got.immediate.GetBody()), "--max-buffered-body-bytes") {
		t.Fatalf("a body longer than the bound: want 400 naming the bound and the flag, got %+v", got)
	}
	waitBuffered(t, f.srv, 0)
	// Both refusals are counted with every other outcome.
	if c := f.requestCounts(); c["429"] != 1 || c["400"] != 1 || c["200"] != 2 {
		t.Fatalf("eppkit_epp_requests_total %v, want 429: 1, 400: 1, 200: 2", c)
	}

	abandoned := f.open()
	abandoned.headers(reqHeaders(completionsPath, "x-request-id", "abandoned"), false, nil)
	abandoned.partialBody(body[:500])
	waitBuffered(t, f.srv, 500)
	abandoned.closeAndDrain()
	waitBuffered(t, f.srv, 0)
	holder.closeAndDrain()
	other.closeAndDrain()
}

// TestBufferedBodyDefault: under the default bound a 200 KB body sent back in chunks is
// released (the count returns to 0) once its last chunk has been sent.
func TestBufferedBodyDefault(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	s.headers(reqHeaders(completionsPath), false, nil)
	s.body(completionBody("m", strings.Repeat("b", 200_000)), 62_000)
	if r := s.readRouting(true); r.immediate != nil {
		t.Fatalf("want routed, got %+v", r)
	}
	waitBuffered(t, f.srv, 0)
	s.closeAndDrain()
}
