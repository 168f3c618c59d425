package tests

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// largeBodyBytes is the size of the request body OpenAILargeBodyChunked sends: more than twice
// the 62,000-byte chunk limit, so at least three chunks come back.
const largeBodyBytes = 150_000

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAILargeBodyChunked",
		Description: "For a request body longer than 62,000 bytes the EPP MUST return the (possibly mutated) body as streamed " +
			"chunks of at most 62,000 bytes each, with the Content-Length header set to the returned body's length.",
		Level:         conformance.LevelUpstream,
		Profile:       conformance.ProfileEPPRouting,
		Features:      []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP parses OpenAI chat completions bodies", "bodies in FULL_DUPLEX_STREAMED mode"},
		Source: "llm-d-router v0.10.0 pkg/common/envoy/chunking.go BuildChunkedBodyResponses (62,000-byte chunks) and " +
			"pkg/epp/handlers/request.go generateHeaders (Content-Length = re-marshaled size from " +
			"pkg/epp/requestcontrol/director.go repackage); same in GIE v1.5.0. SPEC §5.2.",
		Run: runOpenAILargeBodyChunked,
	})
}

func runOpenAILargeBodyChunked(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	var prompt strings.Builder
	prompt.WriteString(uniquePrompt(s, t, r, 0))
	for prompt.Len() < largeBodyBytes {
		prompt.WriteString(" " + vocabulary[r.IntN(len(vocabulary))])
	}
	body := chatBody(s.ModelName, prompt.String())
	// The gateway's usual 16 KiB chunks, and the whole body in one message (Envoy may buffer).
	for _, chunk := range []int{extprocclient.DefaultChunkSize, len(body)} {
		req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", pathChat, authority, body, nil), Body: body, ChunkSize: chunk}
		d := exchange(t, s, c, req)
		mustRoute(t, s, d, req)
		if d.Body == nil {
			t.Fatalf("sent %d bytes in %d-byte chunks: the EPP returned no streamed body", len(body), chunk)
		}
		if d.MaxChunk > extprocclient.MaxStreamedChunk {
			t.Fatalf("sent %d bytes in %d-byte chunks: the EPP returned a %d-byte chunk, above the %d-byte limit (%d chunks)",
				len(body), chunk, d.MaxChunk, extprocclient.MaxStreamedChunk, d.BodyChunks)
		}
		if d.ContentLength != strconv.Itoa(len(d.Body)) {
			t.Fatalf("sent %d bytes in %d-byte chunks: Content-Length header %q, returned body %d bytes", len(body), chunk, d.ContentLength, len(d.Body))
		}
		// The returned body is still the same request (the EPP may rewrite fields such as model,
		// but not the conversation).
		var sent, got struct {
			Messages []map[string]any `json:"messages"`
		}
		_ = json.Unmarshal(body, &sent)
		if err := json.Unmarshal(d.Body, &got); err != nil {
			t.Fatalf("the returned body is not JSON: %v", err)
		}
		if diff := cmp.Diff(sent.Messages, got.Messages); diff != "" {
			t.Fatalf("the returned body's messages differ from the sent ones (-sent +returned):\n%.2000s", diff)
		}
		t.Logf("sent %d bytes in %d-byte chunks: got %d bytes back in %d chunks (largest %d), Content-Length %s",
			len(body), chunk, len(d.Body), d.BodyChunks, d.MaxChunk, d.ContentLength)
	}
}
