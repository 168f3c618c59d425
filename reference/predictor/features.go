package predictor

import (
	"fmt"
	"math"
)

// FeatureSet selects the engineered features the linear models use.
type FeatureSet string

const (
	// FeaturesFull is upstream training_server.py's Bayesian-ridge feature set (with token-in-flight
	// features on): TTFT uses is_queued, kv_cache_percentage, input_token_length,
	// num_request_waiting, num_request_running, prefill_tokens_in_flight, decode_tokens_in_flight,
	// prefix_cache_score and effective_input_tokens = (1 − prefix_cache_score)·input_token_length
	// (the uncached prompt tokens); TPOT the first seven and num_tokens_generated.
	FeaturesFull FeatureSet = "full"
	// FeaturesClient is the subset upstream's Go client reads back from /metrics when it predicts
	// locally for model_type bayesian_ridge (sidecars/latencypredictorasync/prediction.go,
	// predictBayesianRidge): TTFT kv_cache_percentage, input_token_length, num_request_waiting,
	// num_request_running, prefix_cache_score; TPOT the first four and num_tokens_generated.
	// With this set an upstream EPP's local predictions equal this server's exactly.
	FeaturesClient FeatureSet = "client"
)

// Feature names as they appear in /metrics ttft_coef{feature="..."} (upstream names).
const (
	fIsQueued       = "is_queued"
	fKV             = "kv_cache_percentage"
	fInput          = "input_token_length"
	fWaiting        = "num_request_waiting"
	fRunning        = "num_request_running"
	fPrefillTIF     = "prefill_tokens_in_flight"
	fDecodeTIF      = "decode_tokens_in_flight"
	fPrefix         = "prefix_cache_score"
	fEffectiveInput = "effective_input_tokens"
	fGenerated      = "num_tokens_generated"
)

// featureSpec is the ordered TTFT and TPOT feature names of a FeatureSet.
type featureSpec struct {
	ttft, tpot []string
}

func (fs FeatureSet) spec() (featureSpec, error) {
	switch fs {
	case FeaturesFull, "":
		return featureSpec{
			ttft: []string{fIsQueued, fKV, fInput, fWaiting, fRunning, fPrefillTIF, fDecodeTIF, fPrefix, fEffectiveInput},
			tpot: []string{fIsQueued, fKV, fInput, fWaiting, fRunning, fPrefillTIF, fDecodeTIF, fGenerated},
		}, nil
	case FeaturesClient:
		return featureSpec{
			ttft: []string{fKV, fInput, fWaiting, fRunning, fPrefix},
			tpot: []string{fKV, fInput, fWaiting, fRunning, fGenerated},
		}, nil
	}
	return featureSpec{}, fmt.Errorf("feature set %q: want %q or %q", string(fs), FeaturesFull, FeaturesClient)
}

// featureValue computes one named feature from the request fields.
func featureValue(name string, r *PredictionRequest) float64 {
	switch name {
	case fIsQueued:
		if r.NumRequestWaiting > 0 {
			return 1
		}
		return 0
	case fKV:
		return r.KVCachePercentage
	case fInput:
		return float64(r.InputTokenLength)
	case fWaiting:
		return float64(r.NumRequestWaiting)
	case fRunning:
		return float64(r.NumRequestRunning)
	case fPrefillTIF:
		return float64(r.PrefillTokensInFlight)
	case fDecodeTIF:
		return float64(r.DecodeTokensInFlight)
	case fPrefix:
		return r.PrefixCacheScore
	case fEffectiveInput:
		return (1 - r.PrefixCacheScore) * float64(r.InputTokenLength)
	case fGenerated:
		return float64(r.NumTokensGenerated)
	}
	return 0
}

func fillFeatures(dst []float64, names []string, r *PredictionRequest) {
	for i, n := range names {
		dst[i] = featureValue(n, r)
	}
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
