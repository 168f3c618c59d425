package prefix

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
)

func completions(id, model, prompt string) *framework.LLMRequest {
	return &framework.LLMRequest{RequestID: id, TargetModel: model,
		Body: &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: prompt}}}
}

func endpoints(mds []*framework.EndpointMetadata, metrics func(i int) *framework.Metrics) []*framework.Endpoint {
	out := make([]*framework.Endpoint, len(mds))
	for i, md := range mds {
		var m *framework.Metrics
		if metrics != nil {
			m = metrics(i)
		}
		out[i] = framework.NewEndpoint(md, m)
	}
	return out
}

func pick(profile string, eps ...*framework.Endpoint) *framework.SchedulingResult {
	return &framework.SchedulingResult{PrimaryProfileName: profile,
		ProfileResults: map[string]*framework.ProfileRunResult{profile: {TargetEndpoints: eps}}}
}

func infoOf(t *testing.T, ep *framework.Endpoint) PrefixCacheMatchInfo {
	t.Helper()
	info, ok := framework.AttributeAs[*PrefixCacheMatchInfo](ep, PrefixCacheMatchInfoKey)
	if !ok || info == nil {
		t.Fatalf("endpoint %s has no *PrefixCacheMatchInfo (keys %v)", ep.Key(), ep.Keys())
	}
	return *info
}

func newProducer(t *testing.T, params string) (*Producer, *testHandle) {
	t.Helper()
	h, _ := newTestHandle(t)
	pl, err := ProducerFactory("", json.RawMessage(params), h)
	if err != nil {
		t.Fatalf("factory: %v", err)
	}
	return pl.(*Producer), h
}

func TestProducerPrepareDataAndPreRequest(t *testing.T) {
	p, h := newProducer(t, `{"autoTune": false, "blockSizeTokens": 4}`)
	mds := []*framework.EndpointMetadata{meta("pod-a", "10.0.0.1"), meta("pod-b", "10.0.0.2"), meta("pod-c", "10.0.0.3")}
	prompt := strings.Repeat("abcdefghijklmnop", 10) // 160 chars = 10 blocks of 16 chars

	ctx := context.Background()
	eps := endpoints(mds, nil)
	req := completions("r1", "m", prompt)
	if err := p.PrepareRequestData(ctx, req, eps); err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		if diff := cmp.Diff(PrefixCacheMatchInfo{MatchBlocks: 0, TotalBlocks: 10, BlockSizeTokens: 4}, infoOf(t, ep)); diff != "" {
			t.Fatalf("cold index, endpoint %s (-want +got):\n%s", ep.Key(), diff)
		}
	}
	v, ok := h.state.Read("r1", p.StateKey())
	if !ok {
		t.Fatalf("no plugin state after PrepareData")
	}
	if st := v.(*RequestState); len(st.Hashes) != 10 || st.BlockSizeTokens != 4 {
		t.Fatalf("state = %+v", st)
	}

	p.PreRequest(ctx, req, pick("default", eps[1]))
	if _, ok := h.state.Read("r1", p.StateKey()); ok || h.state.Len() != 0 {
		t.Fatalf("plugin state not deleted after PreRequest (len %d)", h.state.Len())
	}

	// A second request sharing the first half sees the match on pod-b only.
	eps2 := endpoints(mds, nil)
	req2 := completions("r2", "m", prompt[:80]+strings.Repeat("z", 80))
	if err := p.PrepareRequestData(ctx, req2, eps2); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{0, 5, 0} {
		if got := infoOf(t, eps2[i]).MatchBlocks; got != want {
			t.Fatalf("%s MatchBlocks = %d, want %d", eps2[i].Key(), got, want)
		}
	}
	// Another model shares nothing.
	eps3 := endpoints(mds, nil)
	if err := p.PrepareRequestData(ctx, completions("r3", "other", prompt), eps3); err != nil {
		t.Fatal(err)
	}
	if got := infoOf(t, eps3[1]).MatchBlocks; got != 0 {
		t.Fatalf("other model matched %d blocks", got)
	}
}

func TestProducerPreRequestPrefillAndEdgeCases(t *testing.T) {
	p, h := newProducer(t, `{"autoTune": false, "blockSizeTokens": 1}`)
	mds := []*framework.EndpointMetadata{meta("a", "10.0.0.1"), meta("b", "10.0.0.2"), meta("c", "10.0.0.3")}
	ctx := context.Background()

	eps := endpoints(mds, nil)
	req := completions("r1", "m", "abcdefgh") // 2 blocks
	_ = p.PrepareRequestData(ctx, req, eps)
	res := &framework.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*framework.ProfileRunResult{
		"decode":  {TargetEndpoints: []*framework.Endpoint{eps[0], eps[2]}},
		"prefill": {TargetEndpoints: []*framework.Endpoint{eps[1]}},
	}}
	p.PreRequest(ctx, req, res)
	if diff := cmp.Diff([]string{"10.0.0.1:8000", "10.0.0.2:8000"}, p.Index().Endpoints()); diff != "" {
		t.Fatalf("indexed endpoints (-want +got):\n%s", diff)
	}

	// No target: nothing indexed, state still deleted.
	_ = p.PrepareRequestData(ctx, completions("r2", "m2", "abcdefgh"), endpoints(mds, nil))
	p.PreRequest(ctx, completions("r2", "m2", "abcdefgh"), &framework.SchedulingResult{PrimaryProfileName: "x"})
	p.PreRequest(ctx, completions("r2", "m2", "abcdefgh"), nil)
	if h.state.Len() != 0 {
		t.Fatalf("state left after PreRequest without a target")
	}
	// PreRequest without PrepareData: nothing indexed (no state, no LRU created), nothing panics.
	p.PreRequest(ctx, completions("r3", "m3", "abcdefgh"), pick("default", eps[2]))
	if _, ok := p.Index().Capacity("10.0.0.3:8000"); ok {
		t.Fatalf("indexed without state")
	}
	// A prompt shorter than one block is one partial block (SPEC §2.1), unmatched everywhere,
	// still an attribute on every endpoint.
	eps4 := endpoints(mds, nil)
	_ = p.PrepareRequestData(ctx, completions("r4", "m", "abc"), eps4)
	for _, ep := range eps4 {
		if diff := cmp.Diff(PrefixCacheMatchInfo{TotalBlocks: 1, BlockSizeTokens: 1}, infoOf(t, ep)); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	}
	// Headers-only request.
	eps5 := endpoints(mds, nil)
	if err := p.PrepareRequestData(ctx, &framework.LLMRequest{RequestID: "r5"}, eps5); err != nil {
		t.Fatal(err)
	}
	if infoOf(t, eps5[0]).TotalBlocks != 0 {
		t.Fatalf("headers-only request has blocks")
	}
	if err := p.PrepareRequestData(ctx, nil, eps5); err == nil {
		t.Fatalf("nil request accepted")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.PrepareRequestData(cctx, completions("r6", "m", "abcd"), eps5); err == nil {
		t.Fatalf("cancelled context accepted")
	}
}

func TestProducerAutoTune(t *testing.T) {
	p, _ := newProducer(t, `{}`) // autoTune on by default, fallback 16 tokens
	mds := []*framework.EndpointMetadata{meta("pod-c", "10.0.0.3"), meta("pod-a", "10.0.0.1"), meta("pod-b", "10.0.0.2")}
	tests := []struct {
		name       string
		blockSizes []int // per mds entry
		want       int
	}{
		{"none reports: default", []int{0, 0, 0}, 16},
		{"first by name reporting wins", []int{32, 0, 64}, 64},
		{"pod-a reports", []int{32, 8, 64}, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eps := endpoints(mds, func(i int) *framework.Metrics { return &framework.Metrics{CacheBlockSize: tc.blockSizes[i]} })
			if got := p.BlockSizeTokens(eps); got != tc.want {
				t.Fatalf("block size = %d, want %d", got, tc.want)
			}
		})
	}
	// Capacity from CacheNumGPUBlocks under autoTune, fixed at first insert.
	eps := endpoints(mds[:1], func(int) *framework.Metrics { return &framework.Metrics{CacheBlockSize: 1, CacheNumGPUBlocks: 3} })
	req := completions("r", "m", strings.Repeat("x", 40)) // 10 blocks of 4 chars
	_ = p.PrepareRequestData(context.Background(), req, eps)
	p.PreRequest(context.Background(), req, pick("default", eps[0]))
	if c, _ := p.Index().Capacity(eps[0].Key()); c != 3 {
		t.Fatalf("capacity = %d, want 3 from CacheNumGPUBlocks", c)
	}
	if n := len(p.Index().Contents()[eps[0].Key()]); n != 3 {
		t.Fatalf("LRU holds %d, want 3", n)
	}
}

func TestProducerParameters(t *testing.T) {
	tests := []struct {
		name    string
		params  string
		wantErr string
		want    ProducerParameters
	}{
		{name: "defaults", params: ``, want: DefaultProducerParameters()},
		{name: "null", params: `null`, want: DefaultProducerParameters()},
		{name: "all fields", params: `{"autoTune":false,"blockSizeTokens":32,"maxPrefixBlocksToMatch":10,"maxPrefixTokensToMatch":64,"lruCapacityPerServer":5}`,
			want: ProducerParameters{AutoTune: false, BlockSizeTokens: 32, MaxPrefixBlocksToMatch: 10, MaxPrefixTokensToMatch: 64, LRUCapacityPerServer: 5}},
		{name: "deprecated blockSize ignored", params: `{"blockSize":64}`,
			want: func() ProducerParameters { p := DefaultProducerParameters(); p.BlockSize = 64; return p }()},
		{name: "unknown field", params: `{"blockSze":3}`, wantErr: `unknown field "blockSze"`},
		{name: "blockSize without tokens", params: `{"blockSize":64,"blockSizeTokens":0}`, wantErr: "parameters.blockSize"},
		{name: "no block size without autoTune", params: `{"autoTune":false,"blockSizeTokens":0}`, wantErr: "parameters.blockSizeTokens"},
		{name: "negative block size", params: `{"blockSizeTokens":-1}`, wantErr: "parameters.blockSizeTokens"},
		{name: "zero max blocks", params: `{"maxPrefixBlocksToMatch":0}`, wantErr: "parameters.maxPrefixBlocksToMatch"},
		{name: "negative max tokens", params: `{"maxPrefixTokensToMatch":-5}`, wantErr: "parameters.maxPrefixTokensToMatch"},
		{name: "zero lru", params: `{"lruCapacityPerServer":0}`, wantErr: "parameters.lruCapacityPerServer"},
		{name: "wrong type", params: `{"autoTune":"yes"}`, wantErr: "autoTune"},
		{name: "trailing data", params: `{} {}`, wantErr: "trailing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newTestHandle(t)
			pl, err := ProducerFactory("p", json.RawMessage(tc.params), h)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
				}
				// The scorer validates the same parameters.
				if _, serr := NewScorer("s", json.RawMessage(tc.params)); serr == nil {
					t.Fatalf("scorer accepted invalid producer parameters")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, pl.(*Producer).Parameters()); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestProducerMaxPrefixTokens(t *testing.T) {
	p, _ := newProducer(t, `{"autoTune":false,"blockSizeTokens":2,"maxPrefixTokensToMatch":6}`)
	eps := endpoints([]*framework.EndpointMetadata{meta("a", "10.0.0.1")}, nil)
	_ = p.PrepareRequestData(context.Background(), completions("r", "m", strings.Repeat("q", 80)), eps)
	if got := infoOf(t, eps[0]).TotalBlocks; got != 3 {
		t.Fatalf("TotalBlocks = %d, want 6/2 = 3", got)
	}
}

func TestProducerSweeper(t *testing.T) {
	h, fc := newTestHandle(t)
	a, b := meta("a", "10.0.0.1"), meta("b", "10.0.0.2")
	h.setEndpoints(a, b)
	p, err := NewProducer("", DefaultProducerParameters(), h)
	if err != nil {
		t.Fatal(err)
	}
	p.Index().Add(a.Key(), 0, []uint64{1})
	p.Index().Add(b.Key(), 0, []uint64{1, 2})
	h.setEndpoints(a) // b leaves the pool
	// Wait for the sweeper's ticker to exist, then fire it.
	deadline := time.Now().Add(5 * time.Second)
	for !fc.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatalf("sweeper did not start a ticker")
		}
		time.Sleep(time.Millisecond)
	}
	fc.Step(DefaultSweepInterval)
	for {
		if eps := p.Index().Endpoints(); len(eps) == 1 && eps[0] == a.Key() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("departed endpoint not swept: %v", p.Index().Endpoints())
		}
		time.Sleep(time.Millisecond)
	}
	if got := p.Index().Holders(2); len(got) != 0 {
		t.Fatalf("hash 2 still held by %v", got)
	}
	p.RemoveEndpoint(a.Key())
	if n := p.Index().Size(); n != 0 {
		t.Fatalf("index size %d after RemoveEndpoint", n)
	}
}

func TestNewProducerErrors(t *testing.T) {
	if _, err := NewProducer("", DefaultProducerParameters(), nil); err == nil {
		t.Fatalf("nil handle accepted")
	}
	h, _ := newTestHandle(t)
	h.state = nil
	if _, err := NewProducer("", DefaultProducerParameters(), h); err == nil {
		t.Fatalf("handle without plugin state accepted")
	}
}

func TestProducerChatAndSalt(t *testing.T) {
	p, _ := newProducer(t, `{"autoTune": false, "blockSizeTokens": 4}`)
	mds := []*framework.EndpointMetadata{meta("a", "10.0.0.1"), meta("b", "10.0.0.2")}
	ctx := context.Background()
	chat := func(id, salt string, msgs ...framework.Message) *framework.LLMRequest {
		return &framework.LLMRequest{RequestID: id, TargetModel: "m",
			Body: &framework.LLMRequestBody{ChatCompletions: &framework.ChatCompletionsRequest{Messages: msgs, CacheSalt: salt}}}
	}
	sys := framework.Message{Role: "system", Content: strings.Repeat("You are a helpful assistant. ", 10)}
	req := chat("c1", "", sys, framework.Message{Role: "user", Content: "first question"})
	eps := endpoints(mds, nil)
	_ = p.PrepareRequestData(ctx, req, eps)
	total := infoOf(t, eps[0]).TotalBlocks
	input, _ := RequestInput(req.Body)
	if want := (len(input.Text) + 15) / 16; total != want {
		t.Fatalf("TotalBlocks = %d, want ⌈len(encoded messages)/16⌉ = %d", total, want)
	}
	p.PreRequest(ctx, req, pick("default", eps[0]))

	eps2 := endpoints(mds, nil)
	_ = p.PrepareRequestData(ctx, chat("c2", "", sys, framework.Message{Role: "user", Content: "another question"}), eps2)
	if got := infoOf(t, eps2[0]).MatchBlocks; got < 10 {
		t.Fatalf("shared system prompt matched only %d blocks", got)
	}
	eps3 := endpoints(mds, nil)
	_ = p.PrepareRequestData(ctx, chat("c3", "tenant-b", sys, framework.Message{Role: "user", Content: "first question"}), eps3)
	if got := infoOf(t, eps3[0]).MatchBlocks; got != 0 {
		t.Fatalf("a different cache_salt matched %d blocks", got)
	}
}
