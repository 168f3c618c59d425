package vllm

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// decodeCase is one decoder table row: a body, and either what the decoded request holds or the
// field the 400 must name.
type decodeCase struct {
	name      string
	body      string
	wantErr   bool
	wantParam string        // with wantErr: the APIError param ("" = not checked)
	prompts   []promptInput // without wantErr: the engine prompts (nil = not checked)
	echo      string        // without wantErr: the first prompt's echo text ("" = not checked)
	check     func(t *testing.T, g *genRequest)
}

func runDecodeCases(t *testing.T, api apiKind, tests []decodeCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := api.decode([]byte(tc.body))
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if g.api != api || g.model == "" {
					t.Errorf("decoded api %v model %q", g.api, g.model)
				}
				if tc.prompts != nil {
					if diff := cmp.Diff(tc.prompts, g.prompts, cmp.AllowUnexported(promptInput{})); diff != "" {
						t.Errorf("prompts (-want +got):\n%s", diff)
					}
				}
				if tc.echo != "" && joinTokens(g.echo[0]) != tc.echo {
					t.Errorf("echo = %q, want %q", joinTokens(g.echo[0]), tc.echo)
				}
				if tc.check != nil {
					tc.check(t, g)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %s", tc.body)
			}
			if err.Code != 400 || err.Type != "BadRequestError" {
				t.Fatalf("error = %#v, want a 400 BadRequestError", err)
			}
			if tc.wantParam != "" && (err.Param == nil || *err.Param != tc.wantParam) {
				got := "<nil>"
				if err.Param != nil {
					got = *err.Param
				}
				t.Errorf("param = %s, want %q (message %q)", got, tc.wantParam, err.Message)
			}
		})
	}
}

func TestDecodeCompletion(t *testing.T) {
	runDecodeCases(t, apiCompletions, []decodeCase{
		{name: "string prompt", body: `{"model":"m","prompt":"hello"}`, prompts: []promptInput{{text: "hello"}}, echo: "hello"},
		{name: "list of strings: one request each", body: `{"model":"m","prompt":["a b","c"]}`, prompts: []promptInput{{text: "a b"}, {text: "c"}}},
		{name: "token ids taken as given", body: `{"model":"m","prompt":[101,2023,0,4294967295]}`, prompts: []promptInput{{ids: []uint32{101, 2023, 0, 4294967295}}}, echo: "t101 t2023 t0 t4294967295 "},
		{name: "lists of token ids", body: `{"model":"m","prompt":[[1,2],[3]]}`, prompts: []promptInput{{ids: []uint32{1, 2}}, {ids: []uint32{3}}}},
		{name: "unknown fields ignored", body: `{"model":"m","prompt":"x","temperature":0.2,"foo":{"bar":1}}`, echo: "x"},
		{name: "max_completion_tokens wins", body: `{"model":"m","prompt":"x","max_tokens":9,"max_completion_tokens":3}`,
			check: func(t *testing.T, g *genRequest) {
				if g.maxTokens != 3 {
					t.Errorf("maxTokens = %d, want 3", g.maxTokens)
				}
			}},
		{name: "malformed JSON", body: `{"model":`, wantErr: true},
		{name: "not an object", body: `[1,2]`, wantErr: true},
		{name: "trailing data", body: `{"model":"m","prompt":"x"} {}`, wantErr: true},
		{name: "missing model", body: `{"prompt":"x"}`, wantErr: true, wantParam: "model"},
		{name: "model of wrong type", body: `{"model":5,"prompt":"x"}`, wantErr: true, wantParam: "model"},
		{name: "missing prompt", body: `{"model":"m"}`, wantErr: true, wantParam: "prompt"},
		{name: "empty prompt list", body: `{"model":"m","prompt":[]}`, wantErr: true, wantParam: "prompt"},
		{name: "negative token id", body: `{"model":"m","prompt":[1,-2]}`, wantErr: true, wantParam: "prompt[1]"},
		{name: "fractional token id", body: `{"model":"m","prompt":[1.5]}`, wantErr: true, wantParam: "prompt[0]"},
		{name: "token id over 32 bits", body: `{"model":"m","prompt":[4294967296]}`, wantErr: true, wantParam: "prompt[0]"},
		{name: "mixed strings and numbers", body: `{"model":"m","prompt":["a",1]}`, wantErr: true, wantParam: "prompt[1]"},
		{name: "empty token list in a batch", body: `{"model":"m","prompt":[[1],[]]}`, wantErr: true, wantParam: "prompt[1]"},
		{name: "prompt of wrong type", body: `{"model":"m","prompt":{"a":1}}`, wantErr: true, wantParam: "prompt"},
		{name: "zero max_tokens", body: `{"model":"m","prompt":"x","max_tokens":0}`, wantErr: true, wantParam: "max_tokens"},
		{name: "max_tokens of wrong type", body: `{"model":"m","prompt":"x","max_tokens":"5"}`, wantErr: true, wantParam: "max_tokens"},
		{name: "n of 0", body: `{"model":"m","prompt":"x","n":0}`, wantErr: true, wantParam: "n"},
		{name: "n of -1", body: `{"model":"m","prompt":"x","n":-1}`, wantErr: true, wantParam: "n"},
		{name: "stream of wrong type", body: `{"model":"m","prompt":"x","stream":"yes"}`, wantErr: true, wantParam: "stream"},
	})
}

func TestDecodeChat(t *testing.T) {
	runDecodeCases(t, apiChat, []decodeCase{
		{name: "last message is echoed", body: `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`,
			prompts: []promptInput{{text: "system: s\nuser: u\n"}}, echo: "u"},
		{name: "content parts: non-text parts by identity",
			body:    `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x/cat.png"}},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}},{"type":"file","file":{"file_id":"f1"}},{"type":"text","text":"b"}]}]}`,
			prompts: []promptInput{{text: "user: a\n[image https://x/cat.png]\n" + digest("image", "data:image/png;base64,AAAA") + "\n" + digest("audio", "UklG") + "\n[file f1]\nb\n"}},
			echo:    "a\nb"},
		{name: "tool calls and tools reach the prompt",
			body:    `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
			prompts: []promptInput{{text: "assistant: \n" + `[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]` + "\ntools: " + `[{"type":"function","function":{"name":"f"}}]` + "\n"}}},
		{name: "empty messages", body: `{"model":"m","messages":[]}`, wantErr: true, wantParam: "messages"},
		{name: "message without role", body: `{"model":"m","messages":[{"content":"x"}]}`, wantErr: true, wantParam: "messages[0].role"},
		{name: "content of wrong type", body: `{"model":"m","messages":[{"role":"user","content":5}]}`, wantErr: true, wantParam: "messages[0].content"},
		{name: "unknown part type", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"video"}]}]}`, wantErr: true, wantParam: "messages[0].content"},
		{name: "image part without url", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, wantErr: true, wantParam: "messages[0].content"},
		{name: "tool_calls not an array", body: `{"model":"m","messages":[{"role":"assistant","content":"x","tool_calls":{}}]}`, wantErr: true, wantParam: "messages[0].tool_calls"},
		{name: "negative max_completion_tokens", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":-1}`, wantErr: true, wantParam: "max_completion_tokens"},
		{name: "messages of wrong type", body: `{"model":"m","messages":"hi"}`, wantErr: true, wantParam: "messages"},
	})
}

func TestDecodeEmbeddings(t *testing.T) {
	runDecodeCases(t, apiEmbeddings, []decodeCase{
		{name: "string", body: `{"model":"m","input":"hello"}`, prompts: []promptInput{{text: "hello"}}},
		{name: "strings", body: `{"model":"m","input":["a","b"]}`, prompts: []promptInput{{text: "a"}, {text: "b"}}},
		{name: "token ids", body: `{"model":"m","input":[7,8]}`, prompts: []promptInput{{ids: []uint32{7, 8}}}},
		{name: "lists of token ids", body: `{"model":"m","input":[[7],[8,9]]}`, prompts: []promptInput{{ids: []uint32{7}}, {ids: []uint32{8, 9}}}},
		{name: "base64 and dimensions", body: `{"model":"m","input":"x","encoding_format":"base64","dimensions":8}`,
			check: func(t *testing.T, g *genRequest) {
				if !g.base64 || g.dims != 8 {
					t.Errorf("base64 %v dims %d, want true 8", g.base64, g.dims)
				}
			}},
		{name: "missing input", body: `{"model":"m"}`, wantErr: true, wantParam: "input"},
		{name: "input of wrong type", body: `{"model":"m","input":true}`, wantErr: true, wantParam: "input"},
		{name: "missing model", body: `{"input":"x"}`, wantErr: true, wantParam: "model"},
		{name: "unknown encoding", body: `{"model":"m","input":"x","encoding_format":"hex"}`, wantErr: true, wantParam: "encoding_format"},
		{name: "zero dimensions", body: `{"model":"m","input":"x","dimensions":0}`, wantErr: true, wantParam: "dimensions"},
		{name: "dimensions of wrong type", body: `{"model":"m","input":"x","dimensions":"8"}`, wantErr: true, wantParam: "dimensions"},
	})
}

func TestDecodeMessages(t *testing.T) {
	runDecodeCases(t, apiMessages, []decodeCase{
		{name: "string content and system", body: `{"model":"m","max_tokens":5,"system":"be brief","messages":[{"role":"user","content":"hi"}]}`,
			prompts: []promptInput{{text: "system: be brief\nuser: hi\n"}}, echo: "hi",
			check: func(t *testing.T, g *genRequest) {
				if g.maxTokens != 5 {
					t.Errorf("maxTokens = %d, want 5", g.maxTokens)
				}
			}},
		{name: "blocks: image by identity, tool use, system blocks, Claude Code roles",
			body:    `{"model":"m","max_tokens":1,"system":[{"type":"text","text":"s"}],"messages":[{"role":"ctx","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`,
			prompts: []promptInput{{text: "system: s\nuser: look\n" + digest("image", "AAAA") + "\nassistant: [tool_use f {\"a\":1}]\nuser: [tool_result t1 \"ok\"]\n"}}},
		{name: "missing max_tokens", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, wantErr: true, wantParam: "max_tokens"},
		{name: "zero max_tokens", body: `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, wantErr: true, wantParam: "max_tokens"},
		{name: "empty messages", body: `{"model":"m","max_tokens":1,"messages":[]}`, wantErr: true, wantParam: "messages"},
		{name: "unknown role", body: `{"model":"m","max_tokens":1,"messages":[{"role":"tool","content":"x"}]}`, wantErr: true, wantParam: "messages[0].role"},
		{name: "missing content", body: `{"model":"m","max_tokens":1,"messages":[{"role":"user"}]}`, wantErr: true, wantParam: "messages[0].content"},
		{name: "unknown block", body: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"video"}]}]}`, wantErr: true, wantParam: "messages[0].content"},
		{name: "image without source", body: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image"}]}]}`, wantErr: true, wantParam: "messages[0].content"},
		{name: "system of wrong type", body: `{"model":"m","max_tokens":1,"system":7,"messages":[{"role":"user","content":"x"}]}`, wantErr: true, wantParam: "system"},
		{name: "max_tokens of wrong type", body: `{"model":"m","max_tokens":"1","messages":[{"role":"user","content":"x"}]}`, wantErr: true, wantParam: "max_tokens"},
		{name: "missing model", body: `{"max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, wantErr: true, wantParam: "model"},
	})
}

func TestDecodeResponses(t *testing.T) {
	runDecodeCases(t, apiResponses, []decodeCase{
		{name: "string input with instructions", body: `{"model":"m","input":"hi","instructions":"be brief","max_output_tokens":4}`,
			prompts: []promptInput{{text: "system: be brief\nuser: hi\n"}}, echo: "hi",
			check: func(t *testing.T, g *genRequest) {
				if g.maxTokens != 4 || g.instructions == nil || *g.instructions != "be brief" {
					t.Errorf("maxTokens %d instructions %v", g.maxTokens, g.instructions)
				}
			}},
		{name: "items: parts by identity, other item types by JSON",
			body:    `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"https://x/a.png"}]},{"type":"function_call_output","call_id":"c","output":"42"},{"type":"message","role":"user","content":"and?"}]}`,
			prompts: []promptInput{{text: "user: see\n[image https://x/a.png]\nfunction_call_output: {\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"42\"}\nuser: and?\n"}},
			echo:    "and?"},
		{name: "missing input", body: `{"model":"m"}`, wantErr: true, wantParam: "input"},
		{name: "empty input list", body: `{"model":"m","input":[]}`, wantErr: true, wantParam: "input"},
		{name: "input of wrong type", body: `{"model":"m","input":3}`, wantErr: true, wantParam: "input"},
		{name: "item not an object", body: `{"model":"m","input":["x"]}`, wantErr: true, wantParam: "input[0]"},
		{name: "message without role", body: `{"model":"m","input":[{"content":"x"}]}`, wantErr: true, wantParam: "input[0].role"},
		{name: "unknown part", body: `{"model":"m","input":[{"role":"user","content":[{"type":"input_video"}]}]}`, wantErr: true, wantParam: "input[0].content"},
		{name: "zero max_output_tokens", body: `{"model":"m","input":"x","max_output_tokens":0}`, wantErr: true, wantParam: "max_output_tokens"},
		{name: "instructions of wrong type", body: `{"model":"m","input":"x","instructions":1}`, wantErr: true, wantParam: "instructions"},
		{name: "missing model", body: `{"input":"x"}`, wantErr: true, wantParam: "model"},
	})
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "ctl\x01\n\t\r", "<html>&", "é世"} {
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil || got != s {
			t.Errorf("appendJSONString(%q) = %s, decodes to %q (%v)", s, b, got, err)
		}
	}
}

func TestEmbeddingDeterministicUnitVector(t *testing.T) {
	a, b := embedding([]uint32{1, 2, 3}, 64), embedding([]uint32{1, 2, 3}, 64)
	if !cmp.Equal(a, b) {
		t.Fatal("equal inputs gave different vectors")
	}
	if cmp.Equal(a, embedding([]uint32{1, 2, 4}, 64)) {
		t.Error("different inputs gave equal vectors")
	}
	var norm float64
	for _, x := range a {
		norm += float64(x) * float64(x)
	}
	if norm < 0.999 || norm > 1.001 {
		t.Errorf("|v|² = %v, want 1", norm)
	}
}

// fuzzDecoder checks that a decoder never panics, and that it either accepts a body with a
// model and at least one prompt, or refuses it with a 400 APIError whose JSON (in either error
// shape) is valid.
func fuzzDecoder(t *testing.T, api apiKind, body []byte) {
	g, err := api.decode(body)
	if err != nil {
		if err.Code != 400 {
			t.Fatalf("error %v is not a 400", err)
		}
		if b, mErr := json.Marshal(err); mErr != nil || !json.Valid(b) {
			t.Fatalf("error body does not encode: %v", mErr)
		}
		return
	}
	if g.model == "" || len(g.prompts) == 0 || len(g.echo) != len(g.prompts) && api != apiEmbeddings {
		t.Fatalf("accepted %q as model %q with %d prompts, %d echoes", body, g.model, len(g.prompts), len(g.echo))
	}
	for _, p := range g.prompts {
		if p.ids != nil && len(p.ids) == 0 {
			t.Fatalf("empty token prompt from %q", body)
		}
		_ = p.numTokens()
	}
	if api == apiEmbeddings {
		for _, p := range g.prompts {
			_ = embedding(p.tokenIDs(), 4)
		}
	}
	_ = engine.Tokenize(g.prompts[0].text)
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":"hello","max_tokens":3}`), false)
	f.Add([]byte(`{"model":"m","prompt":[[1,2],[3]]}`), false)
	f.Add([]byte(`{"model":"m","prompt":["a",1]}`), false)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`), true)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:x"}}]}]}`), true)
	f.Add([]byte(`{"model":`), false)
	f.Add([]byte(`null`), true)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		api := apiCompletions
		if chat {
			api = apiChat
		}
		fuzzDecoder(t, api, body)
	})
}

func FuzzDecodeEmbeddings(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hello"}`))
	f.Add([]byte(`{"model":"m","input":[[1,2],[3]],"encoding_format":"base64","dimensions":3}`))
	f.Add([]byte(`{"model":"m","input":[1,-1]}`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzDecoder(t, apiEmbeddings, body) })
}

func FuzzDecodeMessages(f *testing.F) {
	f.Add([]byte(`{"model":"m","max_tokens":5,"system":"s","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	f.Add([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x"}},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]}]}]}`))
	f.Add([]byte(`{"model":"m","max_tokens":0,"messages":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzDecoder(t, apiMessages, body) })
}

func FuzzDecodeResponses(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hi","instructions":"i","max_output_tokens":3,"stream":true}`))
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_file","file_data":"QQ=="}]},{"type":"reasoning","summary":[]}]}`))
	f.Add([]byte(`{"model":"m","input":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzDecoder(t, apiResponses, body) })
}
