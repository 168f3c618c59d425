package profiles_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/profiles"
	"github.com/eppkit/eppkit/suites/internal/latencytest"
)

// disaggConfig: decode prefers prefix hits, prefill prefers the shortest queue; prefillFilter
// optionally puts a filter in the prefill profile (and decodeFilter in decode).
func disaggConfig(nonCached int, decodeFilter, prefillFilter string) string {
	return latencytest.ConfigHead + fmt.Sprintf(`plugins:
- type: approx-prefix-cache-producer
  parameters: {autoTune: false, blockSizeTokens: 16}
- type: prefix-cache-scorer
- type: queue-scorer
- type: header-based-testing-filter
- type: max-score-picker
- type: disagg-profile-handler
  parameters: {nonCachedTokens: %d}
schedulingProfiles:
- name: decode
  plugins:%s
  - pluginRef: prefix-cache-scorer
- name: prefill
  plugins:%s
  - pluginRef: queue-scorer
`, nonCached, decodeFilter, prefillFilter)
}

const emptyingFilter = "\n  - pluginRef: header-based-testing-filter"

// words returns a prompt of n characters.
func prompt(n int) string { return strings.Repeat("abcdefgh", n/8+1)[:n] }

var _ = ginkgo.Describe("disagg-profile-handler", ginkgo.Label(suiteLabel), func() {
	schedule := func(ctx context.Context, rt *framework.Runtime, id string, chars int) *framework.SchedulingResult {
		req := latencytest.Request(id, prompt(chars), nil)
		res, err := rt.Schedule(ctx, req, latencytest.Endpoints(3))
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		rt.PreRequest(ctx, req, res)
		rt.EndRequest(req)
		return res
	}

	ginkgo.When("the uncached prompt is at most nonCachedTokens", func() {
		ginkgo.It("should run decode only, with no prefill header", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, disaggConfig(100, "", ""), nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			res := schedule(ctx, rt, "r", 400) // 100 tokens: not above 100
			gomega.Expect(res.PrimaryProfileName).To(gomega.Equal(profiles.DefaultDecodeProfile))
			gomega.Expect(res.ProfileResults).To(gomega.HaveLen(1))
			gomega.Expect(res.RequestHeaders).To(gomega.BeEmpty())
		})
	})

	ginkgo.When("the uncached prompt exceeds nonCachedTokens", func() {
		ginkgo.It("should run prefill too, keep decode primary and name the prefill pick in x-prefiller-host-port", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, disaggConfig(100, "", ""), nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			res := schedule(ctx, rt, "r", 404) // 101 tokens
			gomega.Expect(res.PrimaryProfileName).To(gomega.Equal(profiles.DefaultDecodeProfile))
			pf := res.ProfileResults[profiles.DefaultPrefillProfile]
			gomega.Expect(pf).NotTo(gomega.BeNil())
			gomega.Expect(res.RequestHeaders).To(gomega.Equal(map[string]string{profiles.PrefillerHostPortHeader: pf.TargetEndpoints[0].Key()}))
		})
	})

	ginkgo.When("the decode pick already caches most of a long prompt", func() {
		ginkgo.It("should skip prefill for the repeat but not for the first request", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, disaggConfig(100, "", ""), nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			first := schedule(ctx, rt, "r1", 4000) // 1000 tokens, nothing cached
			gomega.Expect(first.ProfileResults).To(gomega.HaveKey(profiles.DefaultPrefillProfile))
			// The first request's decode and prefill picks both hold the prefix now, so the
			// repeat's decode pick (prefix-cache-scorer) is one of them.
			again := schedule(ctx, rt, "r2", 4000)
			cached := []string{first.Primary().TargetEndpoints[0].Key(), first.ProfileResults[profiles.DefaultPrefillProfile].TargetEndpoints[0].Key()}
			gomega.Expect(cached).To(gomega.ContainElement(again.Primary().TargetEndpoints[0].Key()))
			gomega.Expect(again.ProfileResults).NotTo(gomega.HaveKey(profiles.DefaultPrefillProfile))
			gomega.Expect(profiles.UncachedTokens(latencytest.Request("x", prompt(4000), nil), again.Primary().TargetEndpoints[0])).
				To(gomega.BeNumerically("<=", 100))
		})
	})

	ginkgo.When("the prefill profile finds no endpoint", func() {
		ginkgo.It("should serve the request decode-only", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, disaggConfig(0, "", emptyingFilter), nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			res := schedule(ctx, rt, "r", 400)
			gomega.Expect(res.ProfileResults).To(gomega.HaveLen(1))
			gomega.Expect(res.RequestHeaders).To(gomega.BeEmpty())
		})
	})

	ginkgo.When("the decode profile finds no endpoint", func() {
		ginkgo.It("should fail the request with 429 and run no prefill", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, disaggConfig(0, emptyingFilter, ""), nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			_, err = rt.Schedule(ctx, latencytest.Request("r", prompt(400), nil), latencytest.Endpoints(3))
			gomega.Expect(err).To(gomega.MatchError(framework.ErrShed))
			gomega.Expect(director.StatusFor(err)).To(gomega.Equal(http.StatusTooManyRequests))
		})
	})

	ginkgo.When("the config has no prefill profile", func() {
		ginkgo.It("should be decode-only", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, latencytest.ConfigHead+`plugins:
- type: queue-scorer
- type: disagg-profile-handler
schedulingProfiles:
- name: decode
  plugins:
  - pluginRef: queue-scorer
`, nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			res := schedule(ctx, rt, "r", 4000)
			gomega.Expect(res.ProfileResults).To(gomega.HaveLen(1))
		})
	})

	ginkgo.When("nonCachedTokens is negative", func() {
		ginkgo.It("should refuse the config naming the field", func(ctx context.Context) {
			_, err := latencytest.Runtime(ctx, disaggConfig(-1, "", ""), nil, nil, 1)
			gomega.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("parameters.nonCachedTokens")))
		})
	})

	ginkgo.When("a request is handled by the director", func() {
		ginkgo.It("should hand the prefill header to the ext_proc layer in the scheduling result", func(ctx context.Context) {
			rt, err := latencytest.Runtime(ctx, disaggConfig(10, "", ""), nil, nil, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			src := &staticSource{}
			for _, e := range latencytest.Endpoints(2) {
				src.eps = append(src.eps, e.Metadata)
			}
			d, err := director.New(director.Options{Runtime: rt, Endpoints: src})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			res, err := d.HandleRequest(ctx, &director.Input{Headers: map[string]string{":path": "/v1/completions"},
				Body: []byte(`{"model":"m","prompt":"` + prompt(400) + `"}`)})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			d.EndRequest(res.Request)
			gomega.Expect(res.PrimaryProfile).To(gomega.Equal("decode"))
			gomega.Expect(res.Scheduling.RequestHeaders).To(gomega.HaveKey(profiles.PrefillerHostPortHeader))
		})
	})
})
