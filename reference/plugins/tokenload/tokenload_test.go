package tokenload

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

func endpoint(i int) *framework.Endpoint {
	return framework.NewEndpoint(&framework.EndpointMetadata{Name: string(rune('a' + i)), Address: "10.0.0." + string(rune('1'+i)), Port: 8000}, nil)
}

func withLoad(ep *framework.Endpoint, tokens, requests int64) *framework.Endpoint {
	ep.Put(InFlightLoadKey, &InFlightLoad{Tokens: tokens, Requests: requests})
	return ep
}

func withMatch(ep *framework.Endpoint, match, total, block int) *framework.Endpoint {
	ep.Put(prefix.PrefixCacheMatchInfoKey, &prefix.PrefixCacheMatchInfo{MatchBlocks: match, TotalBlocks: total, BlockSizeTokens: block})
	return ep
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-12 {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// TestTokenLoadScore: upstream token_load_test.go's cases, threshold 1000: in-flight 0, 500,
// 1000 → 1, 0.5, 0; with the request's uncached 250 added to in-flight 0, 250, 750 → 0.75, 0.5,
// 0; beyond the threshold 0; no attribute 1.
func TestTokenLoadScore(t *testing.T) {
	s := NewTokenLoadScorer("", TokenLoadParameters{QueueThresholdTokens: 1000})
	eps := []*framework.Endpoint{withLoad(endpoint(0), 0, 0), withLoad(endpoint(1), 500, 1), withLoad(endpoint(2), 1000, 2), endpoint(3)}
	got := s.Score(context.Background(), nil, nil, eps)
	for i, want := range []float64{1, 0.5, 0, 1} {
		near(t, eps[i].Key(), got[eps[i].Key()], want)
	}
	eps = []*framework.Endpoint{withLoad(endpoint(0), 0, 0), withLoad(endpoint(1), 250, 1), withLoad(endpoint(2), 750, 2), withLoad(endpoint(3), 5000, 9)}
	for _, ep := range eps {
		ep.Put(UncachedRequestTokensKey, &UncachedRequestTokens{Tokens: 250})
	}
	out := make([]float64, len(eps))
	s.ScoreIndexed(context.Background(), nil, nil, eps, out)
	for i, want := range []float64{0.75, 0.5, 0, 0} {
		near(t, eps[i].Key(), out[i], want)
	}
	// The default threshold: 4,194,304 tokens; ≤ 0 means the default.
	near(t, "default", TokenLoadScore(2097152, NewTokenLoadScorer("", TokenLoadParameters{QueueThresholdTokens: -1}).threshold), 0.5)
}

// TestActiveRequestScore: upstream active_request.go's formula. Counts 0, 2, 4 (max 4):
// 1, 0.5, 0. idleThreshold 1, maxBusyScore 0.5, counts 1, 3, 0 (max 3): 1, 0, 1 and a count of 2
// would be (3−2)/3 × 0.5. maxBusyScore 0 is binary mode. Out-of-range maxBusyScore is ignored.
func TestActiveRequestScore(t *testing.T) {
	s := NewActiveRequestScorer("", ActiveRequestParameters{}, nil)
	eps := []*framework.Endpoint{withLoad(endpoint(0), 0, 0), withLoad(endpoint(1), 0, 2), withLoad(endpoint(2), 0, 4)}
	got := s.Score(context.Background(), nil, nil, eps)
	for i, want := range []float64{1, 0.5, 0} {
		near(t, eps[i].Key(), got[eps[i].Key()], want)
	}
	half := 0.5
	s = NewActiveRequestScorer("", ActiveRequestParameters{IdleThreshold: 1, MaxBusyScore: &half}, nil)
	eps = []*framework.Endpoint{withLoad(endpoint(0), 0, 1), withLoad(endpoint(1), 0, 3), withLoad(endpoint(2), 0, 0), withLoad(endpoint(3), 0, 2)}
	out := make([]float64, len(eps))
	s.ScoreIndexed(context.Background(), nil, nil, eps, out)
	for i, want := range []float64{1, 0, 1, 1.0 / 3 * 0.5} {
		near(t, eps[i].Key(), out[i], want)
	}
	zero := 0.0
	near(t, "binary", ActiveRequestScore(1, 1, 0, NewActiveRequestScorer("", ActiveRequestParameters{MaxBusyScore: &zero}, nil).maxBusyScore), 0)
	bad := 1.5
	near(t, "out of range", NewActiveRequestScorer("", ActiveRequestParameters{MaxBusyScore: &bad}, nil).maxBusyScore, 1)
	near(t, "no attribute", ActiveRequestScore(0, 0, 0, 1), 1)
}

// TestUncachedInputTokens: upstream producer.go uncachedInputTokens. Block 16: match 3 of 10
// blocks, input 200 tokens: (10−3)·16 + (200 − 160) = 152; input shorter than the indexed
// blocks: no tail; no match info: the input; never negative.
func TestUncachedInputTokens(t *testing.T) {
	near(t, "match 3/10", float64(UncachedInputTokens(withMatch(endpoint(0), 3, 10, 16), 200)), 152)
	near(t, "no tail", float64(UncachedInputTokens(withMatch(endpoint(0), 10, 10, 16), 150)), 0)
	near(t, "no info", float64(UncachedInputTokens(endpoint(0), 77)), 77)
	near(t, "negative input", float64(UncachedInputTokens(endpoint(0), -5)), 0)
}

// TestEstimateOutput: upstream token_estimator.go EstimateOutput: round(input × ratio), capped.
func TestEstimateOutput(t *testing.T) {
	c10, c1000 := int64(10), int64(1000)
	near(t, "ratio 1.5", float64(EstimateOutput(101, 1.5, nil, nil)), 152) // 151.5 rounds half away from zero
	near(t, "client cap", float64(EstimateOutput(100, 1.5, &c10, nil)), 10)
	near(t, "operator cap", float64(EstimateOutput(100, 1.5, &c1000, &c10)), 10)
	near(t, "no input", float64(EstimateOutput(0, 1.5, nil, nil)), 0)
}

func completionsRequest(id, prompt string) *framework.LLMRequest {
	return &framework.LLMRequest{RequestID: id, TargetModel: "m",
		Body: &framework.LLMRequestBody{API: framework.APICompletions, Completions: &framework.CompletionsRequest{Prompt: prompt}}}
}

// TestProducerLifecycle: PrepareData writes the counters and the request's cost; PreRequest adds
// one request and its uncached tokens to each profile's first target; the first response chunk
// releases the tokens (and the prefill profile's request); ResponseComplete releases the rest.
func TestProducerLifecycle(t *testing.T) {
	p, err := NewProducer("", ProducerParameters{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prompt := strings.Repeat("abcd", 100) // 100 tokens by the reference's estimate
	req := completionsRequest("r1", prompt)
	a, b := withMatch(endpoint(0), 2, 6, 16), withMatch(endpoint(1), 0, 6, 16)
	if err := p.PrepareRequestData(ctx, req, []*framework.Endpoint{a, b}); err != nil {
		t.Fatal(err)
	}
	// a: (6−2)·16 + (100 − 96) = 68; b: 6·16 + 4 = 100.
	ua, _ := framework.AttributeAs[*UncachedRequestTokens](a, UncachedRequestTokensKey)
	ub, _ := framework.AttributeAs[*UncachedRequestTokens](b, UncachedRequestTokensKey)
	if ua.Tokens != 68 || ub.Tokens != 100 {
		t.Fatalf("uncached tokens %d, %d; want 68, 100", ua.Tokens, ub.Tokens)
	}
	res := &framework.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*framework.ProfileRunResult{
		"decode": {TargetEndpoints: []*framework.Endpoint{a, b}}, prefix.PrefillProfileName: {TargetEndpoints: []*framework.Endpoint{b}}}}
	p.PreRequest(ctx, req, res)
	if got := p.Load(a.Key()); got != (InFlightLoad{Tokens: 68, Requests: 1}) {
		t.Fatalf("a after PreRequest: %+v", got)
	}
	if got := p.Load(b.Key()); got != (InFlightLoad{Tokens: 100, Requests: 1}) {
		t.Fatalf("b after PreRequest (prefill target): %+v", got)
	}
	// A second request's PrepareData sees the counters.
	c := endpoint(0)
	_ = p.PrepareRequestData(ctx, completionsRequest("r2", "x"), []*framework.Endpoint{c})
	if l, _ := framework.AttributeAs[*InFlightLoad](c, InFlightLoadKey); *l != (InFlightLoad{Tokens: 68, Requests: 1}) {
		t.Fatalf("InFlightLoad attribute %+v", l)
	}
	resp := &framework.Response{RequestID: "r1"}
	p.ResponseBody(ctx, req, resp, []byte("data: {}\n\n"))
	if got := p.Load(a.Key()); got != (InFlightLoad{Tokens: 0, Requests: 1}) {
		t.Fatalf("a after the first chunk: %+v", got)
	}
	if got := p.Load(b.Key()); got != (InFlightLoad{}) {
		t.Fatalf("b (prefill) after the first chunk: %+v", got)
	}
	p.ResponseBody(ctx, req, resp, []byte("data: {}\n\n")) // later chunks release nothing more
	p.ResponseComplete(ctx, req, resp)
	p.ResponseComplete(ctx, req, resp) // idempotent
	if got := p.Load(a.Key()); got != (InFlightLoad{}) || p.InFlightRequests() != 0 {
		t.Fatalf("after ResponseComplete: %+v, %d requests held", got, p.InFlightRequests())
	}
}

// TestProducerWithEstimatedOutput: with addEstimatedOutputTokens the tokens (input uncached +
// round(input × ratio)) stay until the end of the response.
func TestProducerWithEstimatedOutput(t *testing.T) {
	ratio, capOut := 0.5, int64(1000)
	p, err := NewProducer("", ProducerParameters{AddEstimatedOutputTokens: true, OutputRatio: &ratio, MaxEstimatedOutputTokens: &capOut})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := completionsRequest("r", strings.Repeat("abcd", 100))
	a := endpoint(0)
	p.PreRequest(ctx, req, &framework.SchedulingResult{PrimaryProfileName: "default",
		ProfileResults: map[string]*framework.ProfileRunResult{"default": {TargetEndpoints: []*framework.Endpoint{a}}}})
	if got := p.Load(a.Key()); got != (InFlightLoad{Tokens: 150, Requests: 1}) {
		t.Fatalf("after PreRequest: %+v", got)
	}
	p.ResponseBody(ctx, req, &framework.Response{RequestID: "r"}, nil)
	if got := p.Load(a.Key()); got.Tokens != 150 {
		t.Fatalf("after the first chunk: %+v (tokens must stay)", got)
	}
	p.ResponseBody(ctx, req, &framework.Response{RequestID: "r", EndOfStream: true}, nil)
	if got := p.Load(a.Key()); got != (InFlightLoad{}) {
		t.Fatalf("after the end: %+v", got)
	}
}

// TestAffinityFilter: upstream plugin_test.go's cases (prefix scores of 100 blocks).
func TestAffinityFilter(t *testing.T) {
	ep := func(i, match int, predicted float64, tokens int64) *framework.Endpoint {
		e := withMatch(endpoint(i), match, 100, 16)
		if predicted > 0 {
			e.Put(latency.LatencyPredictionInfoKey, &latency.LatencyPredictionInfo{TTFT: predicted})
		}
		if tokens > 0 {
			withLoad(e, tokens, 1)
		}
		return e
	}
	filter := func(p AffinityFilterParameters, eps ...*framework.Endpoint) int {
		t.Helper()
		f, err := NewAffinityFilter("", p, 1)
		if err != nil {
			t.Fatal(err)
		}
		return len(f.Filter(context.Background(), nil, nil, eps))
	}
	base := AffinityFilterParameters{AffinityThreshold: 0.8, TTFTSource: TTFTSourcePrefillThroughput, PeakPrefillThroughput: 1000}
	if n := filter(base, ep(0, 90, 100, 0), ep(1, 85, 120, 0), ep(2, 10, 50, 0)); n != 2 {
		t.Fatalf("narrow to sticky: %d, want 2", n)
	}
	if n := filter(base, ep(0, 10, 0, 0), ep(1, 20, 0, 0)); n != 2 {
		t.Fatalf("none sticky: %d, want all", n)
	}
	pred := base
	pred.TTFTSource, pred.MaxTTFTPenaltyMs = TTFTSourceLatencyPredictor, 100
	if n := filter(pred, ep(0, 90, 500, 0), ep(1, 10, 50, 0)); n != 2 {
		t.Fatalf("predicted TTFT penalty 450 > 100: %d, want all", n)
	}
	// Throughput source at 1000 tokens/s: 500 tokens → 500 ms, 50 → 50 ms; τ = 100 ms × 1000/s = 100 tokens.
	tp := base
	tp.MaxTTFTPenaltyMs = 100
	if n := filter(tp, ep(0, 90, 0, 500), ep(1, 10, 0, 50)); n != 2 {
		t.Fatalf("450 tokens beyond > τ 100: %d, want all", n)
	}
	near(t, "τ", tp.StickinessBreakTokens(), 100)
	tp.MaxTTFTPenaltyMs = 1000
	if n := filter(tp, ep(0, 90, 0, 500), ep(1, 10, 0, 50)); n != 1 {
		t.Fatalf("450 tokens beyond ≤ τ 1000: %d, want the sticky one", n)
	}
	tp.MaxTTFTPenaltyMs = 0
	if n := filter(tp, ep(0, 90, 0, 5000), ep(1, 10, 0, 50)); n != 1 {
		t.Fatalf("penalty 0 always sticks: %d", n)
	}
	explore := base
	explore.ExplorationProbability = 1
	if n := filter(explore, ep(0, 90, 100, 0), ep(1, 10, 50, 0)); n != 2 {
		t.Fatalf("exploration 1: %d, want all", n)
	}
	off := base
	off.AffinityThreshold = 0
	if n := filter(off, ep(0, 90, 0, 0), ep(1, 10, 0, 0)); n != 2 {
		t.Fatalf("threshold 0 disables: %d", n)
	}
	// Predictor source without predictions on the sticky side: MaxFloat64 − 50 > 100, keep all;
	// without any prediction the gate cannot open.
	if n := filter(pred, ep(0, 90, 0, 0), ep(1, 10, 50, 0)); n != 2 {
		t.Fatalf("sticky without prediction: %d, want all", n)
	}
	if n := filter(pred, ep(0, 90, 0, 0), ep(1, 10, 0, 0)); n != 1 {
		t.Fatalf("no predictions: %d, want the sticky one", n)
	}
	// Upstream defaults: τ = 18000 ms × 15928 tokens/s = 286,704 tokens.
	near(t, "default τ", DefaultAffinityFilterParameters().StickinessBreakTokens(), 286704)
}

func TestAffinityFilterConsumes(t *testing.T) {
	for _, c := range []struct {
		p    AffinityFilterParameters
		want []string
	}{
		{AffinityFilterParameters{TTFTSource: TTFTSourcePrefillThroughput}, []string{prefix.PrefixCacheMatchInfoKey}},
		{AffinityFilterParameters{TTFTSource: TTFTSourceLatencyPredictor, MaxTTFTPenaltyMs: 5000}, []string{prefix.PrefixCacheMatchInfoKey, latency.LatencyPredictionInfoKey}},
		{AffinityFilterParameters{TTFTSource: TTFTSourcePrefillThroughput, MaxTTFTPenaltyMs: 5000, PeakPrefillThroughput: 1}, []string{prefix.PrefixCacheMatchInfoKey, InFlightLoadKey}},
	} {
		f, err := NewAffinityFilter("", c.p, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := f.Consumes()
		if len(got) != len(c.want) {
			t.Fatalf("%+v consumes %v, want %v", c.p, got, c.want)
		}
		for _, k := range c.want {
			if _, ok := got[k]; !ok {
				t.Fatalf("%+v consumes %v, want %v", c.p, got, c.want)
			}
		}
	}
}

// TestFactories: defaults are upstream's, a partial config keeps the other defaults, and invalid
// values are errors naming the field.
func TestFactories(t *testing.T) {
	pl, err := affinityFilterFactory("", json.RawMessage(`{"affinityThreshold":0.95}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := pl.(*AffinityFilter).Params()
	want := DefaultAffinityFilterParameters()
	want.AffinityThreshold = 0.95
	if got != want {
		t.Fatalf("params %+v, want %+v", got, want)
	}
	for raw, field := range map[string]string{
		`{"affinityThreshold":1.5}`:                              "affinityThreshold",
		`{"explorationProbability":2}`:                           "explorationProbability",
		`{"maxTTFTPenaltyMs":-1}`:                                "maxTTFTPenaltyMs",
		`{"ttftSource":"guess"}`:                                 "ttftSource",
		`{"peakPrefillThroughput":0}`:                            "peakPrefillThroughput",
		`{"prefixMatchInfoProducerName":"precise"}`:              "prefixMatchInfoProducerName",
		`{"affinityThreshld":0.9}`:                               "affinityThreshld",
		`{"latencyPredictionInfoProducerName":"other-producer"}`: "latencyPredictionInfoProducerName",
	} {
		if _, err := affinityFilterFactory("", json.RawMessage(raw), nil); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err %v, want one naming %s", raw, err, field)
		}
	}
	if _, err := producerFactory("", json.RawMessage(`{"outputRatio":-1}`), nil); err == nil || !strings.Contains(err.Error(), "outputRatio") {
		t.Errorf("outputRatio -1: %v", err)
	}
	if _, err := producerFactory("", json.RawMessage(`{"maxEstimatedOutputTokens":-1}`), nil); err == nil {
		t.Error("maxEstimatedOutputTokens -1 accepted")
	}
	s, err := tokenLoadFactory("x", nil, nil)
	if err != nil || s.(*TokenLoadScorer).threshold != DefaultQueueThresholdTokens || s.TypedName().String() != "x/token-load-scorer" {
		t.Fatalf("token-load defaults: %+v %v", s, err)
	}
	named, _ := tokenLoadFactory("", json.RawMessage(`{"inFlightLoadProducerName":"mine"}`), nil)
	if _, ok := named.(*TokenLoadScorer).Consumes()["InFlightLoad/mine"]; !ok {
		t.Fatalf("a named producer's key: %v", named.(*TokenLoadScorer).Consumes())
	}
}
