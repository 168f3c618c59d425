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

func ptr(n int) *int { return &n }

const sseStream = "data: {\"id\":\"1\",\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\n" +
	": keep-alive comment\n\n" +
	"data: {\"id\":\"1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":4,\"total_tokens\":16,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\r\n\r\n" +
	"data: [DONE]\n\n"

// anthropicStream is Anthropic's Messages SSE shape (event names and fields as vLLM's
// /v1/messages and Anthropic's API document them): usage in message_start's message, then the
// output count in message_delta.
const anthropicStream = "event: message_start\n" +
	"data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]," +
	"\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":16,\"output_tokens\":1}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

// responsesStream is OpenAI Responses' SSE shape: usage only in response.completed.
const responsesStream = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null}}\n\n" +
	"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n" +
	"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"object\":\"response\"," +
	"\"usage\":{\"input_tokens\":9,\"input_tokens_details\":{\"cached_tokens\":4},\"output_tokens\":3,\"total_tokens\":12}}}\n\n"

func TestUsageParserSSE(t *testing.T) {
	cases := []struct {
		name     string
		api      framework.API
		stream   string
		want     *framework.Usage
		wantDone bool
	}{
		{"whole", "", sseStream, &framework.Usage{PromptTokens: ptr(12), CompletionTokens: ptr(4), TotalTokens: ptr(16), CachedTokens: ptr(8)}, true},
		{"chat", framework.APIChatCompletions, sseStream, &framework.Usage{PromptTokens: ptr(12), CompletionTokens: ptr(4), TotalTokens: ptr(16), CachedTokens: ptr(8)}, true},
		{"no usage", "", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", nil, true},
		{"malformed usage ignored", "", "data: {\"usage\":{\"prompt_tokens\":-1}}\n\ndata: {\"usage\":\"x\"}\n\ndata: {\"usage\":{\"total_tokens\":1.5}}\n\n", nil, false},
		{"malformed event ignored", "", "data: {\"usage\":{\"prompt_tokens\":1}\n\ndata: [DONE]\n\n", nil, true},
		{"later usage wins", "", "data: {\"usage\":{\"prompt_tokens\":1}}\n\ndata: {\"usage\":{\"prompt_tokens\":2}}\n\n", &framework.Usage{PromptTokens: ptr(2)}, false},
		{"no trailing newline", "", "data: {\"usage\":{\"prompt_tokens\":3}}", &framework.Usage{PromptTokens: ptr(3)}, false},
		{"upstream's details name", "", "data: {\"usage\":{\"prompt_token_details\":{\"cached_tokens\":2}}}\n\n", &framework.Usage{CachedTokens: ptr(2)}, false},
		{"DONE without space", "", "data:[DONE]\n\n", nil, true},
		{"anthropic: message_start then message_delta", framework.APIMessages, anthropicStream,
			&framework.Usage{PromptTokens: ptr(25), CompletionTokens: ptr(15), CachedTokens: ptr(16)}, false},
		{"anthropic: message_delta alone carries only output tokens", framework.APIMessages,
			"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n", &framework.Usage{CompletionTokens: ptr(7)}, false},
		{"anthropic: OpenAI-shaped usage is not read", framework.APIMessages, sseStream, nil, true},
		{"anthropic: malformed delta keeps the start", framework.APIMessages,
			"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":\"x\"}}\n\n",
			&framework.Usage{PromptTokens: ptr(5)}, false},
		{"responses: response.completed", framework.APIResponses, responsesStream,
			&framework.Usage{PromptTokens: ptr(9), CompletionTokens: ptr(3), TotalTokens: ptr(12), CachedTokens: ptr(4)}, false},
		{"responses: usage outside response.completed is not read", framework.APIResponses,
			"data: {\"type\":\"response.in_progress\",\"response\":{\"usage\":{\"input_tokens\":1}}}\n\ndata: {\"usage\":{\"prompt_tokens\":2}}\n\n", nil, false},
		{"other API: no usage", framework.APIOther, sseStream, nil, true},
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
			p := extproc.NewUsageParser(tc.api, true)
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
		api  framework.API
		body string
		want *framework.Usage
	}{
		{"", `{"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`, &framework.Usage{PromptTokens: ptr(5), CompletionTokens: ptr(1), TotalTokens: ptr(6)}},
		{"", `{"usage":null}`, nil},
		// vLLM's non-streamed response without --enable-prompt-tokens-details (model_dump()).
		{"", `{"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6,"prompt_tokens_details":null}}`,
			&framework.Usage{PromptTokens: ptr(5), CompletionTokens: ptr(1), TotalTokens: ptr(6)}},
		{"", `{"usage":{"prompt_tokens":5e0}}`, &framework.Usage{PromptTokens: ptr(5)}},
		{"", `{"usage":{"prompt_tokens":true}}`, nil},
		{"", `{"usage":{"prompt_tokens_details":7}}`, nil},
		{"", `{"usage":{"prompt_tokens":1}`, nil},
		{"", `[]`, nil},
		{"", ``, nil},
		{"", `{"usage":{}}`, &framework.Usage{}},
		{framework.APIEmbeddings, `{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}`, &framework.Usage{PromptTokens: ptr(8), TotalTokens: ptr(8)}},
		{framework.APIMessages, `{"type":"message","usage":{"input_tokens":10,"output_tokens":4,"cache_read_input_tokens":0}}`,
			&framework.Usage{PromptTokens: ptr(10), CompletionTokens: ptr(4), CachedTokens: ptr(0)}},
		{framework.APIMessages, `{"usage":{"prompt_tokens":10}}`, &framework.Usage{}},
		{framework.APIResponses, `{"object":"response","usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}`,
			&framework.Usage{PromptTokens: ptr(3), CompletionTokens: ptr(2), TotalTokens: ptr(5)}},
		{framework.APIResponses, `{"usage":{"input_tokens":-3}}`, nil},
		{framework.APIOther, `{"usage":{"prompt_tokens":5}}`, nil},
	}
	for _, tc := range cases {
		p := extproc.NewUsageParser(tc.api, false)
		for i := 0; i < len(tc.body); i += 3 {
			p.Write([]byte(tc.body[i:min(i+3, len(tc.body))]))
		}
		if diff := cmp.Diff(tc.want, p.Finish()); diff != "" {
			t.Fatalf("%s body %s: usage (-want +got):\n%s", tc.api, tc.body, diff)
		}
	}
}

// FuzzUsageParser: for any bytes, any split point and any API shape, the parser never panics,
// Finish is idempotent, the result does not depend on where the input was split, and a usage it
// returns has non-negative counts.
func FuzzUsageParser(f *testing.F) {
	apis := []framework.API{"", framework.APIChatCompletions, framework.APIEmbeddings, framework.APIMessages, framework.APIResponses, framework.APIOther}
	f.Add([]byte(sseStream), uint16(10), true, uint8(0))
	f.Add([]byte("data: [DO"), uint16(3), true, uint8(0))
	f.Add([]byte(`{"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`), uint16(7), false, uint8(0))
	f.Add([]byte(anthropicStream), uint16(99), true, uint8(3))
	f.Add([]byte(`{"usage":{"input_tokens":10,"output_tokens":4}}`), uint16(5), false, uint8(3))
	f.Add([]byte(responsesStream), uint16(50), true, uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, split uint16, sse bool, which uint8) {
		api := apis[int(which)%len(apis)]
		whole := extproc.NewUsageParser(api, sse)
		whole.Write(data)
		u1 := whole.Finish()
		cut := int(split) % (len(data) + 1)
		parts := extproc.NewUsageParser(api, sse)
		parts.Write(data[:cut])
		parts.Write(data[cut:])
		u2 := parts.Finish()
		if !cmp.Equal(u1, u2) || whole.Done() != parts.Done() {
			t.Fatalf("split at %d changes the result: %+v done %v vs %+v done %v", cut, u1, whole.Done(), u2, parts.Done())
		}
		if u1 != nil {
			for _, c := range []*int{u1.PromptTokens, u1.CompletionTokens, u1.TotalTokens, u1.CachedTokens} {
				if c != nil && *c < 0 {
					t.Fatalf("negative count in %+v", u1)
				}
			}
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
