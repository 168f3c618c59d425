package pluginstate_test

import (
	"context"
	"fmt"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/internal/testseed"
)

// runChecks runs every check on a fresh env each and returns the names of the checks that
// failed, with their errors.
func runChecks(ctx context.Context, v variant, m mode, seed int64) (map[string]string, error) {
	failed := map[string]string{}
	for i, c := range checks {
		e, err := newEnv(ctx, v, m, seed+int64(i))
		if err != nil {
			return nil, err
		}
		if err := c.run(e); err != nil {
			failed[c.name] = err.Error()
		}
	}
	return failed, nil
}

var _ = ginkgo.Describe("Per-request plugin state of approx-prefix-cache-producer", ginkgo.Label("pluginstate", "upstream"), func() {
	var (
		seed int64
		ctx  context.Context
	)
	ginkgo.BeforeEach(func() {
		seed = testseed.Seed()
		c, cancel := context.WithCancel(context.Background())
		ginkgo.DeferCleanup(cancel)
		ctx = c
		ginkgo.GinkgoWriter.Printf("%s\n", repro(seed, ginkgo.CurrentSpecReport().LeafNodeText))
	})

	for _, m := range []mode{explicit, autoCreated} {
		ginkgo.When(fmt.Sprintf("the producer is %s and the only profile has no prefix scorer", m), func() {
			for _, c := range checks {
				ginkgo.It(fmt.Sprintf("should hold: %s", c.name), func() {
					e, err := newEnv(ctx, variantReal, m, seed)
					gomega.Expect(err).NotTo(gomega.HaveOccurred())
					gomega.Expect(c.run(e)).To(gomega.Succeed(), repro(seed, ginkgo.CurrentSpecReport().LeafNodeText))
				})
			}
		})
	}

	ginkgo.When("the producer writes its state only in Score (the defect GIE PR #2005 fixed)", ginkgo.Label("eppkit"), func() {
		// What the checks report for the faulty producer when no profile scores with it. "state
		// deleted by PreRequest" holds vacuously: the faulty producer never writes any state.
		wantFailed := []string{
			"state written during PrepareData",
			"PreRequest indexes the pick",
			"abandoned state swept after the TTL",
			"running sweeper removes abandoned state",
			"1,000 concurrent requests leave the store empty and indexed",
		}
		for _, m := range []mode{explicit, autoCreated} {
			ginkgo.It(fmt.Sprintf("should be caught by the same checks when %s without a prefix scorer", m), func() {
				failed, err := runChecks(ctx, variantScoreOnly, m, seed)
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				names := make([]string, 0, len(failed))
				for n := range failed {
					names = append(names, n)
				}
				for n, msg := range failed {
					ginkgo.GinkgoWriter.Printf("faulty producer (%s): %s: %s\n", m, n, msg)
				}
				gomega.Expect(names).To(gomega.ConsistOf(wantFailed), repro(seed, ginkgo.CurrentSpecReport().LeafNodeText))
			})
		}

		ginkgo.It("should index the pick once a profile scores with it (the control fails for the reason it models)", func() {
			e, err := newEnv(ctx, variantScoreOnly, scoredBy, seed)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(checkPreRequestIndexesPick(e)).To(gomega.Succeed(), repro(seed, ginkgo.CurrentSpecReport().LeafNodeText))
			gomega.Expect(checkStateWrittenDuringPrepareData(e)).NotTo(gomega.Succeed())
		})
	})
})
