package latency

import (
	"errors"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/predictor"
)

// newHTTPPredictor builds the HTTP client of the upstream-compatible predictor servers.
func newHTTPPredictor(params ProducerParameters, _ framework.Handle) (predictor.Predictor, error) {
	_ = params
	return nil, errors.New("parameters.predictionServerURLs: the HTTP predictor client is not built yet (reference/predictor has no client)")
}
