package prefix

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/eppkit/eppkit/reference/framework"
)

// Scorer is the prefix-cache-scorer: score = MatchBlocks / TotalBlocks of the endpoint's
// *PrefixCacheMatchInfo, in [0,1]; 0 when TotalBlocks is 0 or the attribute is missing or of
// another type; never NaN (GIE v1.5.0 scheduling/scorer/prefix/plugin.go).
//
// For old configs it accepts the producer's parameters (blockSize, blockSizeTokens, autoTune,
// maxPrefixBlocksToMatch, maxPrefixTokensToMatch, lruCapacityPerServer), validates them as the
// producer does, and hands them to the auto-created producer through
// framework.ProducerParametersCarrier; the runtime logs the deprecation warning (GIE v1.5.0
// config/loader/configloader.go passes the scorer's parameters to the producer it creates).
//
// Parameter prefixMatchInfoProducerName (upstream's) names the producer whose attribute it
// scores: empty (the default) reads PrefixCacheMatchInfoKey, which approx-prefix-cache-producer
// writes whatever its name; a name reads MatchInfoKeyFor(name), which a producer that qualifies
// its key by its name writes (precise-prefix-cache-producer).
type Scorer struct {
	typedName      framework.TypedName
	producerParams json.RawMessage
	key            string
}

// MatchInfoKeyFor is the data key of the PrefixCacheMatchInfo of the producer named name:
// PrefixCacheMatchInfoKey for "" (the approximate producer), else
// "PrefixCacheMatchInfo/<name>".
func MatchInfoKeyFor(name string) string {
	if name == "" {
		return PrefixCacheMatchInfoKey
	}
	return PrefixCacheMatchInfoKey + "/" + name
}

var (
	_ framework.IndexedScorer             = (*Scorer)(nil)
	_ framework.ProducerParametersCarrier = (*Scorer)(nil)
)

// ScorerFactory is the framework.FactoryFunc of prefix-cache-scorer. params, when given, must
// be valid approx-prefix-cache-producer parameters (decoded strictly; errors name the field).
func ScorerFactory(name string, params json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	return NewScorer(name, params)
}

// NewScorer builds a scorer; name "" means ScorerType. producerParams are the deprecated
// producer parameters given to the scorer (nil or empty for none).
func NewScorer(name string, producerParams json.RawMessage) (*Scorer, error) {
	if name == "" {
		name = ScorerType
	}
	s := &Scorer{typedName: framework.TypedName{Type: ScorerType, Name: name}, key: PrefixCacheMatchInfoKey}
	trimmed := bytes.TrimSpace(producerParams)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return s, nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(trimmed, &fields) == nil {
		if raw, ok := fields["prefixMatchInfoProducerName"]; ok {
			var producer string
			if err := json.Unmarshal(raw, &producer); err != nil {
				return nil, fmt.Errorf("parameters.prefixMatchInfoProducerName: want a string: %v", err)
			}
			s.key = MatchInfoKeyFor(producer)
			delete(fields, "prefixMatchInfoProducerName")
			if len(fields) == 0 {
				return s, nil
			}
			trimmed, _ = json.Marshal(fields)
		}
	}
	if _, err := DecodeProducerParameters(trimmed); err != nil {
		return nil, err
	}
	s.producerParams = json.RawMessage(bytes.Clone(trimmed))
	return s, nil
}

// TypedName returns the plugin's type and name.
func (s *Scorer) TypedName() framework.TypedName { return s.typedName }

// Consumes declares PrefixCacheMatchInfoKey with type *PrefixCacheMatchInfo.
func (s *Scorer) Consumes() map[string]any {
	return map[string]any{s.key: (*PrefixCacheMatchInfo)(nil)}
}

// ProducerParameters returns the producer parameters the scorer was configured with, for key
// PrefixCacheMatchInfoKey; nil for other keys or when none were given.
func (s *Scorer) ProducerParameters(key string) json.RawMessage {
	if key != PrefixCacheMatchInfoKey || s.producerParams == nil {
		return nil
	}
	return bytes.Clone(s.producerParams)
}

// Score returns MatchBlocks/TotalBlocks per endpoint key (see Scorer).
func (s *Scorer) Score(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint) map[string]float64 {
	out := make(map[string]float64, len(endpoints))
	for _, ep := range endpoints {
		if ep == nil || ep.Metadata == nil {
			continue
		}
		out[ep.Key()] = MatchScoreOf(ep, s.key)
	}
	return out
}

// ScoreIndexed writes Score's value for endpoints[i] into out[i] (framework.IndexedScorer); an
// endpoint Score leaves out (nil or without metadata) keeps 0.
func (s *Scorer) ScoreIndexed(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint, out []float64) {
	for i, ep := range endpoints {
		if ep == nil || ep.Metadata == nil {
			continue
		}
		out[i] = MatchScoreOf(ep, s.key)
	}
}

// MatchScore is the score of one endpoint: MatchBlocks/TotalBlocks of its *PrefixCacheMatchInfo
// clamped to [0,1], or 0 when the attribute is missing, mistyped, nil or has TotalBlocks ≤ 0.
func MatchScore(ep *framework.Endpoint) float64 { return MatchScoreOf(ep, PrefixCacheMatchInfoKey) }

// MatchScoreOf is MatchScore of the attribute under key.
func MatchScoreOf(ep *framework.Endpoint, key string) float64 {
	info, ok := framework.AttributeAs[*PrefixCacheMatchInfo](ep, key)
	if !ok || info == nil || info.TotalBlocks <= 0 || info.MatchBlocks <= 0 {
		return 0
	}
	v := float64(info.MatchBlocks) / float64(info.TotalBlocks)
	if math.IsNaN(v) {
		return 0
	}
	return min(v, 1)
}
