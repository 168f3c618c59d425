package director_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
)

type source struct {
	eps        []*framework.EndpointMetadata
	objectives map[string]int
}

func (s *source) Endpoints() []*framework.EndpointMetadata { return s.eps }
func (s *source) Priority(name string) (int, bool) {
	p, ok := s.objectives[name]
	return p, ok
}

type metricsSource struct {
	m     map[string]*framework.Metrics
	stale map[string]bool
}

func (m *metricsSource) Metrics(key string) *framework.Metrics { return m.m[key].Clone() }
func (m *metricsSource) Stale(key string) bool                 { return m.stale[key] }

func ep(i int) *framework.EndpointMetadata {
	return &framework.EndpointMetadata{Name: fmt.Sprintf("pod-%d", i), Address: fmt.Sprintf("10.1.0.%d", i), Port: 8000}
}

func newDirector(t *testing.T, src *source, ms *metricsSource, clk *clocktesting.FakeClock) *director.Director {
	t.Helper()
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	rt, err := framework.NewRuntime(nil, reg, framework.RuntimeOptions{Clock: clk, Seed: 3, Logger: slog.New(slog.DiscardHandler),
		Endpoints: src.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	d, err := director.New(director.Options{Runtime: rt, Endpoints: src, Metrics: ms, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestStatusFor(t *testing.T) {
	cases := []struct {
		err    error
		want   int
		reason string
	}{
		{nil, http.StatusOK, ""},
		{fmt.Errorf("x: %w", framework.ErrBadRequest), 400, ""},
		{fmt.Errorf("x: %w", framework.ErrShed), 429, ""},
		{fmt.Errorf("x: %w", framework.ErrFilteredOut), 429, ""},
		{fmt.Errorf("x: %w", framework.ErrNoEndpoints), 503, ""},
		{fmt.Errorf("x: %w", framework.ErrEmptySubset), 503, ""},
		{fmt.Errorf("x: %w", framework.ErrInternal), 500, ""},
		{errors.New("plain"), 500, ""},
		{context.DeadlineExceeded, 500, ""},
		// Flow control's refusals name their reason (llm-d-router v0.10.0 admission.go translateFlowControlOutcome).
		{fmt.Errorf("fc: %w", &framework.Dropped{Reason: framework.DroppedSaturated, Err: fmt.Errorf("queue at capacity: %w", framework.ErrShed)}), 429, "rejected-saturated"},
		{fmt.Errorf("fc: %w", &framework.Dropped{Reason: framework.DroppedNoEndpoints, Err: framework.ErrNoEndpoints}), 503, "rejected-no-endpoints"},
	}
	for _, tc := range cases {
		if got := director.StatusFor(tc.err); got != tc.want {
			t.Errorf("StatusFor(%v) = %d, want %d", tc.err, got, tc.want)
		}
		if got := director.ReasonFor(tc.err); got != tc.reason {
			t.Errorf("ReasonFor(%v) = %q, want %q", tc.err, got, tc.reason)
		}
	}
	code, body := director.ErrorJSON(fmt.Errorf("no: %w", framework.ErrShed))
	var eb director.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || code != 429 || eb.Error.Code != 429 || eb.Error.Type != "ResourceExhausted" {
		t.Fatalf("ErrorJSON = %d %s (%v)", code, body, err)
	}
}

// TestSaturationAndShedding walks the saturation rule's inputs one at a time: a sheddable request
// (priority -1) is shed only when no candidate has fresh metrics within both thresholds; a
// non-sheddable one (priority 0, 5) is always routed.
func TestSaturationAndShedding(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	now := clk.Now()
	cases := []struct {
		name      string
		metrics   map[string]*framework.Metrics
		saturated bool
	}{
		{"one endpoint under both thresholds", map[string]*framework.Metrics{
			"10.1.0.1:8000": {WaitingQueueSize: 5, KVCacheUsage: 0.8, UpdateTime: now},
			"10.1.0.2:8000": {WaitingQueueSize: 50, KVCacheUsage: 0.99, UpdateTime: now}}, false},
		{"queue above threshold", map[string]*framework.Metrics{
			"10.1.0.1:8000": {WaitingQueueSize: 6, UpdateTime: now}, "10.1.0.2:8000": {WaitingQueueSize: 9, UpdateTime: now}}, true},
		{"KV above threshold", map[string]*framework.Metrics{
			"10.1.0.1:8000": {KVCacheUsage: 0.81, UpdateTime: now}, "10.1.0.2:8000": {KVCacheUsage: 0.9, UpdateTime: now}}, true},
		{"good metrics but older than the staleness threshold", map[string]*framework.Metrics{
			"10.1.0.1:8000": {UpdateTime: now.Add(-201 * time.Millisecond)}, "10.1.0.2:8000": {WaitingQueueSize: 9, UpdateTime: now}}, true},
		{"good metrics exactly at the threshold", map[string]*framework.Metrics{
			"10.1.0.1:8000": {UpdateTime: now.Add(-200 * time.Millisecond)}}, false},
		{"last scrape failed", map[string]*framework.Metrics{
			"10.1.0.1:8000": {UpdateTime: now, ScrapeError: errors.New("refused")}}, true},
		{"never scraped", map[string]*framework.Metrics{}, true},
	}
	for _, tc := range cases {
		src := &source{eps: []*framework.EndpointMetadata{ep(1), ep(2)}, objectives: map[string]int{"batch": -1, "std": 0, "crit": 5}}
		d := newDirector(t, src, &metricsSource{m: tc.metrics}, clk)
		for _, obj := range []string{"batch", "std", "crit", ""} {
			in := &director.Input{Headers: map[string]string{"x-gateway-inference-objective": obj, ":path": "/v1/completions"},
				Body: []byte(`{"model":"m","prompt":"p"}`)}
			res, err := d.HandleRequest(context.Background(), in)
			wantShed := tc.saturated && obj == "batch"
			if wantShed != errors.Is(err, framework.ErrShed) || (!wantShed && err != nil) {
				t.Fatalf("%s, objective %q: err %v, want shed=%v", tc.name, obj, err, wantShed)
			}
			if err == nil {
				d.EndRequest(res.Request)
			}
		}
	}
}

// TestStaleFilter: stale endpoints are dropped unless every candidate is stale.
func TestStaleFilter(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	now := clk.Now()
	m := map[string]*framework.Metrics{}
	for i := 1; i <= 3; i++ {
		m[ep(i).Key()] = &framework.Metrics{WaitingQueueSize: 10 * (i - 1), UpdateTime: now}
	}
	src := &source{eps: []*framework.EndpointMetadata{ep(1), ep(2), ep(3)}}
	cases := []struct {
		stale   map[string]bool
		allowed []string
	}{
		{map[string]bool{"10.1.0.1:8000": true}, []string{"10.1.0.2:8000"}},                                               // best queue is stale → next best
		{map[string]bool{"10.1.0.1:8000": true, "10.1.0.2:8000": true}, []string{"10.1.0.3:8000"}},                        // only one fresh
		{map[string]bool{"10.1.0.1:8000": true, "10.1.0.2:8000": true, "10.1.0.3:8000": true}, []string{"10.1.0.1:8000"}}, // all stale → all kept
	}
	for _, tc := range cases {
		d := newDirector(t, src, &metricsSource{m: m, stale: tc.stale}, clk)
		for i := range 20 {
			res, err := d.HandleRequest(context.Background(), &director.Input{Body: []byte(fmt.Sprintf(`{"model":"m","prompt":"p%d"}`, i))})
			if err != nil {
				t.Fatal(err)
			}
			if res.Targets[0] != tc.allowed[0] {
				t.Fatalf("stale %v: picked %s, want %s", tc.stale, res.Targets[0], tc.allowed[0])
			}
			d.EndRequest(res.Request)
		}
	}
}

// TestRequestBuilding: request ID, priority, model rewrite and the mutated body.
func TestRequestBuilding(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	src := &source{eps: []*framework.EndpointMetadata{ep(1)}, objectives: map[string]int{"gold": 7}}
	d := newDirector(t, src, &metricsSource{m: map[string]*framework.Metrics{ep(1).Key(): {UpdateTime: clk.Now()}}}, clk)
	res, err := d.HandleRequest(context.Background(), &director.Input{
		Headers: map[string]string{":path": "/v1/chat/completions", "x-gateway-inference-objective": "gold", "x-gateway-model-name-rewrite": "lora-a"},
		Body:    []byte(`{"model":"base","messages":[{"role":"user","content":"hi"}],"temperature":0.10}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.EndRequest(res.Request)
	if !res.RequestIDGenerated || len(res.Request.XRequestID) != 36 || res.Request.RequestID == "" || res.Request.RequestID == res.Request.XRequestID {
		t.Fatalf("x-request-id %q generated=%v, internal id %q", res.Request.XRequestID, res.RequestIDGenerated, res.Request.RequestID)
	}
	if res.Request.Priority != 7 || res.Request.TargetModel != "lora-a" || res.IncomingModel != "base" || !res.BodyMutated {
		t.Fatalf("request %+v result %+v", res.Request, res)
	}
	want := `{"messages":[{"role":"user","content":"hi"}],"model":"lora-a","temperature":0.10}`
	if diff := cmp.Diff(want, string(res.Body)); diff != "" {
		t.Fatalf("body (-want +got):\n%s", diff)
	}
	if res.Request.Body.ChatCompletions == nil || len(res.Request.Body.ChatCompletions.Messages) != 1 {
		t.Fatalf("parsed body %+v", res.Request.Body)
	}
}

func TestParseBody(t *testing.T) {
	cases := []struct {
		api     framework.API
		body    string
		wantErr string // the field the 400 names
		check   func(*director.ParsedBody) string
	}{
		{"", `{"model":"m","prompt":"a"}`, "", prompt("a")},
		{"", `{"model":"m","prompt":["a","b"]}`, "", prompt("a b")},
		{"completions", `{"model":"m","prompt":[101, 2023, 0, 4294967295]}`, "", ids(101, 2023, 0, 4294967295)},
		{"completions", `{"model":"m","prompt":[[1,2],[3]]}`, "", ids(1, 2, 3)},
		{"completions", `{"model":"m","prompt":[]}`, `"prompt"`, nil},
		{"completions", `{"model":"m","prompt":""}`, `"prompt"`, nil},
		{"completions", `{"model":"m","prompt":5}`, `"prompt"`, nil},
		{"completions", `{"model":"m","prompt":["a",1]}`, `"prompt[1]"`, nil},
		{"completions", `{"model":"m","prompt":[1,"a"]}`, `"prompt[1]"`, nil},
		{"completions", `{"model":"m","prompt":[1,-2]}`, `"prompt[1]"`, nil},
		{"completions", `{"model":"m","prompt":[1,2.5]}`, `"prompt[1]"`, nil},
		{"completions", `{"model":"m","prompt":[4294967296]}`, `"prompt[0]"`, nil},
		{"completions", `{"model":"m","prompt":[[1],[]]}`, `"prompt[1]"`, nil},
		{"completions", `{"model":"m","prompt":[[1],[2,"x"]]}`, `"prompt[1][1]"`, nil},
		{"completions", `{"model":"m","prompt":[[1],2]}`, `"prompt[1]"`, nil},
		{"completions", `{"model":"m","prompt":[{}]}`, `"prompt[0]"`, nil},
		{"embeddings", `{"model":"m","input":"hello"}`, "", func(p *director.ParsedBody) string {
			return want(p.Body.Embeddings != nil && p.Body.Embeddings.Input == "hello", "embeddings input")
		}},
		{"embeddings", `{"model":"m","input":[[5,6],[7]]}`, "", func(p *director.ParsedBody) string {
			return want(p.Body.Embeddings != nil && slices.Equal(p.Body.Embeddings.TokenIDs, []uint32{5, 6, 7}), "embeddings ids")
		}},
		{"embeddings", `{"model":"m","prompt":"x"}`, `"input" is required for embeddings`, nil},
		{"embeddings", `{"model":"m","input":{}}`, `"input"`, nil},
		{"", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "", nil},
		{"chat/completions", `{"model":"m","messages":[{"content":"x"}]}`, `messages[0].role`, nil},
		{"chat/completions", `{"model":"m","messages":{}}`, `"messages"`, nil},
		{"chat/completions", `{"model":"m","messages":[]}`, `"messages" must not be empty`, nil},
		{"chat/completions", `{"model":"m","messages":[1]}`, `"messages[0]"`, nil},
		{"chat/completions", `{"model":"m","messages":[{"role":"user","content":7}]}`, `"messages[0].content"`, nil},
		{"chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"text":"x"}]}]}`, `"messages[0].content[0].type"`, nil},
		{"chat/completions", `{"model":"m","messages":[{"role":"user","content":["x"]}]}`, `"messages[0].content[0]"`, nil},
		{"chat/completions", `{"model":"m","messages":[{"role":"assistant","tool_calls":{}}]}`, `"messages[0].tool_calls"`, nil},
		{"chat/completions", `{"model":"m","messages":[{"role":"tool","content":"x","tool_call_id":3}]}`, `"messages[0].tool_call_id"`, nil},
		{"chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":{}}`, `"tools"`, nil},
		{"chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"chat_template":5}`, `chat_template`, nil},
		{"chat/completions", `{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]},` +
			`{"role":"assistant","tool_calls":[{"id":"c"}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`, "", func(p *director.ParsedBody) string {
			c := p.Body.ChatCompletions
			return want(c != nil && len(c.Tools) == 1 && len(c.Messages) == 3 && len(c.Messages[1].ToolCalls) == 1 && c.Messages[2].ToolCallID == "c", "chat tools")
		}},
		{"messages", `{"model":"m","max_tokens":5,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, "", func(p *director.ParsedBody) string {
			m := p.Body.Messages
			return want(m != nil && m.System == "be brief" && len(m.Messages) == 1, "anthropic")
		}},
		{"messages", `{"model":"m","messages":[{"role":"user"}]}`, `"messages[0].content" is required`, nil},
		{"messages", `{"model":"m","system":3,"messages":[{"role":"user","content":"x"}]}`, `"system"`, nil},
		{"messages", `{"model":"m","system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"x"}],"tools":[{"name":"t"}]}`, "", nil},
		{"messages", `{"model":"m","input":"x"}`, `"messages" is required for messages`, nil},
		{"responses", `{"model":"m","input":"hi","instructions":"sys"}`, "", func(p *director.ParsedBody) string {
			r := p.Body.Responses
			return want(r != nil && r.Input == "hi" && r.Instructions == "sys", "responses")
		}},
		{"responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"q"}]},{"type":"function_call_output","call_id":"c","output":"o"}]}`, "", nil},
		{"responses", `{"model":"m","input":""}`, `"input"`, nil},
		{"responses", `{"model":"m","input":[]}`, `"input"`, nil},
		{"responses", `{"model":"m","input":[3]}`, `"input[0]"`, nil},
		{"responses", `{"model":"m","input":[{"type":5}]}`, `"input[0].type"`, nil},
		{"responses", `{"model":"m","input":[{"role":"user","content":[{"text":"q"}]}]}`, `"input[0].content[0].type"`, nil},
		{"responses", `{"model":"m","input":"x","instructions":["a"]}`, `"instructions"`, nil},
		{"responses", `{"model":"m","input":"x","tools":"t"}`, `"tools"`, nil},
		{"other", `{"model":"m","anything":[1,{"x":2}]}`, "", func(p *director.ParsedBody) string {
			return want(p.API == director.APIOther && p.Body.Completions == nil && p.Body.ChatCompletions == nil, "other")
		}},
		{"other", `{"prompt":"x"}`, `"model"`, nil},
		{"", `{"model":"","prompt":"a"}`, `"model"`, nil},
		{"", `{"model":null,"prompt":"a"}`, `"model"`, nil},
		{"", `{"model":"m","prompt":"a","stream":"yes"}`, `"stream"`, nil},
		{"", `{"model":"m","prompt":"a"} {}`, "trailing", nil},
		{"", `  `, "JSON object", nil},
		{"", `{"model":"m","prompt":"a","cache_salt":1}`, `"cache_salt"`, nil},
	}
	for _, tc := range cases {
		p, err := director.ParseBody(tc.api, []byte(tc.body))
		if tc.wantErr != "" {
			if err == nil || !errors.Is(err, framework.ErrBadRequest) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseBody(%s, %s) err %v, want ErrBadRequest naming %s", tc.api, tc.body, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseBody(%s, %s): %v", tc.api, tc.body, err)
			continue
		}
		if tc.check != nil {
			if msg := tc.check(p); msg != "" {
				t.Errorf("ParseBody(%s, %s): %s: parsed %+v", tc.api, tc.body, msg, p.Body)
			}
		}
	}
}

func prompt(s string) func(*director.ParsedBody) string {
	return func(p *director.ParsedBody) string {
		return want(p.Body.Completions != nil && p.Body.Completions.Prompt == s && p.Body.Completions.TokenIDs == nil, "prompt "+s)
	}
}

func ids(v ...uint32) func(*director.ParsedBody) string {
	return func(p *director.ParsedBody) string {
		return want(p.Body.Completions != nil && p.Body.Completions.Prompt == "" && slices.Equal(p.Body.Completions.TokenIDs, v),
			fmt.Sprintf("token ids %v", v))
	}
}

func want(ok bool, what string) string {
	if ok {
		return ""
	}
	return "want " + what
}

func TestAPIFromPath(t *testing.T) {
	for path, want := range map[string]framework.API{
		"/v1/completions": director.APICompletions, "/v1/chat/completions?x=1": director.APIChatCompletions,
		"/v1/embeddings": director.APIEmbeddings, "/v1/messages": director.APIMessages, "/v1/responses/": director.APIResponses,
		"/v1/projects/p/locations/l/endpoints/openapi/chat/completions": director.APIChatCompletions,
		"/v1/rerank": director.APIOther, "/": director.APIOther, "": "",
		// llm-d-router v0.10.0's default parsers' other paths.
		"/v1/chat/completions/render": director.APIChatCompletions, "/v1/completions/render": director.APICompletions,
		"/v1/messages/count_tokens": director.APICountTokens, "/inference/v1/generate": director.APIGenerate,
		"/v1/conversations": director.APIOther, "/v1/images/generations": director.APIOther,
	} {
		if got := director.APIFromPath(path); got != want {
			t.Errorf("APIFromPath(%q) = %q, want %q", path, got, want)
		}
	}
}

// FuzzParseBody: ParseBody never panics; it either accepts with a non-empty model and the body
// field of its API (and only that one) set, or refuses with ErrBadRequest; an accepted body
// re-encoded with another model parses again to the same request with the new model.
func FuzzParseBody(f *testing.F) {
	f.Add("", []byte(`{"model":"m","prompt":"hello"}`))
	f.Add("chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`))
	f.Add("completions", []byte(`{"model":"m","prompt":["a","b"],"cache_salt":"s","stream":true}`))
	f.Add("completions", []byte(`{"model":"m","prompt":[[1,2],[3]]}`))
	f.Add("embeddings", []byte(`{"model":"m","input":[1,2,3]}`))
	f.Add("messages", []byte(`{"model":"m","system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"x"}]}`))
	f.Add("responses", []byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"q"}]}],"instructions":"i"}`))
	f.Add("other", []byte(`{"model":"m","x":[]}`))
	f.Add("messages/count_tokens", []byte(`{"messages":[{"role":"user","content":"x"}]}`))
	f.Add("inference/v1/generate", []byte(`{"model":"m","token_ids":[1,2,3],"sampling_params":{"max_tokens":4}}`))
	f.Fuzz(func(t *testing.T, api string, body []byte) {
		p, err := director.ParseBody(framework.API(api), body)
		if err != nil {
			if !errors.Is(err, framework.ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		set := 0
		b := p.Body
		for _, v := range []bool{b.Completions != nil, b.ChatCompletions != nil, b.Embeddings != nil, b.Messages != nil, b.Responses != nil} {
			if v {
				set++
			}
		}
		noFields := p.API == director.APIOther || p.API == director.APICountTokens || p.API == director.APIGenerate
		if (p.Model == "" && p.API != director.APICountTokens) || b.API != p.API || set != map[bool]int{true: 0, false: 1}[noFields] {
			t.Fatalf("accepted body %q parsed to %+v", body, p)
		}
		// A text prompt or token ids, never both; an empty text comes only from a list of empty
		// strings (accepted, as upstream v1.5.0 accepts it), and token ids are never an empty list.
		if c := b.Completions; c != nil && ((c.Prompt != "" && c.TokenIDs != nil) || (c.TokenIDs != nil && len(c.TokenIDs) == 0)) {
			t.Fatalf("completions %q: want a text prompt or a non-empty list of token ids: %+v", body, c)
		}
		re, err := p.WithModel("rewritten")
		if err != nil {
			t.Fatal(err)
		}
		q, err := director.ParseBody(p.API, re)
		if err != nil {
			t.Fatalf("re-encoded body %q no longer parses: %v", re, err)
		}
		if q.Model != "rewritten" || !cmp.Equal(p.Body, q.Body) {
			t.Fatalf("re-encoding changed the request: %+v vs %+v", p.Body, q.Body)
		}
	})
}

// TestDuplicateRequestIDsIsolated: two requests with the same x-request-id get distinct
// EPP-internal ids (SPEC §9.2), so one's plugin state survives the other's end (GIE #1489).
func TestDuplicateRequestIDsIsolated(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	src := &source{eps: []*framework.EndpointMetadata{ep(1)}}
	d := newDirector(t, src, &metricsSource{m: map[string]*framework.Metrics{ep(1).Key(): {UpdateTime: clk.Now()}}}, clk)
	in := &director.Input{Headers: map[string]string{"x-request-id": "same"}, Body: []byte(`{"model":"m","prompt":"p"}`)}
	a, err := d.HandleRequest(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.HandleRequest(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if a.Request.RequestID == b.Request.RequestID || a.Request.XRequestID != "same" || b.Request.XRequestID != "same" || a.RequestIDGenerated {
		t.Fatalf("ids: %q/%q and %q/%q", a.Request.RequestID, a.Request.XRequestID, b.Request.RequestID, b.Request.XRequestID)
	}
	ps := d.Runtime().PluginState()
	ps.Write(a.Request.RequestID, "k", "a")
	ps.Write(b.Request.RequestID, "k", "b")
	d.EndRequest(a.Request)
	if v, ok := ps.Read(b.Request.RequestID, "k"); !ok || v != "b" {
		t.Fatalf("ending one request removed the other's state: %v %v", v, ok)
	}
	if _, ok := ps.Read(a.Request.RequestID, "k"); ok {
		t.Fatalf("the ended request's state is still there")
	}
	d.EndRequest(b.Request)
}

type fixedRewriter map[string]string

func (f fixedRewriter) Rewrite(model string) (string, string, bool) {
	t, ok := f[model]
	return t, "rw-" + model, ok
}

// TestModelRewritePrecedence (SPEC §9.4): the x-gateway-model-name-rewrite header wins over a
// rewrite rule, a rule over the model as sent; the body is re-encoded with the target, which is
// the model the request is scheduled (and prefix-hashed) with.
func TestModelRewritePrecedence(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	src := &source{eps: []*framework.EndpointMetadata{ep(1)}}
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	rt, err := framework.NewRuntime(nil, reg, framework.RuntimeOptions{Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := director.New(director.Options{Runtime: rt, Endpoints: src, Clock: clk, Logger: slog.New(slog.DiscardHandler),
		Metrics:       &metricsSource{m: map[string]*framework.Metrics{ep(1).Key(): {UpdateTime: clk.Now()}}},
		ModelRewrites: fixedRewriter{"alias": "lora-a"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		model, header, want, rewrite string
	}{
		{"alias", "", "lora-a", "rw-alias"},
		{"alias", "lora-b", "lora-b", ""},
		{"base", "", "base", ""},
	} {
		h := map[string]string{":path": "/v1/completions"}
		if tc.header != "" {
			h["x-gateway-model-name-rewrite"] = tc.header
		}
		res, err := d.HandleRequest(context.Background(), &director.Input{Headers: h, Body: []byte(`{"model":"` + tc.model + `","prompt":"p"}`)})
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.Unmarshal(res.Body, &body)
		if res.Request.TargetModel != tc.want || body["model"] != tc.want || res.ModelRewrite != tc.rewrite || res.BodyMutated != (tc.want != tc.model) {
			t.Errorf("model %q header %q: target %q, body model %v, rewrite %q, mutated %v; want %q from %q",
				tc.model, tc.header, res.Request.TargetModel, body["model"], res.ModelRewrite, res.BodyMutated, tc.want, tc.rewrite)
		}
		d.EndRequest(res.Request)
	}
}

// TestParseBodyLLMDPaths: the bodies of llm-d-router v0.10.0's other default paths.
func TestParseBodyLLMDPaths(t *testing.T) {
	for _, tc := range []struct {
		path, body, bad string
	}{
		{"/v1/messages/count_tokens", `{"messages":[{"role":"user","content":"x"}]}`, ""}, // no model: a raw payload upstream
		{"/v1/messages/count_tokens", `{"model":"m","messages":[]}`, ""},
		{"/inference/v1/generate", `{"model":"m","token_ids":[1,2,3]}`, ""},
		{"/inference/v1/generate", `{"model":"m","token_ids":[]}`, "token_ids"},
		{"/inference/v1/generate", `{"model":"m"}`, "token_ids"},
		{"/inference/v1/generate", `{"model":"m","token_ids":[-1]}`, "token_ids[0]"},
		{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, ""},
		{"/v1/chat/completions/render", `{"model":"m","messages":[]}`, "messages"},
		{"/v1/completions/render", `{"model":"m","prompt":"x"}`, ""},
		{"/v1/conversations", `{"model":"m","items":[{"type":"message","role":"user","content":"x"}]}`, ""},
		{"/v1/images/generations", `{"model":"m","prompt":"a cat"}`, ""},
		{"/v1/images/generations", `{"prompt":"a cat"}`, "model"},
	} {
		_, err := director.ParseBody(director.APIFromPath(tc.path), []byte(tc.body))
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s %s: %v", tc.path, tc.body, err)
		case tc.bad != "" && (!errors.Is(err, framework.ErrBadRequest) || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s %s: %v, want a bad request naming %s", tc.path, tc.body, err, tc.bad)
		}
	}
}
