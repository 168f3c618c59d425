package discovery_test

import (
	"context"
	"sort"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
	"github.com/eppkit/eppkit/reference/discovery"
)

const eventually = 20 * time.Second

// newPool writes a pool named after the spec's namespace and starts the reference discovery on it.
func newPool(ctx context.Context, ns string, addrs []string, objectives map[string]int) (*apiserver.Env, *discovery.InferencePoolSource) {
	env, err := apiserver.NewPool(ctx, controlPlane, apiserver.Options{
		PoolName: "pool", PoolNamespace: ns, Endpoints: addrs, Objectives: objectives,
	})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "write pool and pods")
	src, err := discovery.NewInferencePool(discovery.PoolConfig{RestConfig: controlPlane.RestConfig, Name: "pool", Namespace: ns})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	runCtx, cancel := context.WithCancel(context.Background())
	ginkgo.DeferCleanup(cancel)
	gomega.Expect(src.Start(runCtx)).To(gomega.Succeed())
	gomega.Eventually(src.Synced).WithTimeout(eventually).Should(gomega.BeTrue(), "discovery synced")
	return env, src
}

func keys(src discovery.Source) []string {
	var out []string
	for _, m := range src.Endpoints() {
		out = append(out, m.Key())
	}
	sort.Strings(out)
	return out
}

var _ = ginkgo.Describe("InferencePool discovery from the apiserver endpoint source", ginkgo.Label("apiserver", "discovery"), func() {
	ginkgo.When("the harness writes a pool of three Ready Pods", func() {
		ginkgo.It("should discover exactly the fleet's ip:port addresses", func(ctx context.Context) {
			addrs := []string{"127.0.10.1:8000", "127.0.10.2:8000", "127.0.10.3:8000"}
			_, src := newPool(ctx, "disc-three", addrs, nil)
			gomega.Eventually(func() []string { return keys(src) }).WithTimeout(eventually).
				Should(gomega.BeComparableTo(addrs))
			for _, m := range src.Endpoints() {
				gomega.Expect(m.Namespace).To(gomega.Equal("disc-three"))
				gomega.Expect(m.PodName).To(gomega.Equal(apiserver.PodNameFor("pool", m.Address)))
			}
		}, ginkgo.SpecTimeout(time.Minute))
	})

	ginkgo.When("Pods change while discovery runs (EndpointChurn moves)", func() {
		ginkgo.It("should drop a not-Ready Pod, restore it when Ready, and follow deletions and additions", func(ctx context.Context) {
			addrs := []string{"127.0.10.1:8000", "127.0.10.2:8000", "127.0.10.3:8000"}
			env, src := newPool(ctx, "disc-churn", addrs, nil)
			gomega.Eventually(func() []string { return keys(src) }).WithTimeout(eventually).Should(gomega.BeComparableTo(addrs))

			gomega.Expect(env.SetReady(ctx, "127.0.10.2:8000", false)).To(gomega.Succeed())
			gomega.Eventually(func() []string { return keys(src) }).WithTimeout(eventually).
				Should(gomega.BeComparableTo([]string{"127.0.10.1:8000", "127.0.10.3:8000"}), "not-Ready pod removed")

			gomega.Expect(env.SetReady(ctx, "127.0.10.2:8000", true)).To(gomega.Succeed())
			gomega.Eventually(func() []string { return keys(src) }).WithTimeout(eventually).
				Should(gomega.BeComparableTo(addrs), "Ready again")

			gomega.Expect(env.DeletePod(ctx, "127.0.10.1:8000")).To(gomega.Succeed())
			gomega.Expect(env.AddPod(ctx, "127.0.10.4:8000")).To(gomega.Succeed())
			gomega.Eventually(func() []string { return keys(src) }).WithTimeout(eventually).
				Should(gomega.BeComparableTo([]string{"127.0.10.2:8000", "127.0.10.3:8000", "127.0.10.4:8000"}), "deleted and added")
		}, ginkgo.SpecTimeout(2*time.Minute))
	})

	ginkgo.When("InferenceObjectives reference the pool", func() {
		ginkgo.It("should report their priorities by name, including a later update", func(ctx context.Context) {
			env, src := newPool(ctx, "disc-objectives", []string{"127.0.10.1:8000"}, map[string]int{"critical": 10, "sheddable": -1})
			prio := func(name string) func() int {
				return func() int {
					p, ok := src.Priority(name)
					if !ok {
						return -1000
					}
					return p
				}
			}
			gomega.Eventually(prio("critical")).WithTimeout(eventually).Should(gomega.Equal(10))
			gomega.Eventually(prio("sheddable")).WithTimeout(eventually).Should(gomega.Equal(-1))
			_, ok := src.Priority("unknown")
			gomega.Expect(ok).To(gomega.BeFalse(), "an objective that does not exist has no priority")

			gomega.Expect(env.PutObjective(ctx, "critical", 7)).To(gomega.Succeed())
			gomega.Eventually(prio("critical")).WithTimeout(eventually).Should(gomega.Equal(7))
		}, ginkgo.SpecTimeout(time.Minute))
	})
})
