package director

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/eppkit/eppkit/reference/framework"
)

// API kinds of a request body, by path (SPEC §9.1); aliases of the framework's names.
const (
	APICompletions     = framework.APICompletions
	APIChatCompletions = framework.APIChatCompletions
	APIEmbeddings      = framework.APIEmbeddings
	APIMessages        = framework.APIMessages
	APIResponses       = framework.APIResponses
	APIOther           = framework.APIOther
	APICountTokens     = framework.APICountTokens
	APIGenerate        = framework.APIGenerate
	// APIVLLMGRPCGenerate and APIVLLMGRPCEmbed are vLLM's gRPC engine API (vllmgrpc.go).
	APIVLLMGRPCGenerate = framework.APIVLLMGRPCGenerate
	APIVLLMGRPCEmbed    = framework.APIVLLMGRPCEmbed
)

// ParsedBody is a request body after ParseBody.
type ParsedBody struct {
	// API is the API the body was parsed as.
	API framework.API
	// Model is the body's "model" field (the incoming model name).
	Model string
	// Stream is the body's "stream" field (false when absent).
	Stream bool
	// Body is what the framework sees: Body.API is API and the matching field is set (none for
	// APIOther).
	Body *framework.LLMRequestBody
	// fields holds the top-level fields raw, so the body can be re-encoded with another model
	// without touching any other value (numbers keep their exact text).
	fields map[string]json.RawMessage
}

// APIFromPath returns the API named by a request path (":path" header; query string and
// fragment ignored), matched by suffix as llm-d-router v0.10.0's default parsers match it
// (pkg/epp/framework/plugins/requesthandling/parsers: openai determineAPITypeFromPath, anthropic,
// vllmhttp), so provider prefixes such as /v1/projects/p/.../chat/completions work:
// "/responses", "/chat/completions" and "/chat/completions/render" (chat), "/completions" and
// "/completions/render" (completions), "/embeddings", "/messages" (Anthropic),
// "/messages/count_tokens", "/inference/v1/generate" (vLLM), and vLLM's gRPC engine API
// "/vllm.grpc.engine.VllmEngine/Generate", "…/Embed" and any other method of that service
// (APIVLLMGRPCOther; vllmgrpc.go). Any other non-empty path is
// APIOther (upstream's "/conversations" and "/images/generations" among them: routed with only
// the common rules); an empty path (no ":path" header) is "", which ParseBody treats as
// upstream does a request without a path (completions, or chat when the body has "messages").
func APIFromPath(path string) framework.API {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		return ""
	}
	path = strings.TrimRight(path, "/")
	if api := vllmGRPCAPI(path); api != "" {
		return api
	}
	switch {
	case strings.HasSuffix(path, "/responses"):
		return APIResponses
	case strings.HasSuffix(path, "/chat/completions"), strings.HasSuffix(path, "/chat/completions/render"):
		return APIChatCompletions
	case strings.HasSuffix(path, "/completions/render"):
		return APICompletions
	case strings.HasSuffix(path, "/messages/count_tokens"):
		return APICountTokens
	case strings.HasSuffix(path, "/inference/v1/generate"):
		return APIGenerate
	case strings.HasSuffix(path, "/completions"):
		return APICompletions
	case strings.HasSuffix(path, "/embeddings"):
		return APIEmbeddings
	case strings.HasSuffix(path, "/messages"):
		return APIMessages
	}
	return APIOther
}

// ParseBody parses a request body of one of the APIs of SPEC §9.1. api is the kind from the
// request path (APIFromPath); "" means the path is unknown: a body with a "messages" field is
// then chat and any other body completions (upstream v1.5.0 defaults to completions).
//
// Rules, each failure an error wrapping framework.ErrBadRequest (400) that names the field:
//   - the body must be one JSON object (malformed JSON, trailing data or another type → 400);
//   - "model" must be a non-empty string, on every API;
//   - "stream" when present must be a boolean; "cache_salt" when present a string;
//   - completions "prompt" and embeddings "input": a non-empty string, a non-empty array of
//     strings (joined with single spaces, as upstream v1.5.0's Prompt.PlainText), a non-empty
//     array of token ids (integers 0..4294967295), or a non-empty array of non-empty token-id
//     arrays (concatenated in order);
//   - chat "messages": a non-empty array of objects, each with a non-empty string "role", a
//     "content" that is a string, null or an array of content-part objects with a non-empty
//     string "type", "tool_calls" (when present) an array of objects and "tool_call_id" a string;
//     "tools" an array;
//   - Anthropic Messages "messages": as chat, with "content" required (a string or an array of
//     content blocks); "system" a string or an array of content blocks; "tools" an array;
//   - OpenAI Responses "input": a non-empty string or a non-empty array of item objects (an
//     item's "type", when present, a string; a message item's "content" a string or an array of
//     content-part objects with a string "type"); "instructions" a string; "tools" an array;
//   - APIOther: only the rules common to every API (SPEC §9.1: routed without prompt validation);
//   - vLLM's gRPC engine API: not JSON but one gRPC frame holding a protobuf message, with its
//     own rules (parseVLLMGRPC); no "model".
//
// Unknown fields are kept (they are the model server's business) and never rejected.
func ParseBody(api framework.API, body []byte) (*ParsedBody, error) {
	if isVLLMGRPC(api) {
		return parseVLLMGRPC(api, body)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, badBody("must be a JSON object")
	}
	fields, err := topLevelFields(trimmed)
	if err != nil {
		return nil, badBody("%s", err.Error())
	}
	p := &ParsedBody{fields: fields}

	rawModel, ok := fields["model"]
	switch {
	case api == APICountTokens && (!ok || isNull(rawModel)):
		// count_tokens is forwarded as a raw payload upstream: no model needed.
	case !ok || isNull(rawModel):
		return nil, badBody(`field "model" is required`)
	default:
		if err := decodeString(rawModel, &p.Model); err != nil {
			return nil, badBody(`field "model" must be a string`)
		}
		if p.Model == "" {
			return nil, badBody(`field "model" must not be empty`)
		}
	}
	if raw, ok := fields["stream"]; ok && !isNull(raw) {
		if err := decodeBool(raw, &p.Stream); err != nil {
			return nil, badBody(`field "stream" must be a boolean`)
		}
	}
	var salt string
	if raw, ok := fields["cache_salt"]; ok && !isNull(raw) {
		if err := decodeString(raw, &salt); err != nil {
			return nil, badBody(`field "cache_salt" must be a string`)
		}
	}

	if api == "" {
		api = APICompletions
		if _, ok := fields["messages"]; ok {
			api = APIChatCompletions
		}
	}
	p.API = api
	p.Body = &framework.LLMRequestBody{API: api}
	switch api {
	case APICompletions:
		text, ids, err := promptField(fields, "prompt", "completions")
		if err != nil {
			return nil, err
		}
		p.Body.Completions = &framework.CompletionsRequest{Prompt: text, TokenIDs: ids, CacheSalt: salt}
	case APIEmbeddings:
		text, ids, err := promptField(fields, "input", "embeddings")
		if err != nil {
			return nil, err
		}
		p.Body.Embeddings = &framework.EmbeddingsRequest{Input: text, TokenIDs: ids, CacheSalt: salt}
	case APIChatCompletions:
		chat, err := parseChat(fields)
		if err != nil {
			return nil, err
		}
		chat.CacheSalt = salt
		p.Body.ChatCompletions = chat
	case APIMessages:
		m, err := parseMessages(fields)
		if err != nil {
			return nil, err
		}
		m.CacheSalt = salt
		p.Body.Messages = m
	case APIResponses:
		r, err := parseResponses(fields)
		if err != nil {
			return nil, err
		}
		r.CacheSalt = salt
		p.Body.Responses = r
	case APIGenerate:
		ids, err := tokenIDsField(fields, "token_ids")
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			return nil, badBody(`field "token_ids" must be a non-empty array of token ids`)
		}
	case APIOther, APICountTokens:
	default:
		return nil, badBody("unsupported API %q", api)
	}
	return p, nil
}

// badBody is a refusal of the request body: an error wrapping framework.ErrBadRequest.
func badBody(format string, args ...any) error {
	return fmt.Errorf("request body: "+format+": %w", append(args, framework.ErrBadRequest)...)
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

// decodeString is json.Unmarshal(raw, s) with plainString's fast path for a literal without
// escapes or non-ASCII bytes (FuzzTopLevelFields checks that both agree on such literals).
func decodeString(raw []byte, s *string) error {
	if v, ok := plainString(raw); ok {
		*s = v
		return nil
	}
	return json.Unmarshal(raw, s)
}

// decodeBool is json.Unmarshal(raw, b) with a fast path for the exact literals true and false.
func decodeBool(raw []byte, b *bool) error {
	switch string(raw) {
	case "true":
		*b = true
		return nil
	case "false":
		*b = false
		return nil
	}
	return json.Unmarshal(raw, b)
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

// topLevelFields returns the members of a JSON object (trimmed: no surrounding white space,
// starting with '{') as raw values, the last one winning for a repeated key, exactly as
// decoding into map[string]json.RawMessage does. A body that json.Valid accepts is split in one
// pass without decoding its values (topLevelFast); anything else goes through json.Decoder, which
// words the error ("malformed JSON: ..." or "malformed JSON: trailing data after the object") and
// accepts what it accepts (an object followed by bytes that do not start a JSON token).
func topLevelFields(trimmed []byte) (map[string]json.RawMessage, error) {
	if json.Valid(trimmed) {
		if fields, ok := topLevelFast(trimmed); ok {
			return fields, nil
		}
	}
	return topLevelDecode(trimmed)
}

// topLevelDecode is topLevelFields with encoding/json's Decoder: one value, then a check that no
// further JSON token follows.
func topLevelDecode(trimmed []byte) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&fields); err != nil {
		return nil, fmt.Errorf("malformed JSON: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("malformed JSON: trailing data after the object")
	}
	return fields, nil
}

// topLevelFast splits a valid JSON object into its members. Each value is copied (as
// json.RawMessage's UnmarshalJSON does), so the map does not share the caller's buffer. A key
// with an escape or a non-ASCII byte is decoded with encoding/json (which also replaces invalid
// UTF-8 as it does in a map key). ok is false if the input is not an object after all.
func topLevelFast(b []byte) (fields map[string]json.RawMessage, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	fields = make(map[string]json.RawMessage, 8)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return fields, true
	}
	for i < len(b) {
		if b[i] != '"' {
			return nil, false
		}
		end := stringEnd(b, i)
		if end < 0 {
			return nil, false
		}
		key, ok := plainString(b[i:end])
		if !ok {
			if json.Unmarshal(b[i:end], &key) != nil {
				return nil, false
			}
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		vend := valueEnd(b, i)
		if vend < 0 {
			return nil, false
		}
		fields[key] = append(json.RawMessage(nil), b[i:vend]...)
		i = skipSpace(b, vend)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case '}':
			return fields, true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return nil, false
		}
	}
	return nil, false
}

// plainString returns the text of a JSON string literal (quotes included in raw) when it has no
// escape and only ASCII bytes, so its decoded value is its bytes; ok is false otherwise (decode
// it with encoding/json, which also replaces invalid UTF-8). raw must be a valid literal.
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	for _, c := range in {
		if c == '\\' || c == '"' || c < 0x20 || c >= 0x80 {
			return "", false
		}
	}
	return string(in), true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string literal starting at b[i] == '"', -1 if it
// does not end.
func stringEnd(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		n := 0 // backslashes right before the quote: an odd count escapes it
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// valueEnd returns the index just past the JSON value starting at b[i] (valid input), -1 if it
// does not end.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := stringEnd(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default: // number, true, false, null
		j := i
		for j < len(b) && !strings.ContainsRune(",}] \t\r\n", rune(b[j])) {
			j++
		}
		return j
	}
}
