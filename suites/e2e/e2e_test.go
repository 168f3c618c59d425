package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/eppkit/eppkit/manifests"
	"github.com/eppkit/eppkit/reference/director"
)

var _ = ginkgo.Describe("Cluster objects", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("manifests/k8s is applied", func() {
		ginkgo.It("should run the pool's pods and the EPP Ready, each with its own IP, listed in their EndpointSlices", func(ctx context.Context) {
			pods, ready := poolPods(ctx)
			gomega.Expect(ready).To(gomega.HaveLen(initialReplicas), "Ready fake vLLM pods")
			ips := map[string]bool{}
			var want []string
			for _, p := range pods {
				gomega.Expect(ips).NotTo(gomega.HaveKey(p.Status.PodIP), "pod %s shares its IP", p.Name)
				ips[p.Status.PodIP] = true
				want = append(want, p.Status.PodIP)
			}
			gomega.Eventually(func(g gomega.Gomega) {
				g.Expect(sliceAddresses(ctx, g, manifests.FakeVLLMService)).To(gomega.BeComparableTo(want, cmpopts.SortSlices(func(a, b string) bool { return a < b })))
			}).WithContext(ctx).WithTimeout(discoveryWindow).Should(gomega.Succeed())
			epp := eppPod(ctx)
			gomega.Eventually(func(g gomega.Gomega) {
				g.Expect(sliceAddresses(ctx, g, manifests.EPPService)).To(gomega.Equal([]string{epp.Status.PodIP}))
			}).WithContext(ctx).WithTimeout(discoveryWindow).Should(gomega.Succeed())
		})
	})
})

// sliceAddresses returns the Ready addresses of the Service's EndpointSlices, sorted.
func sliceAddresses(ctx context.Context, g gomega.Gomega, svc string) []string {
	out, err := serviceAddresses(ctx, svc)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	return out
}

var _ = ginkgo.Describe("Routing through the gateway", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("requests carry distinct prompts", func() {
		ginkgo.It("should land every request on a Ready pod of the pool", func(ctx context.Context) {
			const n = 30
			_, ready := poolPods(ctx)
			served, err := sendN(ctx, e.failOpen, uniquePrompt("distinct"), n)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			total := 0
			for pod, c := range served {
				gomega.Expect(ready).To(gomega.HaveKey(pod), "request served by %s, not a Ready pod of the pool %v", pod, keys(ready))
				total += c
			}
			gomega.Expect(total).To(gomega.Equal(n))
		})
	})

	ginkgo.When("requests share a long prefix", func() {
		ginkgo.It("should keep them on one pod (prefix affinity)", func(ctx context.Context) {
			// n = 20 follow-ups after one warm-up; the bound 18 of 20 on the warm-up's pod is far
			// above what a prefix-blind picker over 3 pods gets (expected 6.7, P(≥ 18) < 1e-6).
			const n, bound = 20, 18
			// About 2,000 characters (~600 tokens: the fake's context is 1,024 tokens).
			prefix := strings.Repeat(uniquePrompt("shared prefix")+" lorem ipsum dolor sit amet. ", 20)
			first := send(ctx, e.failOpen, prefix+" warm-up")
			gomega.Expect(first.Status).To(gomega.Equal(http.StatusOK), "body %s", first.Body)
			same := 0
			served := map[string]int{}
			for i := 0; i < n; i++ {
				r := send(ctx, e.failOpen, fmt.Sprintf("%s question %d", prefix, i))
				gomega.Expect(r.Status).To(gomega.Equal(http.StatusOK), "body %s", r.Body)
				served[r.ServedPod]++
				if r.ServedPod == first.ServedPod {
					same++
				}
			}
			gomega.Expect(same).To(gomega.BeNumerically(">=", bound),
				"n=%d requests sharing a %d-character prefix: %d on the warm-up's pod %s (bound ≥ %d); spread %v",
				n, len(prefix), same, first.ServedPod, bound, served)
		})
	})

	ginkgo.When("a pod of the pool turns not-Ready", func() {
		ginkgo.It("should stop routing to it within the discovery window", func(ctx context.Context) {
			pods, ready := poolPods(ctx)
			gomega.Expect(ready).To(gomega.HaveLen(initialReplicas))
			victim := pods[0]
			ginkgo.By("failing the readiness probe of " + victim.Name)
			setHealth(ctx, &victim, http.StatusServiceUnavailable)
			ginkgo.DeferCleanup(func(ctx context.Context) {
				setHealth(ctx, &victim, http.StatusOK)
				gomega.Eventually(func(g gomega.Gomega) {
					_, ready := poolPods(ctx)
					g.Expect(ready).To(gomega.HaveKey(victim.Name))
				}).WithContext(ctx).WithTimeout(discoveryWindow).Should(gomega.Succeed())
			})
			start := time.Now()
			gomega.Eventually(func(g gomega.Gomega) {
				p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, victim.Name, metav1.GetOptions{})
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(podReady(p)).To(gomega.BeFalse(), "pod %s Ready", victim.Name)
			}).WithContext(ctx).WithTimeout(discoveryWindow).WithPolling(100 * time.Millisecond).Should(gomega.Succeed())
			ginkgo.GinkgoWriter.Printf("pod %s not Ready after %s\n", victim.Name, time.Since(start).Round(time.Millisecond))
			ginkgo.By("waiting until a batch of requests avoids it")
			gomega.Eventually(func(g gomega.Gomega) {
				served, err := sendN(ctx, e.failOpen, uniquePrompt("probe"), 6)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(served).NotTo(gomega.HaveKey(victim.Name))
			}).WithContext(ctx).WithTimeout(discoveryWindow).WithPolling(200 * time.Millisecond).Should(gomega.Succeed())
			ginkgo.GinkgoWriter.Printf("traffic left %s %s after its probe failed\n", victim.Name, time.Since(start).Round(time.Millisecond))
			const n = 30
			served, err := sendN(ctx, e.failOpen, uniquePrompt("after"), n)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(served).NotTo(gomega.HaveKey(victim.Name), "n=%d requests after the pod left the pool: %v", n, served)
		})
	})

	ginkgo.When("the fake vLLM Deployment is scaled 3 → 5 → 2", func() {
		ginkgo.It("should spread traffic over the new pods and drop the removed ones", func(ctx context.Context) {
			ginkgo.DeferCleanup(func(ctx context.Context) { scale(ctx, manifests.FakeVLLMDeployment, initialReplicas) })
			scale(ctx, manifests.FakeVLLMDeployment, 5)
			// n = 50 distinct prompts over 5 idle pods: a uniform picker leaves some pod without a
			// request with probability 5·0.8^50 ≈ 7e-5; the reference's KV-cache and queue scorers
			// spread even more evenly.
			gomega.Eventually(func(g gomega.Gomega) {
				_, ready := poolPods(ctx)
				g.Expect(ready).To(gomega.HaveLen(5))
				served, err := sendN(ctx, e.failOpen, uniquePrompt("five"), 50)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(keys(served)).To(gomega.ConsistOf(keys(ready)), "pods served (n=50) vs Ready pods; spread %v", served)
			}).WithContext(ctx).WithTimeout(discoveryWindow).WithPolling(time.Second).Should(gomega.Succeed())

			scale(ctx, manifests.FakeVLLMDeployment, 2)
			gomega.Eventually(func(g gomega.Gomega) {
				_, ready := poolPods(ctx)
				g.Expect(ready).To(gomega.HaveLen(2))
				served, err := sendN(ctx, e.failOpen, uniquePrompt("two"), 20)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				for pod := range served {
					g.Expect(ready).To(gomega.HaveKey(pod), "request served by %s after the scale-down; Ready: %v", pod, keys(ready))
				}
			}).WithContext(ctx).WithTimeout(discoveryWindow).WithPolling(time.Second).Should(gomega.Succeed())
		})
	})
})

var _ = ginkgo.Describe("EPP unavailable", ginkgo.Label(suiteLabel), func() {
	// expectFailOpenAndClose checks both pools once the EPP has no Ready endpoint.
	expectFailOpen := func(ctx context.Context) {
		const n = 10
		_, ready := poolPods(ctx)
		for i := 0; i < n; i++ {
			r := send(ctx, e.failOpen, uniquePrompt(fmt.Sprintf("fail-open %d", i)))
			gomega.Expect(r.Status).To(gomega.Equal(http.StatusOK), "FailOpen pool, request %d: body %s", i, r.Body)
			gomega.Expect(r.FailedOpen).To(gomega.BeTrue(), "request %d bypassed the EPP", i)
			gomega.Expect(ready).To(gomega.HaveKey(r.ServedPod))
		}
	}
	expectFailClose := func(ctx context.Context) {
		const n = 5
		for i := 0; i < n; i++ {
			r := send(ctx, e.failClose, uniquePrompt(fmt.Sprintf("fail-close %d", i)))
			gomega.Expect(r.Status).To(gomega.BeNumerically(">=", 500), "FailClose pool, request %d: HTTP %d %s", i, r.Status, r.Body)
		}
	}
	waitNoEPP := func(ctx context.Context) {
		gomega.Eventually(func(g gomega.Gomega) {
			for _, gw := range []gatewayClient{e.failOpen, e.failClose} {
				resolved, err := gw.EPPResolved(ctx)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(resolved).To(gomega.BeFalse(), "%s: EPP endpoint still resolved", gw)
			}
		}).WithContext(ctx).WithTimeout(discoveryWindow).Should(gomega.Succeed())
	}
	// waitEPPServing waits until both pools are served through the EPP again.
	waitEPPServing := func(ctx context.Context) {
		gomega.Eventually(func(g gomega.Gomega) {
			for _, gw := range []gatewayClient{e.failOpen, e.failClose} {
				r := send(ctx, gw, uniquePrompt("recovered"))
				g.Expect(r.Status).To(gomega.Equal(http.StatusOK))
				g.Expect(r.FailedOpen).To(gomega.BeFalse())
			}
		}).WithContext(ctx).WithTimeout(rolloutTimeout).WithPolling(500 * time.Millisecond).Should(gomega.Succeed())
	}

	ginkgo.When("the EPP Deployment is scaled to 0", func() {
		ginkgo.BeforeEach(func(ctx context.Context) {
			scaleEPP(ctx, 0)
			ginkgo.DeferCleanup(func(ctx context.Context) {
				scaleEPP(ctx, eppReplicas)
				waitEPPServing(ctx)
			})
			waitNoEPP(ctx)
		})
		ginkgo.It("should keep serving through a FailOpen pool", func(ctx context.Context) { expectFailOpen(ctx) })
		ginkgo.It("should answer 5xx through a FailClose pool", func(ctx context.Context) { expectFailClose(ctx) })
	})

	ginkgo.When("the EPP Service's selector matches no pod", func() {
		ginkgo.It("should fail open on the FailOpen pool and closed on the FailClose pool", func(ctx context.Context) {
			patch := func(ctx context.Context, app string) {
				_, err := e.cs.CoreV1().Services(e.ns).Patch(ctx, manifests.EPPService, types.MergePatchType,
					[]byte(fmt.Sprintf(`{"spec":{"selector":{"app":%q}}}`, app)), metav1.PatchOptions{})
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
			}
			patch(ctx, "eppkit-epp-selects-nothing")
			ginkgo.DeferCleanup(func(ctx context.Context) {
				patch(ctx, manifests.EPPPodLabelValue)
				waitEPPServing(ctx)
			})
			waitNoEPP(ctx)
			expectFailOpen(ctx)
			expectFailClose(ctx)
		})
	})
})

var _ = ginkgo.Describe("EPP metrics", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("the EPP serves the pool", func() {
		ginkgo.It("should refuse an unauthenticated scrape and a token without get /metrics", func(ctx context.Context) {
			epp := eppPod(ctx)
			url := "http://" + podAddr(ctx, epp, manifests.EPPMetricsPort) + "/metrics"
			for _, c := range []struct {
				who, token string
				want       int
			}{{"no token", "", http.StatusUnauthorized}, {"a ServiceAccount without get /metrics", metricsToken(ctx, false), http.StatusForbidden}} {
				gomega.Eventually(func(g gomega.Gomega) {
					code, err := scrapeStatus(ctx, url, c.token)
					g.Expect(err).NotTo(gomega.HaveOccurred())
					g.Expect(code).To(gomega.Equal(c.want), "scrape with %s", c.who)
				}).WithContext(ctx).WithTimeout(discoveryWindow).WithPolling(500 * time.Millisecond).Should(gomega.Succeed())
				fmt.Fprintf(ginkgo.GinkgoWriter, "EPP /metrics scraped with %s: HTTP %d\n", c.who, c.want)
			}
		})
		ginkgo.It("should expose the pool gauges on /metrics to a scraper bound to eppkit-epp-metrics-reader", func(ctx context.Context) {
			epp := eppPod(ctx)
			url := "http://" + podAddr(ctx, epp, manifests.EPPMetricsPort) + "/metrics"
			token := metricsToken(ctx, true)
			gomega.Eventually(func(g gomega.Gomega) {
				_, ready := poolPods(ctx)
				fams, err := scrapeWith(ctx, url, token)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				for _, name := range []string{director.MetricPoolReadyEndpoints, director.MetricPoolAverageQueue, director.MetricPoolAverageKVCache} {
					g.Expect(fams).To(gomega.HaveKey(name))
				}
				v, err := gaugeValue(fams[director.MetricPoolReadyEndpoints])
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(v).To(gomega.BeNumerically("==", len(ready)), "%s vs Ready pods of the pool", director.MetricPoolReadyEndpoints)
				q, err := gaugeValue(fams[director.MetricPoolAverageQueue])
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(q).To(gomega.BeNumerically(">=", 0))
			}).WithContext(ctx).WithTimeout(discoveryWindow).WithPolling(500 * time.Millisecond).Should(gomega.Succeed())
		})
	})
})
