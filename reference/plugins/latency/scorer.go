package latency

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

// Headroom selection strategies of latency-scorer (upstream names).
const (
	// StrategyLeast prefers, in the positive tier, the least headroom that still meets the SLO
	// (bin-packing, keeps the roomiest endpoints free).
	StrategyLeast = "least"
	// StrategyMost prefers the most headroom (largest safety margin).
	StrategyMost = "most"
)

// scoreSteps quantises scores to 1/scoreSteps as upstream does (wMax = 100), so nearly equal
// endpoints tie and the picker's seeded tie-break spreads them.
const scoreSteps = 100

// ScorerParameters are the parameters of latency-scorer (upstream JSON names and defaults).
type ScorerParameters struct {
	// TTFTWeight and TPOTWeight blend the normalised headrooms (defaults 0.8 and 0.2, ≥ 0).
	TTFTWeight float64 `json:"ttftWeight"`
	TPOTWeight float64 `json:"tpotWeight"`
	// HeadroomSelectionStrategy is "least" (default) or "most"; it applies to the positive tier
	// only (the negative tier always prefers the smallest deficit).
	HeadroomSelectionStrategy string `json:"headroomSelectionStrategy"`
	// Composite weights of the fallback used when no candidate has a prediction (predictor down,
	// erroring or not ready): KV free, relative queue, prefix score (defaults 1/1/1, ≥ 0).
	CompositeKVWeight     float64 `json:"compositeKVWeight"`
	CompositeQueueWeight  float64 `json:"compositeQueueWeight"`
	CompositePrefixWeight float64 `json:"compositePrefixWeight"`
}

// DefaultScorerParameters returns the upstream defaults.
func DefaultScorerParameters() ScorerParameters {
	return ScorerParameters{TTFTWeight: 0.8, TPOTWeight: 0.2, HeadroomSelectionStrategy: StrategyLeast,
		CompositeKVWeight: 1, CompositeQueueWeight: 1, CompositePrefixWeight: 1}
}

// Validate returns an error naming the first invalid field.
func (p ScorerParameters) Validate() error {
	for _, w := range []struct {
		name string
		v    float64
	}{{"ttftWeight", p.TTFTWeight}, {"tpotWeight", p.TPOTWeight}, {"compositeKVWeight", p.CompositeKVWeight},
		{"compositeQueueWeight", p.CompositeQueueWeight}, {"compositePrefixWeight", p.CompositePrefixWeight}} {
		if !(w.v >= 0) || math.IsInf(w.v, 1) {
			return fmt.Errorf("parameters.%s: must be a finite number >= 0, got %v", w.name, w.v)
		}
	}
	if p.HeadroomSelectionStrategy != StrategyLeast && p.HeadroomSelectionStrategy != StrategyMost {
		return fmt.Errorf("parameters.headroomSelectionStrategy: must be %q or %q, got %q", StrategyLeast, StrategyMost, p.HeadroomSelectionStrategy)
	}
	return nil
}

// Scorer is latency-scorer (SPEC §4.3). With predictions:
//
//   - if any candidate is in the positive tier (both headrooms ≥ 0), only those are scored
//     (others 0): headrooms are min-max normalised within them, blended TTFT 0.8 / TPOT 0.2, and
//     mapped by the strategy (least: less headroom scores higher; most: more scores higher);
//   - otherwise (the negative tier, which includes every request without SLO headers): if some
//     candidates are idle (no request this EPP dispatched is still running there) only they are
//     scored; else the least severe deficit bucket (only TPOT violated, then only TTFT, then
//     both) is scored; within the scored set the smallest blended deficit scores highest — for
//     requests without SLOs that is the lowest predicted latency, TTFT-weighted.
//
// When a dimension has the same value on every scored candidate its weight moves to the other
// (so it does not compress the scores). Scores are quantised to hundredths, like upstream, and
// every scored candidate gets at least 0.01, above the unscored ones.
//
// Without any prediction it returns the composite fallback: (wKV·(1 − KV use) + wQ·(maxQ −
// q)/maxQ + wP·prefix score)/(wKV + wQ + wP), quantised the same way.
type Scorer struct {
	typedName framework.TypedName
	params    ScorerParameters
}

var (
	_ framework.Scorer       = (*Scorer)(nil)
	_ framework.DataConsumer = (*Scorer)(nil)
)

// NewScorer returns the scorer; it fails on invalid parameters.
func NewScorer(name string, params ScorerParameters) (*Scorer, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	return &Scorer{typedName: typed(ScorerType, name), params: params}, nil
}

func scorerFactory(name string, raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	p := DefaultScorerParameters()
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return nil, err
	}
	return NewScorer(name, p)
}

// TypedName returns the plugin's type and name.
func (s *Scorer) TypedName() framework.TypedName { return s.typedName }

// Consumes declares LatencyPredictionInfoKey and prefix.PrefixCacheMatchInfoKey (fallback).
func (s *Scorer) Consumes() map[string]any {
	return map[string]any{
		LatencyPredictionInfoKey:       (*LatencyPredictionInfo)(nil),
		prefix.PrefixCacheMatchInfoKey: (*prefix.PrefixCacheMatchInfo)(nil),
	}
}

type scored struct {
	ep   *framework.Endpoint
	info *LatencyPredictionInfo
}

// Score scores every candidate in [0,1] (see Scorer).
func (s *Scorer) Score(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint) map[string]float64 {
	out := make(map[string]float64, len(endpoints))
	var positive, negative []scored
	for _, ep := range endpoints {
		if ep == nil || ep.Metadata == nil {
			continue
		}
		out[ep.Key()] = 0
		info := predictionOf(ep)
		if info == nil {
			negative = append(negative, scored{ep: ep})
			continue
		}
		if info.TTFTHeadroom >= 0 && info.TPOTHeadroom >= 0 {
			positive = append(positive, scored{ep, info})
		} else {
			negative = append(negative, scored{ep, info})
		}
	}
	if len(positive) == 0 && !anyPredicted(negative) {
		return s.composite(endpoints)
	}
	if len(positive) > 0 {
		s.scoreSet(positive, out, s.params.HeadroomSelectionStrategy)
		return out
	}
	var idle []scored
	for _, d := range negative {
		if d.info != nil && d.info.DispatchedRequests == 0 {
			idle = append(idle, d)
		}
	}
	if len(idle) > 0 {
		s.scoreSet(idle, out, StrategyLeast)
		return out
	}
	var tpotOnly, ttftOnly, both []scored
	for _, d := range negative {
		switch {
		case d.info == nil:
			both = append(both, d)
		case d.info.TTFTHeadroom >= 0:
			tpotOnly = append(tpotOnly, d)
		case d.info.TPOTHeadroom >= 0:
			ttftOnly = append(ttftOnly, d)
		default:
			both = append(both, d)
		}
	}
	for _, bucket := range [][]scored{tpotOnly, ttftOnly, both} {
		if len(bucket) > 0 {
			s.scoreSet(bucket, out, StrategyLeast)
			break
		}
	}
	return out
}

func anyPredicted(ds []scored) bool {
	for _, d := range ds {
		if d.info != nil {
			return true
		}
	}
	return false
}

// scoreSet normalises |headroom| within ds and writes the strategy's scores into out. With
// StrategyLeast the smallest |headroom| (least spare room, or smallest deficit) scores highest.
// A member without a prediction is treated as the worst of the set.
func (s *Scorer) scoreSet(ds []scored, out map[string]float64, strategy string) {
	const eps = 1e-9
	abs := func(d scored) (float64, float64) {
		if d.info == nil {
			return math.Inf(1), math.Inf(1)
		}
		return math.Abs(d.info.TTFTHeadroom), math.Abs(d.info.TPOTHeadroom)
	}
	minT, maxT, minP, maxP := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, d := range ds {
		if d.info == nil {
			continue
		}
		t, p := abs(d)
		minT, maxT, minP, maxP = min(minT, t), max(maxT, t), min(minP, p), max(maxP, p)
	}
	alpha, beta := s.params.TTFTWeight, s.params.TPOTWeight
	if sum := alpha + beta; sum > 0 {
		alpha, beta = alpha/sum, beta/sum
	} else {
		alpha, beta = 1, 0
	}
	rangeT, rangeP := maxT-minT, maxP-minP
	switch {
	case !(rangeT > eps) && rangeP > eps:
		alpha, beta = 0, 1
	case !(rangeP > eps) && rangeT > eps:
		alpha, beta = 1, 0
	}
	for _, d := range ds {
		if d.info == nil {
			out[d.ep.Key()] = 0
			continue
		}
		t, p := abs(d)
		nT, nP := 0.5, 0.5
		if rangeT > eps {
			nT = (t - minT) / rangeT
		}
		if rangeP > eps {
			nP = (p - minP) / rangeP
		}
		combined := alpha*nT + beta*nP
		if strategy != StrategyMost {
			combined = 1 - combined
		}
		// Every scored member gets at least 1/scoreSteps, so it beats the unscored candidates
		// (0) in the picker (upstream: int(c·wMax) + 1).
		out[d.ep.Key()] = min(1, (math.Floor(framework.ClampScore(combined)*scoreSteps)+1)/scoreSteps)
	}
}

// composite is the fallback score without predictions.
func (s *Scorer) composite(endpoints []*framework.Endpoint) map[string]float64 {
	out := make(map[string]float64, len(endpoints))
	wkv, wq, wp := s.params.CompositeKVWeight, s.params.CompositeQueueWeight, s.params.CompositePrefixWeight
	sum := wkv + wq + wp
	if sum <= 0 {
		wkv, wq, wp, sum = 1, 0, 0, 1
	}
	maxQ := 0
	for _, ep := range endpoints {
		if ep != nil && ep.Metrics != nil {
			maxQ = max(maxQ, ep.Metrics.WaitingQueueSize)
		}
	}
	for _, ep := range endpoints {
		if ep == nil || ep.Metadata == nil {
			continue
		}
		m := ep.Metrics
		if m == nil {
			m = &framework.Metrics{}
		}
		relQ := 1.0
		if maxQ > 0 {
			relQ = float64(maxQ-m.WaitingQueueSize) / float64(maxQ)
		}
		kvFree := 1 - framework.ClampScore(m.KVCacheUsage)
		v := (wkv*kvFree + wq*relQ + wp*prefix.MatchScore(ep)) / sum
		out[ep.Key()] = quantise(v)
	}
	return out
}

// quantise rounds v in [0,1] to hundredths (NaN → 0).
func quantise(v float64) float64 {
	v = framework.ClampScore(v)
	return math.Round(v*scoreSteps) / scoreSteps
}
