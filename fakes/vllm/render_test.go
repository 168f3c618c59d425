package vllm

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// TestRender: /v1/completions/render answers one token-id list per prompt, the ids the engine
// runs (the dummy tokenizer's for text, given ids copied through); /v1/chat/completions/render
// one list as long as the chat request's prompt_tokens; bad input is refused as the API refuses
// it; nothing reaches the engine.
func TestRender(t *testing.T) {
	inst := startTest(t, nil)
	ids := func(text string) []uint32 {
		var out []uint32
		for _, tok := range engine.Tokenize(text) {
			out = append(out, tok.ID)
		}
		return out
	}
	for _, tc := range []struct {
		body string
		want [][]uint32
	}{
		{`{"model":"m","prompt":"hello world, again"}`, [][]uint32{ids("hello world, again")}},
		{`{"model":"m","prompt":["hello","world"]}`, [][]uint32{ids("hello"), ids("world")}},
		{`{"model":"m","prompt":[10,20,30]}`, [][]uint32{{10, 20, 30}}},
		{`{"model":"m","prompt":[[1,2],[3,4,5]]}`, [][]uint32{{1, 2}, {3, 4, 5}}},
	} {
		resp, b := post(t, inst.URL()+"/v1/completions/render", tc.body)
		var got []RenderResponse
		if resp.StatusCode != 200 || json.Unmarshal(b, &got) != nil || len(got) != len(tc.want) {
			t.Errorf("%s: %d %s", tc.body, resp.StatusCode, b)
			continue
		}
		for i := range got {
			if !slices.Equal(got[i].TokenIDs, tc.want[i]) {
				t.Errorf("%s: prompt %d rendered %v, want %v", tc.body, i, got[i].TokenIDs, tc.want[i])
			}
		}
	}
	chat := `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"alpha beta gamma"}]}`
	resp, b := post(t, inst.URL()+"/v1/chat/completions/render", chat)
	var r RenderResponse
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || len(r.TokenIDs) == 0 {
		t.Fatalf("chat render: %d %s", resp.StatusCode, b)
	}
	for _, name := range []string{MetricPromptTokens, MetricRequestSuccess} {
		for _, m := range scrapeFamilies(t, inst.URL())[name].GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("%s = %v after renders only: a render reached the engine", name, v)
			}
		}
	}
	_, b = post(t, inst.URL()+"/v1/chat/completions", chat[:len(chat)-1]+`,"max_tokens":1}`)
	if got := at(mustJSON(t, string(b)), "usage", "prompt_tokens"); got != float64(len(r.TokenIDs)) {
		t.Errorf("the chat request's prompt_tokens = %v, the render has %d ids", got, len(r.TokenIDs))
	}
	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/v1/completions/render", `{"model":"m"}`, 400},
		{"/v1/completions/render", `{"model":"nope","prompt":"x"}`, 404},
		{"/v1/chat/completions/render", `{"model":"m","messages":"x"}`, 400},
		{"/v1/chat/completions/render", `not json`, 400},
	} {
		resp, b := post(t, inst.URL()+tc.path, tc.body)
		if resp.StatusCode != tc.status || at(mustJSON(t, string(b)), "error", "message") == nil {
			t.Errorf("%s %s: %d %s, want %d with an OpenAI error", tc.path, tc.body, resp.StatusCode, b, tc.status)
		}
	}
}
