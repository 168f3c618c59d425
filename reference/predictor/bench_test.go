package predictor

import (
	"context"
	"math/rand/v2"
	"testing"
)

// BenchmarkPredictBulk16 is one scheduling cycle's prediction for 16 candidate endpoints with a
// trained model.
func BenchmarkPredictBulk16(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	m, err := NewModel(Config{MinSamples: 10})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.AddTrainingData(context.Background(), entries(rng, 2000, 0.05)); err != nil {
		b.Fatal(err)
	}
	if err := m.Retrain(); err != nil {
		b.Fatal(err)
	}
	reqs := make([]PredictionRequest, 16)
	for i := range reqs {
		reqs[i] = randomRequest(rng)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.PredictBulk(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRetrain10k is one refit of both targets from 10000 stored samples each (the buckets
// hold up to 400 × 500 per target).
func BenchmarkRetrain10k(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	m, err := NewModel(Config{MinSamples: 10, RetrainEvery: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.AddTrainingData(context.Background(), entries(rng, 10000, 0.05)); err != nil {
		b.Fatal(err)
	}
	m.Wait()
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Retrain(); err != nil {
			b.Fatal(err)
		}
	}
}
