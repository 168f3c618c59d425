package profiles_test

import (
	"context"
	"fmt"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/reference/plugins/profiles"
	"github.com/eppkit/eppkit/suites/internal/latencytest"
)

// fallbackConfig has a predicted-latency profile and a default profile under
// latency-fallback-profile-handler with the given extra handler parameters.
func fallbackConfig(handlerParams string) string {
	return latencytest.ConfigHead + fmt.Sprintf(`plugins:
- type: predicted-latency-producer
- type: slo-headroom-tier-filter
- type: latency-scorer
- type: queue-scorer
- type: max-score-picker
- type: latency-fallback-profile-handler
  parameters: {primaryProfile: predicted-latency, fallbackProfile: default%s}
schedulingProfiles:
- name: predicted-latency
  plugins:
  - pluginRef: slo-headroom-tier-filter
  - pluginRef: latency-scorer
- name: default
  plugins:
  - pluginRef: queue-scorer
`, handlerParams)
}

var sloHeaders = map[string]string{latency.HeaderTTFTSLO: "100"}

func primary(ctx context.Context, rt *framework.Runtime, headers map[string]string) string {
	res, err := rt.Schedule(ctx, latencytest.Request("r", "p", headers), latencytest.Endpoints(3))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return res.PrimaryProfileName
}

var _ = ginkgo.Describe("latency-fallback-profile-handler", ginkgo.Label(suiteLabel), func() {
	var (
		pred *latencytest.Predictor
		rt   *framework.Runtime
	)
	build := func(ctx context.Context, params string) {
		pred = latencytest.NewPredictor(latencytest.ByLoad(50, 10, 5, 1))
		var err error
		rt, err = latencytest.Runtime(ctx, fallbackConfig(params), pred, nil, 1)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(rt.ProfileHandler().TypedName().Type).To(gomega.Equal(profiles.LatencyFallbackProfileHandlerType))
	}

	ginkgo.When("the predictor is not ready", func() {
		ginkgo.It("should run the fallback profile", func(ctx context.Context) {
			build(ctx, "")
			pred.SetReady(false)
			gomega.Expect(primary(ctx, rt, sloHeaders)).To(gomega.Equal("default"))
		})
	})

	ginkgo.When("the predictor becomes ready", func() {
		ginkgo.It("should switch to the primary profile, and back while it is not ready again", func(ctx context.Context) {
			build(ctx, "")
			pred.SetReady(false)
			gomega.Expect(primary(ctx, rt, sloHeaders)).To(gomega.Equal("default"))
			pred.SetReady(true)
			gomega.Expect(primary(ctx, rt, sloHeaders)).To(gomega.Equal("predicted-latency"))
			pred.SetReady(false)
			gomega.Expect(primary(ctx, rt, sloHeaders)).To(gomega.Equal("default"))
		})
	})

	ginkgo.When("fallbackWithoutSLO is set and the predictor is ready", func() {
		ginkgo.It("should run the fallback profile for requests without SLO headers and the primary for the others", func(ctx context.Context) {
			build(ctx, ", fallbackWithoutSLO: true")
			gomega.Expect(primary(ctx, rt, nil)).To(gomega.Equal("default"))
			gomega.Expect(primary(ctx, rt, sloHeaders)).To(gomega.Equal("predicted-latency"))
		})
	})

	ginkgo.When("fallbackWithoutSLO is not set and the predictor is ready", func() {
		ginkgo.It("should run the primary profile for requests without SLO headers too", func(ctx context.Context) {
			build(ctx, "")
			gomega.Expect(primary(ctx, rt, nil)).To(gomega.Equal("predicted-latency"))
		})
	})

	ginkgo.When("predictorPlugin names no plugin of the config", func() {
		ginkgo.It("should always run the fallback profile", func(ctx context.Context) {
			build(ctx, ", predictorPlugin: nowhere")
			gomega.Expect(primary(ctx, rt, sloHeaders)).To(gomega.Equal("default"))
		})
	})

	ginkgo.When("the profile it chooses is not configured", func() {
		ginkgo.It("should fail the request with ErrInternal naming both of its profiles", func(ctx context.Context) {
			// No producer: the predictor counts as not ready, so the handler chooses "missing".
			rt, err := latencytest.Runtime(ctx, latencytest.ConfigHead+`plugins:
- type: queue-scorer
- type: latency-fallback-profile-handler
  parameters: {primaryProfile: predicted-latency, fallbackProfile: missing}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
- name: other
  plugins:
  - pluginRef: queue-scorer
`, nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			_, err = rt.Schedule(ctx, latencytest.Request("r", "p", nil), latencytest.Endpoints(2))
			gomega.Expect(err).To(gomega.MatchError(framework.ErrInternal))
			gomega.Expect(err.Error()).To(gomega.And(gomega.ContainSubstring(`"predicted-latency"`), gomega.ContainSubstring(`"missing"`)))
		})
	})

	ginkgo.When("its parameters name the same profile twice", func() {
		ginkgo.It("should refuse the config naming the field", func(ctx context.Context) {
			_, err := latencytest.Runtime(ctx, latencytest.ConfigHead+`plugins:
- type: queue-scorer
- type: latency-fallback-profile-handler
  parameters: {primaryProfile: a, fallbackProfile: a}
`, nil, nil, 1)
			gomega.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("parameters.fallbackProfile")))
		})
	})

	ginkgo.When("a request is handled by the director", func() {
		ginkgo.It("should report the profile that ran as the primary profile (the x-eppkit-profile value)", func(ctx context.Context) {
			build(ctx, "")
			src := &staticSource{eps: []*framework.EndpointMetadata{latencytest.Endpoint(1, framework.Metrics{}).Metadata}}
			d, err := director.New(director.Options{Runtime: rt, Endpoints: src})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			body := []byte(`{"model":"m","prompt":"hello"}`)
			pred.SetReady(false)
			res, err := d.HandleRequest(ctx, &director.Input{Headers: map[string]string{":path": "/v1/completions", latency.HeaderTTFTSLO: "100"}, Body: body})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			d.EndRequest(res.Request)
			gomega.Expect(res.PrimaryProfile).To(gomega.Equal("default"))
			pred.SetReady(true)
			res, err = d.HandleRequest(ctx, &director.Input{Headers: map[string]string{":path": "/v1/completions", latency.HeaderTTFTSLO: "100"}, Body: body})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			d.EndRequest(res.Request)
			gomega.Expect(res.PrimaryProfile).To(gomega.Equal("predicted-latency"))
		})
	})
})

// staticSource is a director.EndpointSource with fixed endpoints and no objectives.
type staticSource struct{ eps []*framework.EndpointMetadata }

func (s *staticSource) Endpoints() []*framework.EndpointMetadata { return s.eps }
func (s *staticSource) Priority(string) (int, bool)              { return 0, false }
