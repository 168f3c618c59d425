package vllm

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

// sseEvent is one server-sent event: its event name ("" for data-only OpenAI chunks) and data.
type sseEvent struct {
	name string
	data string
}

// readSSE reads a whole event stream.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" || cur.name != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func postStream(t *testing.T, url, body string) (*http.Response, []sseEvent) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d content-type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return resp, readSSE(t, resp.Body)
}

func names(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.name
	}
	return out
}

func mustJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not a JSON object: %s (%v)", s, err)
	}
	return m
}

// at walks a decoded JSON value by object keys and array indexes.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func TestCompletionPromptForms(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.Mode = ModeEcho })
	tests := []struct {
		name, prompt string
		texts        []string
		promptTokens int
	}{
		{"string", `"one two"`, []string{"one two"}, 2},
		{"strings: one choice each", `["one two","three"]`, []string{"one two", "three"}, 3},
		{"token ids", `[11,22,33]`, []string{"t11 t22 t33 "}, 3},
		{"lists of token ids", `[[11],[22,33]]`, []string{"t11 ", "t22 t33 "}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":`+tc.prompt+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			var out completionOut
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatal(err)
			}
			var texts []string
			for i, c := range out.Choices {
				if c.Index != i {
					t.Errorf("choice %d has index %d", i, c.Index)
				}
				texts = append(texts, *c.Text)
			}
			if diff := cmp.Diff(tc.texts, texts); diff != "" {
				t.Errorf("texts (-want +got):\n%s", diff)
			}
			if out.Usage.PromptTokens != tc.promptTokens {
				t.Errorf("prompt_tokens = %d, want %d", out.Usage.PromptTokens, tc.promptTokens)
			}
		})
	}
	// Streaming a batch: every choice's tokens, then a finish chunk per choice.
	_, evs := postStream(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":[[1,2],[3]],"stream":true,"stream_options":{"include_usage":true}}`)
	perChoice := map[float64]string{}
	finishes := 0
	var usage any
	for _, e := range evs {
		if e.data == "[DONE]" {
			continue
		}
		m := mustJSON(t, e.data)
		if u := at(m, "usage"); u != nil {
			usage = u
			continue
		}
		idx := at(m, "choices", 0, "index").(float64)
		if f := at(m, "choices", 0, "finish_reason"); f != nil {
			finishes++ // vLLM's placement: the last token chunk carries the reason
		}
		perChoice[idx] += at(m, "choices", 0, "text").(string)
	}
	if diff := cmp.Diff(map[float64]string{0: "t1 t2 ", 1: "t3 "}, perChoice); diff != "" {
		t.Errorf("streamed texts (-want +got):\n%s", diff)
	}
	if finishes != 2 || at(usage, "prompt_tokens") != 3.0 || at(usage, "completion_tokens") != 3.0 {
		t.Errorf("finish chunks %d, usage %v", finishes, usage)
	}
	if evs[len(evs)-1].data != "[DONE]" {
		t.Errorf("stream does not end with [DONE]: %v", evs[len(evs)-1])
	}
}

func TestMessagesAPI(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.Mode = ModeEcho })
	body := `{"model":"m","max_tokens":2,"system":"sys","messages":[{"role":"user","content":"alpha beta gamma"}]}`
	resp, b := post(t, inst.URL()+"/v1/messages", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	m := mustJSON(t, string(b))
	want := map[string]any{"type": "message", "role": "assistant", "model": "m", "stop_reason": "max_tokens"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if got := at(m, "content", 0, "text"); got != "alpha beta " {
		t.Errorf("content text %v", got)
	}
	// The prompt "system: sys\nuser: alpha beta gamma\n" is 8 dummy-tokenizer tokens.
	if diff := cmp.Diff(map[string]any{"input_tokens": 8.0, "output_tokens": 2.0}, m["usage"]); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}

	_, evs := postStream(t, inst.URL()+"/v1/messages", strings.Replace(body, `"max_tokens":2`, `"max_tokens":2,"stream":true`, 1))
	wantNames := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}
	if diff := cmp.Diff(wantNames, names(evs)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	for _, e := range evs {
		if got := mustJSON(t, e.data)["type"]; got != e.name {
			t.Errorf("event %s carries type %v", e.name, got)
		}
	}
	start := mustJSON(t, evs[0].data)
	if diff := cmp.Diff(map[string]any{"input_tokens": 8.0, "output_tokens": 0.0}, at(start, "message", "usage")); diff != "" {
		t.Errorf("message_start usage (-want +got):\n%s", diff)
	}
	delta := mustJSON(t, evs[5].data)
	if at(delta, "delta", "stop_reason") != "max_tokens" || at(delta, "usage", "output_tokens") != 2.0 || at(delta, "usage", "input_tokens") != 8.0 {
		t.Errorf("message_delta %s", evs[5].data)
	}
	if at(mustJSON(t, evs[2].data), "delta", "text") != "alpha " {
		t.Errorf("first delta %s", evs[2].data)
	}
}

func TestResponsesAPI(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.Mode = ModeEcho; c.EnableKVCache = true; c.BlockSize = 8 })
	body := `{"model":"m","instructions":"be kind","input":[{"role":"user","content":[{"type":"input_text","text":"one two three"}]}]}`
	resp, b := post(t, inst.URL()+"/v1/responses", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	m := mustJSON(t, string(b))
	if m["object"] != "response" || m["status"] != "completed" || m["instructions"] != "be kind" {
		t.Errorf("response %s", b)
	}
	if got := at(m, "output", 0, "content", 0, "text"); got != "one two three" {
		t.Errorf("output text %v", got)
	}
	// "system: be kind\nuser: one two three\n" is 9 tokens.
	wantUsage := map[string]any{"input_tokens": 9.0, "input_tokens_details": map[string]any{"cached_tokens": 0.0},
		"output_tokens": 3.0, "output_tokens_details": map[string]any{"reasoning_tokens": 0.0}, "total_tokens": 12.0}
	if diff := cmp.Diff(wantUsage, m["usage"]); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}

	_, evs := postStream(t, inst.URL()+"/v1/responses", strings.Replace(body, `"model":"m"`, `"model":"m","stream":true,"max_output_tokens":2`, 1))
	wantNames := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.done", "response.content_part.done",
		"response.output_item.done", "response.completed"}
	if diff := cmp.Diff(wantNames, names(evs)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	for i, e := range evs {
		ev := mustJSON(t, e.data)
		if ev["type"] != e.name || ev["sequence_number"] != float64(i) {
			t.Errorf("event %d %s: type %v sequence_number %v", i, e.name, ev["type"], ev["sequence_number"])
		}
	}
	if created := mustJSON(t, evs[0].data); at(created, "response", "status") != "in_progress" || at(created, "response", "usage") != nil {
		t.Errorf("response.created %s", evs[0].data)
	}
	done := mustJSON(t, evs[len(evs)-1].data)
	// The second request shares its first full block (8 tokens) with the first one.
	if at(done, "response", "status") != "incomplete" || at(done, "response", "incomplete_details", "reason") != "max_output_tokens" ||
		at(done, "response", "usage", "output_tokens") != 2.0 || at(done, "response", "usage", "input_tokens_details", "cached_tokens") != 8.0 {
		t.Errorf("response.completed %s", evs[len(evs)-1].data)
	}
	if got := at(mustJSON(t, evs[6].data), "text"); got != "one two " {
		t.Errorf("output_text.done text %v", got)
	}
}

func TestEmbeddingsAPI(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.EmbeddingDim = 16 })
	tests := []struct {
		name, input  string
		n, tokens    int
		dims, format string
	}{
		{"string", `"hello world"`, 1, 2, "", ""},
		{"strings", `["a","b c"]`, 2, 3, "", ""},
		{"token ids", `[5,6,7]`, 1, 3, "", ""},
		{"lists of token ids", `[[5],[6,7]]`, 2, 3, "", ""},
		{"dimensions and base64", `"x"`, 1, 1, `,"dimensions":4`, `,"encoding_format":"base64"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, inst.URL()+"/v1/embeddings", `{"model":"m","input":`+tc.input+tc.dims+tc.format+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			var out struct {
				Object string `json:"object"`
				Data   []struct {
					Index     int             `json:"index"`
					Object    string          `json:"object"`
					Embedding json.RawMessage `json:"embedding"`
				} `json:"data"`
				Usage map[string]any `json:"usage"`
			}
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatal(err)
			}
			if out.Object != "list" || len(out.Data) != tc.n || out.Usage["prompt_tokens"] != float64(tc.tokens) || out.Usage["total_tokens"] != float64(tc.tokens) {
				t.Fatalf("response %s", b)
			}
			for i, d := range out.Data {
				var dims int
				if tc.format != "" {
					var s string
					_ = json.Unmarshal(d.Embedding, &s)
					raw, err := base64.StdEncoding.DecodeString(s)
					if err != nil {
						t.Fatal(err)
					}
					dims = len(raw) / 4
				} else {
					var v []float64
					if err := json.Unmarshal(d.Embedding, &v); err != nil {
						t.Fatal(err)
					}
					dims = len(v)
				}
				want := 16
				if tc.dims != "" {
					want = 4
				}
				if d.Index != i || d.Object != "embedding" || dims != want {
					t.Errorf("data[%d] index %d object %q dims %d, want %d", i, d.Index, d.Object, dims, want)
				}
			}
		})
	}
	resp, b := post(t, inst.URL()+"/v1/embeddings", `{"model":"m","input":"x","dimensions":17}`)
	if resp.StatusCode != 400 || decodeError(t, b).Param == nil {
		t.Errorf("dimensions over --embedding-dim: status %d %s", resp.StatusCode, b)
	}
	// Equal inputs give equal vectors whatever their form: "a" as text and as its token id.
	_, b1 := post(t, inst.URL()+"/v1/embeddings", `{"model":"m","input":"a"}`)
	_, b2 := post(t, inst.URL()+"/v1/embeddings", `{"model":"m","input":[`+jsonUint(promptInput{text: "a"}.tokenIDs()[0])+`]}`)
	if emb(t, b1) != emb(t, b2) {
		t.Errorf("text and token-id forms of the same input gave different vectors")
	}
}

func jsonUint(v uint32) string { b, _ := json.Marshal(v); return string(b) }

func emb(t *testing.T, b []byte) string {
	t.Helper()
	var out struct {
		Data []struct {
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Data) == 0 {
		t.Fatalf("embeddings response %s: %v", b, err)
	}
	return string(out.Data[0].Embedding)
}

// TestEmbeddingsOccupySlotAndKV: an embeddings request runs in the engine as a prefill-only
// request (vLLM's pooling runner): while it is prefilled it holds a running slot and its
// prompt's KV blocks, and a second request waits behind it.
func TestEmbeddingsOccupySlotAndKV(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := DefaultConfig()
	cfg.Model, cfg.Port, cfg.Seed = "m", 0, 1
	cfg.MaxNumSeqs = 1
	cfg.PrefillOverhead = Duration(time.Second)
	inst, err := Start(cfg, Options{Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.Close)
	s := inst.Ranks[0]
	done := make(chan []byte, 2)
	go func() {
		_, b := post(t, s.URL()+"/v1/embeddings", `{"model":"m","input":"`+strings.Repeat("w ", 40)+`"}`)
		done <- b
	}()
	waitFor(t, func() bool { return s.engineStats().Running == 1 })
	go func() {
		_, b := post(t, s.URL()+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`)
		done <- b
	}()
	waitFor(t, func() bool { return s.engineStats().Waiting == 1 })
	st := s.engineStats()
	if want := 3.0 / float64(cfg.KVCacheSize); st.KVUsage != want {
		t.Errorf("KV usage while prefilling 40 tokens = %v, want %v (3 blocks of 16)", st.KVUsage, want)
	}
	for range 2 {
		fc.Step(time.Second)
		select {
		case b := <-done:
			if !bytes.Contains(b, []byte(`"usage"`)) {
				t.Errorf("response %s", b)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("request did not finish after its prefill time")
		}
	}
	if st := s.engineStats(); st.GenerationTokens != 1 || st.PromptTokens != 41 {
		t.Errorf("counters %+v: the embeddings request must add prompt tokens and no generation token", st)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAPIErrorShapes: each API refuses malformed JSON and wrong types with its own 400 shape
// (Anthropic's envelope on /v1/messages, OpenAI's elsewhere), injected failures use the same
// shapes, and the server keeps serving.
func TestAPIErrorShapes(t *testing.T) {
	inst := startTest(t, nil)
	u := inst.URL()
	good := map[string]string{
		"/v1/completions":      `{"model":"m","prompt":"x","max_tokens":1}`,
		"/v1/chat/completions": `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1}`,
		"/v1/messages":         `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`,
		"/v1/responses":        `{"model":"m","input":"x","max_output_tokens":1}`,
		"/v1/embeddings":       `{"model":"m","input":"x"}`,
	}
	bad := []struct{ body, param string }{
		{`{"model":"m",`, ""},
		{`{"model":["m"]}`, "model"},
		{`"just a string"`, ""},
	}
	for path := range good {
		for _, bc := range bad {
			resp, b := post(t, u+path, bc.body)
			if resp.StatusCode != 400 {
				t.Errorf("%s %s: status %d", path, bc.body, resp.StatusCode)
				continue
			}
			checkErrorShape(t, path, b, 400, bc.param)
		}
		resp, b := post(t, u+path, strings.Replace(good[path], `"model":"m"`, `"model":"nope"`, 1))
		if resp.StatusCode != 404 {
			t.Errorf("%s unknown model: status %d", path, resp.StatusCode)
		}
		checkErrorShape(t, path, b, 404, "model")
		if resp, b := post(t, u+path, good[path]); resp.StatusCode != 200 {
			t.Errorf("%s after bad input: status %d %s", path, resp.StatusCode, b)
		}
	}
	if resp, b := post(t, u+"/admin/config", `{"failure-injection-rate":100,"failure-types":["rate_limit"]}`); resp.StatusCode != 200 {
		t.Fatalf("admin: %d %s", resp.StatusCode, b)
	}
	for path, body := range good {
		resp, b := post(t, u+path, body)
		if resp.StatusCode != 429 {
			t.Errorf("%s injected rate_limit: status %d", path, resp.StatusCode)
		}
		checkErrorShape(t, path, b, 429, "")
	}
}

func checkErrorShape(t *testing.T, path string, b []byte, status int, param string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if path == "/v1/messages" {
		var e anthropicErrorBody
		if err := dec.Decode(&e); err != nil || e.Type != "error" || e.Error.Type != errorType(status) || e.Error.Message == "" {
			t.Errorf("%s: %s is not an Anthropic error of type %s: %v", path, b, errorType(status), err)
		}
		return
	}
	e := decodeError(t, b)
	if e.Code != status || e.Type != errorType(status) {
		t.Errorf("%s: error %+v, want code %d", path, e, status)
	}
	if param != "" && (e.Param == nil || *e.Param != param) {
		t.Errorf("%s: param %v, want %q", path, e.Param, param)
	}
}

// TestStreamsCutByAbort: the abort failure cuts every streaming API after its first token.
func TestStreamsCutByAbort(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.FailureInjectionRate = 100; c.FailureTypes = []string{FailureAbort} })
	for path, body := range map[string]string{
		"/v1/messages":  `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`,
		"/v1/responses": `{"model":"m","max_output_tokens":5,"stream":true,"input":"x"}`,
	} {
		resp, err := http.Post(inst.URL()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("%s: stream ended cleanly after an abort: %s", path, b)
		}
		if bytes.Contains(b, []byte("message_stop")) || bytes.Contains(b, []byte("response.completed")) {
			t.Errorf("%s: the cut stream carries its end events: %s", path, b)
		}
	}
}

// TestContinuousUsageStats: with stream_options {include_usage, continuous_usage_stats} every
// choice chunk carries that choice's usage so far (vLLM's serving_chat.py and
// serving_completion.py), so a reader that keeps the first usage it meets reads 0 completion
// tokens; without continuous_usage_stats only the final chunk has usage.
func TestContinuousUsageStats(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.Mode = ModeEcho })
	for _, tc := range []struct {
		path, body string
	}{
		{"/v1/completions", `{"model":"m","prompt":[[1,2],[3]],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a b c"}],"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`},
	} {
		_, evs := postStream(t, inst.URL()+tc.path, tc.body)
		seen := map[float64]float64{} // choice → completion tokens in its last chunk
		var final map[string]any
		for _, e := range evs[:len(evs)-1] {
			m := mustJSON(t, e.data)
			u, _ := at(m, "usage").(map[string]any)
			if u == nil {
				t.Fatalf("%s: chunk without usage: %s", tc.path, e.data)
			}
			if len(at(m, "choices").([]any)) == 0 {
				final = u
				continue
			}
			i := at(m, "choices", 0, "index").(float64)
			c := u["completion_tokens"].(float64)
			if c < seen[i] || u["total_tokens"].(float64) != u["prompt_tokens"].(float64)+c {
				t.Errorf("%s: choice %v usage %v after %v completion tokens", tc.path, i, u, seen[i])
			}
			seen[i] = c
		}
		if final == nil || evs[len(evs)-1].data != "[DONE]" {
			t.Fatalf("%s: no final usage chunk or no [DONE]: %v", tc.path, evs)
		}
		var sum float64
		for _, c := range seen {
			sum += c
		}
		if sum != final["completion_tokens"].(float64) || sum == 0 {
			t.Errorf("%s: per-choice completion tokens %v, final usage %v", tc.path, seen, final)
		}
	}
	// include_usage alone: choice chunks carry no usage key (vLLM leaves it unset).
	_, evs := postStream(t, inst.URL()+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a b"}],"stream":true,"stream_options":{"include_usage":true}}`)
	for _, e := range evs[:len(evs)-2] {
		if strings.Contains(e.data, `"usage"`) {
			t.Errorf("choice chunk with usage without continuous_usage_stats: %s", e.data)
		}
	}
}

// TestMessagesCountTokens: POST /v1/messages/count_tokens counts the prompt /v1/messages would
// run (max_tokens optional), without an engine request; bad input is Anthropic's 400 or 404.
func TestMessagesCountTokens(t *testing.T) {
	inst := startTest(t, nil)
	url := inst.URL() + "/v1/messages/count_tokens"
	for _, body := range []string{
		`{"model":"m","system":"sys","messages":[{"role":"user","content":"alpha beta gamma"}]}`,
		`{"model":"m","max_tokens":2,"system":"sys","messages":[{"role":"user","content":"alpha beta gamma"}]}`,
	} {
		resp, b := post(t, url, body)
		// The prompt "system: sys\nuser: alpha beta gamma\n" is 8 tokens, as TestMessagesAPI's usage.
		if resp.StatusCode != 200 || string(bytes.TrimSpace(b)) != `{"input_tokens":8}` {
			t.Errorf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
	for _, name := range []string{MetricPromptTokens, MetricRequestSuccess} {
		for _, m := range scrapeFamilies(t, inst.URL())[name].GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("%s = %v after counts only: a count reached the engine", name, v)
			}
		}
	}
	for _, tc := range []struct {
		body   string
		status int
	}{
		{`{"model":"m","messages":[]}`, 400},
		{`{"messages":[{"role":"user","content":"x"}]}`, 400},
		{`{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404},
		{`not json`, 400},
	} {
		resp, b := post(t, url, tc.body)
		if resp.StatusCode != tc.status || at(mustJSON(t, string(b)), "type") != "error" {
			t.Errorf("%s: %d %s, want %d in Anthropic's error envelope", tc.body, resp.StatusCode, b, tc.status)
		}
	}
}

// TestNChoices: n > 1 answers n choices per prompt, numbered prompt-major (i*n+j, vLLM's
// completions numbering), each its own engine sequence; usage counts each prompt's tokens once
// and every choice's completion tokens, as vLLM.
func TestNChoices(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.Mode = ModeEcho })
	resp, b := post(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":[[1,2],[3]],"n":3}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	m := mustJSON(t, string(b))
	choices := at(m, "choices").([]any)
	if len(choices) != 6 {
		t.Fatalf("%d choices, want 6: %s", len(choices), b)
	}
	for k := range choices {
		want := map[int]string{0: "t1 t2 ", 1: "t3 "}[k/3]
		if at(m, "choices", k, "index") != float64(k) || at(m, "choices", k, "text") != want {
			t.Errorf("choice %d: %v, want index %d text %q", k, choices[k], k, want)
		}
	}
	// prompts 2+1 tokens counted once; completions 3×2 + 3×1.
	if at(m, "usage", "prompt_tokens") != 3.0 || at(m, "usage", "completion_tokens") != 9.0 || at(m, "usage", "total_tokens") != 12.0 {
		t.Errorf("usage %v", m["usage"])
	}

	_, evs := postStream(t, inst.URL()+"/v1/chat/completions", `{"model":"m","n":2,"messages":[{"role":"user","content":"a b"}],"stream":true,"stream_options":{"include_usage":true}}`)
	texts := map[float64]string{}
	for _, e := range evs[:len(evs)-1] {
		ch := mustJSON(t, e.data)
		if len(at(ch, "choices").([]any)) == 0 {
			if at(ch, "usage", "completion_tokens") != 4.0 {
				t.Errorf("chat n=2 usage %v", at(ch, "usage"))
			}
			continue
		}
		if c, ok := at(ch, "choices", 0, "delta", "content").(string); ok {
			texts[at(ch, "choices", 0, "index").(float64)] += c
		}
	}
	if diff := cmp.Diff(map[float64]string{0: "a b", 1: "a b"}, texts); diff != "" {
		t.Errorf("chat n=2 streamed texts (-want +got):\n%s", diff)
	}
}
