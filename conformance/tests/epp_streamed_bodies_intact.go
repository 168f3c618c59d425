package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPStreamedBodiesIntact",
		Description: "In streaming mode the EPP MUST stream the request and response bodies through whole: a request body sent in " +
			"several chunks reaches the data plane as the same JSON, and a JSON or SSE response body sent in several chunks " +
			"reaches the client as the same JSON (event by event for SSE).",
		Level:         conformance.LevelMUST,
		Profile:       conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model", "no model rewrite applies to the pool's base model"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol) as of GIE v1.6.2: \"The EPP MUST support streaming " +
			"mode for inference requests and responses\" (added in GIE v1.6.0 by GIE PR #2514); the bug class of GIE PR #3028 (lwepp " +
			"v1.6.0 answered body chunks without their data)",
		Run: runEPPStreamedBodiesIntact,
	})
}

// streamedChunks is how many request_body / response_body messages each body is cut into.
const streamedChunks = 6

func runEPPStreamedBodiesIntact(t harness.TestingT, s *harness.Suite) {
	requireEndpoints(t, s, 1)
	c := s.ExtProc(t)
	r := s.Rand(t)
	for i := 0; i < 4; i++ {
		st := openStream(t, s, c)
		// A request body of about 24 kB in streamedChunks messages: the EPP must put every byte
		// back on the wire (the data plane forwards only what the streamed responses carry).
		req := chatRequest(s, uniquePrompt(s, t, r, 3000), nil)
		req.ChunkSize = (len(req.Body) + streamedChunks - 1) / streamedChunks
		d := exchangeOn(t, s, st, req)
		mustRoute(t, s, d, req)
		if d.BodyChunks == 0 {
			t.Fatalf("%s: the EPP answered the %d request_body messages with no streamed body", describe(req), streamedChunks)
		}
		if err := sameJSON(req.Body, d.Body); err != nil {
			t.Fatalf("%s: the request body the data plane forwards (the EPP's %d streamed responses, %d bytes in all) "+
				"is not the body sent (%d bytes in %d chunks): %v", describe(req), d.BodyChunks, len(d.Body), len(req.Body), streamedChunks, err)
		}

		// The response: JSON for even i, SSE for odd i, each in streamedChunks messages.
		sse := i%2 == 1
		body := streamedResponseBody(s.ModelName, sse, 24)
		ctype := "application/json"
		if sse {
			ctype = "text/event-stream"
		}
		resp := extprocclient.Response{
			Headers: []extprocclient.Header{{Key: ":status", Value: "200"}, {Key: "content-type", Value: ctype}},
			Chunks:  cutInto(body, streamedChunks),
		}
		if !sse {
			resp.Headers = append(resp.Headers, extprocclient.Header{Key: "content-length", Value: strconv.Itoa(len(body))})
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		rr, err := st.Respond(ctx, resp)
		cancel()
		if err != nil {
			t.Fatalf("response phases (%s, %d bytes in %d chunks): %v", ctype, len(body), streamedChunks, err)
		}
		if rr.Immediate != nil {
			t.Fatalf("EPP answered a %s response with ImmediateResponse %d: %s", ctype, rr.Immediate.Status, rr.Immediate.Body)
		}
		check := sameJSON
		if sse {
			check = sameSSE
		}
		if err := check(body, rr.Body); err != nil {
			t.Fatalf("the %s response body the client gets (the EPP's %d streamed responses, %d bytes) is not the body the "+
				"model server sent (%d bytes in %d chunks): %v", ctype, rr.BodyChunks, len(rr.Body), len(body), streamedChunks, err)
		}
	}
}

// streamedResponseBody is a model server's answer of n tokens for model: a chat completion
// (JSON), or its SSE stream with one event per token, a usage event and [DONE].
func streamedResponseBody(model string, sse bool, n int) []byte {
	if !sse {
		content := strings.Repeat("tok ", n)
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-eppkit", "object": "chat.completion", "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "length",
				"message": map[string]any{"role": "assistant", "content": content}}},
			"usage": map[string]any{"prompt_tokens": 12, "completion_tokens": n, "total_tokens": 12 + n}})
		return b
	}
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		ev, _ := json.Marshal(map[string]any{"id": "chatcmpl-eppkit", "object": "chat.completion.chunk", "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": fmt.Sprintf("tok%d ", i)}}}})
		fmt.Fprintf(&b, "data: %s\n\n", ev)
	}
	ev, _ := json.Marshal(map[string]any{"id": "chatcmpl-eppkit", "object": "chat.completion.chunk", "model": model,
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": 12, "completion_tokens": n, "total_tokens": 12 + n}})
	fmt.Fprintf(&b, "data: %s\n\ndata: [DONE]\n\n", ev)
	return b.Bytes()
}

// cutInto cuts b into n chunks of about equal size (the last may be shorter).
func cutInto(b []byte, n int) [][]byte {
	size := (len(b) + n - 1) / n
	var out [][]byte
	for len(b) > 0 {
		k := min(size, len(b))
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}

// sameJSON returns nil when got is the JSON value of want (key order and white space may
// differ), else what differs.
func sameJSON(want, got []byte) error {
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		return fmt.Errorf("test bug: the sent body is not JSON: %v", err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		return fmt.Errorf("it is not JSON: %v (first bytes %q)", err, head(got, 80))
	}
	if diff := cmp.Diff(w, g); diff != "" {
		return fmt.Errorf("(-sent +received):\n%s", diff)
	}
	return nil
}

// sameSSE returns nil when got holds the same SSE events as want, in order, each event's data
// the same JSON (or the same text, for data: [DONE]).
func sameSSE(want, got []byte) error {
	w, g := sseData(want), sseData(got)
	if len(w) != len(g) {
		return fmt.Errorf("%d events sent, %d received (first bytes received %q)", len(w), len(g), head(got, 80))
	}
	for i := range w {
		if w[i] == g[i] {
			continue
		}
		if err := sameJSON([]byte(w[i]), []byte(g[i])); err != nil {
			return fmt.Errorf("event %d: %v", i, err)
		}
	}
	return nil
}

// sseData returns the data of each SSE event of b (events end with a blank line).
func sseData(b []byte) []string {
	var out []string
	for _, ev := range strings.Split(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n\n") {
		var data []string
		for _, line := range strings.Split(ev, "\n") {
			if v, ok := strings.CutPrefix(line, "data:"); ok {
				data = append(data, strings.TrimPrefix(v, " "))
			}
		}
		if len(data) > 0 {
			out = append(out, strings.Join(data, "\n"))
		}
	}
	return out
}

func head(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
