package extproc

import (
	"strings"
	"testing"
)

func TestRestoreModelJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"id":"x","model":"lora-a","choices":[]}`, `{"id":"x","model":"base","choices":[]}`},
		{`{"model" : "lora-a"}`, `{"model" : "base"}`},
		// Nested: Responses' response.model, Anthropic's message.model.
		{`{"type":"response.completed","response":{"model":"lora-a","output":[]}}`, `{"type":"response.completed","response":{"model":"base","output":[]}}`},
		// Only object members named model whose value is the target.
		{`{"model":"other","text":"\"model\":\"lora-a\"","m":["model","lora-a"]}`, `{"model":"other","text":"\"model\":\"lora-a\"","m":["model","lora-a"]}`},
		{`{"data":[{"model":"lora-a"},{"model":"lora-a"}]}`, `{"data":[{"model":"base"},{"model":"base"}]}`},
		{`{"model":"lora\u002da"}`, `{"model":"base"}`},
		{`not json "model":"lora-a"`, `not json "model":"lora-a"`},
	}
	for _, tc := range cases {
		if got := string(restoreModelJSON([]byte(tc.in), "lora-a", "base")); got != tc.want {
			t.Errorf("restoreModelJSON(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := string(restoreModelJSON([]byte(`{"model":"t"}`), "t", "a<b>&c")); got != `{"model":"a<b>&c"}` {
		t.Errorf("incoming name escaped: %s", got)
	}
}

// TestModelRestorerAnySplit cuts an SSE stream and a JSON body at every byte and checks that the
// released bytes, concatenated, are the restored body (the chunk split never matters).
func TestModelRestorerAnySplit(t *testing.T) {
	sse := "data: {\"id\":\"1\",\"model\":\"lora-a\",\"choices\":[{\"text\":\"hi\"}]}\n\n" +
		"event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"lora-a\"}}\r\n\r\n" +
		"data: [DONE]\n\n"
	wantSSE := strings.ReplaceAll(sse, `"model":"lora-a"`, `"model":"base-model"`)
	body := `{"id":"1","object":"text_completion","model":"lora-a","usage":{"prompt_tokens":3}}`
	wantBody := strings.ReplaceAll(body, "lora-a", "base-model")
	for _, tc := range []struct {
		in, want string
		sse      bool
	}{{sse, wantSSE, true}, {body, wantBody, false}} {
		for cut := 0; cut <= len(tc.in); cut++ {
			m := newModelRestorer("lora-a", "base-model", tc.sse)
			var got []byte
			got = append(got, m.write([]byte(tc.in[:cut]), false)...)
			got = append(got, m.write([]byte(tc.in[cut:]), true)...)
			if string(got) != tc.want {
				t.Fatalf("sse=%v cut at %d: got %q, want %q", tc.sse, cut, got, tc.want)
			}
		}
	}
	if newModelRestorer("m", "m", true) != nil || newModelRestorer("", "m", true) != nil || newModelRestorer("m", "", false) != nil {
		t.Error("a restorer without a rewrite")
	}
}

// TestModelRestorerReleasesCompleteLines checks that an SSE event is released as soon as its
// line is complete, not held to the end of the response.
func TestModelRestorerReleasesCompleteLines(t *testing.T) {
	m := newModelRestorer("t", "i", true)
	if out := m.write([]byte("data: {\"model\":\"t\"}\n\ndata: {\"mo"), false); string(out) != "data: {\"model\":\"i\"}\n\n" {
		t.Fatalf("first chunk released %q", out)
	}
	if out := m.write([]byte("del\":\"t\"}\n"), false); string(out) != "data: {\"model\":\"i\"}\n" {
		t.Fatalf("second chunk released %q", out)
	}
}
