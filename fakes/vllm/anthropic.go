package vllm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// MessagesRequest is the subset of an Anthropic Messages body (POST /v1/messages) the fake reads,
// as vLLM's AnthropicMessagesRequest (entrypoints/anthropic/protocol.py) defines it: model,
// messages (role user, assistant or system; content a string or content blocks), max_tokens
// (required, positive), system (a string or text blocks), stream, tools. Other fields are
// accepted and ignored.
type MessagesRequest struct {
	Model     string            `json:"model"`
	Messages  []AnthropicTurn   `json:"messages"`
	MaxTokens *int              `json:"max_tokens"`
	System    json.RawMessage   `json:"system,omitempty"`
	Stream    bool              `json:"stream"`
	Tools     []json.RawMessage `json:"tools,omitempty"`
}

// AnthropicTurn is one message of a Messages request.
type AnthropicTurn struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is one content block (vLLM AnthropicContentBlock: text, image, tool_use,
// tool_result, tool_reference, thinking, redacted_thinking).
type anthropicBlock struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Source *struct {
		Type      string `json:"type"`
		URL       string `json:"url"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source"`
	ID        string          `json:"id"`
	ToolUseID string          `json:"tool_use_id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	Content   json.RawMessage `json:"content"`
	Thinking  string          `json:"thinking"`
	ToolName  string          `json:"tool_name"`
}

// renderAnthropicContent renders a string or a list of content blocks (non-text blocks by
// identity: an image by its URL or a digest of its data, tool use by name and input JSON, a tool
// result by its content). echo is the text blocks joined by newlines.
func renderAnthropicContent(raw json.RawMessage) (prompt, echo string, err error) {
	return renderContent(raw, true, "content blocks", func(i int, b anthropicBlock) (contentPiece, error) {
		switch b.Type {
		case "text":
			return contentPiece{text: b.Text, isText: true}, nil
		case "image":
			if b.Source == nil {
				return contentPiece{}, fmt.Errorf("block %d: an image block needs source", i)
			}
			if b.Source.Type == "url" {
				return contentPiece{text: mediaRef("image", b.Source.URL)}, nil
			}
			return contentPiece{text: digest("image", b.Source.Data)}, nil
		case "tool_use":
			return contentPiece{text: "[tool_use " + b.Name + " " + compactJSON(nullToEmpty(b.Input)) + "]"}, nil
		case "tool_result":
			return contentPiece{text: "[tool_result " + b.ToolUseID + " " + compactJSON(nullToEmpty(b.Content)) + "]"}, nil
		case "tool_reference":
			return contentPiece{text: "[tool_reference " + b.ToolName + "]"}, nil
		case "thinking":
			return contentPiece{text: b.Thinking}, nil
		case "redacted_thinking":
			return contentPiece{skip: true}, nil
		}
		return contentPiece{}, fmt.Errorf("block %d: unknown content block type %q", i, b.Type)
	})
}

func nullToEmpty(raw json.RawMessage) json.RawMessage {
	if isNull(raw) {
		return json.RawMessage(`{}`)
	}
	return raw
}

// decodeMessages parses and validates a Messages body; errors are 400 APIErrors naming the field
// (written in Anthropic's error envelope by apiMessages.writeError).
func decodeMessages(body []byte) (*genRequest, *APIError) {
	var req MessagesRequest
	if err := decodeObject(body, &req); err != nil {
		return nil, err
	}
	if req.Model == "" {
		return nil, NewAPIError(http.StatusBadRequest, "model", "the field 'model' is required")
	}
	if req.MaxTokens == nil {
		return nil, NewAPIError(http.StatusBadRequest, "max_tokens", "the field 'max_tokens' is required")
	}
	if *req.MaxTokens < 1 {
		return nil, NewAPIError(http.StatusBadRequest, "max_tokens", "max_tokens must be positive, got %d", *req.MaxTokens)
	}
	if len(req.Messages) == 0 {
		return nil, NewAPIError(http.StatusBadRequest, "messages", "the field 'messages' must be a non-empty array")
	}
	var sb strings.Builder
	if !isNull(req.System) {
		sys, _, err := renderAnthropicContent(req.System)
		if err != nil {
			return nil, NewAPIError(http.StatusBadRequest, "system", "system: %v", err)
		}
		renderTurn(&sb, "system", sys)
	}
	var echo string
	for i, m := range req.Messages {
		role := m.Role
		switch role {
		case "ctx", "msg": // vLLM maps Claude Code's non-standard roles to user
			role = "user"
		case "user", "assistant", "system":
		case "":
			return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("messages[%d].role", i), "messages[%d]: the field 'role' is required", i)
		default:
			return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("messages[%d].role", i), "messages[%d]: role must be user, assistant or system, got %q", i, m.Role)
		}
		text, echoText, err := renderAnthropicContent(m.Content)
		if err != nil {
			return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("messages[%d].content", i), "messages[%d].content: %v", i, err)
		}
		renderTurn(&sb, role, text)
		echo = echoText
	}
	for i, t := range req.Tools {
		if len(t) == 0 || t[0] != '{' {
			return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("tools[%d]", i), "tools[%d]: want an object", i)
		}
		renderTurn(&sb, "tool", compactJSON(t))
	}
	return &genRequest{api: apiMessages, model: req.Model, maxTokens: *req.MaxTokens, stream: req.Stream,
		prompts: []promptInput{{text: sb.String()}}, echo: [][]engine.Token{engine.Tokenize(echo)}}, nil
}

// anthropicStopReason maps a finish reason to Anthropic's stop_reason (vLLM
// AnthropicServingMessages.stop_reason_map).
func anthropicStopReason(finish string) string {
	if finish == engine.FinishLength {
		return "max_tokens"
	}
	return "end_turn"
}

// appendMessagesResponse appends the non-streaming Messages response: {id, type "message", role
// "assistant", content [{type "text", text}], model, stop_reason, usage {input_tokens,
// output_tokens}} (vLLM messages_full_converter, dumped with exclude_none).
func appendMessagesResponse(b []byte, id, model, text, finish string, inputTokens, outputTokens int) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, "msg_"+id)
	b = append(b, `,"type":"message","role":"assistant","content":[{"type":"text","text":`...)
	b = appendJSONString(b, text)
	b = append(b, `}],"model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"stop_reason":`...)
	b = appendJSONString(b, anthropicStopReason(finish))
	b = append(b, `,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(inputTokens), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(outputTokens), 10)
	return append(b, `}}`...)
}

// messagesStream writes the Messages API's events as vLLM's message_stream_converter does
// (entrypoints/anthropic/serving.py): message_start (message.usage.input_tokens, output_tokens 0)
// when the first chunk is ready, content_block_start before the first text, content_block_delta
// (text_delta) per token, then content_block_stop, message_delta (stop_reason, usage
// {input_tokens, output_tokens}) and message_stop. Each event is "event: <type>\ndata: <json>".
type messagesStream struct {
	id, model   string
	inputTokens int
}

func (m *messagesStream) begin(*sseWriter) {}

func (m *messagesStream) token(sw *sseWriter, _ int, text string, first bool, _ string) {
	if first {
		sw.buf = append(sw.buf, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"...)
		sw.buf = appendJSONString(sw.buf, "msg_"+m.id)
		sw.buf = append(sw.buf, `,"type":"message","role":"assistant","content":[],"model":`...)
		sw.buf = appendJSONString(sw.buf, m.model)
		sw.buf = append(sw.buf, `,"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`...)
		sw.buf = strconv.AppendInt(sw.buf, int64(m.inputTokens), 10)
		sw.buf = append(sw.buf, ",\"output_tokens\":0}}}\n\n"...)
		sw.buf = append(sw.buf, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"...)
	}
	sw.buf = append(sw.buf, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"...)
	sw.buf = appendJSONString(sw.buf, text)
	sw.buf = append(sw.buf, "}}\n\n"...)
}

func (m *messagesStream) end(sw *sseWriter, finish []string, u Usage) {
	sw.buf = append(sw.buf, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"...)
	sw.buf = append(sw.buf, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"...)
	sw.buf = appendJSONString(sw.buf, anthropicStopReason(finish[0]))
	sw.buf = append(sw.buf, `},"usage":{"input_tokens":`...)
	sw.buf = strconv.AppendInt(sw.buf, int64(u.PromptTokens), 10)
	sw.buf = append(sw.buf, `,"output_tokens":`...)
	sw.buf = strconv.AppendInt(sw.buf, int64(u.CompletionTokens), 10)
	sw.buf = append(sw.buf, "}}\n\n"...)
	sw.buf = append(sw.buf, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
}

// CountTokensResponse is the body of POST /v1/messages/count_tokens.
type CountTokensResponse struct {
	InputTokens int `json:"input_tokens"`
}

// handleCountTokens answers POST /v1/messages/count_tokens, Anthropic's token count, which vLLM's
// Anthropic router (vllm/entrypoints/anthropic/api_router.py) serves next to /v1/messages and
// clients such as Claude Code call before they send: {"input_tokens": N} for a Messages body
// (max_tokens optional) whose prompt is rendered and tokenized as /v1/messages would. It submits
// nothing to the engine and counts in no metric. Errors are Anthropic's envelope: 400 naming the
// field, 404 for an unknown model.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	body, apiErr := s.readBody(w, r)
	if apiErr != nil {
		apiMessages.writeError(w, apiErr)
		return
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) == nil && obj != nil {
		if _, ok := obj["max_tokens"]; !ok {
			obj["max_tokens"] = json.RawMessage("1") // a count needs no output limit
			body, _ = json.Marshal(obj)
		}
	}
	req, apiErr := decodeMessages(body)
	if apiErr != nil {
		apiMessages.writeError(w, apiErr)
		return
	}
	if _, ok := s.resolveModel(req.model); !ok {
		apiMessages.writeError(w, NewAPIError(http.StatusNotFound, "model", "The model `%s` does not exist.", req.model))
		return
	}
	writeJSON(w, http.StatusOK, CountTokensResponse{InputTokens: req.prompts[0].numTokens()})
}

// fail ends a Messages stream with Anthropic's error event, {"type":"error","error":{"type",
// "message"}}, the envelope of apiMessages.writeError.
func (m *messagesStream) fail(sw *sseWriter, e *APIError) {
	b, _ := json.Marshal(anthropicErrorBody{Type: "error", Error: anthropicError{Type: e.Type, Message: e.Message}})
	sw.buf = append(sw.buf, "event: error\ndata: "...)
	sw.buf = append(sw.buf, b...)
	sw.buf = append(sw.buf, "\n\n"...)
}
