package prefix

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/eppkit/eppkit/reference/framework"
)

// Digest returns the identity a non-text part contributes in place of its inline data
// (package doc, "Input"): "xxh64:" and the 16 lower-case hex digits of xxhash64 of the bytes.
func Digest(data string) string { return fmt.Sprintf("xxh64:%016x", xxhash.Sum64String(data)) }

// urlIdentity is a URL as it enters the hash: a data: URL (inline data) by its Digest, any other
// string as is.
func urlIdentity(u string) string {
	if IsDataURL(u) {
		return Digest(u)
	}
	return u
}

// IsDataURL reports whether s is a data: URL (RFC 2397): "data:", a media type and parameters
// made of token characters ([A-Za-z0-9] and !#$&'*+-.^_`|~/;=), then a comma and the data. Text
// that merely starts with "data:" ("data: the table below") is not one.
func IsDataURL(s string) bool {
	rest, ok := strings.CutPrefix(s, "data:")
	if !ok {
		return false
	}
	comma := strings.IndexByte(rest, ',')
	if comma < 0 {
		return false
	}
	for i := 0; i < comma; i++ {
		c := rest[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$&'*+-.^_`|~/;=", c) >= 0) {
			return false
		}
	}
	return true
}

// The chat types below reproduce the JSON shape of GIE v1.5.0's scheduling.Message, Content and
// ContentBlock (framework/interface/scheduling/types.go), so that encoding/json writes the same
// bytes for text and URL parts; the fields marked eppkit are omitted when empty, so a chat without
// them encodes exactly as in v1.5.0. They are private: only their encoding matters.

type wireMessage struct {
	Role    string      `json:"role,omitempty"`
	Content wireContent `json:"content"`
	// eppkit: an assistant message's tool calls as sent, and a tool message's call id.
	ToolCalls  []any  `json:"tool_calls,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
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
	// eppkit: a file part (OpenAI "file": file_id, filename, file_data).
	File *wireFile `json:"file,omitempty"`
}

type wireURL struct {
	URL string `json:"url,omitempty"`
}

type wireAudio struct {
	Data   string `json:"data,omitempty"`
	Format string `json:"format,omitempty"`
}

type wireFile struct {
	FileID   string `json:"file_id,omitempty"`
	Filename string `json:"filename,omitempty"`
	FileData string `json:"file_data,omitempty"`
}

// encodeChat re-encodes a chat request for hashing. With v150 it is exactly v1.5.0's encoding
// of the messages. Otherwise inline data is replaced by its identity (image and video data: URLs
// and audio data by Digest, file parts kept with file_data by Digest), tool calls and tool call
// ids are kept, and non-empty tool definitions come first as {"tools":[...]}.
func encodeChat(chat *framework.ChatCompletionsRequest, v150 bool) ([]byte, error) {
	msgs := chat.Messages
	var wire []wireMessage
	if msgs != nil {
		wire = make([]wireMessage, len(msgs))
	}
	for i, m := range msgs {
		c, err := toWireContent(m.Content, v150)
		if err != nil {
			return nil, fmt.Errorf("prefix: messages[%d].content: %w", i, err)
		}
		wire[i] = wireMessage{Role: m.Role, Content: c}
		if !v150 {
			wire[i].ToolCalls, wire[i].ToolCallID = m.ToolCalls, m.ToolCallID
		}
	}
	b, err := json.Marshal(wire)
	if err != nil || v150 || len(chat.Tools) == 0 {
		return b, err
	}
	return withTools(chat.Tools, b)
}

// withTools puts {"tools":[...]} (the definitions as sent, keys sorted) before the encoded
// messages: chat templates render tools before the conversation, so they are part of the prefix.
func withTools(tools []any, msgs []byte) ([]byte, error) {
	t, err := json.Marshal(map[string]any{"tools": tools})
	if err != nil {
		return nil, fmt.Errorf("prefix: tools: %w", err)
	}
	return append(t, msgs...), nil
}

// toWireContent decodes a parsed content value the way v1.5.0 Content.UnmarshalJSON decodes the
// request bytes: a JSON string (or null) becomes Raw, an array becomes the blocks (decoded with
// encoding/json, so unknown fields drop and keys match case-insensitively), anything else fails.
// Unless v150, each block's inline data is then replaced by its identity and file parts are kept.
func toWireContent(v any, v150 bool) (wireContent, error) {
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
	for i := range blocks {
		b := &blocks[i]
		if v150 {
			b.File = nil
			continue
		}
		b.ImageURL.URL = urlIdentity(b.ImageURL.URL)
		b.VideoURL.URL = urlIdentity(b.VideoURL.URL)
		if b.InputAudio.Data != "" {
			b.InputAudio.Data = Digest(b.InputAudio.Data)
		}
		if b.File != nil {
			if b.File.FileData != "" {
				b.File.FileData = Digest(b.File.FileData)
			}
			if *b.File == (wireFile{}) {
				b.File = nil
			}
		}
	}
	return wireContent{Structured: blocks}, nil
}

// encodeAnthropic re-encodes an Anthropic Messages request for hashing: the system prompt as a
// first {"content":...,"role":"system"} message, then every message as {"content","role"}; in
// that list every inline datum is replaced by its identity (identities); JSON keys sorted;
// non-empty tool definitions first as {"tools":[...]}.
func encodeAnthropic(m *framework.MessagesRequest) ([]byte, error) {
	list := make([]any, 0, len(m.Messages)+1)
	if m.System != nil {
		list = append(list, map[string]any{"role": "system", "content": m.System})
	}
	for _, msg := range m.Messages {
		list = append(list, map[string]any{"role": msg.Role, "content": msg.Content})
	}
	b, err := json.Marshal(identities(list))
	if err != nil {
		return nil, fmt.Errorf("prefix: messages: %w", err)
	}
	if len(m.Tools) == 0 {
		return b, nil
	}
	return withTools(m.Tools, b)
}

// encodeResponses re-encodes an OpenAI Responses request for hashing: the instructions as a first
// {"content":...,"role":"system"} message, then a string input as one user message or each input
// item as sent; in that list every inline datum is replaced by its identity (identities); JSON
// keys sorted; non-empty tool definitions first as {"tools":[...]}.
func encodeResponses(r *framework.ResponsesRequest) ([]byte, error) {
	list := []any{}
	if r.Instructions != "" {
		list = append(list, map[string]any{"role": "system", "content": r.Instructions})
	}
	switch in := r.Input.(type) {
	case string:
		list = append(list, map[string]any{"role": "user", "content": in})
	case []any:
		list = append(list, in...)
	case nil:
	default:
		return nil, errors.New("prefix: input must be a string or an array of items")
	}
	b, err := json.Marshal(identities(list))
	if err != nil {
		return nil, fmt.Errorf("prefix: input: %w", err)
	}
	if len(r.Tools) == 0 {
		return b, nil
	}
	return withTools(r.Tools, b)
}

// identities returns a copy of a decoded JSON value with every inline datum replaced by its
// Digest: a string under the key "data" or "file_data" (Anthropic base64 sources, audio, files),
// and any string that is a data: URL (images). Other values are kept.
func identities(v any) any {
	switch x := v.(type) {
	case string:
		return urlIdentity(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = identities(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "data" || k == "file_data") {
				out[k] = Digest(s)
				continue
			}
			out[k] = identities(e)
		}
		return out
	}
	return v
}
