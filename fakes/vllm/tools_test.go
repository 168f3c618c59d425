package vllm

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestStreamFinishPlacement: vLLM puts finish_reason (with stop_reason null) on the last token
// chunk; --stream-finish openai sends it in a chunk of its own with an empty delta or text.
// Both carry every token exactly once.
func TestStreamFinishPlacement(t *testing.T) {
	for _, mode := range []string{StreamFinishVLLM, StreamFinishOpenAI} {
		inst := startTest(t, func(c *Config) { c.Mode = ModeEcho; c.StreamFinish = mode })
		for path, body := range map[string]string{
			"/v1/chat/completions": `{"model":"m","stream":true,"messages":[{"role":"user","content":"a b c"}]}`,
			"/v1/completions":      `{"model":"m","stream":true,"prompt":"a b c"}`,
		} {
			_, evs := postStream(t, inst.URL()+path, body)
			var text strings.Builder
			var finishing []map[string]any
			for _, e := range evs[:len(evs)-1] {
				m := mustJSON(t, e.data)
				c, _ := at(m, "choices", 0, "delta", "content").(string)
				if path == "/v1/completions" {
					c, _ = at(m, "choices", 0, "text").(string)
				}
				text.WriteString(c)
				if at(m, "choices", 0, "finish_reason") != nil {
					finishing = append(finishing, m)
				}
			}
			if text.String() != "a b c" {
				t.Errorf("%s %s: streamed text %q, want the echo once", mode, path, text.String())
			}
			if len(finishing) != 1 {
				t.Fatalf("%s %s: %d finishing chunks, want 1: %v", mode, path, len(finishing), evs)
			}
			f := finishing[0]
			last := mustJSON(t, evs[len(evs)-2].data)
			if at(f, "choices", 0, "finish_reason") != "stop" || !hasKey(at(f, "choices", 0), "stop_reason") ||
				at(last, "choices", 0, "finish_reason") != "stop" {
				t.Errorf("%s %s: finishing chunk %v (last chunk %v), want finish_reason stop and stop_reason null on the last chunk", mode, path, f, last)
			}
			c, _ := at(f, "choices", 0, "delta", "content").(string)
			if path == "/v1/completions" {
				c, _ = at(f, "choices", 0, "text").(string)
			}
			if mode == StreamFinishVLLM && c != "c" {
				t.Errorf("vllm %s: finishing chunk %v, want it to carry the last token", path, f)
			}
			if mode == StreamFinishOpenAI && c != "" {
				t.Errorf("openai %s: finishing chunk %v, want an empty delta", path, f)
			}
			if mode == StreamFinishOpenAI && path == "/v1/chat/completions" && len(at(f, "choices", 0, "delta").(map[string]any)) != 0 {
				t.Errorf("openai chat: finishing delta %v, want {}", at(f, "choices", 0, "delta"))
			}
		}
	}
	if _, _, err := parseArgs(t, "--model", "m", "--stream-finish", "sometimes"); err == nil || !strings.Contains(err.Error(), "stream-finish") {
		t.Errorf("--stream-finish sometimes: %v, want an error naming the flag", err)
	}
}

func hasKey(v any, k string) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	_, ok = m[k]
	return ok
}

const weatherTools = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}},` +
	`{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}}]`

var toolCallID = regexp.MustCompile(`^chatcmpl-tool-[0-9a-f]{32}$`)

// TestToolCallsJSON: with tools, a chat answer is one tool call whose arguments follow the
// function's parameters; finish_reason is vLLM's (tool_calls for auto, the engine's for a named
// or required choice); tool_choice none answers text.
func TestToolCallsJSON(t *testing.T) {
	inst := startTest(t, nil)
	for _, tc := range []struct {
		choice, wantName, wantFinish string
		wantContent                  any
	}{
		{choice: `{"type":"function","function":{"name":"get_weather"}}`, wantName: "get_weather", wantFinish: "stop", wantContent: ""},
		{choice: `"required"`, wantFinish: "stop", wantContent: ""},
		{choice: `"auto"`, wantFinish: "tool_calls", wantContent: nil},
		{choice: ``, wantFinish: "tool_calls", wantContent: nil}, // auto is the default with tools
	} {
		choice := ""
		if tc.choice != "" {
			choice = `,"tool_choice":` + tc.choice
		}
		resp, b := post(t, inst.URL()+"/v1/chat/completions", `{"model":"m","max_tokens":200,"messages":[{"role":"user","content":"weather?"}],"tools":`+weatherTools+choice+`}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.choice, resp.StatusCode, b)
		}
		m := mustJSON(t, string(b))
		msg := at(m, "choices", 0, "message").(map[string]any)
		if msg["content"] != tc.wantContent || at(m, "choices", 0, "finish_reason") != tc.wantFinish {
			t.Errorf("%s: message %v finish %v, want content %v and finish %s", tc.choice, msg, at(m, "choices", 0, "finish_reason"), tc.wantContent, tc.wantFinish)
		}
		call := at(msg, "tool_calls", 0).(map[string]any)
		name := at(call, "function", "name").(string)
		if (tc.wantName != "" && name != tc.wantName) || (name != "get_weather" && name != "get_time") {
			t.Errorf("%s: called %q", tc.choice, name)
		}
		if id, _ := call["id"].(string); !toolCallID.MatchString(id) || call["type"] != "function" {
			t.Errorf("%s: call %v, want vLLM's id and type function", tc.choice, call)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(at(call, "function", "arguments").(string)), &args); err != nil {
			t.Fatalf("%s: arguments are not a JSON object: %v", tc.choice, err)
		}
		if name == "get_weather" {
			if _, ok := args["city"].(string); !ok || args["unit"] != "c" {
				t.Errorf("%s: arguments %v, want a string city and the first enum unit", tc.choice, args)
			}
		}
		if u := at(m, "usage", "completion_tokens").(float64); u < 3 {
			t.Errorf("%s: %v completion tokens, want the arguments' tokens", tc.choice, u)
		}
	}
	resp, b := post(t, inst.URL()+"/v1/chat/completions", `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"x"}],"tools":`+weatherTools+`,"tool_choice":"none"}`)
	if m := mustJSON(t, string(b)); resp.StatusCode != 200 || hasKey(at(m, "choices", 0, "message"), "tool_calls") {
		t.Errorf("tool_choice none: status %d body %s, want a text answer", resp.StatusCode, b)
	}
}

// TestToolCallsStream: a streamed tool call sends the call's id, type and name with the first
// argument text, then argument deltas only, and finishes with tool_calls; the deltas join into
// the arguments a non-streamed answer would carry.
func TestToolCallsStream(t *testing.T) {
	for _, mode := range []string{StreamFinishVLLM, StreamFinishOpenAI} {
		inst := startTest(t, func(c *Config) { c.StreamFinish = mode })
		_, evs := postStream(t, inst.URL()+"/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":200,"messages":[{"role":"user","content":"w"}],"tools":`+weatherTools+`,"tool_choice":{"type":"function","function":{"name":"get_time"}}}`)
		var args strings.Builder
		finishes := 0
		calls := 0
		for i, e := range evs[:len(evs)-1] {
			m := mustJSON(t, e.data)
			if i == 0 {
				if at(m, "choices", 0, "delta", "role") != "assistant" {
					t.Errorf("%s: first chunk %v, want the role chunk", mode, m)
				}
				continue
			}
			if f := at(m, "choices", 0, "finish_reason"); f != nil {
				finishes++
				if f != "tool_calls" {
					t.Errorf("%s: finish_reason %v, want tool_calls", mode, f)
				}
			}
			call, ok := at(m, "choices", 0, "delta", "tool_calls", 0).(map[string]any)
			if !ok {
				continue
			}
			calls++
			if calls == 1 {
				if id, _ := call["id"].(string); !toolCallID.MatchString(id) || at(call, "function", "name") != "get_time" || call["type"] != "function" {
					t.Errorf("%s: first tool-call delta %v, want id, type and name", mode, call)
				}
			} else if hasKey(call, "id") || hasKey(call["function"], "name") {
				t.Errorf("%s: later tool-call delta %v carries id or name", mode, call)
			}
			args.WriteString(at(call, "function", "arguments").(string))
		}
		var parsed map[string]any
		if err := json.Unmarshal([]byte(args.String()), &parsed); err != nil || !strings.HasPrefix(parsed["tz"].(string), "tz-") {
			t.Errorf("%s: streamed arguments %q: %v", mode, args.String(), err)
		}
		if finishes != 1 || calls < 2 {
			t.Errorf("%s: %d finishing chunks and %d tool-call chunks", mode, finishes, calls)
		}
	}
}

// TestToolChoiceErrors: bad tools and tool_choice are 400s naming the field; the server keeps
// serving.
func TestToolChoiceErrors(t *testing.T) {
	inst := startTest(t, nil)
	msg := `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m",` + msg + `,"tool_choice":"auto"}`, "tool_choice"},
		{`{"model":"m",` + msg + `,"tools":` + weatherTools + `,"tool_choice":"sometimes"}`, "tool_choice"},
		{`{"model":"m",` + msg + `,"tools":` + weatherTools + `,"tool_choice":{"type":"function","function":{"name":"nope"}}}`, "tool_choice.function.name"},
		{`{"model":"m",` + msg + `,"tools":` + weatherTools + `,"tool_choice":{"type":"function","function":{}}}`, "tool_choice.function.name"},
		{`{"model":"m",` + msg + `,"tools":[{"type":"function","function":{}}]}`, "tools[0].function.name"},
		{`{"model":"m",` + msg + `,"tools":[{"type":"retrieval"}]}`, "tools[0].type"},
		{`{"model":"m",` + msg + `,"tools":{"a":1}}`, "tools"},
	} {
		resp, b := post(t, inst.URL()+"/v1/chat/completions", tc.body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d: %s", tc.body, resp.StatusCode, b)
			continue
		}
		checkErrorShape(t, "/v1/chat/completions", b, http.StatusBadRequest, tc.param)
	}
	if resp, b := post(t, inst.URL()+"/v1/chat/completions", `{"model":"m","max_tokens":2,`+msg+`}`); resp.StatusCode != 200 {
		t.Errorf("after bad tools: %d %s", resp.StatusCode, b)
	}
}

func TestGenArgumentsSeeded(t *testing.T) {
	schema := json.RawMessage(`{"properties":{"b":{"type":"boolean"},"n":{"type":"number"},"a":{"type":["integer","null"]},"o":{"type":"object"},"l":{"type":"array"},"x":{}}}`)
	a1, err := genArguments(rand.New(rand.NewPCG(1, 2)), schema)
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := genArguments(rand.New(rand.NewPCG(1, 2)), schema)
	if a1 != a2 {
		t.Errorf("same seed, different arguments: %s vs %s", a1, a2)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(a1), &m); err != nil {
		t.Fatalf("%s: %v", a1, err)
	}
	if _, ok := m["a"].(float64); !ok || m["o"] == nil || m["x"] != nil || !strings.HasPrefix(a1, `{"a": `) {
		t.Errorf("arguments %s: want keys in order with values of their types", a1)
	}
}
