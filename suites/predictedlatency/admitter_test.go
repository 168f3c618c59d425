package predictedlatency_test

import (
	"context"
	"net/http"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/suites/internal/latencytest"
)

var _ = ginkgo.Describe("latency-slo-admitter", ginkgo.Label(suiteLabel), func() {
	a := latency.NewAdmitter("")
	violating := latency.LatencyPredictionInfo{TTFT: 500, TTFTHeadroom: -400, DispatchedRequests: 2}
	busyHot := framework.Metrics{RunningRequests: 4, KVCacheUsage: 0.5}
	sheddable := func(headers map[string]string) *framework.LLMRequest {
		r := latencytest.Request("r", "p", headers)
		r.Priority = -1
		return r
	}
	slo := map[string]string{latency.HeaderTTFTSLO: "100"}

	ginkgo.When("no endpoint meets the SLO, none is idle and none is cold", func() {
		ginkgo.It("should refuse a sheddable request with ErrShed, which the director maps to 429", func(ctx context.Context) {
			eps := []*framework.Endpoint{withInfo(1, violating, busyHot), withInfo(2, violating, busyHot)}
			err := a.AdmitRequest(ctx, sheddable(slo), eps)
			gomega.Expect(err).To(gomega.MatchError(framework.ErrShed))
			gomega.Expect(director.StatusFor(err)).To(gomega.Equal(http.StatusTooManyRequests))
		})

		ginkgo.It("should admit a request with priority ≥ 0", func(ctx context.Context) {
			eps := []*framework.Endpoint{withInfo(1, violating, busyHot)}
			gomega.Expect(a.AdmitRequest(ctx, latencytest.Request("r", "p", slo), eps)).To(gomega.Succeed())
		})

		ginkgo.It("should admit a sheddable request without SLO headers", func(ctx context.Context) {
			eps := []*framework.Endpoint{withInfo(1, violating, busyHot)}
			gomega.Expect(a.AdmitRequest(ctx, sheddable(nil), eps)).To(gomega.Succeed())
		})
	})

	for _, tc := range []struct {
		name string
		ep   func() *framework.Endpoint
	}{
		{"one endpoint meets the SLO", func() *framework.Endpoint {
			return withInfo(3, latency.LatencyPredictionInfo{TTFT: 50, TTFTHeadroom: 50, DispatchedRequests: 2}, busyHot)
		}},
		{"one endpoint is idle (nothing dispatched, nothing running)", func() *framework.Endpoint {
			return withInfo(3, latency.LatencyPredictionInfo{TTFT: 500, TTFTHeadroom: -400}, framework.Metrics{KVCacheUsage: 0.5})
		}},
		{"one endpoint is cold (KV-cache use below 2%)", func() *framework.Endpoint {
			return withInfo(3, violating, framework.Metrics{RunningRequests: 4, KVCacheUsage: 0.01})
		}},
		{"no endpoint has a prediction", func() *framework.Endpoint { return latencytest.Endpoint(3, busyHot) }},
	} {
		ginkgo.When(tc.name, func() {
			ginkgo.It("should admit the sheddable request", func(ctx context.Context) {
				eps := []*framework.Endpoint{tc.ep()}
				if tc.name != "no endpoint has a prediction" {
					eps = append(eps, withInfo(1, violating, busyHot))
				}
				gomega.Expect(a.AdmitRequest(ctx, sheddable(slo), eps)).To(gomega.Succeed())
			})
		})
	}
})
