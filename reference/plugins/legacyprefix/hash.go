package legacyprefix

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/eppkit/eppkit/reference/framework"
)

// promptInput is what one request is hashed over: text bytes, or token ids (tokens true).
type promptInput struct {
	text   []byte
	ids    []uint32
	tokens bool
}

// hashInput returns the input the prefix hashes are computed over (SPEC §2.1, §9.1):
//   - completions prompt / embeddings input: the text as stored (an array of strings already
//     joined by the parser as upstream v1.5.0 joins it), or the token ids;
//   - chat completions: the messages re-encoded the way upstream v1.5.0 marshals its typed
//     messages (pkg/epp/framework/interface/scheduling/types.go Message/Content/ContentBlock),
//     with eppkit's additions (encodeChatMessages): inline data by digest, file parts, tool
//     calls and tool call ids, and tool definitions in front;
//   - Anthropic Messages and OpenAI Responses: a list of messages (system/instructions first),
//     keys sorted, inline data by digest (encodeMessageList).
//
// A headers-only request, or one of an API without a prompt, has no input (zero value, nil).
func hashInput(req *framework.LLMRequest) (promptInput, error) {
	if req == nil || req.Body == nil {
		return promptInput{}, nil
	}
	b := req.Body
	switch {
	case b.Completions != nil:
		if b.Completions.TokenIDs != nil {
			return promptInput{ids: b.Completions.TokenIDs, tokens: true}, nil
		}
		return promptInput{text: []byte(b.Completions.Prompt)}, nil
	case b.Embeddings != nil:
		if b.Embeddings.TokenIDs != nil {
			return promptInput{ids: b.Embeddings.TokenIDs, tokens: true}, nil
		}
		return promptInput{text: []byte(b.Embeddings.Input)}, nil
	case b.ChatCompletions != nil:
		t, err := encodeChatMessages(b.ChatCompletions.Messages, b.ChatCompletions.Tools)
		return promptInput{text: t}, err
	case b.Messages != nil:
		var list []any
		if b.Messages.System != nil {
			list = append(list, map[string]any{"role": "system", "content": b.Messages.System})
		}
		for _, m := range b.Messages.Messages {
			list = append(list, map[string]any{"role": m.Role, "content": m.Content})
		}
		t, err := encodeMessageList(list, b.Messages.Tools)
		return promptInput{text: t}, err
	case b.Responses != nil:
		items, err := responsesItems(b.Responses)
		if err != nil {
			return promptInput{}, err
		}
		t, err := encodeMessageList(items, b.Responses.Tools)
		return promptInput{text: t}, err
	}
	return promptInput{}, nil
}

// responsesItems lists a Responses request as messages and items: the instructions as a system
// message (when set), then the input — a string as one user message, an item list as it is.
func responsesItems(r *framework.ResponsesRequest) ([]any, error) {
	var head []any
	if r.Instructions != "" {
		head = []any{map[string]any{"role": "system", "content": r.Instructions}}
	}
	if r.Input == nil {
		return append([]any{}, head...), nil
	}
	if text, isText := r.Input.(string); isText {
		return append(head, map[string]any{"role": "user", "content": text}), nil
	}
	items, isList := r.Input.([]any)
	if !isList {
		return nil, errors.New("responses input is neither a string nor a list of items")
	}
	return append(head, items...), nil
}

// hashPrompt computes the chained block hashes of a request (SPEC §2.1; upstream
// multi/prefix/plugin.go hashPrompt, December 2025, with eppkit's amendments):
//
//	seed = xxhash64(targetModel ‖ cacheSalt)          (salt only when non-empty)
//	h_i  = xxhash64(block_i ‖ littleEndian64(h_{i-1}))  with h_{-1} = seed
//
// Text blocks are blockSizeTokens × 4 characters (runes as utf8.DecodeRune reads them, so a
// block never ends inside a UTF-8 sequence; an invalid byte is a character of its own);
// token-id blocks are blockSizeTokens ids written as 4-byte little-endian values. The last
// block may be shorter (the trailing partial block is hashed: GIE PR #2823); at most maxBlocks
// blocks are hashed. The result has one hash per block, block 0 first.
func hashPrompt(req *framework.LLMRequest, blockSizeTokens, maxBlocks int) ([]uint64, error) {
	in, err := hashInput(req)
	if err != nil {
		return nil, err
	}
	if blockSizeTokens <= 0 || maxBlocks <= 0 {
		return nil, nil
	}
	var blocks [][]byte
	if in.tokens {
		raw := make([]byte, 4*len(in.ids))
		for i, id := range in.ids {
			binary.LittleEndian.PutUint32(raw[4*i:], id)
		}
		for start := 0; start < len(raw) && len(blocks) < maxBlocks; start += 4 * blockSizeTokens {
			blocks = append(blocks, raw[start:min(start+4*blockSizeTokens, len(raw))])
		}
	} else {
		chars := blockSizeTokens * CharactersPerToken
		start, n := 0, 0
		for pos := 0; pos < len(in.text) && len(blocks) < maxBlocks; {
			_, w := utf8.DecodeRune(in.text[pos:])
			pos += w
			n++
			if n == chars || pos == len(in.text) {
				blocks = append(blocks, in.text[start:pos])
				start, n = pos, 0
			}
		}
	}
	if len(blocks) == 0 {
		return nil, nil
	}

	d := xxhash.New()
	_, _ = d.WriteString(req.TargetModel)
	if salt := req.CacheSalt(); salt != "" {
		_, _ = d.WriteString(salt)
	}
	prev := d.Sum64()
	out := make([]uint64, len(blocks))
	var chain [8]byte
	for i, blk := range blocks {
		d.Reset()
		_, _ = d.Write(blk)
		binary.LittleEndian.PutUint64(chain[:], prev)
		_, _ = d.Write(chain[:])
		prev = d.Sum64()
		out[i] = prev
	}
	return out, nil
}

// digestOf is the identity inline data contributes (SPEC §9.1): "xxh64:" + 16 hex digits of
// xxhash64 over the string's bytes.
func digestOf(s string) string {
	return "xxh64:" + fmt.Sprintf("%016x", xxhash.Sum64([]byte(s)))
}

// dataURL reports whether s is an RFC 2397 data: URL: "data:", then media type and parameters
// of token characters up to a comma.
func dataURL(s string) bool {
	const prefix = "data:"
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return false
	}
	for _, c := range []byte(s[len(prefix):]) {
		switch {
		case c == ',':
			return true
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c == '!' || c == '#' || c == '$' || c == '&' || c == '\'' || c == '*' || c == '+' || c == '-' ||
			c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~' || c == '/' || c == ';' || c == '=':
		default:
			return false
		}
	}
	return false
}

func urlOrDigest(u string) string {
	if dataURL(u) {
		return digestOf(u)
	}
	return u
}

// Upstream-shaped chat types. Upstream v1.5.0 hashes json.Marshal(ChatCompletions.Messages) of
// its typed Message{Role `role,omitempty`; Content}. Content is either a string or a list of
// ContentBlock, and every ContentBlock carries `type`, `text` (omitempty) and the always-present
// objects `image_url`, `input_audio`, `video_url`. Go's encoding/json escapes <, > and & in all
// of it. These types reproduce that byte for byte; eppkit's fields (file, tool_calls,
// tool_call_id) are omitted when empty, so a chat without them encodes exactly as upstream.
type chatMessage struct {
	Role       string      `json:"role,omitempty"`
	Content    chatContent `json:"content"`
	ToolCalls  []any       `json:"tool_calls,omitempty"`
	ToolCallID string      `json:"tool_call_id,omitempty"`
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
	File       *chatFile `json:"file,omitempty"`
}

type chatURL struct {
	URL string `json:"url,omitempty"`
}

type chatAudio struct {
	Data   string `json:"data,omitempty"`
	Format string `json:"format,omitempty"`
}

type chatFile struct {
	FileID   string `json:"file_id,omitempty"`
	Filename string `json:"filename,omitempty"`
	FileData string `json:"file_data,omitempty"`
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
// a string (JSON null reads as the empty string), then as a list of content blocks, whose inline
// data (data: URLs of images and videos, audio data, file_data) is then replaced by its digest.
// Anything else is an error; upstream refuses such a body when parsing it.
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
	for i := range blocks {
		blk := &blocks[i]
		blk.ImageURL.URL = urlOrDigest(blk.ImageURL.URL)
		blk.VideoURL.URL = urlOrDigest(blk.VideoURL.URL)
		if blk.InputAudio.Data != "" {
			blk.InputAudio.Data = digestOf(blk.InputAudio.Data)
		}
		if f := blk.File; f != nil {
			if f.FileData != "" {
				f.FileData = digestOf(f.FileData)
			}
			if f.FileID == "" && f.Filename == "" && f.FileData == "" {
				blk.File = nil
			}
		}
	}
	return chatContent{blocks: blocks}, nil
}

// encodeChatMessages re-encodes chat messages for hashing. A nil message list encodes as `null`
// and an empty one as `[]`, as json.Marshal does upstream. Non-empty tools go first, as
// {"tools":[...]}.
func encodeChatMessages(msgs []framework.Message, tools []any) ([]byte, error) {
	var wire []chatMessage
	if msgs != nil {
		wire = make([]chatMessage, len(msgs))
	}
	for i, m := range msgs {
		c, err := toChatContent(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		wire[i] = chatMessage{Role: m.Role, Content: c, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
	}
	out, err := json.Marshal(wire)
	if err != nil {
		return nil, err
	}
	return prependTools(tools, out)
}

func prependTools(tools []any, rest []byte) ([]byte, error) {
	if len(tools) == 0 {
		return rest, nil
	}
	head, err := json.Marshal(struct {
		Tools []any `json:"tools"`
	}{tools})
	if err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	return append(head, rest...), nil
}

// encodeMessageList encodes a list of message or item values with their inline data digested
// (scrub), map keys sorted, after the tools.
func encodeMessageList(list []any, tools []any) ([]byte, error) {
	if list == nil {
		list = []any{}
	}
	out, err := json.Marshal(scrub(list))
	if err != nil {
		return nil, err
	}
	return prependTools(tools, out)
}

// scrub replaces inline data by its digest in a decoded JSON value: strings that are data: URLs,
// and strings held under the keys "data" and "file_data".
func scrub(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, x := range t {
			if s, isStr := x.(string); isStr && (k == "data" || k == "file_data") {
				m[k] = digestOf(s)
			} else {
				m[k] = scrub(x)
			}
		}
		return m
	case []any:
		l := make([]any, 0, len(t))
		for _, x := range t {
			l = append(l, scrub(x))
		}
		return l
	case string:
		return urlOrDigest(t)
	}
	return v
}
