package tests

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// Shape of DuplicateRequestIDBodiesIsolated: dupStreams concurrent requests with one x-request-id,
// each body dupChunks chunks long, sent interleaved (every stream's headers, then every stream's
// first chunk, ...), so an EPP that keys per-request state by x-request-id mixes them up.
const (
	dupStreams    = 8
	dupChunks     = 4
	dupChunkBytes = 2048
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "DuplicateRequestIDBodiesIsolated",
		Description: "Concurrent requests that carry the same x-request-id, their messages interleaved on their own ext_proc " +
			"streams, MUST each be handled on their own: each is routed with a pick of the pool and gets back its own body " +
			"(x-request-id is a label, never the key of per-request state).",
		Level:         conformance.LevelEppkit,
		Profile:       conformance.ProfileEPPProduction,
		Features:      []conformance.Feature{conformance.FeatureRequestIDIsolation},
		Preconditions: []string{"the EPP serves the pool's base model"},
		Source: "SPEC §9.2 (per-request state keyed by an id the EPP assigns to each ext_proc stream; x-request-id only a " +
			"label; GIE #1489, where concurrent requests with one x-request-id shared plugin state)",
		Run: runDuplicateRequestIDBodiesIsolated,
	})
}

func runDuplicateRequestIDBodiesIsolated(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	id := "eppkit-duplicate-" + s.Nonce(t)
	type flight struct {
		st     *extprocclient.Stream
		prompt string
		body   []byte
	}
	flights := make([]flight, dupStreams)
	for i := range flights {
		var p strings.Builder
		p.WriteString(uniquePrompt(s, t, r, 0))
		for p.Len() < dupChunks*dupChunkBytes-200 {
			p.WriteString(" " + vocabulary[r.IntN(len(vocabulary))])
		}
		flights[i].prompt = p.String()
		flights[i].body = chatBody(s.ModelName, flights[i].prompt)
		flights[i].st = openStream(t, s, c)
	}
	md := extprocclient.Metadata{}
	for i, f := range flights {
		h := extprocclient.RequestHeaders("POST", pathChat, authority, f.body, map[string]string{"x-request-id": id})
		if err := f.st.SendRequestHeaders(h, false, md); err != nil {
			t.Fatalf("request %d: send the request headers: %v", i, err)
		}
	}
	for off := 0; ; off += dupChunkBytes {
		more := false
		for i, f := range flights {
			if off >= len(f.body) {
				continue
			}
			end := min(off+dupChunkBytes, len(f.body))
			if err := f.st.SendRequestBody(f.body[off:end], end == len(f.body), md); err != nil {
				t.Fatalf("request %d: send body bytes %d-%d: %v", i, off, end, err)
			}
			more = more || end < len(f.body)
		}
		if !more {
			break
		}
	}
	for i, f := range flights {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		d, err := f.st.ReadDecision(ctx, false)
		cancel()
		if err != nil {
			t.Fatalf("request %d of %d sharing x-request-id %q: %v", i+1, dupStreams, id, err)
		}
		if d.Immediate != nil {
			t.Fatalf("request %d of %d sharing x-request-id %q was refused with ImmediateResponse %d: %s (requests with one "+
				"x-request-id must not see each other's state)", i+1, dupStreams, id, d.Immediate.Status, strings.TrimSpace(string(d.Immediate.Body)))
		}
		if _, problem := pickProblem(s, d); problem != "" {
			t.Fatalf("request %d of %d sharing x-request-id %q: %s", i+1, dupStreams, id, problem)
		}
		var got struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(d.Body, &got); err != nil || len(got.Messages) != 1 || got.Messages[0].Content != f.prompt {
			other := -1
			for j, g := range flights {
				if j != i && strings.Contains(string(d.Body), g.prompt[:16]) {
					other = j
				}
			}
			msg := "the body streamed back is not its own"
			if other >= 0 {
				msg = "the body streamed back holds request " + strconv.Itoa(other+1) + "'s prompt"
			}
			t.Fatalf("request %d of %d sharing x-request-id %q: %s (%d bytes sent, %d back; parse: %v): per-request state must be "+
				"keyed by the ext_proc stream, not by x-request-id", i+1, dupStreams, id, msg, len(f.body), len(d.Body), err)
		}
	}
	t.Logf("%d concurrent requests with x-request-id %q, %d chunks each, interleaved: each routed with its own body", dupStreams, id, dupChunks)
}
