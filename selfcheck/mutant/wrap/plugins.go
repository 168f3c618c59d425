// Package wrap holds the mutants of the reference EPP that live outside reference/: wrapper
// plugins (Registry), a decorated InferencePool endpoint source (PoolSource) and a decorated
// metrics source (Collector). Reference applies all three to a reference EPP's options. Each
// mutant breaks the one rule its selfcheck/mutant catalogue entry names, by wrapping the real
// plugin or source, never by changing its code; with any other mutant name (or none) every
// function here returns what it was given.
//
// Only binaries built with the eppkit_mutants tag call these with an active mutant
// (mutant.Active()); in every other build mutant.Active() is "" and nothing is wrapped.
package wrap

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/legacyprefix"
	"github.com/eppkit/eppkit/reference/plugins/preciseprefix"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/reference/plugins/scorers"
	"github.com/eppkit/eppkit/selfcheck/mutant"
)

// pluginMutants are the wrapper-plugin mutants: the plugin type each decorates and the wrapper.
var pluginMutants = map[mutant.Name]struct {
	pluginType string
	wrap       func(framework.FactoryFunc) framework.FactoryFunc
}{
	mutant.QueueIgnored:         {scorers.QueueScorerType, flatten},
	mutant.KVIgnored:            {scorers.KVCacheScorerType, flatten},
	mutant.LoRAIgnored:          {scorers.LoRAAffinityScorerType, flatten},
	mutant.PrefixAffinityOff:    {prefix.ScorerType, prefixOff},
	mutant.PluginStateScoreOnly: {prefix.ProducerType, producerWithoutState},
	mutant.LegacyMatchOffByOne:  {legacyprefix.PluginType, legacyOffByOne},
	// The production request surface (issue 16).
	mutant.MessagesSystemUnhashed: {prefix.ProducerType, producerSeeing(withoutSystem)},
	mutant.TokenIDsUnhashed:       {prefix.ProducerType, producerSeeing(withoutTokenIDs)},
	mutant.PartsHashedAsText:      {prefix.ProducerType, producerWithCompat(prefix.HashCompat{V150Chat: true})},
	mutant.PartialBlockDropped:    {prefix.ProducerType, producerWithCompat(prefix.HashCompat{NoPartialBlock: true})},
	mutant.StateKeyedByXRequestID: {prefix.ProducerType, producerSeeing(keyedByXRequestID)},
	// vLLM's gRPC engine API (issue 35).
	mutant.GRPCPromptUnhashed: {prefix.ProducerType, producerSeeing(withoutGRPCPrompt)},
	// KV events (issue 35).
	mutant.PreciseEventsIgnored:   {preciseprefix.PluginType, preciseEventsIgnored},
	mutant.PreciseRemovalsIgnored: {preciseprefix.PluginType, preciseRemovalsIgnored},
}

// Registry decorates, in reg, the plugin type that mutant m wraps (framework.Registry.Decorate),
// so every instance of it from then on is the wrapper. Other names leave reg unchanged. Errors:
// the type is not registered in reg.
func Registry(reg *framework.Registry, m mutant.Name) error {
	pm, ok := pluginMutants[m]
	if !ok {
		return nil
	}
	if err := reg.Decorate(pm.pluginType, pm.wrap); err != nil {
		return fmt.Errorf("mutant %s: %w", m, err)
	}
	return nil
}

// PluginMutants lists the mutants Registry implements.
func PluginMutants() []mutant.Name {
	out := make([]mutant.Name, 0, len(pluginMutants))
	for n := range pluginMutants {
		out = append(out, n)
	}
	return out
}

// wrapAs returns a decorator of a plugin factory: the plugin the factory builds must be a T, and
// build turns it into the wrapper.
func wrapAs[T framework.Plugin](build func(inner T, h framework.Handle) framework.Plugin) func(framework.FactoryFunc) framework.FactoryFunc {
	return func(inner framework.FactoryFunc) framework.FactoryFunc {
		return func(name string, params json.RawMessage, h framework.Handle) (framework.Plugin, error) {
			p, err := inner(name, params, h)
			if err != nil {
				return nil, err
			}
			t, ok := p.(T)
			if !ok {
				return nil, fmt.Errorf("mutant wrapper: plugin %s is a %T, not a %v", p.TypedName(), p, reflect.TypeFor[T]())
			}
			return build(t, h), nil
		}
	}
}

// flatten wraps an IndexedScorer (queue-scorer, kv-cache-utilization-scorer,
// lora-affinity-scorer) so that every endpoint scores 1: its signal is lost.
var flatten = wrapAs(func(s framework.IndexedScorer, _ framework.Handle) framework.Plugin { return flatScorer{s} })

type flatScorer struct{ framework.IndexedScorer }

func (s flatScorer) Score(ctx context.Context, cycle *framework.CycleState, req *framework.LLMRequest, eps []*framework.Endpoint) map[string]float64 {
	out := s.IndexedScorer.Score(ctx, cycle, req, eps)
	for k := range out {
		out[k] = 1
	}
	return out
}

func (s flatScorer) ScoreIndexed(ctx context.Context, cycle *framework.CycleState, req *framework.LLMRequest, eps []*framework.Endpoint, out []float64) {
	s.IndexedScorer.ScoreIndexed(ctx, cycle, req, eps, out)
	for i := range out {
		out[i] = 1
	}
}

// prefixOff wraps prefix-cache-scorer so that every endpoint scores 0 (its consumer and
// producer-parameter sides stay the real ones, so the DAG is unchanged).
var prefixOff = wrapAs(func(s *prefix.Scorer, _ framework.Handle) framework.Plugin { return &zeroPrefixScorer{s} })

type zeroPrefixScorer struct{ *prefix.Scorer }

func (s *zeroPrefixScorer) Score(ctx context.Context, cycle *framework.CycleState, req *framework.LLMRequest, eps []*framework.Endpoint) map[string]float64 {
	out := s.Scorer.Score(ctx, cycle, req, eps)
	for k := range out {
		out[k] = 0
	}
	return out
}

func (s *zeroPrefixScorer) ScoreIndexed(ctx context.Context, cycle *framework.CycleState, req *framework.LLMRequest, eps []*framework.Endpoint, out []float64) {
	s.Scorer.ScoreIndexed(ctx, cycle, req, eps, out)
	for i := range out {
		out[i] = 0
	}
}

// producerWithoutState wraps approx-prefix-cache-producer so that its plugin-state entry is gone
// when PrepareData ends: the defect GIE PR #2005 fixed, where PreRequest found no state unless a
// prefix scorer had written it.
var producerWithoutState = wrapAs(func(p *prefix.Producer, h framework.Handle) framework.Plugin {
	return &statelessProducer{Producer: p, h: h}
})

type statelessProducer struct {
	*prefix.Producer
	h framework.Handle
}

func (p *statelessProducer) PrepareRequestData(ctx context.Context, req *framework.LLMRequest, eps []*framework.Endpoint) error {
	err := p.Producer.PrepareRequestData(ctx, req, eps)
	if req != nil && p.h != nil && p.h.PluginState() != nil {
		p.h.PluginState().DeleteKey(req.RequestID, p.StateKey())
	}
	return err
}

// legacyOffByOne wraps legacy-prefix-cache-scorer so that every match is one block short (a
// one-block match is none), in its scores and in the State it leaves in cycle and plugin state.
var legacyOffByOne = wrapAs(func(p *legacyprefix.Plugin, h framework.Handle) framework.Plugin {
	return &offByOneLegacy{Plugin: p, h: h}
})

type offByOneLegacy struct {
	*legacyprefix.Plugin
	h framework.Handle
}

func (p *offByOneLegacy) Score(ctx context.Context, cycle *framework.CycleState, req *framework.LLMRequest, eps []*framework.Endpoint) map[string]float64 {
	scores := p.Plugin.Score(ctx, cycle, req, eps)
	var v any
	ok := false
	if cycle != nil {
		v, ok = cycle.Read(p.StateKey())
	}
	if !ok && req != nil && p.h != nil && p.h.PluginState() != nil {
		v, ok = p.h.PluginState().Read(req.RequestID, p.StateKey())
	}
	st, _ := v.(*legacyprefix.State)
	if !ok || st == nil || len(st.Hashes) == 0 {
		return scores
	}
	for ep, n := range st.Matches {
		if n > 1 {
			st.Matches[ep] = n - 1
		} else {
			delete(st.Matches, ep)
		}
	}
	for _, ep := range eps {
		scores[ep.Key()] = float64(st.Matches[ep.Key()]) / float64(len(st.Hashes))
	}
	return scores
}

// producerSeeing wraps approx-prefix-cache-producer so that PrepareRequestData and PreRequest
// see the request as view returns it (a copy; the request itself is unchanged for every other
// plugin and the forwarded body).
func producerSeeing(view func(*framework.LLMRequest) *framework.LLMRequest) func(framework.FactoryFunc) framework.FactoryFunc {
	return wrapAs(func(p *prefix.Producer, _ framework.Handle) framework.Plugin {
		return &viewProducer{Producer: p, view: view}
	})
}

type viewProducer struct {
	*prefix.Producer
	view func(*framework.LLMRequest) *framework.LLMRequest
}

func (p *viewProducer) PrepareRequestData(ctx context.Context, req *framework.LLMRequest, eps []*framework.Endpoint) error {
	if req != nil {
		req = p.view(req)
	}
	return p.Producer.PrepareRequestData(ctx, req, eps)
}

func (p *viewProducer) PreRequest(ctx context.Context, req *framework.LLMRequest, res *framework.SchedulingResult) {
	if req != nil {
		req = p.view(req)
	}
	p.Producer.PreRequest(ctx, req, res)
}

// withoutSystem is req with an Anthropic Messages body's system prompt removed: what an EPP
// that parses /v1/messages as chat hashes.
func withoutSystem(req *framework.LLMRequest) *framework.LLMRequest {
	if req.Body == nil || req.Body.Messages == nil || req.Body.Messages.System == nil {
		return req
	}
	cp, body, msgs := *req, *req.Body, *req.Body.Messages
	msgs.System = nil
	body.Messages, cp.Body = &msgs, &body
	return &cp
}

// withoutTokenIDs is req with the token ids of a completions prompt or embeddings input removed
// (nothing is left to hash).
func withoutTokenIDs(req *framework.LLMRequest) *framework.LLMRequest {
	if req.Body == nil {
		return req
	}
	cp, body := *req, *req.Body
	switch {
	case body.Completions != nil && body.Completions.TokenIDs != nil:
		c := *body.Completions
		c.TokenIDs = nil
		body.Completions = &c
	case body.Embeddings != nil && body.Embeddings.TokenIDs != nil:
		e := *body.Embeddings
		e.TokenIDs = nil
		body.Embeddings = &e
	default:
		return req
	}
	cp.Body = &body
	return &cp
}

// withoutGRPCPrompt is req with a vLLM gRPC Generate call's prompt removed: what an EPP that
// routes gRPC calls as opaque payloads hashes (nothing).
func withoutGRPCPrompt(req *framework.LLMRequest) *framework.LLMRequest {
	if req.Body == nil || req.Body.API != framework.APIVLLMGRPCGenerate || req.Body.Completions == nil {
		return req
	}
	cp, body := *req, *req.Body
	body.Completions = nil
	cp.Body = &body
	return &cp
}

// keyedByXRequestID is req with its EPP-internal id replaced by its x-request-id, so the
// producer's plugin state is keyed by the client's id (GIE #1489): two requests in flight with
// one x-request-id overwrite each other's hashes, and the first PreRequest deletes both.
func keyedByXRequestID(req *framework.LLMRequest) *framework.LLMRequest {
	if req.XRequestID == "" {
		return req
	}
	cp := *req
	cp.RequestID = "x-request-id/" + req.XRequestID
	return &cp
}

// producerWithCompat builds approx-prefix-cache-producer from its parameters with some of
// SPEC's hashing rules reverted to upstream v1.5.0's (prefix.HashCompat), wrapped so the
// registry's instance is visibly the mutant.
func producerWithCompat(compat prefix.HashCompat) func(framework.FactoryFunc) framework.FactoryFunc {
	return func(framework.FactoryFunc) framework.FactoryFunc {
		return func(name string, params json.RawMessage, h framework.Handle) (framework.Plugin, error) {
			pp, err := prefix.DecodeProducerParameters(params)
			if err != nil {
				return nil, err
			}
			pp.Compat = compat
			p, err := prefix.NewProducer(name, pp, h)
			if err != nil {
				return nil, err
			}
			return &compatProducer{p}, nil
		}
	}
}

type compatProducer struct{ *prefix.Producer }

// preciseEventsIgnored wraps precise-prefix-cache-producer so that every endpoint matches 0
// blocks: the EPP routes as if no model server had published an event.
var preciseEventsIgnored = wrapAs(func(p *preciseprefix.Producer, _ framework.Handle) framework.Plugin {
	return &preciseZero{p}
})

type preciseZero struct{ *preciseprefix.Producer }

func (p *preciseZero) PrepareRequestData(ctx context.Context, req *framework.LLMRequest, eps []*framework.Endpoint) error {
	err := p.Producer.PrepareRequestData(ctx, req, eps)
	for _, ep := range eps {
		if info, ok := framework.AttributeAs[*prefix.PrefixCacheMatchInfo](ep, p.Key()); ok && info != nil {
			ep.Put(p.Key(), &prefix.PrefixCacheMatchInfo{TotalBlocks: info.TotalBlocks, BlockSizeTokens: info.BlockSizeTokens})
		}
	}
	return err
}

// preciseRemovalsIgnored wraps precise-prefix-cache-producer so that an endpoint keeps every
// match it was once credited with, as if BlockRemoved and AllBlocksCleared were never applied:
// per endpoint and prompt (its first preciseMemoryBytes bytes), the best matched fraction seen
// so far is credited again to every later request with that start.
var preciseRemovalsIgnored = wrapAs(func(p *preciseprefix.Producer, _ framework.Handle) framework.Plugin {
	return &preciseSticky{Producer: p, best: map[string]float64{}}
})

const preciseMemoryBytes = 100

type preciseSticky struct {
	*preciseprefix.Producer
	mu   sync.Mutex
	best map[string]float64 // endpoint key + "|" + prompt start → best MatchBlocks/TotalBlocks
}

func (p *preciseSticky) PrepareRequestData(ctx context.Context, req *framework.LLMRequest, eps []*framework.Endpoint) error {
	err := p.Producer.PrepareRequestData(ctx, req, eps)
	if req == nil || req.Body == nil || req.Body.Completions == nil {
		return err
	}
	start := req.Body.Completions.Prompt
	start = start[:min(len(start), preciseMemoryBytes)]
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ep := range eps {
		info, ok := framework.AttributeAs[*prefix.PrefixCacheMatchInfo](ep, p.Key())
		if !ok || info == nil || info.TotalBlocks == 0 {
			continue
		}
		k := ep.Key() + "|" + start
		frac := float64(info.MatchBlocks) / float64(info.TotalBlocks)
		if frac > p.best[k] {
			p.best[k] = frac
		} else if best := p.best[k]; best > frac {
			ep.Put(p.Key(), &prefix.PrefixCacheMatchInfo{MatchBlocks: int(best * float64(info.TotalBlocks)),
				TotalBlocks: info.TotalBlocks, BlockSizeTokens: info.BlockSizeTokens})
		}
	}
	return err
}
