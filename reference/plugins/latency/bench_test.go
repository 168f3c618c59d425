package latency

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/predictor"
)

// benchHandle is the minimal framework.Handle a producer needs.
type benchHandle struct{ ps *framework.PluginState }

func (h benchHandle) Context() context.Context                 { return nil }
func (h benchHandle) PluginState() *framework.PluginState      { return h.ps }
func (h benchHandle) Plugin(string) (framework.Plugin, bool)   { return nil, false }
func (h benchHandle) Clock() clock.WithTicker                  { return clock.RealClock{} }
func (h benchHandle) Seed() int64                              { return 1 }
func (h benchHandle) Logger() *slog.Logger                     { return slog.New(slog.DiscardHandler) }
func (h benchHandle) Endpoints() []*framework.EndpointMetadata { return nil }

// BenchmarkPrepareDataAndScore measures one request's predicted-latency work on 16 endpoints:
// the producer's PrepareData with the trained in-process model, the tier filter and the scorer.
func BenchmarkPrepareDataAndScore(b *testing.B) {
	m, err := predictor.NewModel(predictor.Config{MinSamples: 20, RetrainEvery: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	var entries []predictor.TrainingEntry
	for i := 0; i < 200; i++ {
		entries = append(entries, predictor.TrainingEntry{KVCachePercentage: float64(i%10) / 10, InputTokenLength: 100 + i,
			NumRequestWaiting: i % 5, NumRequestRunning: i % 7, NumTokensGenerated: 1, ActualTTFT: 50 + float64(i%13), ActualTPOT: 10 + float64(i%3),
			Timestamp: time.Now()})
	}
	if err := m.AddTrainingData(context.Background(), entries); err != nil {
		b.Fatal(err)
	}
	m.Wait()
	if err := m.Retrain(); err != nil {
		b.Fatal(err)
	}
	ps := framework.NewPluginState(nil, 0, 0)
	p, err := NewProducer("", DefaultProducerParameters(), m, benchHandle{ps: ps})
	if err != nil {
		b.Fatal(err)
	}
	tier, _ := NewTierFilter("", TierFilterParameters{EpsilonExploreNeg: 0.01}, 1)
	sc, _ := NewScorer("", DefaultScorerParameters())
	mds := make([]*framework.EndpointMetadata, 16)
	for i := range mds {
		mds[i] = &framework.EndpointMetadata{Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000}
	}
	req := &framework.LLMRequest{RequestID: "r", TargetModel: "m", Headers: map[string]string{HeaderTTFTSLO: "60", HeaderTPOTSLO: "12"},
		Body: &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: string(make([]byte, 2000))}}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		eps := make([]*framework.Endpoint, len(mds))
		for j, md := range mds {
			eps[j] = framework.NewEndpoint(md, &framework.Metrics{WaitingQueueSize: j % 4, RunningRequests: j % 6, KVCacheUsage: float64(j) / 20})
		}
		if err := p.PrepareRequestData(ctx, req, eps); err != nil {
			b.Fatal(err)
		}
		sc.Score(ctx, nil, req, tier.Filter(ctx, nil, req, eps))
		ps.Delete(req.RequestID)
	}
}
