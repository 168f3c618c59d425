package predictedlatency_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	fakepredictor "github.com/eppkit/eppkit/fakes/predictor"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/reference/predictor"
	"github.com/eppkit/eppkit/suites/internal/latencytest"
)

// sidecarRuntime builds the predicted-latency profile over the reference plugin set (the real
// predictor factory), with the producer pointed at an upstream-compatible predictor at url.
func sidecarRuntime(ctx context.Context, url string, timeoutMs int) *framework.Runtime {
	cfg, err := framework.LoadConfig([]byte(latencytest.ConfigHead + fmt.Sprintf(`prepareData:
  timeoutMs: %d
plugins:
- type: predicted-latency-producer
  parameters: {perEndpointCalibration: false, predictionServerURLs: [%q], trainingServerURL: %q}
- type: slo-headroom-tier-filter
  parameters: {epsilonExploreNeg: 0}
- type: latency-scorer
- type: max-score-picker
schedulingProfiles:
- name: predicted-latency
  plugins:
  - pluginRef: slo-headroom-tier-filter
  - pluginRef: latency-scorer
  - pluginRef: max-score-picker
`, timeoutMs, url, url)))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	rt, err := framework.NewRuntime(cfg, reg, framework.RuntimeOptions{Context: ctx, Seed: 1, Logger: slog.New(slog.DiscardHandler)})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	_, isClient := producerOf(rt).Predictor().(*predictor.Client)
	gomega.Expect(isClient).To(gomega.BeTrue(), "predictionServerURLs must select the HTTP client")
	return rt
}

var _ = ginkgo.Describe("A predictor sidecar over HTTP", ginkgo.Label(suiteLabel), func() {
	var fake *fakepredictor.Server
	ginkgo.BeforeEach(func() {
		var err error
		fake, err = fakepredictor.New(fakepredictor.Behavior{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(fake.Start("127.0.0.1:0")).To(gomega.Succeed())
		ginkgo.DeferCleanup(fake.Close)
		// Same law as compositeAnswers: endpoint 1 (waiting 5) is predicted fastest.
		fake.SetFunc(func(r predictor.PredictionRequest) (float64, float64) {
			switch r.NumRequestWaiting {
			case 5:
				return 20, 5
			case 3:
				return 400, 5
			}
			return 900, 5
		})
	})
	slo := map[string]string{latency.HeaderTTFTSLO: "100"}

	ginkgo.When("the sidecar answers, then goes down, then is killed", func() {
		ginkgo.It("should route by its predictions, then by the composite, and fail no request", func(ctx context.Context) {
			rt := sidecarRuntime(ctx, fake.URL(), 400)
			p := producerOf(rt)
			gomega.Eventually(p.PredictorReady).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(gomega.BeTrue())
			eps := compositeEndpoints()
			gomega.Expect(pick(ctx, rt, latencytest.Request("up", "p", slo), eps)).To(gomega.Equal("10.0.0.1:8000"))

			gomega.Expect(fake.Update(func(b *fakepredictor.Behavior) { b.Down = true })).To(gomega.Succeed())
			for i := 0; i < 10; i++ {
				gomega.Expect(pick(ctx, rt, latencytest.Request(fmt.Sprintf("down%d", i), "p", slo), eps)).To(gomega.Equal("10.0.0.3:8000"), "request %d", i)
			}
			gomega.Expect(fake.Close()).To(gomega.Succeed())
			for i := 0; i < 10; i++ {
				gomega.Expect(pick(ctx, rt, latencytest.Request(fmt.Sprintf("dead%d", i), "p", slo), eps)).To(gomega.Equal("10.0.0.3:8000"), "request %d", i)
			}
		})
	})

	ginkgo.When("the sidecar answers with errors", func() {
		ginkgo.It("should score by the composite and fail no request", func(ctx context.Context) {
			rt := sidecarRuntime(ctx, fake.URL(), 400)
			gomega.Eventually(producerOf(rt).PredictorReady).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(gomega.BeTrue())
			gomega.Expect(fake.Update(func(b *fakepredictor.Behavior) { b.ErrorStatus = 503 })).To(gomega.Succeed())
			for i := 0; i < 10; i++ {
				gomega.Expect(pick(ctx, rt, latencytest.Request(fmt.Sprintf("e%d", i), "p", slo), compositeEndpoints())).To(gomega.Equal("10.0.0.3:8000"))
			}
			gomega.Expect(producerOf(rt).Stats().PredictErrors).To(gomega.BeNumerically(">=", 1))
		})
	})

	ginkgo.When("the sidecar is slower than the PrepareData budget", func() {
		ginkgo.It("should schedule every request within the budget by the composite", func(ctx context.Context) {
			rt := sidecarRuntime(ctx, fake.URL(), 100)
			gomega.Eventually(producerOf(rt).PredictorReady).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(gomega.BeTrue())
			gomega.Expect(fake.Update(func(b *fakepredictor.Behavior) { b.Delay = 3 * time.Second })).To(gomega.Succeed())
			for i := 0; i < 3; i++ {
				start := time.Now()
				gomega.Expect(pick(ctx, rt, latencytest.Request(fmt.Sprintf("s%d", i), "p", slo), compositeEndpoints())).To(gomega.Equal("10.0.0.3:8000"))
				gomega.Expect(time.Since(start)).To(gomega.BeNumerically("<", 2*time.Second), "request %d waited for the slow sidecar", i)
			}
		})
	})

	ginkgo.When("a request completes", func() {
		ginkgo.It("should send its training entry to the sidecar", func(ctx context.Context) {
			rt := sidecarRuntime(ctx, fake.URL(), 400)
			req := latencytest.Request("t", "0123456789abcdef", nil)
			res, err := rt.Schedule(ctx, req, compositeEndpoints())
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			rt.PreRequest(ctx, req, res)
			resp := &framework.Response{RequestID: "t", Headers: map[string]string{"content-type": "application/json"}, EndOfStream: true}
			rt.ResponseHeader(ctx, req, resp)
			rt.ResponseComplete(ctx, req, resp)
			rt.EndRequest(req)
			gomega.Eventually(func() int { return len(fake.TrainingEntries()) }).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(gomega.Equal(1))
			gomega.Expect(fake.TrainingEntries()[0].InputTokenLength).To(gomega.Equal(4))
		})
	})
})
