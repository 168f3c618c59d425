// Package predictor is the reference EPP's latency predictor (SPEC §4.2): an in-process online
// model of TTFT and TPOT trained from completed requests, an HTTP server with the upstream
// sidecars' API, and an HTTP client for the upstream sidecars.
//
// The wire types are internal/predictorapi's (the fake predictor speaks the same API and may not
// import the reference); the aliases below are their names here.
package predictor

import (
	"context"
	"errors"

	"github.com/eppkit/eppkit/internal/predictorapi"
)

// Wire types of the sidecar API (internal/predictorapi, upstream's JSON field for field).
type (
	PredictionRequest                = predictorapi.PredictionRequest
	PredictionResponse               = predictorapi.PredictionResponse
	BulkPredictionRequest            = predictorapi.BulkPredictionRequest
	BulkPredictionResponse           = predictorapi.BulkPredictionResponse
	BulkPredictionError              = predictorapi.BulkPredictionError
	BulkPredictionResponseWithErrors = predictorapi.BulkPredictionResponseWithErrors
	TrainingEntry                    = predictorapi.TrainingEntry
	BulkTrainingRequest              = predictorapi.BulkTrainingRequest
	ServerStatusResponse             = predictorapi.ServerStatusResponse
	ModelInfo                        = predictorapi.ModelInfo
	ModelCoefficients                = predictorapi.ModelCoefficients
)

// Upstream's names in "model_type", "objective_type" and "pod_type", and the API's limits.
const (
	ModelTypeBayesianRidge = predictorapi.ModelTypeBayesianRidge
	ModelTypeXGBoost       = predictorapi.ModelTypeXGBoost
	ModelTypeLightGBM      = predictorapi.ModelTypeLightGBM
	ObjectiveQuantile      = predictorapi.ObjectiveQuantile
	ObjectiveMean          = predictorapi.ObjectiveMean
	PodTypeMonolithic      = predictorapi.PodTypeMonolithic
	PodTypePrefill         = predictorapi.PodTypePrefill
	PodTypeDecode          = predictorapi.PodTypeDecode
	MaxBulkRequests        = predictorapi.MaxBulkRequests
	MaxBodyBytes           = predictorapi.MaxBodyBytes
)

// ErrNotReady is returned (wrapped) by a Predictor that cannot answer yet or any more: an
// in-process model still serving its prior is Ready()==false but still answers; an HTTP client
// whose sidecar is unreachable or unready returns an error wrapping ErrNotReady.
var ErrNotReady = errors.New("predictor not ready")

// Predictor is what the predicted-latency plugins use. It is implemented by the in-process Model
// and by the HTTP Client for the upstream sidecars.
type Predictor interface {
	// PredictBulk predicts TTFT and TPOT for each request, returning exactly one response per
	// request in the same order. It fails as a whole (like upstream /predict/bulk/strict): an
	// error means no usable prediction; the caller falls back to its non-predictive scoring.
	PredictBulk(ctx context.Context, reqs []PredictionRequest) ([]PredictionResponse, error)
	// AddTrainingData records completed-request observations. It does not block on training;
	// an error means the entries were refused (bad entries, sidecar down) and were not recorded.
	AddTrainingData(ctx context.Context, entries []TrainingEntry) error
	// Ready reports whether predictions come from a trained model rather than a prior or a
	// fallback. Plugins route by prediction only when Ready is true.
	Ready() bool
}
