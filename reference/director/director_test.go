package director_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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
		err  error
		want int
	}{
		{nil, http.StatusOK},
		{fmt.Errorf("x: %w", framework.ErrBadRequest), 400},
		{fmt.Errorf("x: %w", framework.ErrShed), 429},
		{fmt.Errorf("x: %w", framework.ErrNoEndpoints), 503},
		{fmt.Errorf("x: %w", framework.ErrInternal), 500},
		{errors.New("plain"), 500},
		{context.DeadlineExceeded, 500},
	}
	for _, tc := range cases {
		if got := director.StatusFor(tc.err); got != tc.want {
			t.Errorf("StatusFor(%v) = %d, want %d", tc.err, got, tc.want)
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
	if !res.RequestIDGenerated || len(res.Request.RequestID) != 36 {
		t.Fatalf("request ID %q generated=%v", res.Request.RequestID, res.RequestIDGenerated)
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
		api, body string
		wantErr   string
		prompt    string
	}{
		{"", `{"model":"m","prompt":"a"}`, "", "a"},
		{"", `{"model":"m","prompt":["a","b"]}`, "", "a b"},
		{"completions", `{"model":"m","prompt":[]}`, `"prompt"`, ""},
		{"completions", `{"model":"m","prompt":""}`, `"prompt"`, ""},
		{"completions", `{"model":"m","prompt":5}`, `"prompt"`, ""},
		{"", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "", ""},
		{"chat/completions", `{"model":"m","messages":[{"content":"x"}]}`, `messages[0].role`, ""},
		{"chat/completions", `{"model":"m","messages":{}}`, `"messages"`, ""},
		{"", `{"model":"","prompt":"a"}`, `"model"`, ""},
		{"", `{"model":null,"prompt":"a"}`, `"model"`, ""},
		{"", `{"model":"m","prompt":"a","stream":"yes"}`, `"stream"`, ""},
		{"", `{"model":"m","prompt":"a"} {}`, "trailing", ""},
		{"", `  `, "JSON object", ""},
		{"", `{"model":"m","prompt":"a","cache_salt":1}`, `"cache_salt"`, ""},
	}
	for _, tc := range cases {
		p, err := director.ParseBody(tc.api, []byte(tc.body))
		if tc.wantErr != "" {
			if err == nil || !errors.Is(err, framework.ErrBadRequest) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseBody(%s) err %v, want ErrBadRequest naming %s", tc.body, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseBody(%s): %v", tc.body, err)
			continue
		}
		if tc.prompt != "" && p.Body.Completions.Prompt != tc.prompt {
			t.Errorf("ParseBody(%s) prompt %q, want %q", tc.body, p.Body.Completions.Prompt, tc.prompt)
		}
	}
}

// FuzzParseBody: ParseBody never panics; it either accepts with a non-empty model and exactly one
// body kind, or refuses with ErrBadRequest; an accepted body re-encoded with another model parses
// again to the same request with the new model.
func FuzzParseBody(f *testing.F) {
	f.Add("", []byte(`{"model":"m","prompt":"hello"}`))
	f.Add("chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`))
	f.Add("completions", []byte(`{"model":"m","prompt":["a","b"],"cache_salt":"s","stream":true}`))
	f.Fuzz(func(t *testing.T, api string, body []byte) {
		p, err := director.ParseBody(api, body)
		if err != nil {
			if !errors.Is(err, framework.ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		if p.Model == "" || p.Body == nil || (p.Body.Completions == nil) == (p.Body.ChatCompletions == nil) {
			t.Fatalf("accepted body %q parsed to %+v", body, p)
		}
		b, err := p.WithModel("rewritten")
		if err != nil {
			t.Fatal(err)
		}
		q, err := director.ParseBody(p.API, b)
		if err != nil {
			t.Fatalf("re-encoded body %q no longer parses: %v", b, err)
		}
		if q.Model != "rewritten" || !cmp.Equal(p.Body, q.Body) {
			t.Fatalf("re-encoding changed the request: %+v vs %+v", p.Body, q.Body)
		}
	})
}
