package vllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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
}

// ChatMessage is one chat message. Content is a string or an array of content parts; only text
// parts contribute to the prompt.
type ChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// CompletionRequest is the subset of the OpenAI /v1/completions and /v1/chat/completions request
// bodies the fake reads. Other fields are accepted and ignored.
type CompletionRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt,omitempty"`
	Messages            []ChatMessage   `json:"messages,omitempty"`
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	CacheSalt           string          `json:"cache_salt,omitempty"`
	N                   *int            `json:"n,omitempty"`

	// Filled by DecodeRequest.
	isChat     bool
	promptText string // text sent to the engine
	echoText   string // text echoed in echo mode
}

// DecodeRequest parses and validates a completions (chat=false) or chat completions (chat=true)
// body. Errors are *APIError with status 400 naming the field. It never panics on input.
func DecodeRequest(body []byte, chat bool) (*CompletionRequest, error) {
	var req CompletionRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return nil, NewAPIError(http.StatusBadRequest, "", "invalid JSON body: %v", err)
	}
	if dec.More() {
		return nil, NewAPIError(http.StatusBadRequest, "", "invalid JSON body: trailing data after the object")
	}
	req.isChat = chat
	if req.Model == "" {
		return nil, NewAPIError(http.StatusBadRequest, "model", "the field 'model' is required")
	}
	if req.N != nil && *req.N != 1 {
		return nil, NewAPIError(http.StatusBadRequest, "n", "only n=1 is supported, got %d", *req.N)
	}
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if p.v != nil && *p.v < 1 {
			return nil, NewAPIError(http.StatusBadRequest, p.name, "%s must be at least 1, got %d", p.name, *p.v)
		}
	}
	if chat {
		if len(req.Messages) == 0 {
			return nil, NewAPIError(http.StatusBadRequest, "messages", "the field 'messages' must be a non-empty array")
		}
		var sb strings.Builder
		for i, m := range req.Messages {
			if m.Role == "" {
				return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("messages[%d].role", i), "messages[%d]: the field 'role' is required", i)
			}
			text, err := contentText(m.Content)
			if err != nil {
				return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("messages[%d].content", i), "messages[%d].content: %v", i, err)
			}
			// A plain chat template: "role: content\n" per message.
			sb.WriteString(m.Role)
			sb.WriteString(": ")
			sb.WriteString(text)
			sb.WriteByte('\n')
			req.echoText = text
		}
		req.promptText = sb.String()
		return &req, nil
	}
	if len(req.Prompt) == 0 || string(req.Prompt) == "null" {
		return nil, NewAPIError(http.StatusBadRequest, "prompt", "the field 'prompt' is required")
	}
	var s string
	if err := json.Unmarshal(req.Prompt, &s); err == nil {
		req.promptText, req.echoText = s, s
		return &req, nil
	}
	var list []string
	if err := json.Unmarshal(req.Prompt, &list); err == nil && len(list) == 1 {
		req.promptText, req.echoText = list[0], list[0]
		return &req, nil
	}
	return nil, NewAPIError(http.StatusBadRequest, "prompt", "the field 'prompt' must be a string (or an array of one string)")
}

// contentText returns the text of a message content: a string, or the concatenated text parts of
// an array of {"type":"text","text":...} parts; null is empty.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or an array of content parts")
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// maxTokens is the requested output limit (max_completion_tokens wins over max_tokens), or 0.
func (r *CompletionRequest) maxTokens() int {
	if r.MaxCompletionTokens != nil {
		return *r.MaxCompletionTokens
	}
	if r.MaxTokens != nil {
		return *r.MaxTokens
	}
	return 0
}

// Usage is the OpenAI usage object with vLLM's prompt_tokens_details.
type Usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails PromptTokensDetails `json:"prompt_tokens_details"`
}

// PromptTokensDetails carries cached_tokens: prompt tokens served from the prefix cache.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type chatMessageOut struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type choiceOut struct {
	Index        int             `json:"index"`
	Text         *string         `json:"text,omitempty"`
	Message      *chatMessageOut `json:"message,omitempty"`
	FinishReason string          `json:"finish_reason"`
}

type completionOut struct {
	ID      string      `json:"id"`
	Object  string      `json:"object"`
	Created int64       `json:"created"`
	Model   string      `json:"model"`
	Choices []choiceOut `json:"choices"`
	Usage   Usage       `json:"usage"`
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
