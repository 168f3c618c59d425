package director

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/eppkit/eppkit/reference/framework"
)

// The per-API parts of ParseBody (SPEC §9.1). Every refusal names the field with its path
// ("messages[2].content[0].type") and wraps framework.ErrBadRequest.

// promptField reads a completions "prompt" or an embeddings "input" (field name) in any of the
// four OpenAI forms: a string, an array of strings (joined with single spaces, as upstream
// v1.5.0 joins them), an array of token ids, or an array of token-id arrays (concatenated in
// order). Exactly one of text and ids is set on success.
func promptField(fields map[string]json.RawMessage, name, api string) (text string, ids []uint32, err error) {
	raw, ok := fields[name]
	if !ok || isNull(raw) {
		return "", nil, badBody("field %q is required for %s", name, api)
	}
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case '"':
		text, ok := plainString(raw) // the common case, without decoding
		if !ok {
			var decoded string // a variable of its own: &decoded escapes, text need not
			if err := json.Unmarshal(raw, &decoded); err != nil {
				return "", nil, badBody("field %q: %s", name, describeJSONError(err))
			}
			text = decoded
		}
		if text == "" {
			return "", nil, badBody("field %q must not be empty", name)
		}
		return text, nil, nil
	case '[':
	default:
		return "", nil, badBody("field %q must be a string, an array of strings, an array of token ids or an array of token-id arrays", name)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return "", nil, badBody("field %q: %s", name, describeJSONError(err))
	}
	if len(elems) == 0 {
		return "", nil, badBody("field %q must not be an empty array", name)
	}
	switch first := bytes.TrimSpace(elems[0]); {
	case len(first) > 0 && first[0] == '"':
		var b []byte
		for i, e := range elems {
			var s string
			if !isStringLiteral(e) || decodeString(bytes.TrimSpace(e), &s) != nil {
				return "", nil, badBody("field \"%s[%d]\" must be a string like the array's first element", name, i)
			}
			if i > 0 {
				b = append(b, ' ')
			}
			b = append(b, s...)
		}
		return string(b), nil, nil
	case len(first) > 0 && first[0] == '[':
		for i, e := range elems {
			var inner []json.RawMessage
			if !isArrayLiteral(e) || json.Unmarshal(e, &inner) != nil {
				return "", nil, badBody("field \"%s[%d]\" must be an array of token ids like the array's first element", name, i)
			}
			if len(inner) == 0 {
				return "", nil, badBody("field \"%s[%d]\" must not be an empty array", name, i)
			}
			for j, v := range inner {
				id, err := tokenID(v)
				if err != nil {
					return "", nil, badBody("field \"%s[%d][%d]\" %v", name, i, j, err)
				}
				ids = append(ids, id)
			}
		}
		return "", ids, nil
	default:
		ids = make([]uint32, 0, len(elems))
		for i, e := range elems {
			id, err := tokenID(e)
			if err != nil {
				return "", nil, badBody("field \"%s[%d]\" %v", name, i, err)
			}
			ids = append(ids, id)
		}
		return "", ids, nil
	}
}

// tokenID decodes one token id: a JSON integer from 0 to 4294967295 (SPEC §9.1: ids are hashed
// as 4-byte little-endian values), written without fraction or exponent.
func tokenID(raw json.RawMessage) (uint32, error) {
	raw = bytes.TrimSpace(raw)
	n, err := strconv.ParseUint(string(raw), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("must be a token id (an integer from 0 to 4294967295), got %s", truncateJSON(raw))
	}
	return uint32(n), nil
}

func isStringLiteral(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '"'
}

func isArrayLiteral(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '['
}

func isObjectLiteral(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}

// truncateJSON shortens a JSON value for an error message.
func truncateJSON(raw []byte) string {
	const limit = 40
	if len(raw) <= limit {
		return string(raw)
	}
	return string(raw[:limit]) + "…"
}

// objectArray decodes an array of JSON objects at path; empty arrays are allowed.
func objectArray(raw json.RawMessage, path string) ([]map[string]json.RawMessage, error) {
	if !isArrayLiteral(raw) {
		return nil, badBody("field %q must be an array of objects", path)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, badBody("field %q: %s", path, describeJSONError(err))
	}
	out := make([]map[string]json.RawMessage, len(elems))
	for i, e := range elems {
		if !isObjectLiteral(e) {
			return nil, badBody("field \"%s[%d]\" must be an object", path, i)
		}
		if err := json.Unmarshal(e, &out[i]); err != nil {
			return nil, badBody("field \"%s[%d]\": %s", path, i, describeJSONError(err))
		}
	}
	return out, nil
}

// optionalString checks that obj[key], when present and not null, is a string, and returns it.
func optionalString(obj map[string]json.RawMessage, key, path string) (string, error) {
	raw, ok := obj[key]
	if !ok || isNull(raw) {
		return "", nil
	}
	var s string
	if !isStringLiteral(raw) || json.Unmarshal(raw, &s) != nil {
		return "", badBody("field %q must be a string", path)
	}
	return s, nil
}

// requiredString is optionalString that also refuses an absent or empty value.
func requiredString(obj map[string]json.RawMessage, key, path string) (string, error) {
	s, err := optionalString(obj, key, path)
	if err != nil {
		return "", badBody("field %q must be a non-empty string", path)
	}
	if s == "" {
		return "", badBody("field %q must be a non-empty string", path)
	}
	return s, nil
}

// contentValue checks a message content at path — a string, null (when nullable), or an array
// of content-part objects each with a non-empty string "type" — and returns it decoded.
func contentValue(raw json.RawMessage, path string, nullable bool) (any, error) {
	if isNull(raw) {
		if nullable {
			return nil, nil
		}
		return nil, badBody("field %q is required", path)
	}
	switch {
	case isStringLiteral(raw):
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badBody("field %q: %s", path, describeJSONError(err))
		}
		return s, nil
	case isArrayLiteral(raw):
		parts, err := objectArray(raw, path)
		if err != nil {
			return nil, err
		}
		for j, part := range parts {
			if _, err := requiredString(part, "type", fmt.Sprintf("%s[%d].type", path, j)); err != nil {
				return nil, err
			}
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, badBody("field %q: %s", path, describeJSONError(err))
		}
		return v, nil
	}
	return nil, badBody("field %q must be a string or an array of content parts", path)
}

// optionalArray decodes fields[key], when present and not null, as an array of any.
func optionalArray(fields map[string]json.RawMessage, key string) ([]any, error) {
	raw, ok := fields[key]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var out []any
	if !isArrayLiteral(raw) || json.Unmarshal(raw, &out) != nil {
		return nil, badBody("field %q must be an array", key)
	}
	return out, nil
}

// parseMessageList validates and decodes a chat or Anthropic "messages" array. chatFields reads
// the chat-only fields tool_calls and tool_call_id; contentRequired refuses a missing or null
// content (Anthropic).
func parseMessageList(fields map[string]json.RawMessage, api string, chatFields, contentRequired bool) ([]framework.Message, error) {
	raw, ok := fields["messages"]
	if !ok || isNull(raw) {
		return nil, badBody(`field "messages" is required for %s`, api)
	}
	objs, err := objectArray(raw, "messages")
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, badBody(`field "messages" must not be empty`)
	}
	msgs := make([]framework.Message, len(objs))
	for i, m := range objs {
		path := fmt.Sprintf("messages[%d]", i)
		role, err := requiredString(m, "role", path+".role")
		if err != nil {
			return nil, err
		}
		craw, ok := m["content"]
		if !ok {
			craw = json.RawMessage("null")
		}
		content, err := contentValue(craw, path+".content", !contentRequired)
		if err != nil {
			return nil, err
		}
		msgs[i] = framework.Message{Role: role, Content: content}
		if !chatFields {
			continue
		}
		if tc, ok := m["tool_calls"]; ok && !isNull(tc) {
			if _, err := objectArray(tc, path+".tool_calls"); err != nil {
				return nil, err
			}
			if err := json.Unmarshal(tc, &msgs[i].ToolCalls); err != nil {
				return nil, badBody("field %q: %s", path+".tool_calls", describeJSONError(err))
			}
		}
		if msgs[i].ToolCallID, err = optionalString(m, "tool_call_id", path+".tool_call_id"); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// parseChat reads an OpenAI chat completions body: the messages (parseMessageList) and tools,
// then the remaining chat fields the framework keeps, decoded into their types.
func parseChat(fields map[string]json.RawMessage) (*framework.ChatCompletionsRequest, error) {
	msgs, err := parseMessageList(fields, "chat completions", true, false)
	if err != nil {
		return nil, err
	}
	tools, err := optionalArray(fields, "tools")
	if err != nil {
		return nil, err
	}
	// The other fields, typed; messages and tools are already decoded.
	var chat framework.ChatCompletionsRequest
	rest := make(map[string]json.RawMessage, len(fields))
	for k, v := range fields {
		switch k {
		case "documents", "chat_template", "return_assistant_tokens_mask", "continue_final_message",
			"add_generation_prompt", "chat_template_kwargs":
			rest[k] = v
		}
	}
	if len(rest) > 0 {
		b, _ := json.Marshal(rest) // raw messages always re-encode
		if err := json.Unmarshal(b, &chat); err != nil {
			return nil, badBody("chat completions: %s", describeJSONError(err))
		}
	}
	chat.Messages, chat.Tools = msgs, tools
	return &chat, nil
}

// parseMessages reads an Anthropic Messages body: "system", "messages" and "tools".
func parseMessages(fields map[string]json.RawMessage) (*framework.MessagesRequest, error) {
	msgs, err := parseMessageList(fields, "messages", false, true)
	if err != nil {
		return nil, err
	}
	m := &framework.MessagesRequest{Messages: msgs}
	if raw, ok := fields["system"]; ok {
		if m.System, err = contentValue(raw, "system", true); err != nil {
			return nil, err
		}
	}
	if m.Tools, err = optionalArray(fields, "tools"); err != nil {
		return nil, err
	}
	return m, nil
}

// parseResponses reads an OpenAI Responses body: "input", "instructions" and "tools".
func parseResponses(fields map[string]json.RawMessage) (*framework.ResponsesRequest, error) {
	r := &framework.ResponsesRequest{}
	raw, ok := fields["input"]
	if !ok || isNull(raw) {
		return nil, badBody(`field "input" is required for responses`)
	}
	switch {
	case isStringLiteral(raw):
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badBody(`field "input": %s`, describeJSONError(err))
		}
		if s == "" {
			return nil, badBody(`field "input" must not be empty`)
		}
		r.Input = s
	case isArrayLiteral(raw):
		items, err := objectArray(raw, "input")
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return nil, badBody(`field "input" must not be an empty array`)
		}
		for i, it := range items {
			path := fmt.Sprintf("input[%d]", i)
			if _, err := optionalString(it, "type", path+".type"); err != nil {
				return nil, err
			}
			if _, err := optionalString(it, "role", path+".role"); err != nil {
				return nil, err
			}
			if c, ok := it["content"]; ok {
				if _, err := contentValue(c, path+".content", true); err != nil {
					return nil, err
				}
			}
		}
		if err := json.Unmarshal(raw, &r.Input); err != nil {
			return nil, badBody(`field "input": %s`, describeJSONError(err))
		}
	default:
		return nil, badBody(`field "input" must be a string or an array of input items`)
	}
	var err error
	if r.Instructions, err = optionalString(fields, "instructions", "instructions"); err != nil {
		return nil, err
	}
	if r.Tools, err = optionalArray(fields, "tools"); err != nil {
		return nil, err
	}
	return r, nil
}

// tokenIDsField reads a flat array of token ids (vLLM's /inference/v1/generate "token_ids",
// llm-d-router v0.10.0 parsers/vllmhttp: non-negative integers ≤ MaxUint32); a missing field is
// an error naming it.
func tokenIDsField(fields map[string]json.RawMessage, name string) ([]uint32, error) {
	raw, ok := fields[name]
	if !ok || isNull(raw) {
		return nil, badBody("field %q is required", name)
	}
	var elems []json.RawMessage
	if !isArrayLiteral(raw) || json.Unmarshal(raw, &elems) != nil {
		return nil, badBody("field %q must be an array of token ids", name)
	}
	ids := make([]uint32, 0, len(elems))
	for i, e := range elems {
		id, err := tokenID(e)
		if err != nil {
			return nil, badBody("field \"%s[%d]\" %v", name, i, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
