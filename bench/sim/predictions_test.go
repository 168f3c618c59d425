package sim

import (
	"bytes"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/bench"
)

// TestPredictionRows: per endpoint, only completed requests with a prediction count; coverage is
// the share within the prediction, and of the SLO requests predicted to meet their TTFT SLO the
// table counts those that did.
func TestPredictionRows(t *testing.T) {
	eps := []Endpoint{{Name: "fast", Profile: "default"}, {Name: "slow", Profile: "slow"}}
	slo := &bench.SLOs{TTFTMs: 300}
	ok := func(ep string, ttft float64, s *bench.SLOs) bench.Outcome {
		return bench.Outcome{Endpoint: ep, Status: http.StatusOK, OutputTokens: 4, TTFTMs: ttft, SLO: s}
	}
	outs := []bench.Outcome{
		ok("fast", 100, slo), // predicted 200: covered, predicted met, met
		ok("fast", 250, nil), // predicted 200: not covered, no SLO
		ok("fast", 90, slo),  // no prediction: left out
		ok("slow", 400, slo), // predicted 280: predicted met, missed
		ok("slow", 350, slo), // predicted 500: predicted to miss
		{Endpoint: "slow", Status: http.StatusTooManyRequests, Error: "HTTP 429"}, // failed: left out
	}
	pred := []float64{200, 200, math.NaN(), 280, 500, 300}
	got := predictionRows(eps, outs, pred)
	want := []PredictionRow{
		{Endpoint: "fast", Profile: "default", Predicted: 2, MeanPredictedTTFTMs: 200, MeanTTFTMs: 175, MedianRatio: 0.875, Covered: 0.5, SLOPredictedMet: 1, SLOMet: 1},
		{Endpoint: "slow", Profile: "slow", Predicted: 2, MeanPredictedTTFTMs: 390, MeanTTFTMs: 375, MedianRatio: (400.0/280 + 350.0/500) / 2, Covered: 0.5, SLOPredictedMet: 1, SLOMet: 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	var b bytes.Buffer
	PrintPredictions(&b, got)
	if !strings.Contains(b.String(), "predictions vs outcomes") || !strings.Contains(b.String(), "0 (0%)") {
		t.Errorf("table:\n%s", b.String())
	}
	if rows := predictionRows(eps, outs, []float64{math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()}); rows != nil {
		t.Errorf("no predictions: rows %v, want nil (no table)", rows)
	}
}
