package vllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// APIError is an OpenAI-style error: the body {"error":{"message","type","param","code"}} and
// the HTTP status. Type follows llm-d-inference-sim's ErrorCodeToType (pkg/api/response.go:
// BadRequestError, AuthenticationError, NotFoundError, RateLimitError, InternalServerError...)
// and Code is the HTTP status, as the simulator sends it.
type APIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// Error implements error.
func (e *APIError) Error() string { return fmt.Sprintf("%d %s: %s", e.Code, e.Type, e.Message) }

// NewAPIError returns an error with the type derived from the HTTP status; param names the
// offending request field or is empty.
func NewAPIError(status int, param, format string, args ...any) *APIError {
	e := &APIError{Message: fmt.Sprintf(format, args...), Type: errorType(status), Code: status}
	if param != "" {
		e.Param = &param
	}
	return e
}

func errorType(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusUnauthorized:
		return "AuthenticationError"
	case http.StatusForbidden:
		return "PermissionDeniedError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusUnprocessableEntity:
		return "UnprocessableEntityError"
	case http.StatusTooManyRequests:
		return "RateLimitError"
	}
	if code >= 500 {
		return "InternalServerError"
	}
	return "APIConnectionError"
}

// writeAPIError writes e as JSON with its status.
func writeAPIError(w http.ResponseWriter, e *APIError) {
	b, _ := json.Marshal(struct {
		Error *APIError `json:"error"`
	}{e})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.Code)
	_, _ = w.Write(b)
}

// StreamOptions is the OpenAI stream_options object.
type StreamOptions struct {
	// IncludeUsage adds a final chunk with usage and no choices.
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsageStats (vLLM's extension, honoured with IncludeUsage) puts a usage object in
	// every chunk: the choice's prompt tokens and its completion tokens so far.
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// ChatMessage is one chat message. Content is a string or an array of content parts (text,
// image_url, input_audio, file, refusal); tool_calls of an assistant message are rendered into
// the prompt as their JSON.
type ChatMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
}

// CompletionRequest is the subset of the OpenAI /v1/completions and /v1/chat/completions request
// bodies the fake reads. Other fields are accepted and ignored.
type CompletionRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt,omitempty"`
	Messages            []ChatMessage   `json:"messages,omitempty"`
	Tools               json.RawMessage `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	CacheSalt           string          `json:"cache_salt,omitempty"`
	N                   *int            `json:"n,omitempty"`
}

// genRequest is a decoded request of any API, in the form the engine runs it.
type genRequest struct {
	api   apiKind
	model string
	// prompts holds one entry per engine sequence: several only for a completions prompt or an
	// embeddings input given as a list (vLLM runs each as its own request).
	prompts []promptInput
	// echo is what echo mode answers for each prompt: the prompt itself for completions, the
	// last message's text for the chat-style APIs.
	echo [][]engine.Token
	// maxTokens is the requested output limit, 0 when unset.
	maxTokens    int
	stream       bool
	includeUsage bool
	// continuousUsage is stream_options.continuous_usage_stats with include_usage.
	continuousUsage bool
	// n is the number of choices per prompt (the request's n; 0 means 1).
	n         int
	cacheSalt string
	// toolMode is the chat request's tool_choice ("" without tools), toolNamed the function a
	// named choice names, tools the request's tools; tool is the planned call (planRuns).
	toolMode, toolNamed string
	tools               []chatTool
	tool                *toolPlan
	// failStatus, when not 0, fails a streamed response with this status after failAfter
	// output tokens (X-Return-Error "N@K").
	failStatus, failAfter int
	// instructions is the Responses API's instructions (echoed in the response object).
	instructions *string
	// Embeddings: the vector length and whether to encode vectors as base64.
	dims   int
	base64 bool
}

// decodeCompletion parses and validates a completions (chat=false) or chat completions
// (chat=true) body. Errors are 400 APIErrors naming the field. It never panics on input.
//
// Completions take every OpenAI prompt form (vLLM entrypoints/openai CompletionRequest.prompt:
// string, []string, []int, [][]int); a list is one request per element (choices indexed in
// order). Chat content parts are rendered in order, non-text parts by identity (URL or a digest
// of inline data), and assistant tool_calls and the request's tools as their JSON.
func decodeCompletion(body []byte, chat bool) (*genRequest, *APIError) {
	var req CompletionRequest
	if err := decodeObject(body, &req); err != nil {
		return nil, err
	}
	g := &genRequest{api: apiCompletions, model: req.Model, stream: req.Stream, cacheSalt: req.CacheSalt,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	g.continuousUsage = g.includeUsage && req.StreamOptions.ContinuousUsageStats
	if chat {
		g.api = apiChat
	}
	if req.Model == "" {
		return nil, NewAPIError(http.StatusBadRequest, "model", "the field 'model' is required")
	}
	if req.N != nil && *req.N < 1 {
		return nil, NewAPIError(http.StatusBadRequest, "n", "n must be at least 1, got %d", *req.N)
	}
	if req.N != nil {
		g.n = *req.N
	}
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if p.v != nil && *p.v < 1 {
			return nil, NewAPIError(http.StatusBadRequest, p.name, "%s must be at least 1, got %d", p.name, *p.v)
		}
	}
	switch {
	case req.MaxCompletionTokens != nil:
		g.maxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		g.maxTokens = *req.MaxTokens
	}
	if !chat {
		prompts, err := parsePrompts(req.Prompt, "prompt")
		if err != nil {
			return nil, err
		}
		g.prompts = prompts
		for _, p := range prompts {
			g.echo = append(g.echo, p.engineTokens())
		}
		return g, nil
	}
	if len(req.Messages) == 0 {
		return nil, NewAPIError(http.StatusBadRequest, "messages", "the field 'messages' must be a non-empty array")
	}
	var sb strings.Builder
	var echo string
	for i, m := range req.Messages {
		if m.Role == "" {
			return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("messages[%d].role", i), "messages[%d]: the field 'role' is required", i)
		}
		text, echoText, err := renderChatContent(m.Content)
		if err != nil {
			return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("messages[%d].content", i), "messages[%d].content: %v", i, err)
		}
		if !isNull(m.ToolCalls) {
			if !json.Valid(m.ToolCalls) || bytes.TrimSpace(m.ToolCalls)[0] != '[' {
				return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("messages[%d].tool_calls", i), "messages[%d].tool_calls: want an array", i)
			}
			text += "\n" + compactJSON(m.ToolCalls)
		}
		renderTurn(&sb, m.Role, text)
		echo = echoText
	}
	mode, named, tools, apiErr := parseTools(req.Tools, req.ToolChoice)
	if apiErr != nil {
		return nil, apiErr
	}
	g.toolMode, g.toolNamed, g.tools = mode, named, tools
	if !isNull(req.Tools) {
		renderTurn(&sb, "tools", compactJSON(req.Tools))
	}
	g.prompts = []promptInput{{text: sb.String()}}
	g.echo = [][]engine.Token{engine.Tokenize(echo)}
	return g, nil
}

// renderTurn appends one turn of the fake's plain chat template, "role: content\n" (the same
// for every chat-style API, so the same conversation is the same prompt on each).
func renderTurn(sb *strings.Builder, role, content string) {
	sb.WriteString(role)
	sb.WriteString(": ")
	sb.WriteString(content)
	sb.WriteByte('\n')
}

// compactJSON returns raw with insignificant whitespace removed (raw must be valid JSON).
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// Usage is the OpenAI usage object as vLLM writes it. PromptTokensDetails is nil (the key is
// absent) unless the server runs with --enable-prompt-tokens-details and some prompt tokens were
// cached; Cached reads it either way.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
	// cached is the prefix-cache hit count, known whether or not the details are written.
	cached int
}

// Cached returns prompt_tokens_details.cached_tokens, 0 when the key is absent.
func (u Usage) Cached() int {
	if u.PromptTokensDetails == nil {
		return u.cached
	}
	return u.PromptTokensDetails.CachedTokens
}

// PromptTokensDetails carries cached_tokens: prompt tokens served from the prefix cache.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// appendJSONString appends s as a JSON string literal (with quotes) to b.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
