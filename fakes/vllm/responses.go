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

// ResponsesRequest is the subset of an OpenAI Responses body (POST /v1/responses) the fake
// reads, as vLLM's ResponsesRequest (entrypoints/openai/responses/protocol.py): model, input (a
// string or a list of input items), instructions, max_output_tokens, stream. Other fields are
// accepted and ignored.
type ResponsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions,omitempty"`
	MaxOutputTokens *int            `json:"max_output_tokens,omitempty"`
	Stream          bool            `json:"stream"`
	CacheSalt       string          `json:"cache_salt,omitempty"`
}

// responsesItem is one input item: a message (role + content string or input parts), or another
// item type (function_call, function_call_output, reasoning, …) rendered by its JSON.
type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// responsesPart is one input content part: input_text, input_image, input_file, input_audio, or
// (replaying an earlier answer) output_text.
type responsesPart struct {
	Type       string `json:"type"`
	Text       string `json:"text"`
	ImageURL   string `json:"image_url"`
	FileID     string `json:"file_id"`
	FileData   string `json:"file_data"`
	InputAudio *struct {
		Data string `json:"data"`
	} `json:"input_audio"`
}

func renderResponsesContent(raw json.RawMessage) (prompt, echo string, err error) {
	return renderContent(raw, true, "input parts", func(i int, p responsesPart) (contentPiece, error) {
		switch p.Type {
		case "input_text", "output_text":
			return contentPiece{text: p.Text, isText: true}, nil
		case "input_image", "input_file":
			kind := strings.TrimPrefix(p.Type, "input_")
			switch {
			case p.ImageURL != "" && kind == "image":
				return contentPiece{text: mediaRef("image", p.ImageURL)}, nil
			case p.FileData != "" && kind == "file":
				return contentPiece{text: digest("file", p.FileData)}, nil
			case p.FileID != "":
				return contentPiece{text: "[" + kind + " " + p.FileID + "]"}, nil
			}
			inline := map[string]string{"image": "image_url", "file": "file_data"}[kind]
			return contentPiece{}, fmt.Errorf("part %d: an %s part needs %s or file_id", i, p.Type, inline)
		case "input_audio":
			if p.InputAudio == nil || p.InputAudio.Data == "" {
				return contentPiece{}, fmt.Errorf("part %d: an input_audio part needs input_audio.data", i)
			}
			return contentPiece{text: digest("audio", p.InputAudio.Data)}, nil
		}
		return contentPiece{}, fmt.Errorf("part %d: unknown input part type %q", i, p.Type)
	})
}

// decodeResponses parses and validates a Responses body; errors are 400 APIErrors naming the
// field.
func decodeResponses(body []byte) (*genRequest, *APIError) {
	var req ResponsesRequest
	if err := decodeObject(body, &req); err != nil {
		return nil, err
	}
	if req.Model == "" {
		return nil, NewAPIError(http.StatusBadRequest, "model", "the field 'model' is required")
	}
	if req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1 {
		return nil, NewAPIError(http.StatusBadRequest, "max_output_tokens", "max_output_tokens must be at least 1, got %d", *req.MaxOutputTokens)
	}
	g := &genRequest{api: apiResponses, model: req.Model, stream: req.Stream, cacheSalt: req.CacheSalt, instructions: req.Instructions}
	if req.MaxOutputTokens != nil {
		g.maxTokens = *req.MaxOutputTokens
	}
	var sb strings.Builder
	if req.Instructions != nil && *req.Instructions != "" {
		renderTurn(&sb, "system", *req.Instructions)
	}
	if isNull(req.Input) {
		return nil, NewAPIError(http.StatusBadRequest, "input", "the field 'input' is required")
	}
	var echo string
	var s string
	if json.Unmarshal(req.Input, &s) == nil {
		renderTurn(&sb, "user", s)
		echo = s
	} else {
		var items []json.RawMessage
		if err := json.Unmarshal(req.Input, &items); err != nil {
			return nil, NewAPIError(http.StatusBadRequest, "input", "the field 'input' must be a string or an array of input items")
		}
		if len(items) == 0 {
			return nil, NewAPIError(http.StatusBadRequest, "input", "the field 'input' must not be an empty array")
		}
		for i, raw := range items {
			var it responsesItem
			if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(raw, &it) != nil {
				return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("input[%d]", i), "input[%d]: want an input item object", i)
			}
			if it.Type != "" && it.Type != "message" {
				renderTurn(&sb, it.Type, compactJSON(raw))
				continue
			}
			if it.Role == "" {
				return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("input[%d].role", i), "input[%d]: a message item needs a role", i)
			}
			text, echoText, err := renderResponsesContent(it.Content)
			if err != nil {
				return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("input[%d].content", i), "input[%d].content: %v", i, err)
			}
			renderTurn(&sb, it.Role, text)
			echo = echoText
		}
	}
	g.prompts = []promptInput{{text: sb.String()}}
	g.echo = [][]engine.Token{engine.Tokenize(echo)}
	return g, nil
}

// responsesObject is what the Responses API's response object needs besides the generated text.
type responsesObject struct {
	id, model    string
	created      int64
	instructions *string
	maxOutput    int
}

// appendResponse appends a Responses API response object (vLLM ResponsesResponse.from_request,
// the fields EPPs and clients read): status "in_progress" before generation (output [], usage
// null), else "completed" or — when max_output_tokens cut the output — "incomplete" with
// incomplete_details {reason "max_output_tokens"}, the message output item, and usage
// {input_tokens, input_tokens_details.cached_tokens, output_tokens,
// output_tokens_details.reasoning_tokens, total_tokens} (vLLM
// entrypoints/openai/responses/serving.py responses_full_generator).
func (o *responsesObject) appendResponse(b []byte, done bool, text, finish string, u Usage) []byte {
	status := "in_progress"
	if done {
		status = "completed"
		if finish == engine.FinishLength {
			status = "incomplete"
		}
	}
	b = append(b, `{"id":`...)
	b = appendJSONString(b, "resp_"+o.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, o.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, o.model)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","incomplete_details":`...)
	if status == "incomplete" {
		b = append(b, `{"reason":"max_output_tokens"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":`...)
	if o.instructions != nil {
		b = appendJSONString(b, *o.instructions)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"max_output_tokens":`...)
	if o.maxOutput > 0 {
		b = strconv.AppendInt(b, int64(o.maxOutput), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"output":[`...)
	if done {
		b = o.appendMessageItem(b, "completed", &text)
	}
	b = append(b, `],"usage":`...)
	if !done {
		return append(b, "null}"...)
	}
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Cached()), 10)
	b = append(b, `},"output_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
	return append(b, "}}"...)
}

// appendMessageItem appends the output message item; text nil means no content yet.
func (o *responsesObject) appendMessageItem(b []byte, status string, text *string) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, "msg_"+o.id)
	b = append(b, `,"type":"message","role":"assistant","status":"`...)
	b = append(b, status...)
	b = append(b, `","content":[`...)
	if text != nil {
		b = append(b, `{"type":"output_text","text":`...)
		b = appendJSONString(b, *text)
		b = append(b, `,"annotations":[]}`...)
	}
	return append(b, "]}"...)
}

// responsesStream writes the Responses API's events as vLLM does (entrypoints/openai/responses
// serving.py responses_stream_generator and simple_streaming_events.py), each as
// "event: <type>\ndata: <json>" with a sequence_number counting from 0: response.created and
// response.in_progress at once, response.output_item.added and response.content_part.added
// before the first token, response.output_text.delta per token, then response.output_text.done,
// response.content_part.done, response.output_item.done and response.completed, whose response
// carries the usage. No [DONE] line.
type responsesStream struct {
	responsesObject
	seq  int
	text strings.Builder
}

func (r *responsesStream) event(sw *sseWriter, typ string) {
	sw.buf = append(sw.buf, "event: "...)
	sw.buf = append(sw.buf, typ...)
	sw.buf = append(sw.buf, "\ndata: {\"type\":\""...)
	sw.buf = append(sw.buf, typ...)
	sw.buf = append(sw.buf, `","sequence_number":`...)
	sw.buf = strconv.AppendInt(sw.buf, int64(r.seq), 10)
	r.seq++
}

func (r *responsesStream) itemRef(sw *sseWriter) {
	sw.buf = append(sw.buf, `,"item_id":`...)
	sw.buf = appendJSONString(sw.buf, "msg_"+r.id)
	sw.buf = append(sw.buf, `,"output_index":0,"content_index":0`...)
}

func (r *responsesStream) begin(sw *sseWriter) {
	for _, typ := range []string{"response.created", "response.in_progress"} {
		r.event(sw, typ)
		sw.buf = append(sw.buf, `,"response":`...)
		sw.buf = r.appendResponse(sw.buf, false, "", "", Usage{})
		sw.buf = append(sw.buf, "}\n\n"...)
	}
}

func (r *responsesStream) token(sw *sseWriter, _ int, text string, first bool, _ string) {
	if first {
		r.event(sw, "response.output_item.added")
		sw.buf = append(sw.buf, `,"output_index":0,"item":`...)
		sw.buf = r.appendMessageItem(sw.buf, "in_progress", nil)
		sw.buf = append(sw.buf, "}\n\n"...)
		r.event(sw, "response.content_part.added")
		r.itemRef(sw)
		sw.buf = append(sw.buf, `,"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}`+"\n\n"...)
	}
	r.text.WriteString(text)
	r.event(sw, "response.output_text.delta")
	r.itemRef(sw)
	sw.buf = append(sw.buf, `,"delta":`...)
	sw.buf = appendJSONString(sw.buf, text)
	sw.buf = append(sw.buf, `,"logprobs":[]}`+"\n\n"...)
}

func (r *responsesStream) end(sw *sseWriter, finish []string, u Usage) {
	text := r.text.String()
	r.event(sw, "response.output_text.done")
	r.itemRef(sw)
	sw.buf = append(sw.buf, `,"text":`...)
	sw.buf = appendJSONString(sw.buf, text)
	sw.buf = append(sw.buf, `,"logprobs":[]}`+"\n\n"...)
	r.event(sw, "response.content_part.done")
	r.itemRef(sw)
	sw.buf = append(sw.buf, `,"part":{"type":"output_text","text":`...)
	sw.buf = appendJSONString(sw.buf, text)
	sw.buf = append(sw.buf, `,"annotations":[]}}`+"\n\n"...)
	r.event(sw, "response.output_item.done")
	sw.buf = append(sw.buf, `,"output_index":0,"item":`...)
	sw.buf = r.appendMessageItem(sw.buf, "completed", &text)
	sw.buf = append(sw.buf, "}\n\n"...)
	r.event(sw, "response.completed")
	sw.buf = append(sw.buf, `,"response":`...)
	sw.buf = r.appendResponse(sw.buf, true, text, finish[0], u)
	sw.buf = append(sw.buf, "}\n\n"...)
}

// fail ends a Responses stream with the API's error event: {"type":"error","sequence_number",
// "code","message","param"} (OpenAI's ResponseErrorEvent; code is the HTTP status as a string).
func (r *responsesStream) fail(sw *sseWriter, e *APIError) {
	r.event(sw, "error")
	sw.buf = append(sw.buf, `,"code":`...)
	sw.buf = appendJSONString(sw.buf, strconv.Itoa(e.Code))
	sw.buf = append(sw.buf, `,"message":`...)
	sw.buf = appendJSONString(sw.buf, e.Message)
	sw.buf = append(sw.buf, ",\"param\":null}\n\n"...)
}
