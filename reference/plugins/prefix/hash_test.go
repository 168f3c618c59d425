package prefix

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
)

// refXXH64 is a from-scratch XXH64 (seed 0) written from the xxHash specification
// (github.com/Cyan4973/xxHash doc/xxhash_spec.md, "XXH64 algorithm description"). It shares no
// code with github.com/cespare/xxhash, so the vectors below are an independent computation.
func refXXH64(b []byte) uint64 {
	var (
		p1 uint64 = 0x9E3779B185EBCA87
		p2 uint64 = 0xC2B2AE3D27D4EB4F
		p3 uint64 = 0x165667B19E3779F9
		p4 uint64 = 0x85EBCA77C2B2AE63
		p5 uint64 = 0x27D4EB2F165667C5
	)
	round := func(acc, in uint64) uint64 { return bits.RotateLeft64(acc+in*p2, 31) * p1 }
	merge := func(acc, v uint64) uint64 { return (acc^round(0, v))*p1 + p4 }
	n := uint64(len(b))
	var h uint64
	if len(b) >= 32 {
		v1, v2, v3, v4 := p1+p2, p2, uint64(0), 0-p1
		for len(b) >= 32 {
			v1 = round(v1, binary.LittleEndian.Uint64(b[0:]))
			v2 = round(v2, binary.LittleEndian.Uint64(b[8:]))
			v3 = round(v3, binary.LittleEndian.Uint64(b[16:]))
			v4 = round(v4, binary.LittleEndian.Uint64(b[24:]))
			b = b[32:]
		}
		h = bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
		h = merge(merge(merge(merge(h, v1), v2), v3), v4)
	} else {
		h = p5
	}
	h += n
	for len(b) >= 8 {
		h ^= round(0, binary.LittleEndian.Uint64(b))
		h = bits.RotateLeft64(h, 27)*p1 + p4
		b = b[8:]
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b)) * p1
		h = bits.RotateLeft64(h, 23)*p2 + p3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * p5
		h = bits.RotateLeft64(h, 11) * p1
	}
	h ^= h >> 33
	h *= p2
	h ^= h >> 29
	h *= p3
	h ^= h >> 32
	return h
}

// refChainV150 computes the v1.5.0 chain by concatenation with refXXH64, written straight from
// upstream's hashPrompt without BlockHashes' streaming digest: blocks of blockSizeTokens×4 bytes,
// no trailing partial block.
func refChainV150(model, salt, input string, blockSizeTokens, maxBlocks int) []uint64 {
	chars := blockSizeTokens * 4
	if chars <= 0 || len(input) < chars {
		return nil
	}
	if len(input) > chars*maxBlocks {
		input = input[:chars*maxBlocks]
	}
	prev := refXXH64([]byte(model + salt))
	var out []uint64
	for i := 0; i+chars <= len(input); i += chars {
		buf := binary.LittleEndian.AppendUint64([]byte(input[i:i+chars]), prev)
		prev = refXXH64(buf)
		out = append(out, prev)
	}
	return out
}

// refChain computes SPEC §2.1's chain from scratch: the input split into runes, blocks of
// blockSizeTokens×4 runes with the last one possibly shorter, at most maxBlocks blocks.
func refChain(model, salt, input string, blockSizeTokens, maxBlocks int) []uint64 {
	chars := blockSizeTokens * 4
	if chars <= 0 || maxBlocks <= 0 {
		return nil
	}
	var blocks []string
	var cur []rune
	for _, r := range input { // valid UTF-8 inputs only: range and DecodeRune agree there
		cur = append(cur, r)
		if len(cur) == chars {
			blocks = append(blocks, string(cur))
			cur = nil
		}
	}
	if len(cur) > 0 {
		blocks = append(blocks, string(cur))
	}
	if len(blocks) > maxBlocks {
		blocks = blocks[:maxBlocks]
	}
	return refBlocks(model, salt, blocks)
}

// refTokenChain is refChain for token ids: 4 little-endian bytes per id, blockSizeTokens ids per
// block, the last block possibly shorter.
func refTokenChain(model, salt string, ids []uint32, blockSizeTokens, maxBlocks int) []uint64 {
	var blocks []string
	for i := 0; i < len(ids) && len(blocks) < maxBlocks; i += blockSizeTokens {
		var b []byte
		for _, id := range ids[i:min(i+blockSizeTokens, len(ids))] {
			b = binary.LittleEndian.AppendUint32(b, id)
		}
		blocks = append(blocks, string(b))
	}
	return refBlocks(model, salt, blocks)
}

func refBlocks(model, salt string, blocks []string) []uint64 {
	if len(blocks) == 0 {
		return nil
	}
	prev := refXXH64([]byte(model + salt))
	out := make([]uint64, 0, len(blocks))
	for _, b := range blocks {
		prev = refXXH64(binary.LittleEndian.AppendUint64([]byte(b), prev))
		out = append(out, prev)
	}
	return out
}

func TestRefXXH64KnownVectors(t *testing.T) {
	// Published XXH64 seed-0 values (xxHash README / sanity tests): "" and "abc".
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"", 0xEF46DB3751D8E999},
		{"abc", 0x44BC2CF5AD770999},
	} {
		if got := refXXH64([]byte(tc.in)); got != tc.want {
			t.Errorf("refXXH64(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
	seed := uint64(20260101)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 300; i++ {
		b := make([]byte, r.IntN(200))
		for j := range b {
			b[j] = byte(r.UintN(256))
		}
		if got, want := refXXH64(b), xxhash.Sum64(b); got != want {
			t.Fatalf("seed %d: refXXH64 disagrees with cespare/xxhash on %d bytes: %#x vs %#x", seed, len(b), got, want)
		}
	}
}

func TestBlockHashesVectors(t *testing.T) {
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40) // 1800 bytes
	chinese := strings.Repeat("我们的模型服务器正在处理请求", 22)[:300*3]                     // 300 characters, 900 bytes
	tests := []struct {
		name                       string
		model, salt, input         string
		blockSizeTokens, maxBlocks int
		wantLen, wantV150          int
	}{
		{"shorter than one block is one partial block", "m", "", strings.Repeat("a", 63), 16, 256, 1, 0},
		{"exactly one block", "m", "", strings.Repeat("a", 64), 16, 256, 1, 1},
		{"trailing partial block hashed", "m", "", strings.Repeat("a", 64*3+63), 16, 256, 4, 3},
		{"truncated to maxBlocks", "llama", "", long, 16, 5, 5, 5},
		{"salted", "llama", "tenant-a", long, 16, 256, 29, 28},
		{"block size 1 token", "m", "", "abcdefghij", 1, 256, 3, 2},
		{"300 Chinese characters are 5 character blocks, not 14 byte blocks", "m", "", chinese, 16, 256, 5, 14},
		{"mixed scripts", "m", "", "héllo wörld " + chinese[:30] + " ünïcödé", 2, 256, 4, 7},
		{"empty", "m", "", "", 16, 256, 0, 0},
		{"maxBlocks zero", "m", "", long, 16, 0, 0, 0},
		{"block size zero", "m", "", long, 0, 256, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := BlockHashes(tc.model, tc.salt, Input{Text: tc.input}, tc.blockSizeTokens, tc.maxBlocks)
			if len(got) != tc.wantLen {
				t.Fatalf("len = %d, want %d", len(got), tc.wantLen)
			}
			if tc.wantLen == 0 && got != nil {
				t.Fatalf("want nil, got %v", got)
			}
			if diff := cmp.Diff(refChain(tc.model, tc.salt, tc.input, tc.blockSizeTokens, tc.maxBlocks), got); diff != "" {
				t.Fatalf("chain differs from the independent computation (-want +got):\n%s", diff)
			}
			old := blockHashes(tc.model, tc.salt, Input{Text: tc.input}, tc.blockSizeTokens, tc.maxBlocks, V150)
			if len(old) != tc.wantV150 {
				t.Fatalf("v1.5.0 mode: len = %d, want %d", len(old), tc.wantV150)
			}
			if diff := cmp.Diff(refChainV150(tc.model, tc.salt, tc.input, tc.blockSizeTokens, tc.maxBlocks), old); diff != "" {
				t.Fatalf("v1.5.0 mode differs from upstream's rule (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBlockHashesCharacterBlocks checks on seeded random text of ASCII, two-, three- and
// four-byte runes that every block is whole characters (valid UTF-8, blockSizeTokens×4 runes
// except the last), by rebuilding the chain from the blocks the rule defines, under each
// combination of the compatibility rules that keeps character blocks.
func TestBlockHashesCharacterBlocks(t *testing.T) {
	const seed = 2026
	r := rand.New(rand.NewPCG(seed, 1))
	alphabet := []rune("ab c.é日本語한국어ひらがなカタカナ😀𝄞")
	for trial := range 300 {
		var sb strings.Builder
		for range r.IntN(400) {
			sb.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		in := sb.String()
		bs, maxBlocks := 1+r.IntN(8), 1+r.IntN(20)
		got := BlockHashes("m", "s", Input{Text: in}, bs, maxBlocks)
		if want := refChain("m", "s", in, bs, maxBlocks); !slices.Equal(got, want) {
			t.Fatalf("seed %d trial %d (%d runes, block %d, max %d): %v, independent %v", seed, trial,
				len([]rune(in)), bs, maxBlocks, got, want)
		}
		// NoPartialBlock alone: the same chain without a shorter last block.
		np := blockHashes("m", "s", Input{Text: in}, bs, maxBlocks, HashCompat{NoPartialBlock: true})
		full := len([]rune(in)) / (bs * 4)
		if want := min(full, maxBlocks); len(np) != want || !slices.Equal(np, got[:want]) {
			t.Fatalf("seed %d trial %d: NoPartialBlock gave %d hashes, want the first %d of %v", seed, trial, len(np), want, got)
		}
	}
}

// TestBlockHashesTokenIDs: token-id inputs hash 4-byte little-endian ids in blocks of
// blockSizeTokens ids, the last possibly shorter (dropped under NoPartialBlock), and never equal
// a text input's hashes.
func TestBlockHashesTokenIDs(t *testing.T) {
	ids := make([]uint32, 37)
	for i := range ids {
		ids[i] = uint32(i*7919 + 101)
	}
	got := BlockHashes("m", "", Input{TokenIDs: ids, IsTokens: true}, 16, 256)
	if want := refTokenChain("m", "", ids, 16, 256); len(got) != 3 || !slices.Equal(got, want) {
		t.Fatalf("token chain %v, want 3 blocks %v", got, want)
	}
	if np := blockHashes("m", "", Input{TokenIDs: ids, IsTokens: true}, 16, 256, V150); !slices.Equal(np, got[:2]) {
		t.Fatalf("v1.5.0 mode: %v, want the 2 full blocks %v", np, got[:2])
	}
	if capped := BlockHashes("m", "", Input{TokenIDs: ids, IsTokens: true}, 16, 2); !slices.Equal(capped, got[:2]) {
		t.Fatalf("maxBlocks 2: %v", capped)
	}
	if BlockHashes("m", "", Input{IsTokens: true}, 16, 256) != nil {
		t.Fatalf("no ids must give no blocks")
	}
	changed := slices.Clone(ids)
	changed[36]++
	if c := BlockHashes("m", "", Input{TokenIDs: changed, IsTokens: true}, 16, 256); c[1] != got[1] || c[2] == got[2] {
		t.Fatalf("a change in the last id must change only the partial block's hash")
	}
}

func TestEstimateTokens(t *testing.T) {
	chinese := strings.Repeat("我们的模型服务器正在处理请求", 22)[:300*3]
	for _, tc := range []struct {
		name string
		in   Input
		want int
	}{
		{"ascii rounds up", Input{Text: "hello"}, 2},
		{"empty", Input{}, 0},
		{"300 Chinese characters are 300 tokens, not 225", Input{Text: chinese}, 300},
		{"kana and hangul one each", Input{Text: "ひらがなカタカナ한국어"}, 11},
		{"accented latin counts characters, not bytes", Input{Text: "ééééééééé"}, 3},
		{"mixed", Input{Text: "abcd日本"}, 3},
		{"token ids one each", Input{TokenIDs: []uint32{1, 2, 3, 4, 5}, IsTokens: true}, 5},
	} {
		if got := tc.in.EstimateTokens(); got != tc.want {
			t.Errorf("%s: EstimateTokens = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestBlockHashesLiteralVectors pins literal values. They were produced once by refChain (the
// from-scratch XXH64 above, checked against the published XXH64 vectors) for these inputs; a
// change to either implementation or to the chain rule breaks them.
func TestBlockHashesLiteralVectors(t *testing.T) {
	in := Input{Text: strings.Repeat("0123456789abcdef", 8)} // 128 bytes = 2 blocks of 16 tokens
	tests := []struct {
		name, model, salt string
		want              []uint64
	}{
		{"model only", "meta-llama/Llama-3.1-8B-Instruct", "", []uint64{0x15661834777aa767, 0x7cd1cb50bbd6b488}},
		{"model and salt", "meta-llama/Llama-3.1-8B-Instruct", "s1", []uint64{0x33cb35fd99e79d19, 0xf482e74cce9d4483}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := BlockHashes(tc.model, tc.salt, in, 16, 256)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\nindependent: %#x", diff, refChain(tc.model, tc.salt, in.Text, 16, 256))
			}
		})
	}
}

func TestBlockHashesProperties(t *testing.T) {
	in := Input{Text: strings.Repeat("x", 640)}
	base := BlockHashes("m", "", in, 16, 256)
	if diff := cmp.Diff(base, BlockHashes("m", "", in, 16, 256)); diff != "" {
		t.Fatalf("not deterministic: %s", diff)
	}
	other := BlockHashes("m2", "", in, 16, 256)
	salted := BlockHashes("m", "x", in, 16, 256)
	for i := range base {
		if base[i] == other[i] || base[i] == salted[i] {
			t.Fatalf("block %d shares a hash across models or salts", i)
		}
	}
	// A shared prefix gives shared leading hashes, then diverges.
	h2 := BlockHashes("m", "", Input{Text: strings.Repeat("x", 320) + strings.Repeat("y", 320)}, 16, 256)
	if diff := cmp.Diff(base[:5], h2[:5]); diff != "" {
		t.Fatalf("shared prefix hashes differ: %s", diff)
	}
	if base[5] == h2[5] {
		t.Fatalf("diverging block has the same hash")
	}
}

func TestRequestInput(t *testing.T) {
	chatBody := func(msgs ...framework.Message) *framework.LLMRequestBody {
		return &framework.LLMRequestBody{ChatCompletions: &framework.ChatCompletionsRequest{Messages: msgs}}
	}
	const dataURL = "data:image/png;base64,iVBORw0KGgo="
	imageBlocks := []any{
		map[string]any{"type": "text", "text": "look", "extra": 1},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "http://x/y.png", "detail": "high"}},
	}
	tests := []struct {
		name     string
		body     *framework.LLMRequestBody
		want     string
		wantV150 string // "" = same as want
		wantErr  bool
	}{
		{name: "completions prompt", body: &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: "a <b> & c"}}, want: "a <b> & c"},
		{name: "embeddings input", body: &framework.LLMRequestBody{Embeddings: &framework.EmbeddingsRequest{Input: "embed me"}}, want: "embed me"},
		{name: "chat string content escapes html", body: chatBody(framework.Message{Role: "system", Content: "Use <tags> & more"}, framework.Message{Role: "user", Content: "hi"}),
			want: `[{"role":"system","content":"Use \u003ctags\u003e \u0026 more"},{"role":"user","content":"hi"}]`},
		{name: "chat empty role omitted, nil content is empty string", body: chatBody(framework.Message{Content: nil}),
			want: `[{"content":""}]`},
		{name: "chat structured content as v1.5.0 ContentBlock", body: chatBody(framework.Message{Role: "user", Content: imageBlocks}),
			want: `[{"role":"user","content":[{"type":"text","text":"look","image_url":{},"input_audio":{},"video_url":{}},` +
				`{"type":"image_url","image_url":{"url":"http://x/y.png"},"input_audio":{},"video_url":{}}]}]`},
		{name: "chat inline image and audio by digest", body: chatBody(framework.Message{Role: "user", Content: []any{
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": dataURL}},
			map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": "UklGRg==", "format": "wav"}},
		}}),
			want: `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + Digest(dataURL) + `"},"input_audio":{},"video_url":{}},` +
				`{"type":"input_audio","image_url":{},"input_audio":{"data":"` + Digest("UklGRg==") + `","format":"wav"},"video_url":{}}]}]`,
			wantV150: `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + dataURL + `"},"input_audio":{},"video_url":{}},` +
				`{"type":"input_audio","image_url":{},"input_audio":{"data":"UklGRg==","format":"wav"},"video_url":{}}]}]`},
		{name: "chat file part kept", body: chatBody(framework.Message{Role: "user", Content: []any{
			map[string]any{"type": "file", "file": map[string]any{"filename": "a.pdf", "file_data": "JVBERi0="}},
		}}),
			want:     `[{"role":"user","content":[{"type":"file","image_url":{},"input_audio":{},"video_url":{},"file":{"filename":"a.pdf","file_data":"` + Digest("JVBERi0=") + `"}}]}]`,
			wantV150: `[{"role":"user","content":[{"type":"file","image_url":{},"input_audio":{},"video_url":{}}]}]`},
		{name: "chat tool calls and tools", body: &framework.LLMRequestBody{ChatCompletions: &framework.ChatCompletionsRequest{
			Tools: []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}},
			Messages: []framework.Message{{Role: "assistant", ToolCalls: []any{map[string]any{"id": "c1", "type": "function"}}},
				{Role: "tool", ToolCallID: "c1", Content: "42"}}}},
			want: `{"tools":[{"function":{"name":"f"},"type":"function"}]}` +
				`[{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function"}]},{"role":"tool","content":"42","tool_call_id":"c1"}]`,
			wantV150: `[{"role":"assistant","content":""},{"role":"tool","content":"42"}]`},
		{name: "chat empty content array", body: chatBody(framework.Message{Role: "user", Content: []any{}}),
			want: `[{"role":"user","content":[]}]`},
		{name: "chat object content is an error", body: chatBody(framework.Message{Role: "user", Content: map[string]any{"a": 1}}), wantErr: true},
		{name: "anthropic messages", body: &framework.LLMRequestBody{Messages: &framework.MessagesRequest{
			System: "be brief",
			Messages: []framework.Message{{Role: "user", Content: []any{
				map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBO"}},
				map[string]any{"type": "text", "text": "data: not a URL"},
			}}}}},
			want: `[{"content":"be brief","role":"system"},{"content":[{"source":{"data":"` + Digest("iVBO") +
				`","media_type":"image/png","type":"base64"},"type":"image"},{"text":"data: not a URL","type":"text"}],"role":"user"}]`},
		{name: "responses string input", body: &framework.LLMRequestBody{Responses: &framework.ResponsesRequest{Instructions: "sys", Input: "q"}},
			want: `[{"content":"sys","role":"system"},{"content":"q","role":"user"}]`},
		{name: "responses items", body: &framework.LLMRequestBody{Responses: &framework.ResponsesRequest{Input: []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_image", "image_url": dataURL}}}}}},
			want: `[{"content":[{"image_url":"` + Digest(dataURL) + `","type":"input_image"}],"role":"user"}]`},
		{name: "other API has no input", body: &framework.LLMRequestBody{API: framework.APIOther}, wantErr: true},
		{name: "nil body", body: nil, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RequestInput(tc.body)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if got.Text != tc.want || got.IsTokens {
				t.Fatalf("got  %s\nwant %s", got.Text, tc.want)
			}
			if tc.body.ChatCompletions == nil {
				return
			}
			want := tc.wantV150
			if want == "" {
				want = tc.want
			}
			old, err := requestInput(tc.body, V150)
			if err != nil || old.Text != want {
				t.Fatalf("v1.5.0 mode: got %s (%v)\nwant %s", old.Text, err, want)
			}
		})
	}
	if _, err := RequestInput(nil); !errors.Is(err, ErrNoInput) {
		t.Fatalf("nil body: err = %v, want ErrNoInput", err)
	}
	ids := &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{TokenIDs: []uint32{1, 2}}}
	if in, err := RequestInput(ids); err != nil || !in.IsTokens || !slices.Equal(in.TokenIDs, []uint32{1, 2}) {
		t.Fatalf("token ids: %+v %v", in, err)
	}
}

// TestMultimodalIdentity: two chat requests with equal text and different images (URL or inline
// data, SPEC §9.1) share the blocks before the image and none after it; the same image shares
// all.
func TestMultimodalIdentity(t *testing.T) {
	text := strings.Repeat("describe the picture in detail please. ", 8)
	req := func(url string) *framework.LLMRequest {
		return &framework.LLMRequest{TargetModel: "m", Body: &framework.LLMRequestBody{ChatCompletions: &framework.ChatCompletionsRequest{
			Messages: []framework.Message{{Role: "user", Content: []any{
				map[string]any{"type": "text", "text": text},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}},
				map[string]any{"type": "text", "text": text},
			}}}}}}
	}
	for _, pair := range [][2]string{
		{"https://img.example/cat-0001.png", "https://img.example/cat-0002.png"},
		// Longer than maxPrefixBlocksToMatch × 64 characters: hashed in full (v1.5.0) two images
		// that differ only near their end would be cut before the difference and match in full.
		{"data:image/png;base64," + strings.Repeat("A", 20000) + "B", "data:image/png;base64," + strings.Repeat("A", 20000) + "C"},
	} {
		a, _ := HashRequest(req(pair[0]), 16, 256)
		b, _ := HashRequest(req(pair[1]), 16, 256)
		same, _ := HashRequest(req(pair[0]), 16, 256)
		if !slices.Equal(a, same) {
			t.Fatalf("the same image hashes differently")
		}
		shared := 0
		for shared < min(len(a), len(b)) && a[shared] == b[shared] {
			shared++
		}
		if shared == 0 || shared >= len(a)-1 {
			t.Fatalf("images %q vs %q: %d of %d blocks shared; want the text before the image only", pair[0][:30], pair[1][:30], shared, len(a))
		}
	}
}

// TestHashRequestCompletionsInPlace checks that HashRequest's string path for a completions
// prompt gives exactly BlockHashes over RequestInput, on seeded random prompts whose
// lengths straddle block boundaries, with and without a salt and a block cap.
func TestHashRequestCompletionsInPlace(t *testing.T) {
	const seed = 77
	r := rand.New(rand.NewPCG(seed, 0))
	for trial := range 500 {
		buf := make([]byte, r.IntN(300))
		for i := range buf {
			buf[i] = byte(32 + r.IntN(95))
		}
		req := &framework.LLMRequest{TargetModel: "m", Body: &framework.LLMRequestBody{
			Completions: &framework.CompletionsRequest{Prompt: string(buf)}}}
		if r.IntN(2) == 0 {
			req.Body.Completions.CacheSalt = "salt"
		}
		bs, maxBlocks := 1+r.IntN(6), r.IntN(12)-1
		got, err := HashRequest(req, bs, maxBlocks)
		if err != nil {
			t.Fatal(err)
		}
		in, err := RequestInput(req.Body)
		if err != nil {
			t.Fatal(err)
		}
		if want := BlockHashes("m", req.CacheSalt(), in, bs, maxBlocks); !slices.Equal(got, want) {
			t.Fatalf("seed %d trial %d (len %d, block %d, max %d): HashRequest %v, BlockHashes %v", seed, trial, len(buf), bs, maxBlocks, got, want)
		}
	}
}
