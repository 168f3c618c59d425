package director

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/eppkit/eppkit/reference/framework"
)

// API kinds of an OpenAI request body.
const (
	// APICompletions is /v1/completions.
	APICompletions = "completions"
	// APIChatCompletions is /v1/chat/completions.
	APIChatCompletions = "chat/completions"
)

// ParsedBody is a request body after ParseBody.
type ParsedBody struct {
	// API is APICompletions or APIChatCompletions.
	API string
	// Model is the body's "model" field (the incoming model name).
	Model string
	// Stream is the body's "stream" field (false when absent).
	Stream bool
	// Body is what the framework sees: exactly one of Completions or ChatCompletions is set.
	Body *framework.LLMRequestBody
	// fields holds the top-level fields raw, so the body can be re-encoded with another model
	// without touching any other value (numbers keep their exact text).
	fields map[string]json.RawMessage
}

// APIFromPath returns the API kind named by a request path (":path" header, query string
// ignored): a path ending in "/chat/completions" is chat, one ending in "/completions" is
// completions, anything else "" (unknown). Upstream v1.5.0 does the same suffix match
// (gateway-api-inference-extension, pkg/epp/framework/plugins/requesthandling/parsers/openai/openai.go,
// determineAPITypeFromPath).
func APIFromPath(path string) string {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	path = strings.TrimRight(path, "/")
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return APIChatCompletions
	case strings.HasSuffix(path, "/completions"):
		return APICompletions
	}
	return ""
}

// ParseBody parses an OpenAI completions or chat-completions body (SPEC §5.2). api is the kind
// from the request path (APIFromPath); "" means unknown, in which case a body with a "messages"
// field is chat and any other body is completions (upstream defaults to completions).
//
// Rules, each failure an error wrapping framework.ErrBadRequest (400) that names the field:
//   - the body must be one JSON object (malformed JSON, trailing data or another type → 400);
//   - "model" must be a non-empty string;
//   - chat: "messages" must be a non-empty array of objects with a string "role";
//   - completions: "prompt" must be a non-empty string or a non-empty array of strings; an array
//     is joined with single spaces, as upstream v1.5.0's Prompt.PlainText does
//     (pkg/epp/framework/interface/scheduling/types.go);
//   - "stream" when present must be a boolean; "cache_salt" when present a string.
//
// Unknown fields are kept (they are the model server's business) and never rejected.
func ParseBody(api string, body []byte) (*ParsedBody, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("request body: "+format+": %w", append(args, framework.ErrBadRequest)...)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, bad("must be a JSON object")
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&fields); err != nil {
		return nil, bad("malformed JSON: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err == nil {
		return nil, bad("malformed JSON: trailing data after the object")
	}
	p := &ParsedBody{fields: fields}

	rawModel, ok := fields["model"]
	if !ok || isNull(rawModel) {
		return nil, bad(`field "model" is required`)
	}
	if err := json.Unmarshal(rawModel, &p.Model); err != nil {
		return nil, bad(`field "model" must be a string`)
	}
	if p.Model == "" {
		return nil, bad(`field "model" must not be empty`)
	}
	if raw, ok := fields["stream"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &p.Stream); err != nil {
			return nil, bad(`field "stream" must be a boolean`)
		}
	}
	var salt string
	if raw, ok := fields["cache_salt"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &salt); err != nil {
			return nil, bad(`field "cache_salt" must be a string`)
		}
	}

	if api == "" {
		api = APICompletions
		if _, ok := fields["messages"]; ok {
			api = APIChatCompletions
		}
	}
	p.API = api
	switch api {
	case APIChatCompletions:
		raw, ok := fields["messages"]
		if !ok || isNull(raw) {
			return nil, bad(`field "messages" is required for chat completions`)
		}
		var chat framework.ChatCompletionsRequest
		if err := json.Unmarshal(trimmed, &chat); err != nil {
			return nil, bad("chat completions: %s", describeJSONError(err))
		}
		if len(chat.Messages) == 0 {
			return nil, bad(`field "messages" must not be empty`)
		}
		var msgs []map[string]json.RawMessage
		if err := json.Unmarshal(raw, &msgs); err != nil {
			return nil, bad(`field "messages" must be an array of objects`)
		}
		for i, m := range msgs {
			var role string
			if err := json.Unmarshal(m["role"], &role); err != nil || role == "" {
				return nil, bad(`field "messages[%d].role" must be a non-empty string`, i)
			}
		}
		chat.CacheSalt = salt
		p.Body = &framework.LLMRequestBody{ChatCompletions: &chat}
	case APICompletions:
		raw, ok := fields["prompt"]
		if !ok || isNull(raw) {
			return nil, bad(`field "prompt" is required for completions`)
		}
		prompt, err := promptText(raw)
		if err != nil {
			return nil, bad(`field "prompt": %v`, err)
		}
		p.Body = &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: prompt, CacheSalt: salt}}
	default:
		return nil, bad("unsupported API %q", api)
	}
	return p, nil
}

// WithModel returns the body re-encoded with "model" set to model. The other top-level fields
// keep their exact JSON text; keys come out sorted (encoding/json's map order).
func (p *ParsedBody) WithModel(model string) ([]byte, error) {
	fields := make(map[string]json.RawMessage, len(p.fields))
	for k, v := range p.fields {
		fields[k] = v
	}
	m, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	fields["model"] = m
	return json.Marshal(fields)
}

func promptText(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return "", errors.New("must not be empty")
		}
		return s, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", errors.New("must be a string or an array of strings")
	}
	if len(list) == 0 {
		return "", errors.New("must not be an empty array")
	}
	return strings.Join(list, " "), nil
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %q must be %s, got %s", te.Field, te.Type, te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}
