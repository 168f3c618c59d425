package profiles

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

func TestHandlerParameterErrors(t *testing.T) {
	tests := []struct {
		name  string
		f     framework.FactoryFunc
		raw   string
		field string
	}{
		{"fallback same profiles", fallbackFactory, `{"primaryProfile":"a","fallbackProfile":"a"}`, "parameters.fallbackProfile"},
		{"fallback empty primary", fallbackFactory, `{"primaryProfile":""}`, "parameters.primaryProfile"},
		{"fallback unknown field", fallbackFactory, `{"fallback":"x"}`, `"fallback"`},
		{"disagg negative", disaggFactory, `{"nonCachedTokens":-3}`, "parameters.nonCachedTokens"},
		{"disagg same profiles", disaggFactory, `{"decodeProfile":"x","prefillProfile":"x"}`, "parameters.prefillProfile"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.f("", json.RawMessage(tc.raw), nil)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
}

func TestFallbackChoose(t *testing.T) {
	ready := false
	h, err := NewLatencyFallbackProfileHandler("", FallbackParameters{PrimaryProfile: "p", FallbackProfile: "f", FallbackWithoutSLO: true, PredictorPlugin: "x"},
		func() bool { return ready }, nil)
	if err != nil {
		t.Fatal(err)
	}
	slo := &framework.LLMRequest{Headers: map[string]string{"x-slo-ttft-ms": "10"}}
	noSLO := &framework.LLMRequest{Headers: map[string]string{}}
	for _, tc := range []struct {
		ready bool
		req   *framework.LLMRequest
		want  string
	}{{false, slo, "f"}, {true, slo, "p"}, {true, noSLO, "f"}, {false, noSLO, "f"}, {true, nil, "f"}} {
		ready = tc.ready
		if got := h.Choose(tc.req); got != tc.want {
			t.Errorf("ready=%v req=%v: Choose = %q, want %q", tc.ready, tc.req, got, tc.want)
		}
	}
}

func TestUncachedTokens(t *testing.T) {
	req := &framework.LLMRequest{Body: &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: strings.Repeat("x", 400)}}}
	ep := func(match, bs int) *framework.Endpoint {
		e := framework.NewEndpoint(&framework.EndpointMetadata{Address: "10.0.0.1", Port: 1}, nil)
		if bs >= 0 {
			e.Put(prefix.PrefixCacheMatchInfoKey, &prefix.PrefixCacheMatchInfo{MatchBlocks: match, TotalBlocks: 6, BlockSizeTokens: bs})
		}
		return e
	}
	for _, tc := range []struct {
		name string
		ep   *framework.Endpoint
		want int
	}{
		{"no endpoint", nil, 100}, {"no attribute", ep(0, -1), 100}, {"two blocks cached", ep(2, 16), 68},
		{"all cached", ep(6, 16), 4}, {"never negative", ep(20, 16), 0},
	} {
		if got := UncachedTokens(req, tc.ep); got != tc.want {
			t.Errorf("%s: UncachedTokens = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := UncachedTokens(&framework.LLMRequest{}, nil); got != 0 {
		t.Errorf("headers-only request: %d", got)
	}
}
