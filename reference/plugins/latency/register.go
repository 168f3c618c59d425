package latency

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/predictor"
)

// Register adds the four plugin types of this package to reg and names predicted-latency-producer
// the default producer of LatencyPredictionInfoKey, so a config with only a latency scorer or
// filter gets one with default parameters (the in-process predictor). newPredictor builds each
// producer's predictor; nil gives producers without a predictor (every request is scored by the
// composite fallback). It returns the first registration error. prefix-cache-affinity-filter is
// registered by reference/plugins/tokenload (llm-d-router v0.10.0's filter, whose
// ttftSource: latencyPredictor is this package's AffinityFilter's gate on predicted TTFT).
func Register(reg *framework.Registry, newPredictor PredictorFactory) error {
	for _, r := range []struct {
		typ string
		f   framework.FactoryFunc
	}{
		{ProducerType, ProducerFactory(newPredictor)},
		{TierFilterType, tierFilterFactory},
		{ScorerType, scorerFactory},
		{AdmitterType, admitterFactory},
	} {
		if err := reg.Register(r.typ, r.f); err != nil {
			return err
		}
	}
	reg.RegisterDefaultProducer(LatencyPredictionInfoKey, ProducerType)
	return nil
}

// ProducerFactory returns the framework.FactoryFunc of predicted-latency-producer, building
// each instance's predictor with newPredictor (nil: no predictor).
func ProducerFactory(newPredictor PredictorFactory) framework.FactoryFunc {
	return func(name string, raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
		params, err := DecodeProducerParameters(raw)
		if err != nil {
			return nil, err
		}
		var pred predictor.Predictor
		if newPredictor != nil {
			if pred, err = newPredictor(params, h); err != nil {
				return nil, fmt.Errorf("predictor: %w", err)
			}
		}
		return NewProducer(name, params, pred, h)
	}
}

// SidecarPredictorFactory returns a factory that gives every producer without its own
// predictionServerURLs the HTTP client of the upstream-compatible predictor at url (prediction
// and training on the same server, as `eppkit predictor` serves both); a producer with URLs of
// its own keeps them. url must be an absolute http(s) URL.
func SidecarPredictorFactory(url string) PredictorFactory {
	return func(params ProducerParameters, h framework.Handle) (predictor.Predictor, error) {
		if !params.UsesHTTP() {
			params.PredictionServerURLs, params.TrainingServerURL = []string{url}, url
		}
		return DefaultPredictorFactory(params, h)
	}
}

// DefaultPredictorFactory builds the predictor the reference EPP uses: the in-process model
// (reference/predictor.Model, tuned by parameters.inProcess, on the handle's clock) unless
// parameters.predictionServerURLs selects upstream-compatible HTTP servers.
func DefaultPredictorFactory(params ProducerParameters, h framework.Handle) (predictor.Predictor, error) {
	if params.UsesHTTP() {
		return newHTTPPredictor(params, h)
	}
	cfg := predictor.Config{
		Objective:    params.InProcess.Objective,
		Quantile:     params.InProcess.Quantile,
		MinSamples:   params.InProcess.MinSamples,
		RetrainEvery: params.InProcess.RetrainEvery,
	}
	if params.InProcess.RetrainIntervalMs > 0 {
		cfg.RetrainInterval = time.Duration(params.InProcess.RetrainIntervalMs) * time.Millisecond
	}
	if h != nil && h.Clock() != nil {
		cfg.Clock = h.Clock()
	}
	m, err := predictor.NewModel(cfg)
	if err != nil {
		return nil, fmt.Errorf("parameters.inProcess: %w", err)
	}
	return m, nil
}
