package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIModelNameRestored",
		Description: "When a request's model was rewritten (x-llm-d-model-name-rewrite or x-gateway-model-name-rewrite), the " +
			"response the client gets through the gateway MUST name the model the client sent, never the rewrite target, in " +
			"every model field: the JSON body and every SSE event, for completions, chat completions, embeddings, Anthropic " +
			"messages and OpenAI responses.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP processes response bodies in FULL_DUPLEX_STREAMED mode",
			"the rewrite targets are LoRA adapters of one fleet member each (the request's subset hint names that member)",
			"the gateway applies the EPP's response body mutations (the fake gateway, as Envoy)"},
		Source: "SPEC §10 (GIE #2769; llm-d-router v0.10.0 pkg/epp/handlers/server.go rewriteModelName, Process " +
			"(ResponseBody: per chunk when streaming, finishResponse otherwise))",
		Run: runOpenAIModelNameRestored,
	})
}

// restoreCases are the APIs and modes of OpenAIModelNameRestored: path, body fields beyond
// model, and whether the response streams.
func restoreCases(prompt string) []struct {
	name, path string
	fields     map[string]any
} {
	msgs := []map[string]any{{"role": "user", "content": prompt}}
	return []struct {
		name, path string
		fields     map[string]any
	}{
		{"completions JSON", pathCompletions, map[string]any{"prompt": prompt, "max_tokens": 3}},
		{"completions SSE", pathCompletions, map[string]any{"prompt": prompt, "max_tokens": 3, "stream": true}},
		{"chat JSON", pathChat, map[string]any{"messages": msgs, "max_tokens": 3}},
		{"chat SSE", pathChat, map[string]any{"messages": msgs, "max_tokens": 3, "stream": true,
			"stream_options": map[string]any{"include_usage": true}}},
		{"embeddings JSON", pathEmbeddings, map[string]any{"input": prompt}},
		{"messages JSON", pathMessages, map[string]any{"messages": msgs, "max_tokens": 3}},
		{"messages SSE", pathMessages, map[string]any{"messages": msgs, "max_tokens": 3, "stream": true}},
		{"responses JSON", pathResponses, map[string]any{"input": prompt, "max_output_tokens": 3}},
		{"responses SSE", pathResponses, map[string]any{"input": prompt, "max_output_tokens": 3, "stream": true}},
	}
}

func runOpenAIModelNameRestored(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 1)
	r := s.Rand(t)
	if len(s.LoRAAdapters) != len(pool) {
		t.Fatalf("precondition: the fleet serves no LoRA adapters per member to rewrite to")
	}
	for i, tc := range restoreCases(uniquePrompt(s, t, r, 8)) {
		e := i % len(pool)
		if len(s.LoRAAdapters[e]) == 0 {
			t.Fatalf("precondition: fleet member %s serves no LoRA adapter", pool[e])
		}
		target := s.LoRAAdapters[e][r.IntN(len(s.LoRAAdapters[e]))]
		header := hdrRewrite
		if i%2 == 1 {
			header = hdrRewriteLegacy
		}
		body := apiBody(s.ModelName, tc.fields, nil)
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		res, err := s.Gateway.Do(ctx, &gateway.Request{Method: http.MethodPost, Path: tc.path, SubsetHint: []string{pool[e]},
			Headers: map[string]string{"content-type": "application/json", header: target}, Body: body})
		cancel()
		switch {
		case err != nil:
			t.Fatalf("%s: POST %s through the gateway: %v", tc.name, tc.path, err)
		case res.Status != http.StatusOK || res.Endpoint == "":
			t.Fatalf("%s: POST %s with %s: %s: status %d from %q: %s", tc.name, tc.path, header, target, res.Status, res.Endpoint, strings.TrimSpace(string(res.Body)))
		}
		models, err := responseModels(res.Body, strings.Contains(res.Headers.Get("Content-Type"), "text/event-stream"))
		if err != nil {
			t.Fatalf("%s: the response is not what the model server sends: %v: %q", tc.name, err, res.Body)
		}
		if len(models) == 0 {
			t.Fatalf("%s: the response names no model at all: %q", tc.name, res.Body)
		}
		for _, m := range models {
			if m != s.ModelName {
				t.Fatalf("%s (%s: %s): the client got a response naming model %q, want %q, the model it sent (all: %v)", tc.name, header, target, m, s.ModelName, models)
			}
		}
		t.Logf("%s (%s: %s, served by %s): %d model fields, all %q", tc.name, header, target, res.Endpoint, len(models), s.ModelName)
	}
}

// responseModels returns the value of every object member "model", at any depth, of a JSON body
// or of every JSON "data:" event of an SSE body, in order.
func responseModels(body []byte, sse bool) ([]string, error) {
	var docs [][]byte
	if !sse {
		docs = append(docs, body)
	} else {
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			if p, ok := strings.CutPrefix(line, "data:"); ok && strings.TrimSpace(p) != "[DONE]" {
				docs = append(docs, []byte(strings.TrimSpace(p)))
			}
		}
	}
	var out []string
	for _, d := range docs {
		var v any
		if err := json.Unmarshal(d, &v); err != nil {
			return nil, fmt.Errorf("not JSON: %v", err)
		}
		collectModels(v, &out)
	}
	return out, nil
}

func collectModels(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "model" {
				*out = append(*out, s)
				continue
			}
			collectModels(e, out)
		}
	case []any:
		for _, e := range x {
			collectModels(e, out)
		}
	}
}
