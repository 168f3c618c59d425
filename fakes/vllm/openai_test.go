package vllm

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		chat      bool
		wantParam string // "" with wantErr false = success
		wantErr   bool
		wantEcho  string
	}{
		{name: "completion string prompt", body: `{"model":"m","prompt":"hello"}`, wantEcho: "hello"},
		{name: "completion one-element prompt list", body: `{"model":"m","prompt":["hi"]}`, wantEcho: "hi"},
		{name: "chat last message is echoed", chat: true, body: `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`, wantEcho: "u"},
		{name: "chat content parts", chat: true, body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}]}`, wantEcho: "a\nb"},
		{name: "unknown fields ignored", body: `{"model":"m","prompt":"x","temperature":0.2,"foo":{"bar":1}}`, wantEcho: "x"},
		{name: "malformed JSON", body: `{"model":`, wantErr: true},
		{name: "not an object", body: `[1,2]`, wantErr: true},
		{name: "trailing data", body: `{"model":"m","prompt":"x"} {}`, wantErr: true},
		{name: "missing model", body: `{"prompt":"x"}`, wantErr: true, wantParam: "model"},
		{name: "missing prompt", body: `{"model":"m"}`, wantErr: true, wantParam: "prompt"},
		{name: "prompt of numbers", body: `{"model":"m","prompt":[1,2]}`, wantErr: true, wantParam: "prompt"},
		{name: "empty messages", chat: true, body: `{"model":"m","messages":[]}`, wantErr: true, wantParam: "messages"},
		{name: "message without role", chat: true, body: `{"model":"m","messages":[{"content":"x"}]}`, wantErr: true, wantParam: "messages[0].role"},
		{name: "content of wrong type", chat: true, body: `{"model":"m","messages":[{"role":"user","content":5}]}`, wantErr: true, wantParam: "messages[0].content"},
		{name: "zero max_tokens", body: `{"model":"m","prompt":"x","max_tokens":0}`, wantErr: true, wantParam: "max_tokens"},
		{name: "negative max_completion_tokens", chat: true, body: `{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":-1}`, wantErr: true, wantParam: "max_completion_tokens"},
		{name: "n of 2", body: `{"model":"m","prompt":"x","n":2}`, wantErr: true, wantParam: "n"},
		{name: "max_tokens of wrong type", body: `{"model":"m","prompt":"x","max_tokens":"5"}`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := DecodeRequest([]byte(tc.body), tc.chat)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("DecodeRequest: %v", err)
				}
				if req.echoText != tc.wantEcho {
					t.Errorf("echo text = %q, want %q", req.echoText, tc.wantEcho)
				}
				return
			}
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Code != 400 || apiErr.Type != "BadRequestError" {
				t.Fatalf("error = %#v, want a 400 BadRequestError", err)
			}
			if tc.wantParam != "" && (apiErr.Param == nil || *apiErr.Param != tc.wantParam) {
				t.Errorf("param = %v, want %q", apiErr.Param, tc.wantParam)
			}
		})
	}
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

// FuzzDecodeRequest checks that the request decoder never panics, and that it either accepts a
// body with a model and a prompt or rejects it with a 400 APIError whose JSON is valid.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":"hello","max_tokens":3}`), false)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`), true)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`), true)
	f.Add([]byte(`{"model":`), false)
	f.Add([]byte(`null`), true)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		req, err := DecodeRequest(body, chat)
		if err != nil {
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Code != 400 {
				t.Fatalf("error %v is not a 400 APIError", err)
			}
			b, mErr := json.Marshal(apiErr)
			if mErr != nil || !json.Valid(b) {
				t.Fatalf("error body does not encode: %v", mErr)
			}
			return
		}
		if req.Model == "" {
			t.Fatalf("accepted a request without a model: %q", body)
		}
		if chat && len(req.Messages) == 0 {
			t.Fatalf("accepted a chat request without messages: %q", body)
		}
		if !chat && len(req.Prompt) == 0 {
			t.Fatalf("accepted a completion without a prompt: %q", body)
		}
		if utf8.ValidString(req.promptText) && !strings.Contains(req.promptText, req.echoText) {
			t.Fatalf("echo text %q is not part of the prompt %q", req.echoText, req.promptText)
		}
	})
}
