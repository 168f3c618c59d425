// Package tokenload is llm-d-router v0.10.0's token-aware routing (llm-d blog "Sticky until
// saturated: token-aware routing", 2026-08-17): the EPP's own in-flight accounting
// (inflight-load-producer), the scorers it feeds (token-load-scorer, active-request-scorer) and
// the prefix-cache-affinity filter whose stickiness is released at a calibrated load
// τ = maxTTFTPenaltyMs × peakPrefillThroughput (prefix-cache-affinity-filter). Type names,
// parameters, defaults and formulas are upstream's; each is cited in its doc comment as
// file:function of the v0.10.0 source (paths under pkg/epp/framework/plugins/). The code is
// eppkit's own.
//
// Differences from upstream, all [eppkit]:
//   - Input tokens come from the reference's estimate (prefix.Input.EstimateTokens, SPEC §4.1:
//     4 characters per token, one per CJK character, one per token id) instead of upstream's
//     token-producer (whose estimate backend counts bytes ÷ 4): no tokenizer is needed.
//   - In-flight load reaches the scorers as a PrepareData attribute (a snapshot per request)
//     instead of upstream's dynamic endpoint attribute; both read the counters when the request
//     is scheduled.
//   - An entry is released at ResponseComplete, which the reference runs for every request
//     however it ends (completed, refused, abandoned), instead of upstream's plugin-state
//     eviction bound to the ext_proc stream's context. No cross-replica sync
//     (syncCrossReplicaState is accepted and has no effect: the reference runs one replica).
//   - Randomness (the filter's exploration) is seeded from the handle, never a global source.
//   - The estimated output is not capped by the request's max_tokens (the reference's parsed body
//     does not carry it); maxEstimatedOutputTokens caps it.
package tokenload

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

// Plugin types (upstream's names).
const (
	ProducerType        = "inflight-load-producer"
	TokenLoadScorerType = "token-load-scorer"
	ActiveRequestType   = "active-request-scorer"
	AffinityFilterType  = "prefix-cache-affinity-filter"
)

// Data keys. A producer instance named other than its type writes (and a consumer with
// inFlightLoadProducerName set reads) "<key>/<name>", as upstream keys data by producer name
// (interface/plugin/datakey.go DataKey.WithNonEmptyProducerName).
const (
	InFlightLoadKey          = "InFlightLoad"
	UncachedRequestTokensKey = "UncachedRequestTokens"
)

// KeyFor returns key for the producer instance name ("" or ProducerType: the default producer).
func KeyFor(key, producerName string) string {
	if producerName == "" || producerName == ProducerType {
		return key
	}
	return key + "/" + producerName
}

// InFlightLoad is an endpoint's in-flight load as the EPP accounts it: requests it sent there and
// has not seen finish, and their tokens not yet released (upstream
// datalayer/attribute/concurrency InFlightLoad).
type InFlightLoad struct {
	Tokens   int64
	Requests int64
}

// UncachedRequestTokens is the current request's cost on an endpoint: its prompt tokens that
// endpoint would have to compute (not in its prefix cache), plus estimated output tokens when
// the producer adds them (upstream UncachedRequestTokens).
type UncachedRequestTokens struct {
	Tokens int64
}

// DefaultOutputRatio is the estimated output ÷ input tokens (upstream
// dataproducer/inflightload/token_estimator.go DefaultOutputRatio).
const DefaultOutputRatio = 1.5

// ProducerParameters are inflight-load-producer's parameters (upstream
// dataproducer/inflightload/producer.go Config).
type ProducerParameters struct {
	// AddEstimatedOutputTokens adds round(input × OutputRatio) output tokens (capped) to each
	// request's in-flight tokens, released at the end of the response instead of at its first
	// chunk (default false).
	AddEstimatedOutputTokens bool `json:"addEstimatedOutputTokens"`
	// OutputRatio (≥ 0, default 1.5) and MaxEstimatedOutputTokens (≥ 0, nil = no cap).
	OutputRatio              *float64 `json:"outputRatio,omitempty"`
	MaxEstimatedOutputTokens *int64   `json:"maxEstimatedOutputTokens,omitempty"`
	// PrefixMatchInfoProducerName selects the prefix producer; the reference has one
	// (approx-prefix-cache-producer), so only "" and that name are accepted.
	PrefixMatchInfoProducerName string `json:"prefixMatchInfoProducerName,omitempty"`
	// SyncCrossReplicaState is accepted for upstream configs and has no effect.
	SyncCrossReplicaState *bool `json:"syncCrossReplicaState,omitempty"`
}

// counters are one endpoint's in-flight counters.
type counters struct {
	tokens, requests atomic.Int64
}

// entry is one request's contribution to one endpoint, for one profile: released once.
type entry struct {
	profile  string
	c        *counters
	tokens   atomic.Int64
	requests atomic.Int64
}

func (e *entry) releaseTokens() {
	if t := e.tokens.Swap(0); t != 0 {
		decrementFloor(&e.c.tokens, t)
	}
}

func (e *entry) release() {
	e.releaseTokens()
	if e.requests.Swap(0) != 0 {
		decrementFloor(&e.c.requests, 1)
	}
}

// decrementFloor subtracts delta from v, never below 0 (upstream decrementClamped).
func decrementFloor(v *atomic.Int64, delta int64) {
	for {
		cur := v.Load()
		if cur <= 0 {
			return
		}
		if v.CompareAndSwap(cur, max(cur-delta, 0)) {
			return
		}
	}
}

// requestEntries are a request's entries, and whether its first response chunk was seen.
type requestEntries struct {
	entries []*entry
	started bool
}

// Producer is inflight-load-producer (upstream dataproducer/inflightload/producer.go
// InFlightLoadProducer): PrepareData writes InFlightLoad and UncachedRequestTokens on every
// candidate; PreRequest adds the request to the first target of every profile; the response
// releases it.
type Producer struct {
	typedName  framework.TypedName
	params     ProducerParameters
	ratio      float64
	loadKey    string
	uncached   string
	mu         sync.RWMutex
	byEndpoint map[string]*counters
	reqMu      sync.Mutex
	byRequest  map[string]*requestEntries
}

var (
	_ framework.PrepareDataPlugin      = (*Producer)(nil)
	_ framework.DataConsumer           = (*Producer)(nil)
	_ framework.PreRequest             = (*Producer)(nil)
	_ framework.ResponseBodyPlugin     = (*Producer)(nil)
	_ framework.ResponseCompletePlugin = (*Producer)(nil)
)

// NewProducer returns an inflight-load-producer. Errors name the field.
func NewProducer(name string, p ProducerParameters) (*Producer, error) {
	ratio := DefaultOutputRatio
	if p.OutputRatio != nil {
		if !(*p.OutputRatio >= 0) || math.IsInf(*p.OutputRatio, 0) {
			return nil, fmt.Errorf("parameters.outputRatio: must be a non-negative number, got %v", *p.OutputRatio)
		}
		ratio = *p.OutputRatio
	}
	if p.MaxEstimatedOutputTokens != nil && *p.MaxEstimatedOutputTokens < 0 {
		return nil, fmt.Errorf("parameters.maxEstimatedOutputTokens: must be non-negative, got %d", *p.MaxEstimatedOutputTokens)
	}
	if err := checkPrefixProducer("prefixMatchInfoProducerName", p.PrefixMatchInfoProducerName); err != nil {
		return nil, err
	}
	tn := typed(ProducerType, name)
	return &Producer{typedName: tn, params: p, ratio: ratio, loadKey: KeyFor(InFlightLoadKey, tn.Name),
		uncached: KeyFor(UncachedRequestTokensKey, tn.Name), byEndpoint: map[string]*counters{}, byRequest: map[string]*requestEntries{}}, nil
}

func checkPrefixProducer(field, name string) error {
	if name != "" && name != prefix.ProducerType {
		return fmt.Errorf("parameters.%s: the reference has one prefix producer (%s), got %q", field, prefix.ProducerType, name)
	}
	return nil
}

func producerFactory(name string, raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	var p ProducerParameters
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return nil, err
	}
	return NewProducer(name, p)
}

// TypedName returns the plugin's type and name.
func (p *Producer) TypedName() framework.TypedName { return p.typedName }

// Produces declares InFlightLoad and UncachedRequestTokens (under this instance's keys).
func (p *Producer) Produces() map[string]any {
	return map[string]any{p.loadKey: (*InFlightLoad)(nil), p.uncached: (*UncachedRequestTokens)(nil)}
}

// Consumes declares PrefixCacheMatchInfo, for the cached-prefix discount (upstream: optional;
// here the DAG orders the prefix producer first and creates it when none is configured, as
// upstream's well-known configs show it auto-created).
func (p *Producer) Consumes() map[string]any {
	return map[string]any{prefix.PrefixCacheMatchInfoKey: (*prefix.PrefixCacheMatchInfo)(nil)}
}

// Load returns endpoint key's in-flight load now.
func (p *Producer) Load(key string) InFlightLoad {
	p.mu.RLock()
	c := p.byEndpoint[key]
	p.mu.RUnlock()
	if c == nil {
		return InFlightLoad{}
	}
	return InFlightLoad{Tokens: c.tokens.Load(), Requests: c.requests.Load()}
}

// PrepareRequestData writes every candidate's InFlightLoad and the request's
// UncachedRequestTokens on it (upstream Produce; Extract's dynamic attribute).
func (p *Producer) PrepareRequestData(_ context.Context, req *framework.LLMRequest, endpoints []*framework.Endpoint) error {
	input := inputTokens(req)
	for _, ep := range endpoints {
		l := p.Load(ep.Key())
		ep.Put(p.loadKey, &l)
		ep.Put(p.uncached, &UncachedRequestTokens{Tokens: p.requestTokens(ep, input)})
	}
	return nil
}

// inputTokens is the request's estimated prompt length (upstream SimpleTokenEstimator.EstimateInput
// reads the tokenized prompt; the reference estimates, SPEC §4.1).
func inputTokens(req *framework.LLMRequest) int64 {
	if req == nil || req.Body == nil {
		return 0
	}
	in, err := prefix.RequestInput(req.Body)
	if err != nil {
		return 0
	}
	return int64(in.EstimateTokens())
}

// requestTokens is upstream estimateRequestTokens: the uncached input on ep, plus the estimated
// output (from the full input) when AddEstimatedOutputTokens is set.
func (p *Producer) requestTokens(ep *framework.Endpoint, input int64) int64 {
	t := UncachedInputTokens(ep, input)
	if p.params.AddEstimatedOutputTokens {
		// The reference's parsed body does not carry max_tokens: only the operator's cap applies.
		t += EstimateOutput(input, p.ratio, nil, p.params.MaxEstimatedOutputTokens)
	}
	return t
}

// UncachedInputTokens is upstream inflightload/producer.go uncachedInputTokens: with ep's
// PrefixCacheMatchInfo, (TotalBlocks − MatchBlocks) × BlockSizeTokens plus the input beyond the
// indexed blocks (max(0, input − TotalBlocks × BlockSizeTokens)); without it, the input. Never
// negative.
func UncachedInputTokens(ep *framework.Endpoint, input int64) int64 {
	info, ok := framework.AttributeAs[*prefix.PrefixCacheMatchInfo](ep, prefix.PrefixCacheMatchInfoKey)
	if !ok || info == nil || info.BlockSizeTokens <= 0 {
		return max(input, 0)
	}
	bs := int64(info.BlockSizeTokens)
	indexed := int64(info.TotalBlocks) * bs
	return max(indexed-int64(info.MatchBlocks)*bs, 0) + max(input-indexed, 0)
}

// EstimateOutput is upstream token_estimator.go SimpleTokenEstimator.EstimateOutput:
// round(input × ratio), at most the client's max tokens and the operator's cap (each when set
// and ≥ 0); 0 for no input.
func EstimateOutput(input int64, ratio float64, clientCap, operatorCap *int64) int64 {
	if input <= 0 {
		return 0
	}
	est := int64(math.Round(float64(input) * ratio))
	if clientCap != nil && *clientCap >= 0 && *clientCap < est {
		est = *clientCap
	}
	if operatorCap != nil && *operatorCap >= 0 && *operatorCap < est {
		est = *operatorCap
	}
	return est
}

func (p *Producer) counters(key string) *counters {
	p.mu.RLock()
	c := p.byEndpoint[key]
	p.mu.RUnlock()
	if c != nil {
		return c
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c = p.byEndpoint[key]; c == nil {
		c = &counters{}
		p.byEndpoint[key] = c
	}
	return c
}

// PreRequest adds the request to the first target of every profile's result: one request and its
// tokens (UncachedRequestTokens on that endpoint) (upstream PreRequest).
func (p *Producer) PreRequest(_ context.Context, req *framework.LLMRequest, result *framework.SchedulingResult) {
	if req == nil || req.RequestID == "" || result == nil {
		return
	}
	input := inputTokens(req)
	var entries []*entry
	for profile, r := range result.ProfileResults {
		if r == nil || len(r.TargetEndpoints) == 0 || r.TargetEndpoints[0] == nil {
			continue
		}
		ep := r.TargetEndpoints[0]
		tokens := p.requestTokens(ep, input)
		c := p.counters(ep.Key())
		c.requests.Add(1)
		c.tokens.Add(tokens)
		e := &entry{profile: profile, c: c}
		e.tokens.Store(tokens)
		e.requests.Store(1)
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return
	}
	p.reqMu.Lock()
	if old := p.byRequest[req.RequestID]; old != nil { // PreRequest twice: release the first
		for _, e := range old.entries {
			e.release()
		}
	}
	p.byRequest[req.RequestID] = &requestEntries{entries: entries}
	p.reqMu.Unlock()
}

// ResponseBody releases at the first chunk (upstream ResponseBody at StartOfStream): without
// estimated output tokens, every entry's tokens (the prompt is prefilled) and the prefill
// profile's entry whole; with them, the prefill profile's entry only.
func (p *Producer) ResponseBody(_ context.Context, req *framework.LLMRequest, resp *framework.Response, _ []byte) {
	id := requestID(req, resp)
	p.reqMu.Lock()
	re := p.byRequest[id]
	first := re != nil && !re.started
	if first {
		re.started = true
	}
	p.reqMu.Unlock()
	if first {
		for _, e := range re.entries {
			switch {
			case e.profile == prefix.PrefillProfileName:
				e.release()
			case !p.params.AddEstimatedOutputTokens:
				e.releaseTokens()
			}
		}
	}
	if resp != nil && resp.EndOfStream {
		p.End(id)
	}
}

// ResponseComplete releases whatever the request still holds: it ran for every request however it
// ended (upstream: PluginState.Delete at EndOfStream, and the janitor).
func (p *Producer) ResponseComplete(_ context.Context, req *framework.LLMRequest, resp *framework.Response) {
	p.End(requestID(req, resp))
}

// End releases every entry of request id (idempotent).
func (p *Producer) End(id string) {
	p.reqMu.Lock()
	re := p.byRequest[id]
	delete(p.byRequest, id)
	p.reqMu.Unlock()
	if re != nil {
		for _, e := range re.entries {
			e.release()
		}
	}
}

// InFlightRequests returns how many requests hold entries (for tests and state dumps).
func (p *Producer) InFlightRequests() int {
	p.reqMu.Lock()
	defer p.reqMu.Unlock()
	return len(p.byRequest)
}

// RemoveEndpoint forgets a departed endpoint's counters (upstream DeleteEndpoint); requests still
// holding entries release into the orphaned counters, never the live ones.
func (p *Producer) RemoveEndpoint(key string) {
	p.mu.Lock()
	delete(p.byEndpoint, key)
	p.mu.Unlock()
}

func requestID(req *framework.LLMRequest, resp *framework.Response) string {
	if req != nil && req.RequestID != "" {
		return req.RequestID
	}
	if resp != nil {
		return resp.RequestID
	}
	return ""
}

func typed(typ, name string) framework.TypedName {
	if name == "" {
		name = typ
	}
	return framework.TypedName{Type: typ, Name: name}
}
