package legacyprefix

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/eppkit/eppkit/reference/framework"
)

// hashInput returns the bytes the prefix hashes are computed over (SPEC §2.1):
//   - completions: the prompt as stored in the request (an array prompt was already joined by
//     the parser as upstream v1.5.0 joins it);
//   - chat completions: the messages re-encoded the way upstream marshals its typed messages
//     (v1.5.0 pkg/epp/framework/interface/scheduling/types.go Message/Content/ContentBlock and
//     approximateprefix/hashing.go getUserInputBytes), see encodeChatMessages.
//
// A headers-only request has no input (nil, nil).
func hashInput(req *framework.LLMRequest) ([]byte, error) {
	if req == nil || req.Body == nil {
		return nil, nil
	}
	switch {
	case req.Body.Completions != nil:
		return []byte(req.Body.Completions.Prompt), nil
	case req.Body.ChatCompletions != nil:
		return encodeChatMessages(req.Body.ChatCompletions.Messages)
	}
	return nil, errors.New("request body has neither completions nor chat completions")
}

// hashPrompt computes the chained block hashes of a request (SPEC §2.1; upstream
// multi/prefix/plugin.go hashPrompt, December 2025, unchanged in v1.5.0 hashing.go):
//
//	seed = xxhash64(targetModel ‖ cacheSalt)          (salt only when non-empty)
//	h_i  = xxhash64(block_i ‖ littleEndian64(h_{i-1}))  with h_{-1} = seed
//
// Blocks are blockSizeTokens × 4 characters (bytes) long. The input is cut to at most
// maxBlocks blocks; a trailing partial block is not hashed, and an input shorter than one block
// yields no hashes. The result has one hash per full block, block 0 first.
func hashPrompt(req *framework.LLMRequest, blockSizeTokens, maxBlocks int) ([]uint64, error) {
	input, err := hashInput(req)
	if err != nil || input == nil {
		return nil, err
	}
	blockChars := blockSizeTokens * CharactersPerToken
	if blockChars <= 0 || maxBlocks <= 0 || len(input) < blockChars {
		return nil, nil
	}
	n := len(input) / blockChars
	if n > maxBlocks {
		n = maxBlocks
	}

	d := xxhash.New()
	_, _ = d.WriteString(req.TargetModel)
	if salt := req.CacheSalt(); salt != "" {
		_, _ = d.WriteString(salt)
	}
	prev := d.Sum64()

	out := make([]uint64, n)
	var chain [8]byte
	for i := range n {
		d.Reset()
		_, _ = d.Write(input[i*blockChars : (i+1)*blockChars])
		binary.LittleEndian.PutUint64(chain[:], prev)
		_, _ = d.Write(chain[:])
		prev = d.Sum64()
		out[i] = prev
	}
	return out, nil
}

// Upstream-shaped chat types. Upstream v1.5.0 hashes json.Marshal(ChatCompletions.Messages) of
// its typed Message{Role `role,omitempty`; Content}. Content is either a string or a list of
// ContentBlock, and every ContentBlock carries `type`, `text` (omitempty) and the always-present
// objects `image_url`, `input_audio`, `video_url`. Go's encoding/json escapes <, > and & in all
// of it. These types reproduce that byte for byte.
type chatMessage struct {
	Role    string      `json:"role,omitempty"`
	Content chatContent `json:"content"`
}

type chatContent struct {
	text   string
	blocks []chatBlock
}

type chatBlock struct {
	Type       string    `json:"type"`
	Text       string    `json:"text,omitempty"`
	ImageURL   chatURL   `json:"image_url"`
	InputAudio chatAudio `json:"input_audio"`
	VideoURL   chatURL   `json:"video_url"`
}

type chatURL struct {
	URL string `json:"url,omitempty"`
}

type chatAudio struct {
	Data   string `json:"data,omitempty"`
	Format string `json:"format,omitempty"`
}

// MarshalJSON writes the string form when there is text, else the block list when there is
// one (even empty), else "" — upstream Content.MarshalJSON's order.
func (c chatContent) MarshalJSON() ([]byte, error) {
	switch {
	case c.text != "":
		return json.Marshal(c.text)
	case c.blocks != nil:
		return json.Marshal(c.blocks)
	}
	return []byte(`""`), nil
}

// toChatContent reads a message's content as upstream's Content.UnmarshalJSON would: first as
// a string (JSON null reads as the empty string), then as a list of content blocks. Anything
// else is an error; upstream refuses such a body when parsing it.
func toChatContent(v any) (chatContent, error) {
	switch c := v.(type) {
	case nil:
		return chatContent{}, nil
	case string:
		return chatContent{text: c}, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return chatContent{}, fmt.Errorf("message content: %w", err)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return chatContent{text: s}, nil
	}
	var blocks []chatBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return chatContent{}, fmt.Errorf("message content is neither a string nor a list of content blocks: %w", err)
	}
	return chatContent{blocks: blocks}, nil
}

// encodeChatMessages re-encodes chat messages as upstream v1.5.0 does before hashing. A nil
// message list encodes as `null` and an empty one as `[]`, as json.Marshal does upstream.
func encodeChatMessages(msgs []framework.Message) ([]byte, error) {
	if msgs == nil {
		return json.Marshal([]chatMessage(nil))
	}
	wire := make([]chatMessage, len(msgs))
	for i, m := range msgs {
		c, err := toChatContent(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		wire[i] = chatMessage{Role: m.Role, Content: c}
	}
	return json.Marshal(wire)
}
