package predictor

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	upstream "sigs.k8s.io/gateway-api-inference-extension/sidecars/latencypredictorasync"
)

func toUpstreamEntries(es []TrainingEntry) []upstream.TrainingEntry {
	out := make([]upstream.TrainingEntry, len(es))
	for i, e := range es {
		out[i] = upstream.TrainingEntry{KVCachePercentage: e.KVCachePercentage, InputTokenLength: e.InputTokenLength,
			NumRequestWaiting: e.NumRequestWaiting, NumRequestRunning: e.NumRequestRunning,
			NumTokensGenerated: e.NumTokensGenerated, ActualTTFT: e.ActualTTFT, ActualTPOT: e.ActualTPOT,
			PrefixCacheScore: e.PrefixCacheScore, PrefillTokensInFlight: e.PrefillTokensInFlight,
			DecodeTokensInFlight: e.DecodeTokensInFlight, Timestamp: time.Now()}
	}
	return out
}

func toUpstreamRequest(r PredictionRequest) upstream.PredictionRequest {
	return upstream.PredictionRequest{KVCachePercentage: r.KVCachePercentage, InputTokenLength: r.InputTokenLength,
		NumRequestWaiting: r.NumRequestWaiting, NumRequestRunning: r.NumRequestRunning,
		NumTokensGenerated: r.NumTokensGenerated, PrefixCacheScore: r.PrefixCacheScore,
		PrefillTokensInFlight: r.PrefillTokensInFlight, DecodeTokensInFlight: r.DecodeTokensInFlight}
}

// TestUpstreamClientAgainstServer drives eppkit's server with upstream's own Go client
// (sidecars/latencypredictorasync v1.5.0): its background flush trains the model over
// /add_training_data_bulk, PredictBulkStrict goes over HTTP, and Predict computes locally from the
// coefficients it parses off /metrics (model_type bayesian_ridge). With the "client" feature set
// the local predictions must equal the server's; with the "full" set upstream's client ignores
// is_queued, the token-in-flight features and effective_input_tokens, so they differ (the same
// happens against upstream's own training server) — the test records by how much.
func TestUpstreamClientAgainstServer(t *testing.T) {
	const seed = 21
	tests := []struct {
		features  FeatureSet
		wantEqual bool
	}{
		{FeaturesClient, true},
		{FeaturesFull, false},
	}
	for _, tc := range tests {
		t.Run(string(tc.features), func(t *testing.T) {
			ctx := context.Background()
			m, err := NewModel(Config{Features: tc.features, MinSamples: 50, RetrainEvery: 100})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(NewHandler(m, ServerOptions{}))
			defer srv.Close()
			cfg := upstream.DefaultConfig()
			cfg.TrainingURL, cfg.PredictionURLs = srv.URL, []string{srv.URL}
			cfg.FlushInterval, cfg.MetricsRefreshInterval = 20*time.Millisecond, 30*time.Millisecond
			cfg.HTTPTimeout, cfg.CoalesceWindow, cfg.MaxSampleSize = 5*time.Second, 0, 10000
			up := upstream.New(cfg, logr.Discard())
			defer up.Stop(ctx)
			if err := up.Start(ctx); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(seed, 4))
			if err := up.AddTrainingDataBulk(toUpstreamEntries(entries(rng, 400, 0.05))); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(15 * time.Second)
			for !(m.Ready() && up.IsReady() && up.GetCurrentModelType() == ModelTypeBayesianRidge) {
				if time.Now().After(deadline) {
					t.Fatalf("not ready: server %v, upstream client %v (model %q); stats %+v", m.Ready(), up.IsReady(), up.GetCurrentModelType(), m.Stats())
				}
				time.Sleep(10 * time.Millisecond)
			}
			// Let the client's metrics refresh pick up the current coefficients.
			m.Wait()
			want := m.Coefficients()
			for {
				mr, ok := up.GetCachedMetrics()
				if ok && mr.Coefficients != nil && mr.Coefficients.TTFTIntercept == want.TTFTIntercept && mr.Coefficients.TPOTIntercept == want.TPOTIntercept {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("upstream client's cached coefficients %+v never matched the server's %+v", mr, want)
				}
				time.Sleep(10 * time.Millisecond)
			}

			reqs := make([]PredictionRequest, 20)
			ureqs := make([]upstream.PredictionRequest, len(reqs))
			for i := range reqs {
				reqs[i] = randomRequest(rng)
				ureqs[i] = toUpstreamRequest(reqs[i])
			}
			ours, err := m.PredictBulk(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			strict, err := up.PredictBulkStrict(ctx, ureqs)
			if err != nil {
				t.Fatalf("upstream PredictBulkStrict against eppkit: %v", err)
			}
			maxRel := 0.0
			for i := range reqs {
				s := strict.Predictions[i]
				if s.TTFT != ours[i].TTFT || s.TPOT != ours[i].TPOT || s.ModelType != ModelTypeBayesianRidge || s.Quantile != 0.9 {
					t.Fatalf("strict row %d over HTTP = %+v, in process %+v", i, s, ours[i])
				}
				local, err := up.Predict(ctx, ureqs[i])
				if err != nil {
					t.Fatalf("upstream local Predict: %v", err)
				}
				if ours[i].TTFT > 0 {
					maxRel = math.Max(maxRel, math.Abs(local.TTFT-ours[i].TTFT)/ours[i].TTFT)
				}
				if ours[i].TPOT > 0 {
					maxRel = math.Max(maxRel, math.Abs(local.TPOT-ours[i].TPOT)/ours[i].TPOT)
				}
			}
			t.Logf("seed=%d features=%s: upstream local bayesian_ridge predictions vs the server's: max relative difference %.3g over %d rows", seed, tc.features, maxRel, len(reqs))
			if tc.wantEqual && maxRel > 1e-9 {
				t.Errorf("seed=%d: upstream local predictions differ from the server's by up to %.3g (relative)", seed, maxRel)
			}
			if !tc.wantEqual && maxRel < 1e-3 {
				t.Errorf("seed=%d: expected upstream's client to disagree on the full feature set (it ignores features), max diff %.3g", seed, maxRel)
			}
		})
	}
}
