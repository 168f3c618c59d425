// Package predictorapi is the HTTP API of the upstream latency-predictor sidecars, as wire types:
// the reference EPP's predictor (reference/predictor: its server and its client) and the
// scriptable fake predictor (fakes/predictor) both speak it, and neither may import the other.
//
// The types mirror the upstream Go client (kubernetes-sigs/gateway-api-inference-extension
// v1.5.0, sidecars/latencypredictorasync/types.go) and the Python sidecars
// (latencypredictor/prediction_server.py, latencypredictor/training_server.py) field for field:
// the JSON names are upstream's, so an eppkit server can stand in for a sidecar and the eppkit
// client can talk to a real one.
package predictorapi

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Model types reported in "model_type" (upstream names; see types.go in
// sidecars/latencypredictorasync). eppkit's own model reports ModelTypeBayesianRidge only when it
// really is a linear model whose coefficients are published on /metrics.
const (
	ModelTypeBayesianRidge = "bayesian_ridge"
	ModelTypeXGBoost       = "xgboost"
	ModelTypeLightGBM      = "lightgbm"
)

// Objective types reported in "objective_type" (upstream names).
const (
	ObjectiveQuantile = "quantile"
	ObjectiveMean     = "mean"
)

// Pod types in "pod_type" (upstream: "prefill", "decode", or "" for a monolithic server).
const (
	PodTypeMonolithic = ""
	PodTypePrefill    = "prefill"
	PodTypeDecode     = "decode"
)

// Limits of the HTTP API.
const (
	// MaxBulkRequests is the most rows one bulk prediction may carry (upstream
	// prediction_server.py BulkPredictionRequest max_items).
	MaxBulkRequests = 10000
	// MaxBodyBytes bounds a request body; larger bodies are answered 413.
	MaxBodyBytes = 32 << 20
)

// DefaultQuantile is the quantile the sidecars predict unless configured otherwise (upstream
// LATENCY_QUANTILE_ALPHA's default).
const DefaultQuantile = 0.9

// PredictionRequest is the per-endpoint feature vector of one prediction (upstream
// PredictionRequest). Units: KVCachePercentage is KV-cache use in [0,1] (upstream's name says
// "percentage" but the value is a fraction); InputTokenLength, NumTokensGenerated and the
// in-flight counts are tokens; NumRequestWaiting and NumRequestRunning are requests;
// PrefixCacheScore is the fraction of the prompt's blocks cached on the endpoint, in [0,1].
type PredictionRequest struct {
	KVCachePercentage     float64 `json:"kv_cache_percentage"`
	InputTokenLength      int     `json:"input_token_length"`
	NumRequestWaiting     int     `json:"num_request_waiting"`
	NumRequestRunning     int     `json:"num_request_running"`
	NumTokensGenerated    int     `json:"num_tokens_generated"`
	PrefixCacheScore      float64 `json:"prefix_cache_score"`
	PodType               string  `json:"pod_type,omitempty"`
	PrefillTokensInFlight int64   `json:"prefill_tokens_in_flight"`
	DecodeTokensInFlight  int64   `json:"decode_tokens_in_flight"`
}

// PredictionResponse is one prediction (upstream PredictionResponse). TTFT and TPOT are in ms.
// Quantile is the predicted quantile in (0,1) when ObjectiveType is "quantile" (upstream sends it
// in both objectives). LastModelLoad is when the model answering was last (re)trained or loaded,
// nil before the first model.
type PredictionResponse struct {
	TTFT                 float64    `json:"ttft_ms"`
	TPOT                 float64    `json:"tpot_ms"`
	TTFTUncertainty      float64    `json:"ttft_uncertainty,omitempty"`
	TPOTUncertainty      float64    `json:"tpot_uncertainty,omitempty"`
	TTFTPredictionBounds [2]float64 `json:"ttft_prediction_bounds,omitempty"`
	TPOTPredictionBounds [2]float64 `json:"tpot_prediction_bounds,omitempty"`
	PredictedAt          time.Time  `json:"predicted_at"`
	ModelType            string     `json:"model_type"`
	ObjectiveType        string     `json:"objective_type,omitempty"`
	Quantile             float64    `json:"quantile"`
	LastModelLoad        *time.Time `json:"last_model_load"`
}

// BulkPredictionRequest is the body of POST /predict/bulk and /predict/bulk/strict.
type BulkPredictionRequest struct {
	Requests []PredictionRequest `json:"requests"`
}

// BulkPredictionResponse is the answer of POST /predict/bulk/strict (upstream
// BulkPredictionResponse): one prediction per request, in order, or an error status for all.
type BulkPredictionResponse struct {
	Predictions           []PredictionResponse `json:"predictions"`
	TotalRequests         int                  `json:"total_requests"`
	SuccessfulPredictions int                  `json:"successful_predictions"`
	FailedPredictions     int                  `json:"failed_predictions"`
	ProcessingTimeMs      float64              `json:"processing_time_ms"`
}

// BulkPredictionError names one failed row of POST /predict/bulk (upstream BulkPredictionError).
type BulkPredictionError struct {
	Index   int               `json:"index"`
	Error   string            `json:"error"`
	Request PredictionRequest `json:"request"`
}

// BulkPredictionResponseWithErrors is the answer of POST /predict/bulk (upstream): Predictions[i]
// is null for a failed row i, which is then listed in Errors.
type BulkPredictionResponseWithErrors struct {
	Predictions           []*PredictionResponse `json:"predictions"`
	Errors                []BulkPredictionError `json:"errors"`
	TotalRequests         int                   `json:"total_requests"`
	SuccessfulPredictions int                   `json:"successful_predictions"`
	FailedPredictions     int                   `json:"failed_predictions"`
	ProcessingTimeMs      float64               `json:"processing_time_ms"`
}

// TrainingEntry is one completed request's observation (upstream TrainingEntry): the features at
// dispatch time plus the measured ActualTTFT and ActualTPOT in ms. A zero ActualTTFT or
// ActualTPOT means "not measured" and that target is not trained from the entry (upstream
// training_server.py drops non-positive targets the same way).
type TrainingEntry struct {
	KVCachePercentage     float64   `json:"kv_cache_percentage"`
	InputTokenLength      int       `json:"input_token_length"`
	NumRequestWaiting     int       `json:"num_request_waiting"`
	NumRequestRunning     int       `json:"num_request_running"`
	NumTokensGenerated    int       `json:"num_tokens_generated"`
	ActualTTFT            float64   `json:"actual_ttft_ms"`
	ActualTPOT            float64   `json:"actual_tpot_ms"`
	PrefixCacheScore      float64   `json:"prefix_cache_score"`
	PodType               string    `json:"pod_type,omitempty"`
	PrefillTokensInFlight int64     `json:"prefill_tokens_in_flight"`
	DecodeTokensInFlight  int64     `json:"decode_tokens_in_flight"`
	Timestamp             time.Time `json:"timestamp"`
}

// BulkTrainingRequest is the body of POST /add_training_data_bulk (answered 202).
type BulkTrainingRequest struct {
	Entries []TrainingEntry `json:"entries"`
}

// ServerStatusResponse is the answer of GET /status on a prediction server (upstream).
type ServerStatusResponse struct {
	IsReady           bool            `json:"is_ready"`
	ModelType         string          `json:"model_type"`
	ObjectiveType     string          `json:"objective_type,omitempty"`
	Quantile          float64         `json:"quantile"`
	LastModelLoad     *time.Time      `json:"last_model_load"`
	TrainingServerURL string          `json:"training_server_url"`
	ModelsExist       map[string]bool `json:"models_exist"`
}

// ModelInfo is the answer of GET /model/download/info on a training server (upstream).
type ModelInfo struct {
	ModelType     string          `json:"model_type"`
	ObjectiveType string          `json:"objective_type,omitempty"`
	ModelStatus   map[string]bool `json:"model_status"`
	Quantile      float64         `json:"quantile"`
}

// ModelCoefficients are a linear model's parameters as published on /metrics (upstream parses
// ttft_intercept, ttft_coef{feature="..."} etc. into this shape). TTFT and TPOT are in ms.
type ModelCoefficients struct {
	TTFTIntercept float64            `json:"ttft_intercept"`
	TTFTCoeffs    map[string]float64 `json:"ttft_coefficients"`
	TPOTIntercept float64            `json:"tpot_intercept"`
	TPOTCoeffs    map[string]float64 `json:"tpot_coefficients"`
}

// Validate checks the request the way upstream's pydantic model does (prediction_server.py
// PredictionRequest): kv_cache_percentage and prefix_cache_score in [0,1], counts ≥ 0, pod_type
// "", "prefill" or "decode". The error names the field.
func (r *PredictionRequest) Validate() error {
	return validateFeatures(r.KVCachePercentage, r.PrefixCacheScore, r.InputTokenLength, r.NumRequestWaiting,
		r.NumRequestRunning, r.NumTokensGenerated, r.PrefillTokensInFlight, r.DecodeTokensInFlight, r.PodType)
}

// Validate checks the entry like upstream's training_server.py TrainingEntry: the request
// fields as PredictionRequest.Validate, and actual_ttft_ms, actual_tpot_ms finite and ≥ 0.
func (e *TrainingEntry) Validate() error {
	if err := validateFeatures(e.KVCachePercentage, e.PrefixCacheScore, e.InputTokenLength, e.NumRequestWaiting,
		e.NumRequestRunning, e.NumTokensGenerated, e.PrefillTokensInFlight, e.DecodeTokensInFlight, e.PodType); err != nil {
		return err
	}
	if !finite(e.ActualTTFT) || e.ActualTTFT < 0 {
		return fmt.Errorf("actual_ttft_ms: must be a finite number ≥ 0, got %v", e.ActualTTFT)
	}
	if !finite(e.ActualTPOT) || e.ActualTPOT < 0 {
		return fmt.Errorf("actual_tpot_ms: must be a finite number ≥ 0, got %v", e.ActualTPOT)
	}
	return nil
}

// Request returns the entry's features as a PredictionRequest.
func (e *TrainingEntry) Request() PredictionRequest {
	return PredictionRequest{
		KVCachePercentage: e.KVCachePercentage, InputTokenLength: e.InputTokenLength,
		NumRequestWaiting: e.NumRequestWaiting, NumRequestRunning: e.NumRequestRunning,
		NumTokensGenerated: e.NumTokensGenerated, PrefixCacheScore: e.PrefixCacheScore,
		PodType: e.PodType, PrefillTokensInFlight: e.PrefillTokensInFlight,
		DecodeTokensInFlight: e.DecodeTokensInFlight,
	}
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func validateFeatures(kv, prefix float64, input, waiting, running, generated int, prefillTIF, decodeTIF int64, podType string) error {
	switch {
	case !finite(kv) || kv < 0 || kv > 1:
		return fmt.Errorf("kv_cache_percentage: must be in [0,1], got %v", kv)
	case !finite(prefix) || prefix < 0 || prefix > 1:
		return fmt.Errorf("prefix_cache_score: must be in [0,1], got %v", prefix)
	case input < 0:
		return fmt.Errorf("input_token_length: must be ≥ 0, got %d", input)
	case waiting < 0:
		return fmt.Errorf("num_request_waiting: must be ≥ 0, got %d", waiting)
	case running < 0:
		return fmt.Errorf("num_request_running: must be ≥ 0, got %d", running)
	case generated < 0:
		return fmt.Errorf("num_tokens_generated: must be ≥ 0, got %d", generated)
	case prefillTIF < 0:
		return fmt.Errorf("prefill_tokens_in_flight: must be ≥ 0, got %d", prefillTIF)
	case decodeTIF < 0:
		return fmt.Errorf("decode_tokens_in_flight: must be ≥ 0, got %d", decodeTIF)
	}
	switch strings.TrimSpace(podType) {
	case PodTypeMonolithic, PodTypePrefill, PodTypeDecode:
	default:
		return fmt.Errorf("pod_type: must be %q, %q or %q, got %q", PodTypeMonolithic, PodTypePrefill, PodTypeDecode, podType)
	}
	return nil
}
