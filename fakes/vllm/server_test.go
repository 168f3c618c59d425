package vllm

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func startTest(t *testing.T, mutate func(c *Config)) *Instance {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Model = "m"
	cfg.Port = 0
	cfg.Seed = 42
	cfg.PodName = "pod-a"
	cfg.PodNamespace = "ns"
	if mutate != nil {
		mutate(&cfg)
	}
	inst, err := Start(cfg, Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := inst.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return inst
}

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return resp, b
}

func decodeError(t *testing.T, b []byte) APIError {
	t.Helper()
	var e struct {
		Error *APIError `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error == nil {
		t.Fatalf("body %s is not an OpenAI error: %v", b, err)
	}
	return *e.Error
}

func TestBadInput(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.MaxModelLen = 64; c.MaxRequestBodySizeMB = 1 })
	u := inst.URL()
	tests := []struct {
		name       string
		path, body string
		wantStatus int
		wantType   string
	}{
		{"malformed JSON", "/v1/completions", `{"model":"m","prompt":`, 400, "BadRequestError"},
		{"missing model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400, "BadRequestError"},
		{"unknown model", "/v1/completions", `{"model":"nope","prompt":"x"}`, 404, "NotFoundError"},
		{"empty messages", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "BadRequestError"},
		{"prompt over max-model-len", "/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("w ", 70) + `"}`, 400, "BadRequestError"},
		{"prompt plus max_tokens over max-model-len", "/v1/completions", `{"model":"m","prompt":"a b c","max_tokens":62}`, 400, "BadRequestError"},
		{"oversized body", "/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("x", 1<<20+10) + `"}`, 413, "APIConnectionError"},
		{"unknown route", "/v1/nothing", `{}`, 404, "NotFoundError"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, u+tc.path, tc.body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tc.wantStatus, b)
			}
			e := decodeError(t, b)
			if e.Type != tc.wantType || e.Code != tc.wantStatus || e.Message == "" {
				t.Errorf("error = %+v, want type %s code %d", e, tc.wantType, tc.wantStatus)
			}
		})
	}
	// The server keeps serving after bad input.
	resp, b := post(t, u+"/v1/completions", `{"model":"m","prompt":"still here","max_tokens":2}`)
	if resp.StatusCode != 200 {
		t.Fatalf("after bad input: status %d, body %s", resp.StatusCode, b)
	}
}

func TestEchoAndFinishReason(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.Mode = ModeEcho })
	tests := []struct {
		name, body, wantText, wantFinish string
		wantTokens                       int
	}{
		{"whole prompt", `{"model":"m","prompt":"one two three"}`, "one two three", "stop", 3},
		{"cut by max_tokens", `{"model":"m","prompt":"one two three","max_tokens":2}`, "one two ", "length", 2},
		{"max_tokens larger than the echo", `{"model":"m","prompt":"one two","max_tokens":50}`, "one two", "stop", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, inst.URL()+"/v1/completions", tc.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			var out completionOut
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatal(err)
			}
			if got := *out.Choices[0].Text; got != tc.wantText || out.Choices[0].FinishReason != tc.wantFinish || out.Usage.CompletionTokens != tc.wantTokens {
				t.Errorf("text %q finish %q tokens %d; want %q %q %d", got, out.Choices[0].FinishReason, out.Usage.CompletionTokens, tc.wantText, tc.wantFinish, tc.wantTokens)
			}
			if resp.Header.Get(HeaderPod) != "pod-a" || resp.Header.Get(HeaderNamespace) != "ns" || resp.Header.Get(HeaderPort) == "" {
				t.Errorf("identity headers = %v", resp.Header)
			}
		})
	}
}

func TestQueueFullIs429(t *testing.T) {
	inst := startTest(t, func(c *Config) {
		c.MaxNumSeqs, c.MaxWaitingQueueLength = 1, 1
		c.InterTokenLatency = Duration(200 * time.Millisecond)
	})
	// Two requests fill the slot and the queue; the third must get 429.
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = http.Post(inst.URL()+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"x","max_tokens":3}`))
		}()
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		st := inst.Ranks[0].engineStats()
		if st.Running == 1 && st.Waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine never reached 1 running + 1 waiting: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, b := post(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":3}`)
	if resp.StatusCode != 429 || decodeError(t, b).Type != "RateLimitError" {
		t.Fatalf("status %d body %s, want 429 RateLimitError", resp.StatusCode, b)
	}
	wg.Wait()
}

func TestLoraAdapters(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.MaxLoras, c.MaxCPULoras = 1, 2; c.LoraModules = []LoraModule{{Name: "a"}} })
	u := inst.URL()
	models := func() []string {
		resp, err := http.Get(u + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Data []modelCard `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range out.Data {
			ids = append(ids, d.ID)
		}
		return ids
	}
	if diff := cmp.Diff([]string{"m", "a"}, models()); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	steps := []struct {
		path, body string
		want       int
	}{
		{"/v1/load_lora_adapter", `{"lora_name":"b","lora_path":"/p/b"}`, 200},
		{"/v1/load_lora_adapter", `{"lora_name":"b","lora_path":"/p/b"}`, 400}, // already loaded
		{"/v1/load_lora_adapter", `{"lora_name":"c"}`, 400},                    // max-cpu-loras reached
		{"/v1/load_lora_adapter", `{}`, 400},
		{"/v1/unload_lora_adapter", `{"lora_name":"a"}`, 200},
		{"/v1/unload_lora_adapter", `{"lora_name":"a"}`, 404},
	}
	for i, s := range steps {
		if resp, b := post(t, u+s.path, s.body); resp.StatusCode != s.want {
			t.Fatalf("step %d %s %s: status %d (%s), want %d", i, s.path, s.body, resp.StatusCode, b, s.want)
		}
	}
	if diff := cmp.Diff([]string{"m", "b"}, models()); diff != "" {
		t.Errorf("models after load/unload (-want +got):\n%s", diff)
	}
	if resp, b := post(t, u+"/v1/completions", `{"model":"b","prompt":"x","max_tokens":1}`); resp.StatusCode != 200 {
		t.Errorf("request to loaded adapter: %d %s", resp.StatusCode, b)
	}
	if resp, _ := post(t, u+"/v1/completions", `{"model":"a","prompt":"x","max_tokens":1}`); resp.StatusCode != 404 {
		t.Errorf("request to unloaded adapter: status %d, want 404", resp.StatusCode)
	}
}

// TestLoraAdapterNamesRejected: names that would break the lora_requests_info labels or shadow the
// base model are refused with a 400 naming lora_name, and nothing is loaded.
func TestLoraAdapterNamesRejected(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.MaxLoras, c.MaxCPULoras = 1, 8; c.ServedModelNames = []string{"m", "served"} })
	for _, name := range []string{"a,b", `a\nb`, `a\u0000`, "m", "served"} {
		resp, b := post(t, inst.URL()+"/v1/load_lora_adapter", `{"lora_name":"`+name+`"}`)
		if resp.StatusCode != 400 {
			t.Fatalf("lora_name %s: status %d (%s), want 400", name, resp.StatusCode, b)
		}
		if e := decodeError(t, b); e.Param == nil || *e.Param != "lora_name" {
			t.Errorf("lora_name %s: param %v, want lora_name (%s)", name, e.Param, e.Message)
		}
	}
	if resp, b := post(t, inst.URL()+"/v1/load_lora_adapter", `{"lora_name":"ok-1"}`); resp.StatusCode != 200 {
		t.Fatalf("a valid name: status %d (%s)", resp.StatusCode, b)
	}
}

func TestAdminConfig(t *testing.T) {
	inst := startTest(t, nil)
	s := inst.Ranks[0]
	tests := []struct {
		name, body, wantParam string
	}{
		{"unknown key", `{"no-such-key":1}`, "no-such-key"},
		{"wrong type", `{"failure-injection-rate":"x"}`, "failure-injection-rate"},
		{"rate out of range", `{"failure-injection-rate":150}`, ""},
		{"bad failure type", `{"failure-types":["boom"]}`, ""},
		{"bad duration", `{"inter-token-latency":"soon"}`, "inter-token-latency"},
		{"factor below 1", `{"time-factor-under-load":0.5}`, ""},
		{"fake metrics unknown key", `{"fake-metrics":{"running":1}}`, "fake-metrics"},
		{"fake metrics out of range", `{"fake-metrics":{"kv-cache-usage":1.5}}`, "fake-metrics"},
		{"not an object", `[1]`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, s.URL()+"/admin/config", tc.body)
			if resp.StatusCode != 400 {
				t.Fatalf("status %d (%s), want 400", resp.StatusCode, b)
			}
			e := decodeError(t, b)
			if tc.wantParam != "" && (e.Param == nil || *e.Param != tc.wantParam) {
				t.Errorf("param = %v, want %q (%s)", e.Param, tc.wantParam, e.Message)
			}
		})
	}
	before := s.AdminConfig()
	if diff := cmp.Diff(AdminConfig{Latency: Latency{TimeFactorUnderLoad: 1}}, before); diff != "" {
		t.Errorf("rejected updates changed the config (-want +got):\n%s", diff)
	}
	resp, b := post(t, s.URL()+"/admin/config", `{"inter-token-latency":"3ms","failure-injection-rate":0,"failure-types":["reset"],"fake-metrics":{"running-requests":9,"waiting-requests":4,"kv-cache-usage":0.5},"kv-cache-transfer-latency":"1ms"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	got := s.AdminConfig()
	want := AdminConfig{Latency: Latency{InterTokenLatency: Duration(3 * time.Millisecond), TimeFactorUnderLoad: 1},
		FakeMetrics:  &FakeMetrics{RunningRequests: 9, WaitingRequests: 4, KVCacheUsage: 0.5},
		FailureTypes: []string{"reset"}, Ignored: map[string]json.RawMessage{"kv-cache-transfer-latency": json.RawMessage(`"1ms"`)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("admin config (-want +got):\n%s", diff)
	}
	if st := s.engineStats(); st.Running != 0 {
		t.Errorf("engine stats after latency swap: %+v", st)
	}
	// The new latency applies: 5 tokens at 3 ms take at least 12 ms after the first.
	start := time.Now()
	if resp, b := post(t, s.URL()+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":5}`); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if el := time.Since(start); el < 12*time.Millisecond {
		t.Errorf("5 tokens at 3ms inter-token latency took %v, want ≥ 12ms", el)
	}
	if resp, b := post(t, s.URL()+"/admin/config", `{"fake-metrics":null}`); resp.StatusCode != 200 || s.AdminConfig().FakeMetrics != nil {
		t.Errorf("unpinning: status %d body %s", resp.StatusCode, b)
	}
}

func TestGaugeOnlyMetrics(t *testing.T) {
	for _, gaugeOnly := range []bool{false, true} {
		inst := startTest(t, func(c *Config) { c.GaugeOnly = gaugeOnly; c.EnableLoRA = true })
		if resp, b := post(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":3}`); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		resp, err := http.Get(inst.URL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := string(body)
		for _, name := range []string{MetricRunning, MetricWaiting, MetricKVCacheUsage, MetricLoraInfo, MetricCacheConfig,
			MetricPromptTokens, MetricGenerationTokens, MetricRequestSuccess, MetricPrefixQueries, MetricPrefixHits} {
			if !strings.Contains(text, "# TYPE "+name+" ") {
				t.Errorf("gaugeOnly=%v: %s missing", gaugeOnly, name)
			}
		}
		for _, name := range []string{MetricTTFT, MetricInterToken, MetricRequestTPOT, MetricE2E, MetricQueueTime, MetricTokenLateness} {
			if got := strings.Contains(text, "# TYPE "+name+" histogram"); got == gaugeOnly {
				t.Errorf("gaugeOnly=%v: histogram %s present = %v", gaugeOnly, name, got)
			}
		}
	}
}

func TestServedModelNames(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.ServedModelNames = []string{"alias1", "alias2"} })
	tests := []struct {
		model string
		want  int
	}{{"alias1", 200}, {"alias2", 200}, {"m", 404}}
	for _, tc := range tests {
		resp, b := post(t, inst.URL()+"/v1/completions", `{"model":"`+tc.model+`","prompt":"x","max_tokens":1}`)
		if resp.StatusCode != tc.want {
			t.Errorf("model %q: status %d (%s), want %d", tc.model, resp.StatusCode, b, tc.want)
		}
	}
	resp, err := http.Get(inst.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), MetricRunning+`{engine="0",model_name="alias1"} 0`) {
		t.Errorf("metrics do not label model_name with the first served name:\n%s", body)
	}
}

// Response shapes the tests decode.
type chatMessageOut struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type choiceOut struct {
	Index        int             `json:"index"`
	Text         *string         `json:"text,omitempty"`
	Message      *chatMessageOut `json:"message,omitempty"`
	FinishReason string          `json:"finish_reason"`
}

type completionOut struct {
	ID      string      `json:"id"`
	Object  string      `json:"object"`
	Created int64       `json:"created"`
	Model   string      `json:"model"`
	Choices []choiceOut `json:"choices"`
	Usage   Usage       `json:"usage"`
}
