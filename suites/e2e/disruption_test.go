package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/manifests"
	"github.com/eppkit/eppkit/reference/eppserver"
)

// Disruptions the upstream EPP's own suite runs (llm-d-router v0.10.0 test/e2e/disruption_test.go,
// e2e_test.go leader election), against the reference running highly available (manifests/k8s:
// 2 replicas, leader election, drain): a model-server pod deleted mid-stream, the leading EPP pod
// deleted under load, the pool scaled to 0 and back, a rolling update of the EPP under load. Every
// spec counts what it sent, what was answered, what failed and what was never answered (a
// request that times out is a failure, never ignored), and prints its figures.

// loadRate is the request rate of the specs under load (issue 33: 20 req/s).
const loadRate = 20

// loadCount is what a load run saw.
type loadCount struct {
	gw                          string
	sent, ok, failed, unanswerd int
	failedOpen                  int
	statuses                    map[int]int
	firstFail, lastFail         time.Duration
}

func (c *loadCount) String() string {
	codes := make([]string, 0, len(c.statuses))
	for code, n := range c.statuses {
		codes = append(codes, fmt.Sprintf("%d×%d", code, n))
	}
	sort.Strings(codes)
	s := fmt.Sprintf("%s: sent %d, answered 200 %d (failed open %d), failed %d, never answered %d, statuses [%s]",
		c.gw, c.sent, c.ok, c.failedOpen, c.failed, c.unanswerd, strings.Join(codes, " "))
	if c.failed+c.unanswerd > 0 {
		s += fmt.Sprintf(", failures from %v to %v into the run", c.firstFail.Round(time.Millisecond), c.lastFail.Round(time.Millisecond))
	}
	return s
}

// runLoad sends loadRate req/s of distinct two-token completions through every gateway of gws
// (named by names) until stop is closed, then waits for every request's end (each bounded by requestTimeout).
func runLoad(ctx context.Context, names []string, gws []gatewayClient, stop <-chan struct{}) []*loadCount {
	counts := make([]*loadCount, len(gws))
	var wg sync.WaitGroup
	var mu sync.Mutex
	start := time.Now()
	for i, gw := range gws {
		c := &loadCount{gw: names[i] + " " + gw.String(), statuses: map[int]int{}}
		counts[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / loadRate)
			defer tick.Stop()
			var reqs sync.WaitGroup
			for n := 0; ; n++ {
				select {
				case <-stop:
					reqs.Wait()
					return
				case <-ctx.Done():
					reqs.Wait()
					return
				case <-tick.C:
				}
				mu.Lock()
				c.sent++
				mu.Unlock()
				reqs.Add(1)
				go func() {
					defer reqs.Done()
					body, _ := json.Marshal(map[string]any{"model": manifests.FakeVLLMModel, "max_tokens": 2,
						"prompt": fmt.Sprintf("%d load %s", n, uniquePrompt(gw.String()))})
					rctx, cancel := context.WithTimeout(ctx, requestTimeout)
					defer cancel()
					r, err := gw.Do(rctx, &gateway.Request{Method: http.MethodPost, Path: "/v1/completions",
						Headers: map[string]string{"Content-Type": "application/json"}, Body: body})
					at := time.Since(start)
					mu.Lock()
					defer mu.Unlock()
					fail := func() {
						if c.failed+c.unanswerd == 0 {
							c.firstFail = at
						}
						c.lastFail = at
					}
					switch {
					case err != nil:
						fail()
						c.unanswerd++
					case r.Status != http.StatusOK:
						fail()
						c.failed++
						c.statuses[r.Status]++
					default:
						c.ok++
						c.statuses[r.Status]++
						if r.FailedOpen {
							c.failedOpen++
						}
					}
				}()
			}
		}()
	}
	wg.Wait()
	return counts
}

// leaderPod returns the one Ready EPP pod and the Lease's holder.
func leaderPod(ctx context.Context) (*corev1.Pod, string) {
	ginkgo.GinkgoHelper()
	p := eppPod(ctx)
	lease, err := e.cs.CoordinationV1().Leases(e.ns).Get(ctx, fmt.Sprintf(manifests.EPPLeaseNameFormat, e.ns), metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "the EPP's Lease")
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	return p, holder
}

// metricsToken returns a ServiceAccount token of this namespace: bound to the ClusterRole that
// may get the EPP's /metrics (bound), or of an identity without it.
func metricsToken(ctx context.Context, bound bool) string {
	ginkgo.GinkgoHelper()
	name := "metrics-stranger"
	if bound {
		name = "metrics-scraper"
	}
	_, err := e.cs.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	}
	if bound {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "eppkit-e2e-metrics-" + e.ns},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: e.ns}},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: manifests.EPPMetricsReaderClusterRole}}
		_, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
		}
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_ = e.cs.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{})
		})
	}
	tr, err := e.cs.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return tr.Status.Token
}

// scrapeStatus GETs url with a bearer token (none when "") and returns the status.
func scrapeStatus(ctx context.Context, url, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: requestTimeout}).Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// eppGauge reads one gauge of the leading EPP's /metrics with an authorised token.
func eppGauge(ctx context.Context, g gomega.Gomega, token, name string) float64 {
	url := "http://" + podAddr(ctx, eppPod(ctx), manifests.EPPMetricsPort) + "/metrics"
	fams, err := scrapeWith(ctx, url, token)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(fams).To(gomega.HaveKey(name))
	v, err := gaugeValue(fams[name])
	g.Expect(err).NotTo(gomega.HaveOccurred())
	return v
}

var _ = ginkgo.Describe("Disruptions", ginkgo.Label(suiteLabel, "disruption"), func() {
	ginkgo.When("the model-server pod serving a stream is deleted mid-stream", func() {
		ginkgo.It("should end the client's stream, route the next requests elsewhere and bring the EPP's in-flight count back to 0", func(ctx context.Context) {
			token := metricsToken(ctx, true)
			// Slow streams: a token every 100 ms on every pod, 100 tokens (10 s).
			all, _ := poolPods(ctx)
			for i := range all {
				setLatency(ctx, &all[i], "100ms")
			}
			ginkgo.DeferCleanup(func(ctx context.Context) {
				pods, _ := poolPods(ctx)
				for i := range pods {
					if pods[i].DeletionTimestamp == nil && podReady(&pods[i]) {
						setLatency(ctx, &pods[i], "0s")
					}
				}
			})
			type res struct {
				r   *gateway.Result
				err error
				at  time.Time
			}
			done := make(chan res, 1)
			go func() {
				body, _ := json.Marshal(map[string]any{"model": manifests.FakeVLLMModel, "max_tokens": 100, "ignore_eos": true,
					"stream": true, "prompt": uniquePrompt("mid-stream")})
				rctx, cancel := context.WithTimeout(ctx, 2*requestTimeout)
				defer cancel()
				r, err := e.failClose.Do(rctx, &gateway.Request{Method: http.MethodPost, Path: "/v1/completions",
					Headers: map[string]string{"Content-Type": "application/json"}, Body: body})
				done <- res{r, err, time.Now()}
			}()
			var victim *corev1.Pod
			gomega.Eventually(func(g gomega.Gomega) {
				for i := range all {
					if running(ctx, &all[i]) > 0 {
						victim = &all[i]
						return
					}
				}
				g.Expect(victim).NotTo(gomega.BeNil(), "no pool pod runs the stream yet")
			}).WithContext(ctx).WithTimeout(requestTimeout).WithPolling(100 * time.Millisecond).Should(gomega.Succeed())
			ginkgo.By("deleting pod " + victim.Name + " mid-stream (grace period 0)")
			deleted := time.Now()
			zero := int64(0)
			gomega.Expect(e.cs.CoreV1().Pods(e.ns).Delete(ctx, victim.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})).To(gomega.Succeed())
			var got res
			gomega.Eventually(done).WithTimeout(2*requestTimeout).Should(gomega.Receive(&got), "the stream never ended after its pod was deleted")
			whole := got.err == nil && got.r.Status == http.StatusOK && strings.Contains(string(got.r.Body), "[DONE]")
			gomega.Expect(whole).To(gomega.BeFalse(), "the stream ended whole although its pod was deleted 10 s before its end")
			streamEnd := got.at.Sub(deleted)
			// The next requests avoid the pod once it is gone.
			var avoidedAfter time.Duration
			gomega.Eventually(func(g gomega.Gomega) {
				served, err := sendN(ctx, e.failClose, uniquePrompt("after the deletion"), 10)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(served).NotTo(gomega.HaveKey(victim.Name))
				avoidedAfter = time.Since(deleted)
			}).WithContext(ctx).WithTimeout(discoveryWindow).WithPolling(time.Second).Should(gomega.Succeed())
			// The EPP released the request: in flight back to 0.
			gomega.Eventually(func(g gomega.Gomega) {
				g.Expect(eppGauge(ctx, g, token, eppserver.MetricInFlight)).To(gomega.BeZero())
			}).WithContext(ctx).WithTimeout(discoveryWindow).WithPolling(500 * time.Millisecond).Should(gomega.Succeed())
			fmt.Fprintf(ginkgo.GinkgoWriter, "FIGURES mid-stream pod deletion: the client's stream ended %v after the delete (err %v); 10 of 10 "+
				"requests avoided %s %v after it; %s 0\n", streamEnd.Round(time.Millisecond), got.err, victim.Name,
				avoidedAfter.Round(time.Millisecond), eppserver.MetricInFlight)
			waitDeployment(ctx, manifests.FakeVLLMDeployment, initialReplicas)
		})
	})

	ginkgo.When("the leading EPP pod is deleted while 20 req/s flow", func() {
		ginkgo.It("should lose nothing through the FailOpen pool and fail only inside the failover window through the FailClose pool", func(ctx context.Context) {
			old, holder := leaderPod(ctx)
			stop := make(chan struct{})
			var counts []*loadCount
			loadDone := make(chan struct{})
			go func() {
				counts = runLoad(ctx, []string{"FailOpen", "FailClose"}, []gatewayClient{e.failOpen, e.failClose}, stop)
				close(loadDone)
			}()
			time.Sleep(3 * time.Second)
			ginkgo.By("deleting the leading EPP pod " + old.Name)
			deleted := time.Now()
			gomega.Expect(e.cs.CoreV1().Pods(e.ns).Delete(ctx, old.Name, metav1.DeleteOptions{})).To(gomega.Succeed())
			var newLeader *corev1.Pod
			var newHolder string
			gomega.Eventually(func(g gomega.Gomega) {
				p, h := leaderPod(ctx)
				g.Expect(p.Name).NotTo(gomega.Equal(old.Name))
				g.Expect(h).NotTo(gomega.Equal(holder))
				newLeader, newHolder = p, h
			}).WithContext(ctx).WithTimeout(rolloutTimeout).WithPolling(100 * time.Millisecond).Should(gomega.Succeed())
			failover := time.Since(deleted)
			time.Sleep(5 * time.Second)
			close(stop)
			<-loadDone
			waitEPP(ctx, eppReplicas)
			fmt.Fprintf(ginkgo.GinkgoWriter, "FIGURES leader deletion at %d req/s: new leader %s (lease holder %s) Ready %v after the delete\n  %s\n  %s\n",
				loadRate, newLeader.Name, newHolder, failover.Round(time.Millisecond), counts[0], counts[1])
			gomega.Expect(counts[0].failed+counts[0].unanswerd).To(gomega.BeZero(), "FailOpen pool: %s", counts[0])
			gomega.Expect(counts[1].unanswerd).To(gomega.BeZero(), "FailClose pool: a request never answered: %s", counts[1])
			if counts[1].failed > 0 {
				gomega.Expect(counts[1].lastFail-counts[1].firstFail).To(gomega.BeNumerically("<=", failover+5*time.Second),
					"FailClose pool: failures outside the failover window (%v): %s", failover, counts[1])
			}
		})
	})

	ginkgo.When("the pool is scaled to 0 and back", func() {
		ginkgo.It("should answer 503 while no pod is ready and route again within the discovery window", func(ctx context.Context) {
			scale(ctx, manifests.FakeVLLMDeployment, 0)
			ginkgo.DeferCleanup(func(ctx context.Context) { scale(ctx, manifests.FakeVLLMDeployment, initialReplicas) })
			const n = 10
			var reasons []string
			gomega.Eventually(func(g gomega.Gomega) {
				reasons = reasons[:0]
				for i := 0; i < n; i++ {
					r := send(ctx, e.failClose, uniquePrompt(fmt.Sprintf("no pods %d", i)))
					g.Expect(r.Status).To(gomega.Equal(http.StatusServiceUnavailable), "request %d with the pool at 0: %s", i, r.Body)
					reasons = append(reasons, r.Headers.Get("x-llm-d-request-dropped-reason"))
				}
			}).WithContext(ctx).WithTimeout(discoveryWindow).WithPolling(time.Second).Should(gomega.Succeed())
			ginkgo.By("scaling the pool back")
			back := time.Now()
			patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, initialReplicas))
			_, err := e.cs.AppsV1().Deployments(e.ns).Patch(ctx, manifests.FakeVLLMDeployment, types.MergePatchType, patch, metav1.PatchOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			var resumed time.Duration
			gomega.Eventually(func(g gomega.Gomega) {
				r := send(ctx, e.failClose, uniquePrompt("scaled back"))
				g.Expect(r.Status).To(gomega.Equal(http.StatusOK))
				resumed = time.Since(back)
			}).WithContext(ctx).WithTimeout(rolloutTimeout).WithPolling(500 * time.Millisecond).Should(gomega.Succeed())
			fmt.Fprintf(ginkgo.GinkgoWriter, "FIGURES pool scaled to 0: %d of %d requests 503 (reason headers dropped/eppkit: %v); scaled back to %d: routing resumed %v later\n",
				n, n, reasons[:1], initialReplicas, resumed.Round(time.Millisecond))
		})
	})

	ginkgo.When("the EPP Deployment is rolled out while 20 req/s flow", func() {
		ginkgo.It("should fail no request through the FailOpen pool", func(ctx context.Context) {
			stop := make(chan struct{})
			var counts []*loadCount
			loadDone := make(chan struct{})
			go func() {
				counts = runLoad(ctx, []string{"FailOpen", "FailClose"}, []gatewayClient{e.failOpen, e.failClose}, stop)
				close(loadDone)
			}()
			time.Sleep(3 * time.Second)
			ginkgo.By("restarting the EPP Deployment (a new pod template)")
			started := time.Now()
			patch := []byte(fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"eppkit.io/restarted-at":%q}}}}}`, time.Now().Format(time.RFC3339Nano)))
			_, err := e.cs.AppsV1().Deployments(e.ns).Patch(ctx, manifests.EPPDeployment, types.MergePatchType, patch, metav1.PatchOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			waitEPP(ctx, eppReplicas)
			rollout := time.Since(started)
			time.Sleep(5 * time.Second)
			close(stop)
			<-loadDone
			fmt.Fprintf(ginkgo.GinkgoWriter, "FIGURES rolling update at %d req/s: the rollout took %v\n  %s\n  %s\n",
				loadRate, rollout.Round(time.Millisecond), counts[0], counts[1])
			gomega.Expect(counts[0].failed+counts[0].unanswerd).To(gomega.BeZero(), "FailOpen pool: %s", counts[0])
			gomega.Expect(counts[1].unanswerd).To(gomega.BeZero(), "FailClose pool: a request never answered: %s", counts[1])
		})
	})
})

// setLatency sets a fake vLLM pod's inter-token latency through its admin API.
func setLatency(ctx context.Context, pod *corev1.Pod, itl string) {
	ginkgo.GinkgoHelper()
	url := "http://" + podAddr(ctx, pod, manifests.FakeVLLMPort) + "/admin/config"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(fmt.Sprintf(`{"inter-token-latency":%q}`, itl)))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: requestTimeout}).Do(req)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "POST %s", url)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "POST %s: %s", url, b)
}

// running reads vllm:num_requests_running from a fake vLLM pod (0 when it cannot be read).
func running(ctx context.Context, pod *corev1.Pod) float64 {
	fams, err := scrapeWith(ctx, "http://"+podAddr(ctx, pod, manifests.FakeVLLMPort)+"/metrics", "")
	if err != nil {
		return 0
	}
	mf, ok := fams["vllm:num_requests_running"]
	if !ok {
		return 0
	}
	sum := 0.0
	for _, m := range mf.GetMetric() {
		sum += m.GetGauge().GetValue()
	}
	return sum
}
