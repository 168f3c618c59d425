package extproc_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/extproc"
	"github.com/eppkit/eppkit/reference/framework"
)

func completionBody(model, prompt string) []byte {
	b, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 5})
	return b
}

const completionsPath = "/v1/completions"

func reqHeaders(path string, extra ...string) map[string]string {
	h := map[string]string{":method": "POST", ":path": path, "content-type": "application/json", "x-request-id": "req-1"}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

// TestErrorTable checks every row of the SPEC §5.3 error table through a real ext_proc stream:
// the ImmediateResponse status and its JSON body, and that the plugin state was released.
func TestErrorTable(t *testing.T) {
	f := newFixture(t)
	good := completionBody("m", "hello world")
	cases := []struct {
		name     string
		headers  map[string]string
		body     []byte // nil = headers-only
		metadata *corev3.Metadata
		setup    func()
		want     int
		reason   string // x-llm-d-request-dropped-reason: none outside flow control (llm-d-router v0.10.0)
	}{
		{name: "malformed JSON", headers: reqHeaders(completionsPath), body: []byte(`{"model": "m", "prompt": `), want: 400},
		{name: "body is not an object", headers: reqHeaders(completionsPath), body: []byte(`["model"]`), want: 400},
		{name: "missing model", headers: reqHeaders(completionsPath), body: []byte(`{"prompt":"hi"}`), want: 400},
		{name: "model not a string", headers: reqHeaders(completionsPath), body: []byte(`{"model":3,"prompt":"hi"}`), want: 400},
		{name: "missing prompt", headers: reqHeaders(completionsPath), body: []byte(`{"model":"m"}`), want: 400},
		{name: "empty messages", headers: reqHeaders("/v1/chat/completions"), body: []byte(`{"model":"m","messages":[]}`), want: 400},
		{name: "missing messages", headers: reqHeaders("/v1/chat/completions"), body: []byte(`{"model":"m","prompt":"x"}`), want: 400},
		{name: "ErrBadRequest from a PrepareData plugin", headers: reqHeaders(completionsPath, "x-test-bad-request", "1"), body: good, want: 400},
		{name: "shed: sheddable and saturated", headers: reqHeaders(completionsPath, "x-gateway-inference-objective", "batch"), body: good,
			setup: func() { f.setQueues(10, 10, 10) }, want: 429},
		{name: "admitter refuses a sheddable request", headers: reqHeaders(completionsPath, "x-test-shed", "1", "x-gateway-inference-objective", "batch"), body: good, want: 429},
		{name: "every endpoint filtered out", headers: reqHeaders(completionsPath, "x-test-filter-all", "1"), body: good, want: 429},
		{name: "no candidate endpoints", headers: reqHeaders(completionsPath), body: good, setup: func() { f.src.eps = nil }, want: 503},
		{name: "no endpoints, headers-only", headers: reqHeaders(completionsPath), setup: func() { f.src.eps = nil }, want: 503},
		{name: "empty subset", headers: reqHeaders(completionsPath), body: good, metadata: subsetMetadata(), want: 503},
		{name: "subset matching no endpoint", headers: reqHeaders(completionsPath), body: good, metadata: subsetMetadata("10.9.9.9:8000"), want: 503},
		{name: "anything else inside the EPP", headers: reqHeaders(completionsPath, "x-test-internal", "1"), body: good, want: 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			saved := f.src.Endpoints()
			defer func() { f.src.eps = saved; f.setQueues(0, 5, 5) }()
			if tc.setup != nil {
				tc.setup()
			}
			s := f.open()
			s.headers(tc.headers, tc.body == nil, tc.metadata)
			if tc.body != nil {
				s.body(tc.body, 7)
			}
			got := s.readRouting(tc.body != nil)
			if got.immediate == nil {
				t.Fatalf("want ImmediateResponse %d, got a pick %v", tc.want, got.setHeaders)
			}
			if code := int(got.immediate.GetStatus().GetCode()); code != tc.want {
				t.Fatalf("status %d, want %d (body %s)", code, tc.want, got.immediate.GetBody())
			}
			if got.reason != tc.reason || got.eppkitReason {
				t.Fatalf("%s = %q, want %q (x-eppkit-reason set: %v)", extproc.DroppedReasonHeader, got.reason, tc.reason, got.eppkitReason)
			}
			var eb struct {
				Error struct {
					Message string `json:"message"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(got.immediate.GetBody(), &eb); err != nil || eb.Error.Message == "" || eb.Error.Code != tc.want {
				t.Fatalf("body %q is not {\"error\":{\"message\":...,\"code\":%d}} (%v)", got.immediate.GetBody(), tc.want, err)
			}
			s.closeAndDrain()
			if n := f.rt.PluginState().Len(); n != 0 {
				t.Fatalf("plugin state holds %d requests after a refusal, want 0", n)
			}
		})
	}
	// Control: the same fixture routes a sheddable request when the pool is not saturated and a
	// non-sheddable one when it is.
	for _, queues := range [][3]int{{0, 5, 5}, {10, 10, 10}} {
		f.setQueues(queues[0], queues[1], queues[2])
		objective := "batch"
		if queues[0] == 10 {
			objective = "critical"
		}
		s := f.open()
		s.headers(reqHeaders(completionsPath, "x-gateway-inference-objective", objective), false, nil)
		s.body(good, 1000)
		if got := s.readRouting(true); got.immediate != nil {
			t.Fatalf("queues %v objective %s: refused with %d, want routed", queues, objective, got.immediate.GetStatus().GetCode())
		}
		s.closeAndDrain()
	}
}

func (f *fixture) setQueues(q1, q2, q3 int) {
	f.ms.mu.Lock()
	defer f.ms.mu.Unlock()
	for i, q := range []int{q1, q2, q3} {
		f.ms.m["10.0.0."+strconv.Itoa(i+1)+":8000"].WaitingQueueSize = q
	}
}

// TestChunkedBodyMutation sends a body of more than three chunk limits with a model rewrite:
// every mutated chunk is ≤ 62,000 bytes, Content-Length is set once to the mutated length, and
// the chunks reassemble to the input JSON with the model rewritten.
func TestChunkedBodyMutation(t *testing.T) {
	f := newFixture(t)
	prompt := strings.Repeat("the quick brown fox jumps over the lazy dog ", 5000) // 220,000 bytes
	in := completionBody("base-model", prompt)
	for _, inChunk := range []int{16384, 62000, 100000} {
		s := f.open()
		s.headers(reqHeaders(completionsPath, "x-gateway-model-name-rewrite", "adapter-1"), false, nil)
		s.body(in, inChunk)
		got := s.readRouting(true)
		if got.immediate != nil {
			t.Fatalf("refused: %s", got.immediate.GetBody())
		}
		var all []byte
		for i, c := range got.chunks {
			if len(c) > extproc.BodyChunkLimit {
				t.Fatalf("input chunks %d: chunk %d has %d bytes, limit %d", inChunk, i, len(c), extproc.BodyChunkLimit)
			}
			all = append(all, c...)
		}
		if len(got.chunks) < 4 {
			t.Fatalf("input chunks %d: %d body chunks for %d bytes", inChunk, len(got.chunks), len(all))
		}
		if cl := got.setHeaders["Content-Length"]; len(cl) != 1 || cl[0] != strconv.Itoa(len(all)) {
			t.Fatalf("input chunks %d: Content-Length %v, want once %d", inChunk, cl, len(all))
		}
		var out map[string]any
		if err := json.Unmarshal(all, &out); err != nil {
			t.Fatalf("reassembled body is not JSON: %v", err)
		}
		want := map[string]any{"model": "adapter-1", "prompt": prompt, "max_tokens": float64(5)}
		if diff := cmp.Diff(want, out); diff != "" {
			t.Fatalf("input chunks %d: reassembled body (-want +got):\n%s", inChunk, diff)
		}
		for k := range got.setHeaders {
			if strings.HasPrefix(strings.ToLower(k), "x-gateway-") && k != extproc.DestinationEndpointKey {
				t.Fatalf("header mutation sets input header %s back", k)
			}
		}
		s.closeAndDrain()
	}
}

// TestUnchangedBodyIsForwardedAsIs: without a rewrite the body goes back byte for byte.
func TestUnchangedBodyIsForwardedAsIs(t *testing.T) {
	f := newFixture(t)
	in := []byte(`{"prompt": "hi",   "model": "m", "n": 1.50}`)
	s := f.open()
	s.headers(reqHeaders(completionsPath), false, nil)
	s.body(in, 5)
	got := s.readRouting(true)
	if !bytes.Equal(bytes.Join(got.chunks, nil), in) {
		t.Fatalf("body %q, want %q", bytes.Join(got.chunks, nil), in)
	}
}

// TestPickHeaderMetadataAndResponse checks a whole request: the pick in the header and the
// metadata (equal, the lowest-queue endpoint), x-eppkit-profile on the response, the response
// passed through unchanged, usage from an SSE stream whose [DONE] is split across two chunks,
// the served endpoint from the metadata handed to the plugins, and EndRequest.
func TestPickHeaderMetadataAndResponse(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	s.headers(reqHeaders(completionsPath), false, nil)
	s.body(completionBody("m", "hello"), 4)
	got := s.readRouting(true)
	if got.immediate != nil {
		t.Fatalf("refused: %s", got.immediate.GetBody())
	}
	if hdr := got.setHeaders[extproc.DestinationEndpointKey]; len(hdr) != 1 || hdr[0] != got.metadataDst {
		t.Fatalf("header %v and metadata %q differ", hdr, got.metadataDst)
	}
	if got.metadataDst != "10.0.0.1:8000" {
		t.Fatalf("picked %q, want the queue-0 endpoint 10.0.0.1:8000", got.metadataDst)
	}
	if _, ok := got.setHeaders["x-request-id"]; ok {
		t.Fatal("x-request-id was present but is set again")
	}

	s.respHeaders(map[string]string{":status": "200", "content-type": "text/event-stream"}, servedMetadata("10.0.0.2:8000"))
	rh := s.recv().GetResponseHeaders()
	if rh == nil {
		t.Fatal("want a response_headers response")
	}
	var profile string
	for _, h := range rh.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == extproc.ProfileHeader {
			profile = string(h.GetHeader().GetRawValue())
		}
	}
	if profile != "default" {
		t.Fatalf("%s = %q, want default", extproc.ProfileHeader, profile)
	}
	chunks := [][]byte{
		[]byte("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"comp"),
		[]byte("letion_tokens\":3,\"total_tokens\":10}}\n\ndata: [DO"),
		[]byte("NE]\n\n"),
	}
	for i, c := range chunks {
		s.respBody(c, i == len(chunks)-1)
		br := s.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if br == nil || !bytes.Equal(br.GetBody(), c) || br.GetEndOfStream() != (i == len(chunks)-1) {
			t.Fatalf("chunk %d not passed through unchanged: %v", i, br)
		}
	}
	s.closeAndDrain()
	completes, headers, preReqs := f.hooks.snapshot()
	if preReqs != 1 || len(headers) != 1 || len(completes) != 1 {
		t.Fatalf("hooks ran preRequest %d, header %d, complete %d times, want 1 each", preReqs, len(headers), len(completes))
	}
	c := completes[0]
	if diff := cmp.Diff(&framework.Usage{PromptTokens: ptr(7), CompletionTokens: ptr(3), TotalTokens: ptr(10)}, c.Usage); diff != "" {
		t.Fatalf("usage (-want +got):\n%s", diff)
	}
	if !c.EndOfStream || c.Endpoint == nil || c.Endpoint.Key() != "10.0.0.2:8000" || c.RequestID == "" || c.RequestID == "req-1" {
		t.Fatalf("complete got EndOfStream %v endpoint %v request %q; want true, the served 10.0.0.2:8000, an EPP-internal id (not the x-request-id req-1)",
			c.EndOfStream, c.Endpoint, c.RequestID)
	}
	if headers[0].Endpoint.Name != "pod-10.0.0.2-8000" {
		t.Fatalf("response header hook got endpoint %+v, want the served pod's metadata", headers[0].Endpoint)
	}
	if n := f.rt.PluginState().Len(); n != 0 {
		t.Fatalf("plugin state holds %d requests after completion", n)
	}
}

// TestHeadersOnlyRequest: end_of_stream on the headers gets the pick at the headers phase, no
// Content-Length, and a generated x-request-id set on the request.
func TestHeadersOnlyRequest(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	h := reqHeaders("/v1/models")
	delete(h, "x-request-id")
	h[":method"] = "GET"
	s.headers(h, true, nil)
	got := s.readRouting(false)
	if got.immediate != nil {
		t.Fatalf("refused: %s", got.immediate.GetBody())
	}
	if got.metadataDst != "10.0.0.1:8000" || got.setHeaders[extproc.DestinationEndpointKey][0] != got.metadataDst {
		t.Fatalf("pick header %v metadata %q, want 10.0.0.1:8000 in both", got.setHeaders[extproc.DestinationEndpointKey], got.metadataDst)
	}
	if _, ok := got.setHeaders["Content-Length"]; ok {
		t.Fatal("Content-Length set on a headers-only request")
	}
	if id := got.setHeaders["x-request-id"]; len(id) != 1 || len(id[0]) != 36 {
		t.Fatalf("generated x-request-id %v, want one UUID", id)
	}
	s.closeAndDrain()
	completes, _, _ := f.hooks.snapshot()
	if len(completes) != 1 || completes[0].EndOfStream {
		t.Fatalf("an abandoned request must complete once with EndOfStream false, got %+v", completes)
	}
	if n := f.rt.PluginState().Len(); n != 0 {
		t.Fatalf("plugin state holds %d requests after the stream ended", n)
	}
}

// TestSubsetHint: the pick stays inside the subset, matched by IP with a different port.
func TestSubsetHint(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		subset []string
		want   string
	}{
		{[]string{"10.0.0.3:9999"}, "10.0.0.3:8000"},
		{[]string{"10.0.0.2:1", "10.0.0.3:2"}, "10.0.0.2:8000"}, // both queue 5, the tie breaks either way
		{[]string{"10.0.0.1"}, "10.0.0.1:8000"},
	}
	for _, tc := range cases {
		s := f.open()
		s.headers(reqHeaders(completionsPath), false, subsetMetadata(tc.subset...))
		s.body(completionBody("m", "x"), 100)
		got := s.readRouting(true)
		if got.immediate != nil {
			t.Fatalf("subset %v refused: %s", tc.subset, got.immediate.GetBody())
		}
		ok := got.metadataDst == tc.want
		if len(tc.subset) == 2 {
			ok = got.metadataDst == "10.0.0.2:8000" || got.metadataDst == "10.0.0.3:8000"
		}
		if !ok {
			t.Fatalf("subset %v: picked %q, want %s", tc.subset, got.metadataDst, tc.want)
		}
		s.closeAndDrain()
	}
}

// TestRequestsAfterRefusalOnOneStream: a 400 leaves the stream usable; the next requests on it
// are routed, and a new request_headers after an unfinished request abandons it cleanly.
func TestRequestsAfterRefusalOnOneStream(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	s.headers(reqHeaders(completionsPath), false, nil)
	s.body([]byte(`{not json`), 3)
	if got := s.readRouting(true); got.immediate == nil || got.immediate.GetStatus().GetCode() != 400 {
		t.Fatalf("want 400, got %+v", got)
	}
	for i := range 3 {
		s.headers(reqHeaders("/v1/chat/completions", "x-request-id", "next-"+strconv.Itoa(i)), false, nil)
		s.body([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), 10)
		got := s.readRouting(true)
		if got.immediate != nil || got.metadataDst == "" {
			t.Fatalf("request %d after a 400 on the same stream: %+v", i, got)
		}
	}
	s.closeAndDrain()
	completes, _, preReqs := f.hooks.snapshot()
	if preReqs != 3 || len(completes) != 3 {
		t.Fatalf("preRequest %d, complete %d; want 3 and 3 (each unfinished request abandoned once)", preReqs, len(completes))
	}
	if n := f.rt.PluginState().Len(); n != 0 {
		t.Fatalf("plugin state holds %d requests", n)
	}
}

// TestClientCancel: a client that cancels mid-response still gets ResponseComplete (not
// end-of-stream) and EndRequest.
func TestClientCancel(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	s.headers(reqHeaders(completionsPath), false, nil)
	s.body(completionBody("m", "x"), 100)
	s.readRouting(true)
	s.respHeaders(map[string]string{":status": "200"}, nil)
	s.recv()
	s.respBody([]byte(`{"choices":[`), false)
	s.recv()
	if err := s.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		completes, _, _ := f.hooks.snapshot()
		if len(completes) == 1 && f.rt.PluginState().Len() == 0 {
			if completes[0].EndOfStream {
				t.Fatal("abandoned request completed with EndOfStream true")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the client left: %d completes, plugin state %d", len(completes), f.rt.PluginState().Len())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestJSONResponseUsage: a non-streamed JSON response's usage reaches ResponseComplete; a
// malformed usage block is ignored.
func TestJSONResponseUsage(t *testing.T) {
	f := newFixture(t)
	bodies := []struct {
		parts []string
		want  *framework.Usage
	}{
		{[]string{`{"id":"x","usage":{"prompt_tokens":4,`, `"completion_tokens":2,"total_tokens":6}}`}, &framework.Usage{PromptTokens: ptr(4), CompletionTokens: ptr(2), TotalTokens: ptr(6)}},
		{[]string{`{"id":"x","usage":{"prompt_tokens":"four"}}`}, nil},
		{[]string{`{"id":"x","usage":[1,2]}`}, nil},
	}
	for i, b := range bodies {
		s := f.open()
		s.headers(reqHeaders(completionsPath, "x-request-id", "json-"+strconv.Itoa(i)), false, nil)
		s.body(completionBody("m", "x"), 100)
		s.readRouting(true)
		s.respHeaders(map[string]string{":status": "200", "content-type": "application/json"}, nil)
		s.recv()
		for j, p := range b.parts {
			s.respBody([]byte(p), j == len(b.parts)-1)
			s.recv()
		}
		s.closeAndDrain()
		completes, _, _ := f.hooks.snapshot()
		if diff := cmp.Diff(b.want, completes[len(completes)-1].Usage); diff != "" {
			t.Fatalf("body %d usage (-want +got):\n%s", i, diff)
		}
	}
}

// TestEmptyBodyPhase: a request whose body phase carries no bytes is scheduled like a
// headers-only request, and its body phase is still answered (one empty end_of_stream chunk).
func TestEmptyBodyPhase(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	s.headers(reqHeaders("/v1/models"), false, nil)
	s.body(nil, 10)
	got := s.readRouting(true)
	if got.immediate != nil || got.metadataDst == "" {
		t.Fatalf("want a pick, got %+v", got)
	}
	if len(got.chunks) != 1 || len(got.chunks[0]) != 0 {
		t.Fatalf("body chunks %q, want one empty chunk", got.chunks)
	}
	if _, ok := got.setHeaders["Content-Length"]; ok {
		t.Fatal("Content-Length set for an empty body")
	}
	s.closeAndDrain()
}
