package vllm

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// apiKind is the API a request came in on: it decides the request decoder, the response and
// event formats, and the error shape.
type apiKind int

const (
	apiCompletions apiKind = iota // POST /v1/completions (OpenAI)
	apiChat                       // POST /v1/chat/completions (OpenAI)
	apiMessages                   // POST /v1/messages (Anthropic Messages, as vLLM serves it)
	apiResponses                  // POST /v1/responses (OpenAI Responses, as vLLM serves it)
	apiEmbeddings                 // POST /v1/embeddings (OpenAI, vLLM's pooling runner)
)

// String is the API's path.
func (k apiKind) String() string {
	switch k {
	case apiCompletions:
		return "/v1/completions"
	case apiChat:
		return "/v1/chat/completions"
	case apiMessages:
		return "/v1/messages"
	case apiResponses:
		return "/v1/responses"
	case apiEmbeddings:
		return "/v1/embeddings"
	}
	return "apiKind(" + strconv.Itoa(int(k)) + ")"
}

// promptParam is the request field a context-length error names.
func (k apiKind) promptParam() string {
	switch k {
	case apiCompletions:
		return "prompt"
	case apiChat, apiMessages:
		return "messages"
	}
	return "input"
}

// decode parses a request body of this API.
func (k apiKind) decode(body []byte) (*genRequest, *APIError) {
	switch k {
	case apiChat:
		return decodeCompletion(body, true)
	case apiMessages:
		return decodeMessages(body)
	case apiResponses:
		return decodeResponses(body)
	case apiEmbeddings:
		return decodeEmbeddings(body)
	}
	return decodeCompletion(body, false)
}

// writeError writes e in the API's own error shape: Anthropic's envelope
// {"type":"error","error":{"type","message"}} for /v1/messages (vLLM
// entrypoints/anthropic/api_router.py translate_error_response, which carries vLLM's error type
// and message over), the OpenAI shape {"error":{"message","type","param","code"}} for the others
// (vLLM's ErrorResponse, Responses API included).
func (k apiKind) writeError(w http.ResponseWriter, e *APIError) {
	if k != apiMessages {
		writeAPIError(w, e)
		return
	}
	b, _ := json.Marshal(anthropicErrorBody{Type: "error", Error: anthropicError{Type: e.Type, Message: e.Message}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.Code)
	_, _ = w.Write(b)
}

// anthropicErrorBody is vLLM's AnthropicErrorResponse (entrypoints/anthropic/protocol.py).
type anthropicErrorBody struct {
	Type  string         `json:"type"`
	Error anthropicError `json:"error"`
}

type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}
