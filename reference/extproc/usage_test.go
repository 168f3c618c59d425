package extproc_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/extproc"
	"github.com/eppkit/eppkit/reference/framework"
)

const sseStream = "data: {\"id\":\"1\",\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\n" +
	": keep-alive comment\n\n" +
	"data: {\"id\":\"1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":4,\"total_tokens\":16,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\r\n\r\n" +
	"data: [DONE]\n\n"

func TestUsageParserSSE(t *testing.T) {
	want := &framework.Usage{PromptTokens: 12, CompletionTokens: 4, TotalTokens: 16, CachedTokens: 8}
	cases := []struct {
		name     string
		stream   string
		want     *framework.Usage
		wantDone bool
	}{
		{"whole", sseStream, want, true},
		{"no usage", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", nil, true},
		{"malformed usage ignored", "data: {\"usage\":{\"prompt_tokens\":-1}}\n\ndata: {\"usage\":\"x\"}\n\ndata: {\"usage\":{\"total_tokens\":1.5}}\n\n", nil, false},
		{"malformed event ignored", "data: {\"usage\":{\"prompt_tokens\":1}\n\ndata: [DONE]\n\n", nil, true},
		{"later usage wins", "data: {\"usage\":{\"prompt_tokens\":1}}\n\ndata: {\"usage\":{\"prompt_tokens\":2}}\n\n", &framework.Usage{PromptTokens: 2}, false},
		{"no trailing newline", "data: {\"usage\":{\"prompt_tokens\":3}}", &framework.Usage{PromptTokens: 3}, false},
		{"upstream's details name", "data: {\"usage\":{\"prompt_token_details\":{\"cached_tokens\":2}}}\n\n", &framework.Usage{CachedTokens: 2}, false},
		{"DONE without space", "data:[DONE]\n\n", nil, true},
	}
	for _, tc := range cases {
		// Every two-way split, then random multi-way splits (seeded).
		splits := [][]int{}
		for i := 0; i <= len(tc.stream); i++ {
			splits = append(splits, []int{i})
		}
		seed := uint64(len(tc.name))
		r := rand.New(rand.NewPCG(seed, 7))
		for range 50 {
			var cut []int
			for i := 0; i < len(tc.stream); i += 1 + r.IntN(9) {
				cut = append(cut, i)
			}
			splits = append(splits, cut)
		}
		for _, cut := range splits {
			p := extproc.NewUsageParser(true)
			prev := 0
			for _, c := range cut {
				p.Write([]byte(tc.stream[prev:c]))
				prev = c
			}
			p.Write([]byte(tc.stream[prev:]))
			got := p.Finish()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("%s split at %v (seed %d): usage (-want +got):\n%s", tc.name, cut, seed, diff)
			}
			if p.Done() != tc.wantDone {
				t.Fatalf("%s split at %v: Done %v, want %v", tc.name, cut, p.Done(), tc.wantDone)
			}
		}
	}
}

func TestUsageParserJSON(t *testing.T) {
	cases := []struct {
		body string
		want *framework.Usage
	}{
		{`{"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`, &framework.Usage{PromptTokens: 5, CompletionTokens: 1, TotalTokens: 6}},
		{`{"usage":null}`, nil},
		{`{"usage":{"prompt_tokens":5e0}}`, &framework.Usage{PromptTokens: 5}},
		{`{"usage":{"prompt_tokens":true}}`, nil},
		{`{"usage":{"prompt_tokens_details":7}}`, nil},
		{`{"usage":{"prompt_tokens":1}`, nil},
		{`[]`, nil},
		{``, nil},
	}
	for _, tc := range cases {
		p := extproc.NewUsageParser(false)
		for i := 0; i < len(tc.body); i += 3 {
			p.Write([]byte(tc.body[i:min(i+3, len(tc.body))]))
		}
		if diff := cmp.Diff(tc.want, p.Finish()); diff != "" {
			t.Fatalf("body %s: usage (-want +got):\n%s", tc.body, diff)
		}
	}
}

// FuzzUsageParser: for any bytes and any split point, the parser never panics, Finish is
// idempotent, the result does not depend on where the input was split, and a usage it returns
// has non-negative counts.
func FuzzUsageParser(f *testing.F) {
	f.Add([]byte(sseStream), uint16(10), true)
	f.Add([]byte("data: [DO"), uint16(3), true)
	f.Add([]byte(`{"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`), uint16(7), false)
	f.Fuzz(func(t *testing.T, data []byte, split uint16, sse bool) {
		whole := extproc.NewUsageParser(sse)
		whole.Write(data)
		u1 := whole.Finish()
		cut := int(split) % (len(data) + 1)
		parts := extproc.NewUsageParser(sse)
		parts.Write(data[:cut])
		parts.Write(data[cut:])
		u2 := parts.Finish()
		if !cmp.Equal(u1, u2) || whole.Done() != parts.Done() {
			t.Fatalf("split at %d changes the result: %+v done %v vs %+v done %v", cut, u1, whole.Done(), u2, parts.Done())
		}
		if u1 != nil && (u1.PromptTokens < 0 || u1.CompletionTokens < 0 || u1.TotalTokens < 0 || u1.CachedTokens < 0) {
			t.Fatalf("negative count in %+v", u1)
		}
		if again := whole.Finish(); !cmp.Equal(u1, again) {
			t.Fatalf("Finish is not idempotent: %+v then %+v", u1, again)
		}
		if !sse && u1 != nil {
			var probe map[string]json.RawMessage
			if err := json.Unmarshal(bytes.TrimSpace(data), &probe); err != nil {
				t.Fatalf("usage %+v from invalid JSON %q", u1, data)
			}
		}
	})
}
