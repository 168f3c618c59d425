package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIResponseUsageRobust",
		Description: "The EPP MUST pass every response body through unchanged and answer every response phase without an error, " +
			"whatever the usage block and however the body is split into chunks (the SSE data: [DONE] marker split across chunks " +
			"and malformed usage blocks included), and MUST keep serving afterwards.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP processes response bodies in FULL_DUPLEX_STREAMED mode"},
		Source: "llm-d-router v0.10.0 pkg/epp/handlers/response.go HandleResponseBody with " +
			"pkg/epp/framework/plugins/requesthandling/parsers/openai/openai.go " +
			"extractUsage/extractUsageStreaming: bodies pass through, a malformed usage block is a logged error. " +
			"GIE v1.5.0 openai.go extractUsage: an unchecked type assertion panics on a non-object usage. SPEC " +
			"§5.2.",
		Run: runOpenAIResponseUsageRobust,
	})
}

// usageResponse is one response body and how it is cut into chunks.
type usageResponse struct {
	name   string
	sse    bool
	body   string
	chunks [][]byte
}

// sseWithUsage is a streamed chat answer whose usage event carries usage (raw JSON).
func sseWithUsage(model, usage string) string {
	return "data: {\"id\":\"chatcmpl-eppkit\",\"object\":\"chat.completion.chunk\",\"model\":\"" + model + "\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"}}]}\n\n" +
		"data: {\"id\":\"chatcmpl-eppkit\",\"object\":\"chat.completion.chunk\",\"model\":\"" + model + "\",\"choices\":[],\"usage\":" + usage + "}\n\n" +
		"data: [DONE]\n\n"
}

// cutAt splits body at the given offsets (increasing, inside the body).
func cutAt(body string, offsets ...int) [][]byte {
	var out [][]byte
	prev := 0
	for _, o := range offsets {
		out = append(out, []byte(body[prev:o]))
		prev = o
	}
	return append(out, []byte(body[prev:]))
}

func usageResponses(model string) []usageResponse {
	good := `{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":4}}`
	var out []usageResponse
	// data: [DONE] split at every byte of its line.
	sse := sseWithUsage(model, good)
	done := strings.LastIndex(sse, "data: [DONE]")
	for i := 1; i < len("data: [DONE]\n\n"); i++ {
		out = append(out, usageResponse{name: fmt.Sprintf("SSE, [DONE] line cut after %d bytes", i), sse: true, body: sse,
			chunks: cutAt(sse, done+i)})
	}
	// One byte per chunk: every event, line and CRLF boundary split.
	crlf := strings.ReplaceAll(sse, "\n", "\r\n")
	for _, b := range []struct{ name, body string }{{"SSE", sse}, {"SSE with CRLF line ends", crlf}} {
		var chunks [][]byte
		for i := 0; i < len(b.body); i++ {
			chunks = append(chunks, []byte{b.body[i]})
		}
		out = append(out, usageResponse{name: b.name + ", one byte per chunk", sse: true, body: b.body, chunks: chunks})
	}
	// Malformed usage blocks, streamed and in JSON bodies.
	for _, bad := range []string{`"lots"`, `{"prompt_tokens":-1}`, `{"prompt_tokens":1.5}`, `{"prompt_tokens":"12"}`, `[1,2]`, `{"prompt_tokens_details":7}`, `{"completion_tokens":1e40}`} {
		b := sseWithUsage(model, bad)
		out = append(out, usageResponse{name: "SSE with malformed usage " + bad, sse: true, body: b, chunks: cutAt(b, len(b)/2)})
		j := `{"id":"cmpl-eppkit","object":"text_completion","model":"` + model + `","choices":[{"index":0,"text":"ok","finish_reason":"length"}],"usage":` + bad + `}`
		out = append(out, usageResponse{name: "JSON with malformed usage " + bad, body: j, chunks: cutAt(j, len(j)/3, 2*len(j)/3)})
	}
	// Not JSON at all, and an unterminated SSE event.
	junk := `{"usage": {"prompt_tokens": 3` // truncated
	out = append(out, usageResponse{name: "truncated JSON body", body: junk, chunks: [][]byte{[]byte(junk)}})
	tail := "data: {\"usage\":" + good + "}\n\ndata: [DO"
	out = append(out, usageResponse{name: "SSE ending inside data: [DONE]", sse: true, body: tail, chunks: cutAt(tail, len(tail)-2)})
	return out
}

func runOpenAIResponseUsageRobust(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	cases := usageResponses(s.ModelName)
	for _, uc := range cases {
		st := openStream(t, s, c)
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		addrs := mustRoute(t, s, exchangeOn(t, s, st, req), req)
		ctype := "application/json"
		headers := []extprocclient.Header{{Key: ":status", Value: "200"}}
		if uc.sse {
			ctype = "text/event-stream"
		} else {
			headers = append(headers, extprocclient.Header{Key: "content-length", Value: strconv.Itoa(len(uc.body))})
		}
		headers = append(headers, extprocclient.Header{Key: "content-type", Value: ctype})
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		rr, err := st.Respond(ctx, extprocclient.Response{Headers: headers, Chunks: uc.chunks, Served: addrs[0]})
		cancel()
		if err != nil {
			t.Fatalf("%s (%d chunks): the response phases failed: %v", uc.name, len(uc.chunks), err)
		}
		if rr.Immediate != nil {
			t.Fatalf("%s: the EPP answered the response with ImmediateResponse %d: %s", uc.name, rr.Immediate.Status, rr.Immediate.Body)
		}
		if !bytes.Equal(rr.Body, []byte(uc.body)) {
			t.Fatalf("%s: the EPP changed the response body (%d bytes sent in %d chunks, %d returned):\nsent     %q\nreturned %.400q",
				uc.name, len(uc.body), len(uc.chunks), len(rr.Body), uc.body, rr.Body)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatalf("%s: half-close the stream: %v", uc.name, err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		_, err = st.Recv(ctx)
		cancel()
		if !errors.Is(err, io.EOF) {
			t.Fatalf("%s: after the response the stream did not end cleanly: %v", uc.name, err)
		}
	}
	// The process still serves.
	req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
	mustRoute(t, s, exchange(t, s, c, req), req)
	t.Logf("%d response bodies passed through unchanged; the EPP still routes", len(cases))
}
