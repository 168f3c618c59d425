package latency

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

// TierFilterParameters are the parameters of slo-headroom-tier-filter (upstream JSON name).
type TierFilterParameters struct {
	// EpsilonExploreNeg is the probability, in [0,1], of keeping the negative tier instead of
	// the positive one when both exist (default 0.01).
	EpsilonExploreNeg float64 `json:"epsilonExploreNeg"`
}

// TierFilter is slo-headroom-tier-filter (SPEC §4.3): it splits the candidates into the positive
// tier (both headrooms ≥ 0) and the negative tier (any headroom < 0, plus candidates without a
// prediction). When both tiers exist it keeps the positive one, except with probability
// EpsilonExploreNeg, drawn from a seeded source, when it keeps the negative one (exploration,
// so overloaded endpoints keep getting samples). One tier alone is kept as is; without any
// prediction, or with one candidate, every candidate is kept.
type TierFilter struct {
	typedName framework.TypedName
	params    TierFilterParameters
	rnd       *lockedRand
}

var (
	_ framework.Filter       = (*TierFilter)(nil)
	_ framework.DataConsumer = (*TierFilter)(nil)
)

// NewTierFilter returns the filter; seed is the handle's seed. It fails when
// epsilonExploreNeg is outside [0,1].
func NewTierFilter(name string, params TierFilterParameters, seed int64) (*TierFilter, error) {
	if !(params.EpsilonExploreNeg >= 0 && params.EpsilonExploreNeg <= 1) {
		return nil, fmt.Errorf("parameters.epsilonExploreNeg: must be in [0,1], got %v", params.EpsilonExploreNeg)
	}
	tn := typed(TierFilterType, name)
	return &TierFilter{typedName: tn, params: params, rnd: newLockedRand(seed, tn.String())}, nil
}

func tierFilterFactory(name string, raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	p := TierFilterParameters{EpsilonExploreNeg: 0.01}
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return nil, err
	}
	return NewTierFilter(name, p, seedOf(h))
}

// TypedName returns the plugin's type and name.
func (f *TierFilter) TypedName() framework.TypedName { return f.typedName }

// Consumes declares LatencyPredictionInfoKey.
func (f *TierFilter) Consumes() map[string]any {
	return map[string]any{LatencyPredictionInfoKey: (*LatencyPredictionInfo)(nil)}
}

// Filter keeps one tier (see TierFilter), in input order.
func (f *TierFilter) Filter(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint) []*framework.Endpoint {
	if len(endpoints) <= 1 {
		return endpoints
	}
	var positive, negative []*framework.Endpoint
	predicted := false
	for _, ep := range endpoints {
		info := predictionOf(ep)
		if info != nil {
			predicted = true
		}
		if info != nil && info.TTFTHeadroom >= 0 && info.TPOTHeadroom >= 0 {
			positive = append(positive, ep)
		} else {
			negative = append(negative, ep)
		}
	}
	switch {
	case !predicted, len(positive) == 0:
		return endpoints
	case len(negative) == 0:
		return positive
	case f.rnd.float64() < f.params.EpsilonExploreNeg:
		return negative
	}
	return positive
}

// AffinityFilterParameters are the parameters of prefix-cache-affinity-filter (upstream names).
type AffinityFilterParameters struct {
	// AffinityThreshold: candidates whose prefix score (MatchBlocks/TotalBlocks) is ≥ it are
	// "sticky" (default 0.80, ≤ 1; ≤ 0 disables the filter).
	AffinityThreshold float64 `json:"affinityThreshold"`
	// ExplorationProbability, in [0,1], is the chance of keeping every candidate (default 0.01).
	ExplorationProbability float64 `json:"explorationProbability"`
	// MaxTTFTPenaltyMs: when the best sticky candidate's predicted TTFT exceeds the best
	// non-sticky one's by more than this, every candidate is kept (default 5000, ≥ 0; 0 always
	// sticks).
	MaxTTFTPenaltyMs float64 `json:"maxTTFTPenaltyMs"`
}

// AffinityFilter is GIE v1.5.0's prefix-cache-affinity-filter (SPEC §3), kept for the
// predicted-latency suite; the registered type is reference/plugins/tokenload's llm-d-router
// v0.10.0 filter (the same gate with ttftSource: latencyPredictor). It keeps the candidates whose prefix
// score is at least AffinityThreshold; when none passes it keeps all. With probability
// ExplorationProbability (seeded) it keeps all, and it keeps all when stickiness would cost more
// than MaxTTFTPenaltyMs of predicted TTFT.
type AffinityFilter struct {
	typedName framework.TypedName
	params    AffinityFilterParameters
	rnd       *lockedRand
}

var (
	_ framework.Filter       = (*AffinityFilter)(nil)
	_ framework.DataConsumer = (*AffinityFilter)(nil)
)

// NewAffinityFilter returns the filter; seed is the handle's seed. Errors name the field.
func NewAffinityFilter(name string, params AffinityFilterParameters, seed int64) (*AffinityFilter, error) {
	switch {
	case math.IsNaN(params.AffinityThreshold) || params.AffinityThreshold > 1:
		return nil, fmt.Errorf("parameters.affinityThreshold: must be <= 1, got %v", params.AffinityThreshold)
	case !(params.ExplorationProbability >= 0 && params.ExplorationProbability <= 1):
		return nil, fmt.Errorf("parameters.explorationProbability: must be in [0,1], got %v", params.ExplorationProbability)
	case !(params.MaxTTFTPenaltyMs >= 0):
		return nil, fmt.Errorf("parameters.maxTTFTPenaltyMs: must be >= 0, got %v", params.MaxTTFTPenaltyMs)
	}
	tn := typed(AffinityFilterType, name)
	return &AffinityFilter{typedName: tn, params: params, rnd: newLockedRand(seed, tn.String())}, nil
}

// TypedName returns the plugin's type and name.
func (f *AffinityFilter) TypedName() framework.TypedName { return f.typedName }

// Consumes declares prefix.PrefixCacheMatchInfoKey and LatencyPredictionInfoKey.
func (f *AffinityFilter) Consumes() map[string]any {
	return map[string]any{
		prefix.PrefixCacheMatchInfoKey: (*prefix.PrefixCacheMatchInfo)(nil),
		LatencyPredictionInfoKey:       (*LatencyPredictionInfo)(nil),
	}
}

// Filter keeps the sticky candidates (see AffinityFilter), in input order.
func (f *AffinityFilter) Filter(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint) []*framework.Endpoint {
	if len(endpoints) <= 1 || f.params.AffinityThreshold <= 0 {
		return endpoints
	}
	if f.rnd.float64() < f.params.ExplorationProbability {
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
	if f.params.MaxTTFTPenaltyMs > 0 && len(other) > 0 {
		bs, bo := bestTTFT(sticky), bestTTFT(other)
		if !math.IsInf(bs, 1) && !math.IsInf(bo, 1) && bs-bo > f.params.MaxTTFTPenaltyMs {
			return endpoints
		}
	}
	return sticky
}

// bestTTFT is the lowest predicted TTFT among endpoints, +Inf when none has a prediction.
func bestTTFT(endpoints []*framework.Endpoint) float64 {
	best := math.Inf(1)
	for _, ep := range endpoints {
		if info := predictionOf(ep); info != nil {
			best = min(best, info.TTFT)
		}
	}
	return best
}

func seedOf(h framework.Handle) int64 {
	if h == nil {
		return 0
	}
	return h.Seed()
}
