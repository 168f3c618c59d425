package predictedlatency_test

import (
	"context"
	"fmt"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/reference/predictor"
	"github.com/eppkit/eppkit/suites/internal/latencytest"
)

// routing is the predicted-latency profile alone: tier filter (no exploration), latency scorer,
// max-score picker. timeoutMs is the PrepareData budget.
func routing(timeoutMs int) string {
	return latencytest.ConfigHead + fmt.Sprintf(`prepareData:
  timeoutMs: %d
plugins:
- type: predicted-latency-producer
  parameters: {perEndpointCalibration: false}
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
`, timeoutMs)
}

// pick schedules req on fresh copies of eps and returns the primary target's key.
func pick(ctx context.Context, rt *framework.Runtime, req *framework.LLMRequest, eps []*framework.Endpoint) string {
	res, err := rt.Schedule(ctx, req, latencytest.Fresh(eps))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return res.Primary().TargetEndpoints[0].Key()
}

// compositeEndpoints: endpoint 3 has the best composite score (free KV and an empty queue);
// endpoint 1 has the lowest predicted TTFT under answerFor below (waiting 5 → 20 ms).
func compositeEndpoints() []*framework.Endpoint {
	return []*framework.Endpoint{
		latencytest.Endpoint(1, framework.Metrics{WaitingQueueSize: 5, KVCacheUsage: 0.9}),
		latencytest.Endpoint(2, framework.Metrics{WaitingQueueSize: 3, KVCacheUsage: 0.5}),
		latencytest.Endpoint(3, framework.Metrics{WaitingQueueSize: 0, KVCacheUsage: 0.1}),
	}
}

var compositeAnswers = answerFor(map[int]predictor.PredictionResponse{5: {TTFT: 20, TPOT: 5}, 3: {TTFT: 400, TPOT: 5}, 0: {TTFT: 900, TPOT: 5}})

var _ = ginkgo.Describe("Predictor unavailable", ginkgo.Label(suiteLabel), func() {
	var pred *latencytest.Predictor
	ginkgo.BeforeEach(func() { pred = latencytest.NewPredictor(compositeAnswers) })

	ginkgo.It("should route by prediction while the predictor answers (control for the specs below)", func(ctx context.Context) {
		rt, err := latencytest.Runtime(ctx, routing(400), pred, nil, 1)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(pick(ctx, rt, latencytest.Request("r", "p", map[string]string{latency.HeaderTTFTSLO: "100"}), compositeEndpoints())).
			To(gomega.Equal("10.0.0.1:8000"))
	})

	for _, tc := range []struct {
		name   string
		script func(*latencytest.Predictor)
	}{
		{"errors", func(p *latencytest.Predictor) { p.SetFail(true) }},
		{"is not ready", func(p *latencytest.Predictor) { p.SetReady(false) }},
		{"does not answer within the PrepareData budget", func(p *latencytest.Predictor) { p.SetBlock(true) }},
	} {
		ginkgo.When("the predictor "+tc.name, func() {
			ginkgo.It("should fall back to the composite of KV, queue and prefix, and fail no request", func(ctx context.Context) {
				tc.script(pred)
				rt, err := latencytest.Runtime(ctx, routing(50), pred, nil, 1)
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				eps := compositeEndpoints()
				for i := 0; i < 20; i++ {
					req := latencytest.Request(fmt.Sprintf("r%d", i), "prompt", map[string]string{latency.HeaderTTFTSLO: "100"})
					gomega.Expect(pick(ctx, rt, req, eps)).To(gomega.Equal("10.0.0.3:8000"), "request %d", i)
				}
			})
		})
	}

	ginkgo.When("the config has a producer without any predictor", func() {
		ginkgo.It("should schedule every request by the composite", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, routing(400), nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(pick(ctx, rt, latencytest.Request("r", "p", nil), compositeEndpoints())).To(gomega.Equal("10.0.0.3:8000"))
			gomega.Expect(producerOf(rt).PredictorReady()).To(gomega.BeFalse())
		})
	})
})

var _ = ginkgo.Describe("Requests without SLO headers", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("no endpoint has a request this EPP dispatched", func() {
		ginkgo.It("should go to the endpoint with the lowest predicted latency", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, routing(400), latencytest.NewPredictor(compositeAnswers), nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			// All three are idle: the idle set is scored by deficit = predicted latency.
			gomega.Expect(pick(ctx, rt, latencytest.Request("r", "p", nil), compositeEndpoints())).To(gomega.Equal("10.0.0.1:8000"))
		})
	})

	ginkgo.When("the fastest endpoints are busy with dispatched requests", func() {
		ginkgo.It("should go to an idle endpoint first, then to the lowest predicted latency once none is idle", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, routing(400), latencytest.NewPredictor(compositeAnswers), nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			eps := compositeEndpoints()
			var got []string
			for i := 0; i < 4; i++ {
				req := latencytest.Request(fmt.Sprintf("r%d", i), "p", nil)
				res, err := rt.Schedule(ctx, req, latencytest.Fresh(eps))
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				rt.PreRequest(ctx, req, res) // dispatched, never completed: the endpoint stays busy
				got = append(got, res.Primary().TargetEndpoints[0].Key())
			}
			// 1 (fastest, idle) → 2 (idle, faster than 3) → 3 (last idle) → 1 (none idle: lowest prediction).
			gomega.Expect(got).To(gomega.Equal([]string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.1:8000"}))
		})
	})
})

var _ = ginkgo.Describe("The PrepareData DAG", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("the config lists the prefix producer", func() {
		ginkgo.It("should have an edge from predicted-latency-producer to approx-prefix-cache-producer and run the prefix producer first", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, latencytest.ConfigHead+`plugins:
- type: predicted-latency-producer
- type: approx-prefix-cache-producer
- type: latency-scorer
`, latencytest.NewPredictor(compositeAnswers), nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			nodes := rt.DAG()
			var deps []framework.TypedName
			for _, n := range nodes {
				if n.Plugin.Type == latency.ProducerType {
					deps = n.DependsOn
				}
			}
			gomega.Expect(deps).To(gomega.ContainElement(framework.TypedName{Type: prefix.ProducerType, Name: prefix.ProducerType}),
				"DAG nodes %+v", nodes)
			layers := rt.PrepareDataLayers()
			gomega.Expect(layers).To(gomega.HaveLen(2))
			gomega.Expect(layers[0][0].Type).To(gomega.Equal(prefix.ProducerType))
			gomega.Expect(layers[1][0].Type).To(gomega.Equal(latency.ProducerType))
		})
	})

	ginkgo.When("the config has no prefix producer", func() {
		ginkgo.It("should create the default approx-prefix-cache-producer for the latency producer", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, latencytest.ConfigHead+"plugins:\n- type: predicted-latency-producer\n- type: max-score-picker\n",
				latencytest.NewPredictor(compositeAnswers), nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(rt.AutoCreated()).To(gomega.ContainElement(framework.TypedName{Type: prefix.ProducerType, Name: prefix.ProducerType}))
		})
	})

	ginkgo.When("the config has only the latency scorer", func() {
		ginkgo.It("should create the latency producer and, for it, the prefix producer", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, latencytest.ConfigHead+"plugins:\n- type: latency-scorer\n", latencytest.NewPredictor(compositeAnswers), nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(rt.AutoCreated()).To(gomega.ContainElements(
				framework.TypedName{Type: latency.ProducerType, Name: latency.ProducerType},
				framework.TypedName{Type: prefix.ProducerType, Name: prefix.ProducerType}))
		})
	})
})
