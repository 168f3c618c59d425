package profiles_test

import (
	"context"
	"net/http"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/profiles"
	"github.com/eppkit/eppkit/suites/internal/latencytest"
)

func target(i int) *framework.ProfileRunResult {
	return &framework.ProfileRunResult{TargetEndpoints: []*framework.Endpoint{latencytest.Endpoint(i, framework.Metrics{})}}
}

var _ = ginkgo.Describe("single-profile-handler", ginkgo.Label(suiteLabel), func() {
	h := profiles.NewSingleProfileHandler("")

	ginkgo.When("no profile produced a result", func() {
		ginkgo.It("should return an error", func(ctx context.Context) {
			_, err := h.ProcessResults(ctx, nil, nil, map[string]*framework.ProfileRunResult{})
			gomega.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("exactly one profile result, got 0")))
		})
	})

	ginkgo.When("two profiles produced results", func() {
		ginkgo.It("should return an error naming both", func(ctx context.Context) {
			_, err := h.ProcessResults(ctx, nil, nil, map[string]*framework.ProfileRunResult{"a": target(1), "b": target(2)})
			gomega.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("got 2 [a b]")))
		})
	})

	ginkgo.When("exactly one profile ran", func() {
		ginkgo.It("should make it the primary profile", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, latencytest.ConfigHead+`plugins:
- type: queue-scorer
schedulingProfiles:
- name: only
  plugins:
  - pluginRef: queue-scorer
`, nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(rt.ProfileHandler().TypedName().Type).To(gomega.Equal(profiles.SingleProfileHandlerType))
			res, err := rt.Schedule(ctx, latencytest.Request("r", "p", nil), latencytest.Endpoints(2))
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(res.PrimaryProfileName).To(gomega.Equal("only"))
		})
	})

	ginkgo.When("the only profile's filters remove every endpoint", func() {
		ginkgo.It("should fail the request with ErrShed (429)", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, latencytest.ConfigHead+"plugins:\n- type: header-based-testing-filter\n", nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			_, err = rt.Schedule(ctx, latencytest.Request("r", "p", nil), latencytest.Endpoints(2))
			gomega.Expect(err).To(gomega.MatchError(framework.ErrShed))
			gomega.Expect(director.StatusFor(err)).To(gomega.Equal(http.StatusTooManyRequests))
		})
	})
})
