package latency

import (
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/predictor"
)

// newHTTPPredictor builds the HTTP client of upstream-compatible predictor servers
// (reference/predictor.Client): predictions round-robin over parameters.predictionServerURLs,
// training to parameters.trainingServerURL, on the handle's clock.
func newHTTPPredictor(params ProducerParameters, h framework.Handle) (predictor.Predictor, error) {
	cfg := predictor.ClientConfig{PredictionURLs: params.PredictionServerURLs, TrainingURL: params.TrainingServerURL}
	if h != nil && h.Clock() != nil {
		cfg.Clock = h.Clock()
	}
	c, err := predictor.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}
