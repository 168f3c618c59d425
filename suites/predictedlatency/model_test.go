package predictedlatency_test

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/internal/testseed"
	"github.com/eppkit/eppkit/reference/predictor"
)

// law is the synthetic latency law the in-process predictor must learn (ms).
func law(r predictor.PredictionRequest) (ttft, tpot float64) {
	ttft = 25 + 0.3*float64(r.InputTokenLength) + 12*float64(r.NumRequestWaiting) + 4*float64(r.NumRequestRunning) + 30*r.KVCachePercentage
	tpot = 8 + 0.6*float64(r.NumRequestRunning) + 5*r.KVCachePercentage
	return ttft, tpot
}

func features(rng *rand.Rand) predictor.PredictionRequest {
	return predictor.PredictionRequest{
		KVCachePercentage:  rng.Float64() * 0.9,
		InputTokenLength:   50 + rng.IntN(950),
		NumRequestWaiting:  rng.IntN(10),
		NumRequestRunning:  rng.IntN(16),
		NumTokensGenerated: 1,
	}
}

var _ = ginkgo.Describe("The in-process predictor", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("trained on a synthetic linear law with ±2% noise", func() {
		ginkgo.It("should predict held-out requests within 5% MAPE for TTFT and TPOT", func(ctx context.Context) {
			seed := testseed.Seed()
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			m, err := predictor.NewModel(predictor.Config{Objective: predictor.ObjectiveMean, MinSamples: 200, RetrainEvery: 1 << 30, Clock: clk})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(m.Ready()).To(gomega.BeFalse())
			// n = 3000 training samples, 500 held out.
			const nTrain, nTest = 3000, 500
			entries := make([]predictor.TrainingEntry, nTrain)
			for i := range entries {
				f := features(rng)
				ttft, tpot := law(f)
				entries[i] = predictor.TrainingEntry{KVCachePercentage: f.KVCachePercentage, InputTokenLength: f.InputTokenLength,
					NumRequestWaiting: f.NumRequestWaiting, NumRequestRunning: f.NumRequestRunning, NumTokensGenerated: 1,
					ActualTTFT: ttft * (1 + 0.02*(2*rng.Float64()-1)), ActualTPOT: tpot * (1 + 0.02*(2*rng.Float64()-1)), Timestamp: clk.Now()}
			}
			gomega.Expect(m.AddTrainingData(ctx, entries)).To(gomega.Succeed())
			m.Wait()
			gomega.Expect(m.Retrain()).To(gomega.Succeed())
			gomega.Expect(m.Ready()).To(gomega.BeTrue())
			test := make([]predictor.PredictionRequest, nTest)
			for i := range test {
				test[i] = features(rng)
			}
			preds, err := m.PredictBulk(ctx, test)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			var apeT, apeP float64
			for i, r := range test {
				ttft, tpot := law(r)
				apeT += math.Abs(preds[i].TTFT-ttft) / ttft
				apeP += math.Abs(preds[i].TPOT-tpot) / tpot
			}
			mapeT, mapeP := apeT/nTest, apeP/nTest
			gomega.Expect(mapeT).To(gomega.BeNumerically("<", 0.05), "TTFT MAPE %.4f over n=%d held-out requests (bound 5%%); %s", mapeT, nTest, repro(seed))
			gomega.Expect(mapeP).To(gomega.BeNumerically("<", 0.05), "TPOT MAPE %.4f over n=%d held-out requests (bound 5%%); %s", mapeP, nTest, repro(seed))
			ginkgo.GinkgoWriter.Printf("MAPE TTFT %.4f TPOT %.4f (n=%d train, %d held out)\n", mapeT, mapeP, nTrain, nTest)
		})
	})
})
