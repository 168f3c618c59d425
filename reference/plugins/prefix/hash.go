package prefix

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/eppkit/eppkit/reference/framework"
)

// AverageCharactersPerToken converts a block size in tokens to characters: blockChars =
// blockSizeTokens × 4 (GIE v1.5.0 approximateprefix/types.go averageCharactersPerToken).
const AverageCharactersPerToken = 4

// BlockHashes splits input into blocks of blockSizeTokens×4 bytes and returns the chained block
// hashes, at most maxBlocks of them (see the package doc for the exact rule):
//
//	seed = xxhash64(model ‖ salt)              (salt written only when non-empty)
//	h_i  = xxhash64(block_i ‖ littleEndian64(h_{i−1})), h_{−1} = seed
//
// It returns nil when the block size is ≤ 0, when input is shorter than one block, or when
// maxBlocks ≤ 0. The trailing partial block is not hashed (GIE v1.5.0 hashing.go hashPrompt).
func BlockHashes(model, salt string, input []byte, blockSizeTokens, maxBlocks int) []uint64 {
	return blockHashes(model, salt, input, blockSizeTokens, maxBlocks, (*xxhash.Digest).Write)
}

// blockHashes is BlockHashes over a string or a byte slice (HashRequest hashes a completions
// prompt in place, without copying it into a []byte); write feeds one block to the digest.
func blockHashes[T string | []byte](model, salt string, input T, blockSizeTokens, maxBlocks int,
	write func(*xxhash.Digest, T) (int, error)) []uint64 {
	blockChars := blockSizeTokens * AverageCharactersPerToken
	if blockChars <= 0 || len(input) < blockChars {
		return nil
	}
	if maxBlocks < 0 {
		maxBlocks = 0
	}
	if limit := blockChars * maxBlocks; len(input) > limit {
		input = input[:limit]
	}
	n := len(input) / blockChars
	if n == 0 {
		return nil
	}
	out := make([]uint64, 0, n)

	d := xxhash.New()
	_, _ = d.WriteString(model)
	if salt != "" {
		_, _ = d.WriteString(salt)
	}
	prev := d.Sum64()
	var chain [8]byte
	for i := 0; i+blockChars <= len(input); i += blockChars {
		d.Reset()
		_, _ = write(d, input[i:i+blockChars])
		binary.LittleEndian.PutUint64(chain[:], prev)
		_, _ = d.Write(chain[:])
		prev = d.Sum64()
		out = append(out, prev)
	}
	return out
}

// ErrNoInput is returned by InputText for a request without a completions or chat body.
var ErrNoInput = errors.New("prefix: request has no completions or chat body")

// InputText returns the bytes that are hashed for a request body (package doc, "Input text"):
// the completions prompt as is, or the chat messages re-encoded as GIE v1.5.0 encodes them.
// It returns ErrNoInput for a nil body or one with neither API set, and an error naming the
// message index when a chat message's content is neither a string, null, nor an array of
// content-block objects (GIE v1.5.0 rejects such a body when parsing it).
func InputText(body *framework.LLMRequestBody) ([]byte, error) {
	switch {
	case body == nil:
		return nil, ErrNoInput
	case body.ChatCompletions != nil:
		return encodeMessages(body.ChatCompletions.Messages)
	case body.Completions != nil:
		return []byte(body.Completions.Prompt), nil
	}
	return nil, ErrNoInput
}

// HashRequest is InputText followed by BlockHashes with the request's target model and cache
// salt. A request whose input cannot be built hashes to nil (no blocks) and the error says why.
func HashRequest(req *framework.LLMRequest, blockSizeTokens, maxBlocks int) ([]uint64, error) {
	if req == nil {
		return nil, ErrNoInput
	}
	if b := req.Body; b != nil && b.ChatCompletions == nil && b.Completions != nil {
		// InputText's bytes, hashed from the prompt string without copying it.
		return blockHashes(req.TargetModel, req.CacheSalt(), b.Completions.Prompt, blockSizeTokens, maxBlocks,
			(*xxhash.Digest).WriteString), nil
	}
	input, err := InputText(req.Body)
	if err != nil {
		return nil, err
	}
	return BlockHashes(req.TargetModel, req.CacheSalt(), input, blockSizeTokens, maxBlocks), nil
}

// The types below reproduce the JSON shape of GIE v1.5.0's scheduling.Message, Content and
// ContentBlock (framework/interface/scheduling/types.go), so that encoding/json writes the same
// bytes. They are private: only their encoding matters.

type wireMessage struct {
	Role    string      `json:"role,omitempty"`
	Content wireContent `json:"content"`
}

type wireContent struct {
	Raw        string
	Structured []wireBlock
}

// MarshalJSON writes the raw string when non-empty, else the blocks when non-nil, else "" —
// the rule of v1.5.0 Content.MarshalJSON.
func (c wireContent) MarshalJSON() ([]byte, error) {
	switch {
	case c.Raw != "":
		return json.Marshal(c.Raw)
	case c.Structured != nil:
		return json.Marshal(c.Structured)
	}
	return json.Marshal("")
}

type wireBlock struct {
	Type       string    `json:"type"`
	Text       string    `json:"text,omitempty"`
	ImageURL   wireURL   `json:"image_url"`
	InputAudio wireAudio `json:"input_audio"`
	VideoURL   wireURL   `json:"video_url"`
}

type wireURL struct {
	URL string `json:"url,omitempty"`
}

type wireAudio struct {
	Data   string `json:"data,omitempty"`
	Format string `json:"format,omitempty"`
}

func encodeMessages(msgs []framework.Message) ([]byte, error) {
	var wire []wireMessage
	if msgs != nil {
		wire = make([]wireMessage, len(msgs))
	}
	for i, m := range msgs {
		c, err := toWireContent(m.Content)
		if err != nil {
			return nil, fmt.Errorf("prefix: messages[%d].content: %w", i, err)
		}
		wire[i] = wireMessage{Role: m.Role, Content: c}
	}
	return json.Marshal(wire)
}

// toWireContent decodes a parsed content value the way v1.5.0 Content.UnmarshalJSON decodes the
// request bytes: a JSON string (or null) becomes Raw, an array becomes the blocks (decoded with
// encoding/json, so unknown fields drop and keys match case-insensitively), anything else fails.
func toWireContent(v any) (wireContent, error) {
	switch c := v.(type) {
	case nil:
		return wireContent{}, nil
	case string:
		return wireContent{Raw: c}, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return wireContent{}, err
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return wireContent{Raw: s}, nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return wireContent{}, errors.New("content must be a string or an array of content blocks")
	}
	return wireContent{Structured: blocks}, nil
}
