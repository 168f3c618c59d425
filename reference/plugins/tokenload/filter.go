package tokenload

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

// TTFT sources of prefix-cache-affinity-filter's load gate (upstream
// scheduling/filter/prefixcacheaffinity/plugin.go TTFTSource).
const (
	// TTFTSourcePrefillThroughput estimates an endpoint's TTFT as its in-flight tokens ÷
	// peakPrefillThroughput (the default).
	TTFTSourcePrefillThroughput = "prefillThroughput"
	// TTFTSourceLatencyPredictor reads the predicted TTFT of predicted-latency-producer.
	TTFTSourceLatencyPredictor = "latencyPredictor"
)

// Defaults of prefix-cache-affinity-filter (upstream prefixcacheaffinity.DefaultConfig;
// peakPrefillThroughput is calibrated there for Qwen 32B on 2× H100, TP 2, vLLM 0.19).
const (
	DefaultAffinityThreshold     = 0.80
	DefaultMaxTTFTPenaltyMs      = 18000
	DefaultPeakPrefillThroughput = 15928
)

// AffinityFilterParameters are prefix-cache-affinity-filter's parameters (upstream
// prefixcacheaffinity.Config).
type AffinityFilterParameters struct {
	// AffinityThreshold: candidates whose prefix score MatchBlocks/TotalBlocks is ≥ it are sticky
	// (default 0.80; ≤ 0 disables the filter; > 1 is an error).
	AffinityThreshold float64 `json:"affinityThreshold"`
	// ExplorationProbability, in [0,1], is the chance of keeping every candidate (default 0).
	ExplorationProbability float64 `json:"explorationProbability"`
	// MaxTTFTPenaltyMs (≥ 0, default 18000; 0 always sticks): when the best sticky candidate's
	// TTFT exceeds the best non-sticky one's by more than this, every candidate is kept.
	MaxTTFTPenaltyMs float64 `json:"maxTTFTPenaltyMs"`
	// TTFTSource is prefillThroughput (default) or latencyPredictor.
	TTFTSource string `json:"ttftSource"`
	// PeakPrefillThroughput (tokens/s, default 15928; > 0 when the gate uses prefillThroughput).
	PeakPrefillThroughput float64 `json:"peakPrefillThroughput"`
	// Producer-name overrides: the reference has one producer of prefix matches and of
	// predictions, so only "" is accepted for those two.
	PrefixMatchInfoProducerName       string `json:"prefixMatchInfoProducerName,omitempty"`
	LatencyPredictionInfoProducerName string `json:"latencyPredictionInfoProducerName,omitempty"`
	InFlightLoadProducerName          string `json:"inFlightLoadProducerName,omitempty"`
}

// DefaultAffinityFilterParameters are upstream's defaults.
func DefaultAffinityFilterParameters() AffinityFilterParameters {
	return AffinityFilterParameters{AffinityThreshold: DefaultAffinityThreshold, MaxTTFTPenaltyMs: DefaultMaxTTFTPenaltyMs,
		TTFTSource: TTFTSourcePrefillThroughput, PeakPrefillThroughput: DefaultPeakPrefillThroughput}
}

// StickinessBreakTokens is τ: with the prefillThroughput source, stickiness breaks when the best
// sticky candidate holds more than τ in-flight tokens beyond the best non-sticky one,
// τ = maxTTFTPenaltyMs × peakPrefillThroughput ÷ 1000 (defaults: 286,704 tokens). 0 when the gate
// is off or uses the predictor.
func (p AffinityFilterParameters) StickinessBreakTokens() float64 {
	if p.TTFTSource != TTFTSourcePrefillThroughput || p.MaxTTFTPenaltyMs <= 0 {
		return 0
	}
	return p.MaxTTFTPenaltyMs * p.PeakPrefillThroughput / 1000
}

// AffinityFilter is prefix-cache-affinity-filter as llm-d-router v0.10.0 has it (upstream
// prefixcacheaffinity/plugin.go Plugin.Filter): with at most one candidate or a threshold ≤ 0,
// every candidate; with probability explorationProbability (seeded), every candidate; otherwise
// the sticky candidates (prefix score ≥ threshold) when there are any, unless the TTFT load gate
// opens: maxTTFTPenaltyMs > 0, some candidate is not sticky, and the best sticky TTFT minus the
// best non-sticky TTFT exceeds maxTTFTPenaltyMs. An endpoint's TTFT is its in-flight tokens ÷
// peakPrefillThroughput × 1000 ms (no InFlightLoad = 0 tokens), or with latencyPredictor its
// predicted TTFT (no prediction = math.MaxFloat64, never the fastest).
type AffinityFilter struct {
	typedName framework.TypedName
	params    AffinityFilterParameters
	loadKey   string
	mu        sync.Mutex
	rnd       *rand.Rand
}

var (
	_ framework.Filter       = (*AffinityFilter)(nil)
	_ framework.DataConsumer = (*AffinityFilter)(nil)
)

// NewAffinityFilter validates p as upstream's Config.validate does and returns the filter; seed
// seeds its exploration. Errors name the field.
func NewAffinityFilter(name string, p AffinityFilterParameters, seed int64) (*AffinityFilter, error) {
	switch {
	case math.IsNaN(p.AffinityThreshold) || p.AffinityThreshold > 1:
		return nil, fmt.Errorf("parameters.affinityThreshold: must be <= 1, got %v", p.AffinityThreshold)
	case !(p.ExplorationProbability >= 0 && p.ExplorationProbability <= 1):
		return nil, fmt.Errorf("parameters.explorationProbability: must be in [0,1], got %v", p.ExplorationProbability)
	case !(p.MaxTTFTPenaltyMs >= 0):
		return nil, fmt.Errorf("parameters.maxTTFTPenaltyMs: must be >= 0, got %v", p.MaxTTFTPenaltyMs)
	case !(p.PeakPrefillThroughput >= 0):
		return nil, fmt.Errorf("parameters.peakPrefillThroughput: must be >= 0, got %v", p.PeakPrefillThroughput)
	case p.TTFTSource != TTFTSourcePrefillThroughput && p.TTFTSource != TTFTSourceLatencyPredictor:
		return nil, fmt.Errorf("parameters.ttftSource: must be %q or %q, got %q", TTFTSourceLatencyPredictor, TTFTSourcePrefillThroughput, p.TTFTSource)
	case p.TTFTSource == TTFTSourcePrefillThroughput && p.MaxTTFTPenaltyMs > 0 && p.PeakPrefillThroughput == 0:
		return nil, fmt.Errorf("parameters.peakPrefillThroughput: must be > 0 when ttftSource is %s", TTFTSourcePrefillThroughput)
	}
	if err := checkPrefixProducer("prefixMatchInfoProducerName", p.PrefixMatchInfoProducerName); err != nil {
		return nil, err
	}
	if err := checkUnsupported("latencyPredictionInfoProducerName", p.LatencyPredictionInfoProducerName); err != nil {
		return nil, err
	}
	tn := typed(AffinityFilterType, name)
	return &AffinityFilter{typedName: tn, params: p, loadKey: KeyFor(InFlightLoadKey, p.InFlightLoadProducerName),
		rnd: rand.New(rand.NewPCG(uint64(seed), xxhash.Sum64String(tn.String())))}, nil
}

func affinityFilterFactory(name string, raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	p := DefaultAffinityFilterParameters()
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return nil, err
	}
	var seed int64
	if h != nil {
		seed = h.Seed()
	}
	return NewAffinityFilter(name, p, seed)
}

// TypedName returns the plugin's type and name.
func (f *AffinityFilter) TypedName() framework.TypedName { return f.typedName }

// Params returns the filter's parameters.
func (f *AffinityFilter) Params() AffinityFilterParameters { return f.params }

// Consumes declares PrefixCacheMatchInfo and, when the gate is on, the TTFT source's data:
// InFlightLoad or LatencyPredictionInfo (upstream Plugin.Consumes).
func (f *AffinityFilter) Consumes() map[string]any {
	out := map[string]any{prefix.PrefixCacheMatchInfoKey: (*prefix.PrefixCacheMatchInfo)(nil)}
	if f.params.MaxTTFTPenaltyMs > 0 {
		if f.params.TTFTSource == TTFTSourceLatencyPredictor {
			out[latency.LatencyPredictionInfoKey] = (*latency.LatencyPredictionInfo)(nil)
		} else {
			out[f.loadKey] = (*InFlightLoad)(nil)
		}
	}
	return out
}

func (f *AffinityFilter) explore() bool {
	if f.params.ExplorationProbability <= 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.Float64() < f.params.ExplorationProbability
}

// Filter keeps the sticky candidates (see AffinityFilter), in input order.
func (f *AffinityFilter) Filter(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint) []*framework.Endpoint {
	if len(endpoints) <= 1 || f.params.AffinityThreshold <= 0 || f.explore() {
		return endpoints
	}
	var sticky, other []*framework.Endpoint
	for _, ep := range endpoints {
		if prefix.MatchScore(ep) >= f.params.AffinityThreshold {
			sticky = append(sticky, ep)
		} else {
			other = append(other, ep)
		}
	}
	if len(sticky) == 0 {
		return endpoints
	}
	if f.params.MaxTTFTPenaltyMs > 0 && len(other) > 0 && f.bestTTFT(sticky)-f.bestTTFT(other) > f.params.MaxTTFTPenaltyMs {
		return endpoints
	}
	return sticky
}

// bestTTFT is the lowest TTFT (ms) among endpoints (upstream Plugin.bestTTFT).
func (f *AffinityFilter) bestTTFT(endpoints []*framework.Endpoint) float64 {
	best := math.MaxFloat64
	for _, ep := range endpoints {
		best = min(best, f.TTFT(ep))
	}
	return best
}

// TTFT is the gate's TTFT of ep in ms (upstream Plugin.endpointTTFT).
func (f *AffinityFilter) TTFT(ep *framework.Endpoint) float64 {
	if f.params.TTFTSource == TTFTSourceLatencyPredictor {
		if info, ok := framework.AttributeAs[*latency.LatencyPredictionInfo](ep, latency.LatencyPredictionInfoKey); ok && info != nil {
			return info.TTFT
		}
		return math.MaxFloat64
	}
	var tokens int64
	if l, ok := framework.AttributeAs[*InFlightLoad](ep, f.loadKey); ok && l != nil {
		tokens = l.Tokens
	}
	return float64(tokens) / f.params.PeakPrefillThroughput * 1000
}
