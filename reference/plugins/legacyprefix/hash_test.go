package legacyprefix

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
)

// chainByHand recomputes the SPEC §2.1 chain with a different formulation (whole-buffer
// xxhash.Sum64 over block ‖ LE64(prev), blocks taken as rune slices of the input) so the test
// does not just repeat the implementation. The last block may be shorter.
func chainByHand(model, salt, input string, blockChars, maxBlocks int) []uint64 {
	runes := []rune(input) // valid UTF-8 inputs only
	var out []uint64
	prev := xxhash.Sum64String(model + salt)
	for i := 0; i < len(runes) && len(out) < maxBlocks; i += blockChars {
		blk := []byte(string(runes[i:min(i+blockChars, len(runes))]))
		buf := binary.LittleEndian.AppendUint64(blk, prev)
		prev = xxhash.Sum64(buf)
		out = append(out, prev)
	}
	return out
}

func completions(model, prompt, salt string) *framework.LLMRequest {
	return &framework.LLMRequest{RequestID: "r", TargetModel: model, Body: &framework.LLMRequestBody{
		Completions: &framework.CompletionsRequest{Prompt: prompt, CacheSalt: salt}}}
}

func chat(model string, msgs ...framework.Message) *framework.LLMRequest {
	return &framework.LLMRequest{RequestID: "r", TargetModel: model, Body: &framework.LLMRequestBody{
		ChatCompletions: &framework.ChatCompletionsRequest{Messages: msgs}}}
}

func TestHashPrompt(t *testing.T) {
	long := strings.Repeat("abcdefgh", 40) // 320 characters
	tests := []struct {
		name       string
		req        *framework.LLMRequest
		blockToks  int
		maxBlocks  int
		wantLen    int
		wantChain  []uint64 // nil: only the length is checked
		wantErrSub string
	}{
		{name: "nil request", req: nil, blockToks: 16, maxBlocks: 256, wantLen: 0},
		{name: "headers-only request", req: &framework.LLMRequest{TargetModel: "m"}, blockToks: 16, maxBlocks: 256, wantLen: 0},
		{name: "shorter than one block is one short block", req: completions("m", strings.Repeat("x", 63), ""), blockToks: 16, maxBlocks: 256,
			wantLen: 1, wantChain: chainByHand("m", "", strings.Repeat("x", 63), 64, 256)},
		{name: "exactly one block", req: completions("m", strings.Repeat("x", 64), ""), blockToks: 16, maxBlocks: 256,
			wantLen: 1, wantChain: chainByHand("m", "", strings.Repeat("x", 64), 64, 256)},
		{name: "trailing partial block is hashed", req: completions("m", long[:200], ""), blockToks: 16, maxBlocks: 256,
			wantLen: 4, wantChain: chainByHand("m", "", long[:200], 64, 256)},
		{name: "blocks are characters, not bytes", req: completions("m", strings.Repeat("日本語のテキスト", 25), ""), blockToks: 16, maxBlocks: 256,
			wantLen: 4, wantChain: chainByHand("m", "", strings.Repeat("日本語のテキスト", 25), 64, 256)},
		{name: "empty prompt hashes nothing", req: completions("m", "", ""), blockToks: 16, maxBlocks: 256, wantLen: 0},
		{name: "cut at maxPrefixBlocksToMatch", req: completions("m", long, ""), blockToks: 4, maxBlocks: 5,
			wantLen: 5, wantChain: chainByHand("m", "", long, 16, 5)},
		{name: "cache salt joins the seed", req: completions("m", long, "s1"), blockToks: 16, maxBlocks: 256,
			wantLen: 5, wantChain: chainByHand("m", "s1", long, 64, 256)},
		{name: "token ids", req: &framework.LLMRequest{TargetModel: "m", Body: &framework.LLMRequestBody{
			Completions: &framework.CompletionsRequest{TokenIDs: []uint32{1, 2, 3, 4, 5}}}}, blockToks: 2, maxBlocks: 256,
			wantLen: 3, wantChain: chainByHand("m", "", "\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05\x00\x00\x00", 8, 256)},
		{name: "zero block size hashes nothing", req: completions("m", long, ""), blockToks: 0, maxBlocks: 256, wantLen: 0},
		{name: "bad chat content is an error", req: chat("m", framework.Message{Role: "user", Content: 42}), blockToks: 1, maxBlocks: 256,
			wantLen: 0, wantErrSub: "messages[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := hashPrompt(tc.req, tc.blockToks, tc.maxBlocks)
			if tc.wantErrSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErrSub)
				}
			} else if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(got) != tc.wantLen {
				t.Fatalf("got %d hashes, want %d", len(got), tc.wantLen)
			}
			if tc.wantChain != nil {
				if diff := cmp.Diff(tc.wantChain, got); diff != "" {
					t.Fatalf("chain mismatch (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestHashPromptSeparatesModelsAndSalts(t *testing.T) {
	prompt := strings.Repeat("shared system prompt ", 10)
	base, _ := hashPrompt(completions("base", prompt, ""), 16, 256)
	tests := []struct {
		name string
		req  *framework.LLMRequest
	}{
		{"other model (LoRA adapter)", completions("base-lora-a", prompt, "")},
		{"same model with a cache salt", completions("base", prompt, "tenant-1")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := hashPrompt(tc.req, 16, 256)
			if len(got) != len(base) || len(got) == 0 {
				t.Fatalf("len = %d, want %d (> 0)", len(got), len(base))
			}
			for i := range got {
				if got[i] == base[i] {
					t.Fatalf("block %d shares a hash with the base model's unsalted chain", i)
				}
			}
		})
	}
}

func TestEncodeChatMessages(t *testing.T) {
	tests := []struct {
		name    string
		msgs    []framework.Message
		want    string
		wantErr bool
	}{
		{name: "nil list", msgs: nil, want: `null`},
		{name: "empty list", msgs: []framework.Message{}, want: `[]`},
		{name: "string content, HTML escaped", msgs: []framework.Message{{Role: "user", Content: "a<b>&c"}},
			want: `[{"role":"user","content":"a\u003cb\u003e\u0026c"}]`},
		{name: "empty role omitted, null content is empty string", msgs: []framework.Message{{Content: nil}},
			want: `[{"content":""}]`},
		{name: "content blocks keep the three sub-objects and drop unknown fields",
			msgs: []framework.Message{{Role: "user", Content: []any{
				map[string]any{"type": "text", "text": "hi", "extra": 1},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "http://x/y.png"}},
			}}},
			want: `[{"role":"user","content":[{"type":"text","text":"hi","image_url":{},"input_audio":{},"video_url":{}},` +
				`{"type":"image_url","image_url":{"url":"http://x/y.png"},"input_audio":{},"video_url":{}}]}]`},
		{name: "inline image by digest, file part kept",
			msgs: []framework.Message{{Role: "user", Content: []any{
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,AAAA"}},
				map[string]any{"type": "file", "file": map[string]any{"file_id": "f-1"}},
			}}},
			want: `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + digestOf("data:image/png;base64,AAAA") +
				`"},"input_audio":{},"video_url":{}},{"type":"file","image_url":{},"input_audio":{},"video_url":{},"file":{"file_id":"f-1"}}]}]`},
		{name: "tool calls kept", msgs: []framework.Message{{Role: "assistant", ToolCalls: []any{map[string]any{"id": "x"}}}, {Role: "tool", ToolCallID: "x", Content: "ok"}},
			want: `[{"role":"assistant","content":"","tool_calls":[{"id":"x"}]},{"role":"tool","content":"ok","tool_call_id":"x"}]`},
		{name: "empty block list stays a list", msgs: []framework.Message{{Role: "user", Content: []any{}}},
			want: `[{"role":"user","content":[]}]`},
		{name: "number content is refused", msgs: []framework.Message{{Role: "user", Content: 3.5}}, wantErr: true},
		{name: "object content is refused", msgs: []framework.Message{{Role: "user", Content: map[string]any{"a": 1}}}, wantErr: true},
		{name: "block with a non-object image_url is refused",
			msgs: []framework.Message{{Role: "user", Content: []any{map[string]any{"type": "image_url", "image_url": "u"}}}}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := encodeChatMessages(tc.msgs, nil)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want an error, got %s", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if string(got) != tc.want {
				t.Fatalf("encoding mismatch\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}
