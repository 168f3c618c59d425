package tokenload

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/eppkit/eppkit/reference/framework"
)

// DefaultQueueThresholdTokens is token-load-scorer's normalisation (upstream
// scheduling/scorer/tokenload/token_load.go tokenQueueThresholdDefault: 128 requests of 32K).
const DefaultQueueThresholdTokens = 4194304

// TokenLoadParameters are token-load-scorer's parameters (upstream tokenload.Config).
type TokenLoadParameters struct {
	// QueueThresholdTokens normalises the score (≤ 0 = the default 4,194,304).
	QueueThresholdTokens     int64  `json:"queueThresholdTokens"`
	InFlightLoadProducerName string `json:"inFlightLoadProducerName,omitempty"`
}

// TokenLoadScorer is token-load-scorer (upstream scheduling/scorer/tokenload/token_load.go
// TokenLoadScorer.Score): tokens = the endpoint's in-flight tokens + this request's uncached
// tokens there; score 1 when tokens ≤ 0, else 1 − min(tokens, T)/T.
type TokenLoadScorer struct {
	typedName          framework.TypedName
	threshold          float64
	loadKey, uncachedK string
}

var _ framework.DataConsumer = (*TokenLoadScorer)(nil)

// NewTokenLoadScorer returns the scorer.
func NewTokenLoadScorer(name string, p TokenLoadParameters) *TokenLoadScorer {
	if p.QueueThresholdTokens <= 0 {
		p.QueueThresholdTokens = DefaultQueueThresholdTokens
	}
	return &TokenLoadScorer{typedName: typed(TokenLoadScorerType, name), threshold: float64(p.QueueThresholdTokens),
		loadKey: KeyFor(InFlightLoadKey, p.InFlightLoadProducerName), uncachedK: KeyFor(UncachedRequestTokensKey, p.InFlightLoadProducerName)}
}

func tokenLoadFactory(name string, raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	p := TokenLoadParameters{QueueThresholdTokens: DefaultQueueThresholdTokens}
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return nil, err
	}
	return NewTokenLoadScorer(name, p), nil
}

// TypedName returns the plugin's type and name.
func (s *TokenLoadScorer) TypedName() framework.TypedName { return s.typedName }

// Consumes declares InFlightLoad and UncachedRequestTokens.
func (s *TokenLoadScorer) Consumes() map[string]any {
	return map[string]any{s.loadKey: (*InFlightLoad)(nil), s.uncachedK: (*UncachedRequestTokens)(nil)}
}

// Score scores every candidate (see TokenLoadScorer).
func (s *TokenLoadScorer) Score(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint) map[string]float64 {
	out := make(map[string]float64, len(endpoints))
	for _, ep := range endpoints {
		out[ep.Key()] = s.score(ep)
	}
	return out
}

// ScoreIndexed is Score by position (framework.IndexedScorer).
func (s *TokenLoadScorer) ScoreIndexed(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint, out []float64) {
	for i, ep := range endpoints {
		out[i] = s.score(ep)
	}
}

func (s *TokenLoadScorer) score(ep *framework.Endpoint) float64 {
	var tokens int64
	if l, ok := framework.AttributeAs[*InFlightLoad](ep, s.loadKey); ok && l != nil {
		tokens += l.Tokens
	}
	if u, ok := framework.AttributeAs[*UncachedRequestTokens](ep, s.uncachedK); ok && u != nil {
		tokens += u.Tokens
	}
	return TokenLoadScore(tokens, s.threshold)
}

// TokenLoadScore is the formula: 1 for tokens ≤ 0, else 1 − min(tokens, threshold)/threshold.
func TokenLoadScore(tokens int64, threshold float64) float64 {
	if tokens <= 0 {
		return 1
	}
	return 1 - min(float64(tokens), threshold)/threshold
}

// ActiveRequestParameters are active-request-scorer's parameters (upstream
// scheduling/scorer/activerequest/active_request.go Parameters).
type ActiveRequestParameters struct {
	// RequestTimeout is deprecated upstream and ignored (a warning is logged).
	RequestTimeout string `json:"requestTimeout"`
	// IdleThreshold: endpoints with at most this many in-flight requests score 1 (default 0; a
	// negative value is ignored).
	IdleThreshold int `json:"idleThreshold"`
	// MaxBusyScore, in [0,1] (default 1; out of range is ignored with a warning), scales the busy
	// endpoints' scores.
	MaxBusyScore             *float64 `json:"maxBusyScore,omitempty"`
	InFlightLoadProducerName string   `json:"inFlightLoadProducerName,omitempty"`
}

// ActiveRequestScorer is active-request-scorer (upstream active_request.go ActiveRequest.Score):
// count = the endpoint's in-flight requests; count ≤ idleThreshold scores 1, else
// (maxCount − count)/maxCount × maxBusyScore, maxCount over the candidates.
type ActiveRequestScorer struct {
	typedName     framework.TypedName
	idleThreshold int64
	maxBusyScore  float64
	loadKey       string
}

var _ framework.DataConsumer = (*ActiveRequestScorer)(nil)

// NewActiveRequestScorer returns the scorer; logger (may be nil) receives upstream's warnings.
func NewActiveRequestScorer(name string, p ActiveRequestParameters, logger *slog.Logger) *ActiveRequestScorer {
	s := &ActiveRequestScorer{typedName: typed(ActiveRequestType, name), maxBusyScore: 1, loadKey: KeyFor(InFlightLoadKey, p.InFlightLoadProducerName)}
	if p.IdleThreshold >= 0 {
		s.idleThreshold = int64(p.IdleThreshold)
	}
	if p.MaxBusyScore != nil {
		if *p.MaxBusyScore >= 0 && *p.MaxBusyScore <= 1 {
			s.maxBusyScore = *p.MaxBusyScore
		} else if logger != nil {
			logger.Warn("ignoring out-of-range maxBusyScore; using 1.0", "plugin", s.typedName.String(), "provided", *p.MaxBusyScore)
		}
	}
	if p.RequestTimeout != "" && logger != nil {
		logger.Warn("requestTimeout is deprecated and ignored; in-flight requests are tracked by inflight-load-producer",
			"plugin", s.typedName.String(), "requestTimeout", p.RequestTimeout)
	}
	return s
}

func activeRequestFactory(name string, raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	var p ActiveRequestParameters
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return nil, err
	}
	var logger *slog.Logger
	if h != nil {
		logger = h.Logger()
	}
	return NewActiveRequestScorer(name, p, logger), nil
}

// TypedName returns the plugin's type and name.
func (s *ActiveRequestScorer) TypedName() framework.TypedName { return s.typedName }

// Consumes declares InFlightLoad.
func (s *ActiveRequestScorer) Consumes() map[string]any {
	return map[string]any{s.loadKey: (*InFlightLoad)(nil)}
}

// Score scores every candidate (see ActiveRequestScorer).
func (s *ActiveRequestScorer) Score(ctx context.Context, c *framework.CycleState, r *framework.LLMRequest, endpoints []*framework.Endpoint) map[string]float64 {
	scores := make([]float64, len(endpoints))
	s.ScoreIndexed(ctx, c, r, endpoints, scores)
	out := make(map[string]float64, len(endpoints))
	for i, ep := range endpoints {
		out[ep.Key()] = scores[i]
	}
	return out
}

// ScoreIndexed is Score by position (framework.IndexedScorer).
func (s *ActiveRequestScorer) ScoreIndexed(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint, out []float64) {
	counts := make([]int64, len(endpoints))
	var maxCount int64
	for i, ep := range endpoints {
		if l, ok := framework.AttributeAs[*InFlightLoad](ep, s.loadKey); ok && l != nil {
			counts[i] = l.Requests
		}
		maxCount = max(maxCount, counts[i])
	}
	for i, n := range counts {
		out[i] = ActiveRequestScore(n, maxCount, s.idleThreshold, s.maxBusyScore)
	}
}

// ActiveRequestScore is the formula: 1 when count ≤ idle, else (maxCount − count)/maxCount ×
// maxBusyScore.
func ActiveRequestScore(count, maxCount, idle int64, maxBusyScore float64) float64 {
	if count <= idle {
		return 1
	}
	return float64(maxCount-count) / float64(maxCount) * maxBusyScore
}

// checkUnsupported refuses a producer-name override the reference cannot honour.
func checkUnsupported(field, value string) error {
	if value != "" {
		return fmt.Errorf("parameters.%s: the reference has one producer of that data; got %q", field, value)
	}
	return nil
}
