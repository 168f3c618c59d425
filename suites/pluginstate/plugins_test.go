package pluginstate_test

import (
	"context"
	"encoding/json"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

// Test plugin types registered in the suite's registry.
const (
	// scoreOnlyProducerType is the negative control: a prefix producer with the pre-PR #2005
	// defect, writing its request state only in Score.
	scoreOnlyProducerType = "score-only-state-prefix-producer"
	// observerType is a filter that consumes PrefixCacheMatchInfo and keeps every endpoint. It
	// makes the runtime auto-create the default producer in a profile without a prefix scorer, as
	// a latency scorer consuming prefix data does upstream.
	observerType = "prefix-match-observer"
)

// scoreOnlyProducer puts the same *prefix.PrefixCacheMatchInfo on every candidate as
// approx-prefix-cache-producer, through the producer's exported hashing and index, but writes
// the request state that PreRequest needs only in Score — the way the December 2025 monolith
// did. When no profile scores with it, PreRequest finds no state and never indexes the pick.
type scoreOnlyProducer struct {
	typedName framework.TypedName
	inner     *prefix.Producer // index, parameters, state key and PreRequest
	state     *framework.PluginState
}

var (
	_ framework.PrepareDataPlugin = (*scoreOnlyProducer)(nil)
	_ framework.Scorer            = (*scoreOnlyProducer)(nil)
	_ framework.PreRequest        = (*scoreOnlyProducer)(nil)
)

func scoreOnlyProducerFactory(name string, params json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	p, err := prefix.DecodeProducerParameters(params)
	if err != nil {
		return nil, err
	}
	inner, err := prefix.NewProducer(name, p, h)
	if err != nil {
		return nil, err
	}
	return &scoreOnlyProducer{typedName: framework.TypedName{Type: scoreOnlyProducerType, Name: name}, inner: inner,
		state: h.PluginState()}, nil
}

func (p *scoreOnlyProducer) TypedName() framework.TypedName { return p.typedName }
func (p *scoreOnlyProducer) Produces() map[string]any       { return p.inner.Produces() }

func (p *scoreOnlyProducer) hash(req *framework.LLMRequest, endpoints []*framework.Endpoint) ([]uint64, int) {
	bs := p.inner.BlockSizeTokens(endpoints)
	hashes, _ := prefix.HashRequest(req, bs, p.inner.Parameters().MaxPrefixBlocksToMatch)
	return hashes, bs
}

// PrepareRequestData produces the attributes and, unlike the real producer, keeps no state.
func (p *scoreOnlyProducer) PrepareRequestData(_ context.Context, req *framework.LLMRequest, endpoints []*framework.Endpoint) error {
	hashes, bs := p.hash(req, endpoints)
	matches := p.inner.Index().Match(hashes)
	for _, ep := range endpoints {
		ep.Put(prefix.PrefixCacheMatchInfoKey, &prefix.PrefixCacheMatchInfo{
			MatchBlocks: matches[ep.Key()], TotalBlocks: len(hashes), BlockSizeTokens: bs})
	}
	return nil
}

// Score writes the request state (the defect: only here) and scores as prefix-cache-scorer.
func (p *scoreOnlyProducer) Score(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest, endpoints []*framework.Endpoint) map[string]float64 {
	hashes, bs := p.hash(req, endpoints)
	p.state.Write(req.RequestID, p.inner.StateKey(), &prefix.RequestState{
		Hashes: hashes, Matches: p.inner.Index().Match(hashes), BlockSizeTokens: bs})
	out := make(map[string]float64, len(endpoints))
	for _, ep := range endpoints {
		out[ep.Key()] = prefix.MatchScore(ep)
	}
	return out
}

// PreRequest indexes from the state, as the real producer does.
func (p *scoreOnlyProducer) PreRequest(ctx context.Context, req *framework.LLMRequest, res *framework.SchedulingResult) {
	p.inner.PreRequest(ctx, req, res)
}

// observer is a pass-through filter consuming PrefixCacheMatchInfo.
type observer struct{ typedName framework.TypedName }

var (
	_ framework.Filter       = (*observer)(nil)
	_ framework.DataConsumer = (*observer)(nil)
)

func observerFactory(name string, params json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	if err := framework.DecodeParameters(params, &struct{}{}); err != nil {
		return nil, err
	}
	return &observer{typedName: framework.TypedName{Type: observerType, Name: name}}, nil
}

func (o *observer) TypedName() framework.TypedName { return o.typedName }
func (o *observer) Consumes() map[string]any {
	return map[string]any{prefix.PrefixCacheMatchInfoKey: (*prefix.PrefixCacheMatchInfo)(nil)}
}
func (o *observer) Filter(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint) []*framework.Endpoint {
	return endpoints
}
