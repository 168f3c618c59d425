package vllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
)

// Tool choice modes of a chat request (OpenAI's tool_choice; vLLM serving_chat.py).
const (
	toolChoiceNone     = "none"
	toolChoiceAuto     = "auto"
	toolChoiceRequired = "required"
	toolChoiceNamed    = "named" // {"type":"function","function":{"name":...}}
)

// chatTool is one entry of a chat request's tools: {"type":"function","function":{"name",
// "description","parameters"}}.
type chatTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// toolPlan is the tool call a chat request is answered with: the fake answers a request with
// tools and a tool_choice other than "none" with one call, its arguments generated from the
// tool's parameter schema; the arguments are the output tokens.
type toolPlan struct {
	// mode is the request's tool_choice: auto, required or named.
	mode string
	// name is the function called; id its call id ("chatcmpl-tool-" + 32 hex digits, vLLM's
	// make_tool_call_id for random ids); args the arguments, a JSON object.
	name, id, args string
}

// parseTools validates a chat request's tools and tool_choice (vLLM's ChatCompletionRequest
// validation: tool_choice needs tools; a named choice must name one of them) and returns the
// tool_choice mode ("" without tools and tool_choice) and the tools. Errors are 400s naming the
// field.
func parseTools(rawTools, rawChoice json.RawMessage) (mode, named string, tools []chatTool, apiErr *APIError) {
	if !isNull(rawTools) {
		if err := json.Unmarshal(rawTools, &tools); err != nil {
			return "", "", nil, NewAPIError(http.StatusBadRequest, "tools", "the field 'tools' must be an array of tool objects")
		}
		for i, t := range tools {
			if t.Type != "function" {
				return "", "", nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("tools[%d].type", i), "tools[%d].type must be \"function\", got %q", i, t.Type)
			}
			if t.Function == nil || t.Function.Name == "" {
				return "", "", nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("tools[%d].function.name", i), "tools[%d]: the field 'function.name' is required", i)
			}
			if !isNull(t.Function.Parameters) && bytes.TrimSpace(t.Function.Parameters)[0] != '{' {
				return "", "", nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("tools[%d].function.parameters", i), "tools[%d].function.parameters must be a JSON Schema object", i)
			}
		}
	}
	if isNull(rawChoice) {
		if len(tools) == 0 {
			return "", "", tools, nil
		}
		return toolChoiceAuto, "", tools, nil // OpenAI's and vLLM's default with tools
	}
	var s string
	if json.Unmarshal(rawChoice, &s) == nil {
		switch s {
		case toolChoiceNone, toolChoiceAuto, toolChoiceRequired:
			mode = s
		default:
			return "", "", nil, NewAPIError(http.StatusBadRequest, "tool_choice", "tool_choice must be none, auto, required or {\"type\":\"function\",\"function\":{\"name\":...}}, got %q", s)
		}
	} else {
		var obj struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(rawChoice, &obj); err != nil || obj.Type != "function" {
			return "", "", nil, NewAPIError(http.StatusBadRequest, "tool_choice", "tool_choice must be none, auto, required or {\"type\":\"function\",\"function\":{\"name\":...}}")
		}
		if obj.Function == nil || obj.Function.Name == "" {
			return "", "", nil, NewAPIError(http.StatusBadRequest, "tool_choice.function.name", "tool_choice: the field 'function.name' is required")
		}
		mode, named = toolChoiceNamed, obj.Function.Name
	}
	if mode != toolChoiceNone && len(tools) == 0 {
		return "", "", nil, NewAPIError(http.StatusBadRequest, "tool_choice", "When using `tool_choice`, `tools` must be set.")
	}
	if mode == toolChoiceNamed && !slices.ContainsFunc(tools, func(t chatTool) bool { return t.Function.Name == named }) {
		return "", "", nil, NewAPIError(http.StatusBadRequest, "tool_choice.function.name", "The tool specified in `tool_choice` (%q) does not match any of the specified `tools`", named)
	}
	return mode, named, tools, nil
}

// planToolCall chooses the call a request with tools makes: the named function, else one of the
// tools chosen by rng; its arguments come from the function's parameter schema (genArguments).
func planToolCall(rng *rand.Rand, mode, named string, tools []chatTool) (*toolPlan, error) {
	if mode == "" || mode == toolChoiceNone {
		return nil, nil
	}
	t := tools[0]
	if mode == toolChoiceNamed {
		t = tools[slices.IndexFunc(tools, func(t chatTool) bool { return t.Function.Name == named })]
	} else if len(tools) > 1 {
		t = tools[rng.IntN(len(tools))]
	}
	args, err := genArguments(rng, t.Function.Parameters)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 0, 46)
	id = append(id, "chatcmpl-tool-"...)
	for range 2 {
		id = fmt.Appendf(id, "%016x", rng.Uint64())
	}
	return &toolPlan{mode: mode, name: t.Function.Name, id: string(id), args: args}, nil
}

// genArguments returns a JSON object for a function's parameter schema: every property of
// "properties", in key order, with a value of its "type" (the first "enum" value when there is
// one; strings "<property>-<n>", integers and numbers in [0, 100), booleans, empty arrays and
// objects, null for a missing or unknown type). Values are drawn from rng.
func genArguments(rng *rand.Rand, schema json.RawMessage) (string, error) {
	var s struct {
		Properties map[string]struct {
			Type any               `json:"type"`
			Enum []json.RawMessage `json:"enum"`
		} `json:"properties"`
	}
	if !isNull(schema) {
		if err := json.Unmarshal(schema, &s); err != nil {
			return "", fmt.Errorf("parameters: %w", err)
		}
	}
	keys := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := []byte{'{'}
	for i, k := range keys {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendJSONString(b, k)
		b = append(b, ": "...)
		p := s.Properties[k]
		if len(p.Enum) > 0 {
			b = append(b, compactJSON(p.Enum[0])...)
			continue
		}
		typ, _ := p.Type.(string)
		if list, ok := p.Type.([]any); ok && len(list) > 0 {
			typ, _ = list[0].(string)
		}
		switch typ {
		case "string":
			b = appendJSONString(b, k+"-"+strconv.Itoa(rng.IntN(1000)))
		case "integer":
			b = strconv.AppendInt(b, int64(rng.IntN(100)), 10)
		case "number":
			b = strconv.AppendFloat(b, float64(rng.IntN(10000))/100, 'f', -1, 64)
		case "boolean":
			b = strconv.AppendBool(b, rng.IntN(2) == 1)
		case "array":
			b = append(b, "[]"...)
		case "object":
			b = append(b, "{}"...)
		default:
			b = append(b, "null"...)
		}
	}
	return string(append(b, '}')), nil
}

// streamFinish is the finish_reason a streamed tool call ends with: "tool_calls" whatever the
// engine's reason, as vLLM's serving_chat.py sets it once tool-call deltas were streamed.
func (p *toolPlan) streamFinish() string { return "tool_calls" }

// jsonFinish is the finish_reason of a non-streamed tool call (vLLM
// chat_completion_full_generator): "tool_calls" for tool_choice auto (auto_tools_called), the
// engine's reason ("stop" or "length") for a named or required choice.
func (p *toolPlan) jsonFinish(engineReason string) string {
	if p.mode == toolChoiceAuto {
		return "tool_calls"
	}
	return engineReason
}
