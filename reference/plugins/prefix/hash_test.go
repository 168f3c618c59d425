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

// refChain computes the v1.5.0 chain by concatenation with refXXH64, written straight from SPEC
// §2.1 without BlockHashes' streaming digest.
func refChain(model, salt, input string, blockSizeTokens, maxBlocks int) []uint64 {
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
	tests := []struct {
		name                       string
		model, salt, input         string
		blockSizeTokens, maxBlocks int
		wantLen                    int
	}{
		{"shorter than one block", "m", "", strings.Repeat("a", 63), 16, 256, 0},
		{"exactly one block", "m", "", strings.Repeat("a", 64), 16, 256, 1},
		{"trailing partial block ignored", "m", "", strings.Repeat("a", 64*3+63), 16, 256, 3},
		{"truncated to maxBlocks", "llama", "", long, 16, 5, 5},
		{"salted", "llama", "tenant-a", long, 16, 256, 28},
		{"block size 1 token", "m", "", "abcdefghij", 1, 256, 2},
		{"maxBlocks zero", "m", "", long, 16, 0, 0},
		{"block size zero", "m", "", long, 0, 256, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := BlockHashes(tc.model, tc.salt, []byte(tc.input), tc.blockSizeTokens, tc.maxBlocks)
			if len(got) != tc.wantLen {
				t.Fatalf("len = %d, want %d", len(got), tc.wantLen)
			}
			if tc.wantLen == 0 {
				if got != nil {
					t.Fatalf("want nil, got %v", got)
				}
				return
			}
			want := refChain(tc.model, tc.salt, tc.input, tc.blockSizeTokens, tc.maxBlocks)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("chain differs from the independent computation (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBlockHashesLiteralVectors pins literal values. They were produced once by refChain (the
// from-scratch XXH64 above, checked against the published XXH64 vectors) for these inputs; a
// change to either implementation or to the chain rule breaks them.
func TestBlockHashesLiteralVectors(t *testing.T) {
	in := []byte(strings.Repeat("0123456789abcdef", 8)) // 128 bytes = 2 blocks of 16 tokens
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
				t.Errorf("(-want +got):\n%s\nindependent: %#x", diff, refChain(tc.model, tc.salt, string(in), 16, 256))
			}
		})
	}
}

func TestBlockHashesProperties(t *testing.T) {
	in := []byte(strings.Repeat("x", 640))
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
	in2 := append([]byte(strings.Repeat("x", 320)), []byte(strings.Repeat("y", 320))...)
	h2 := BlockHashes("m", "", in2, 16, 256)
	if diff := cmp.Diff(base[:5], h2[:5]); diff != "" {
		t.Fatalf("shared prefix hashes differ: %s", diff)
	}
	if base[5] == h2[5] {
		t.Fatalf("diverging block has the same hash")
	}
}

func TestInputText(t *testing.T) {
	tests := []struct {
		name    string
		body    *framework.LLMRequestBody
		want    string
		wantErr bool
	}{
		{name: "completions prompt", body: &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: "a <b> & c"}}, want: "a <b> & c"},
		{name: "chat string content escapes html", body: &framework.LLMRequestBody{ChatCompletions: &framework.ChatCompletionsRequest{
			Messages: []framework.Message{{Role: "system", Content: "Use <tags> & more"}, {Role: "user", Content: "hi"}}}},
			want: `[{"role":"system","content":"Use \u003ctags\u003e \u0026 more"},{"role":"user","content":"hi"}]`},
		{name: "chat empty role omitted, nil content is empty string", body: &framework.LLMRequestBody{ChatCompletions: &framework.ChatCompletionsRequest{
			Messages: []framework.Message{{Content: nil}}}},
			want: `[{"content":""}]`},
		{name: "chat structured content as v1.5.0 ContentBlock", body: &framework.LLMRequestBody{ChatCompletions: &framework.ChatCompletionsRequest{
			Messages: []framework.Message{{Role: "user", Content: []any{
				map[string]any{"type": "text", "text": "look", "extra": 1},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "http://x/y.png", "detail": "high"}},
			}}}}},
			want: `[{"role":"user","content":[{"type":"text","text":"look","image_url":{},"input_audio":{},"video_url":{}},` +
				`{"type":"image_url","image_url":{"url":"http://x/y.png"},"input_audio":{},"video_url":{}}]}]`},
		{name: "chat empty content array", body: &framework.LLMRequestBody{ChatCompletions: &framework.ChatCompletionsRequest{
			Messages: []framework.Message{{Role: "user", Content: []any{}}}}},
			want: `[{"role":"user","content":[]}]`},
		{name: "chat tools are not hashed", body: &framework.LLMRequestBody{ChatCompletions: &framework.ChatCompletionsRequest{
			Messages: []framework.Message{{Role: "user", Content: "q"}}, Tools: []any{"t"}}},
			want: `[{"role":"user","content":"q"}]`},
		{name: "chat object content is an error", body: &framework.LLMRequestBody{ChatCompletions: &framework.ChatCompletionsRequest{
			Messages: []framework.Message{{Role: "user", Content: map[string]any{"a": 1}}}}}, wantErr: true},
		{name: "nil body", body: nil, wantErr: true},
		{name: "empty body", body: &framework.LLMRequestBody{}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := InputText(tc.body)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	if _, err := InputText(nil); !errors.Is(err, ErrNoInput) {
		t.Fatalf("nil body: err = %v, want ErrNoInput", err)
	}
}

// TestHashRequestCompletionsInPlace checks that HashRequest's string path for a completions
// prompt gives exactly BlockHashes over InputText's bytes, on seeded random prompts whose
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
		in, err := InputText(req.Body)
		if err != nil {
			t.Fatal(err)
		}
		if want := BlockHashes("m", req.CacheSalt(), in, bs, maxBlocks); !slices.Equal(got, want) {
			t.Fatalf("seed %d trial %d (len %d, block %d, max %d): HashRequest %v, BlockHashes %v", seed, trial, len(buf), bs, maxBlocks, got, want)
		}
	}
}
