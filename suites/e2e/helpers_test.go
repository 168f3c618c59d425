package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/manifests"
)

func newLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(ginkgo.GinkgoWriter, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// send posts one completion with prompt through gw and returns the result; transport errors
// fail the spec.
func send(ctx context.Context, gw gatewayClient, prompt string) *gateway.Result {
	ginkgo.GinkgoHelper()
	body, err := json.Marshal(map[string]any{"model": manifests.FakeVLLMModel, "prompt": prompt, "max_tokens": 2})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	r, err := gw.Do(rctx, &gateway.Request{Method: http.MethodPost, Path: "/v1/completions",
		Headers: map[string]string{"Content-Type": "application/json"}, Body: body})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "request through the %s", gw)
	return r
}

// sendN sends n requests with distinct prompts (index + prefix) and returns how many each pod
// served; any non-200 fails the returned error.
func sendN(ctx context.Context, gw gatewayClient, prefix string, n int) (map[string]int, error) {
	ginkgo.GinkgoHelper()
	served := map[string]int{}
	for i := 0; i < n; i++ {
		// The index leads, so no two prompts share a prefix-cache block.
		r := send(ctx, gw, fmt.Sprintf("%d %s", i, prefix))
		if r.Status != http.StatusOK {
			return served, fmt.Errorf("request %d of %d: HTTP %d: %s", i+1, n, r.Status, r.Body)
		}
		if r.ServedPod == "" {
			return served, fmt.Errorf("request %d of %d: no x-inference-pod header", i+1, n)
		}
		served[r.ServedPod]++
	}
	return served, nil
}

// poolPods returns the fake vLLM pods (all, and the names of the Ready ones).
func poolPods(ctx context.Context) (all []corev1.Pod, ready map[string]bool) {
	ginkgo.GinkgoHelper()
	pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: manifests.PoolLabelKey + "=" + manifests.PoolLabelValue})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ready = map[string]bool{}
	for i := range pods.Items {
		if podReady(&pods.Items[i]) {
			ready[pods.Items[i].Name] = true
		}
	}
	return pods.Items, ready
}

// keys returns the sorted keys of a map.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// scale sets a Deployment's replicas (through the scale subresource) and waits for the rollout.
func scale(ctx context.Context, name string, replicas int32) {
	ginkgo.GinkgoHelper()
	ginkgo.By(fmt.Sprintf("scaling deployment %s to %d", name, replicas))
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	_, err := e.cs.AppsV1().Deployments(e.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	waitDeployment(ctx, name, replicas)
}

// setHealth sets a fake vLLM pod's GET /health status through its admin API (health-status).
func setHealth(ctx context.Context, pod *corev1.Pod, status int) {
	ginkgo.GinkgoHelper()
	url := "http://" + podAddr(ctx, pod, manifests.FakeVLLMPort) + "/admin/config"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(fmt.Sprintf(`{"health-status":%d}`, status))))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: requestTimeout}).Do(req)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "POST %s", url)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "POST %s: %s", url, b)
}

// scaleEPP scales the EPP Deployment and waits for its pods (the leader alone Ready).
func scaleEPP(ctx context.Context, replicas int32) {
	ginkgo.GinkgoHelper()
	ginkgo.By(fmt.Sprintf("scaling deployment %s to %d", manifests.EPPDeployment, replicas))
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	_, err := e.cs.AppsV1().Deployments(e.ns).Patch(ctx, manifests.EPPDeployment, types.MergePatchType, patch, metav1.PatchOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	waitEPP(ctx, replicas)
}

// eppPod returns the one Ready EPP pod.
func eppPod(ctx context.Context) *corev1.Pod {
	ginkgo.GinkgoHelper()
	var pod *corev1.Pod
	gomega.Eventually(func(g gomega.Gomega) {
		pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + manifests.EPPPodLabelValue})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		var ready []corev1.Pod
		for _, p := range pods.Items {
			if podReady(&p) {
				ready = append(ready, p)
			}
		}
		g.Expect(ready).To(gomega.HaveLen(1), "ready EPP pods")
		pod = &ready[0]
	}).WithContext(ctx).WithTimeout(rolloutTimeout).WithPolling(250 * time.Millisecond).Should(gomega.Succeed())
	return pod
}

// scrapeWith reads the Prometheus text exposition at url with a bearer token (the EPP's
// /metrics is checked by the API server: --metrics-endpoint-auth).
func scrapeWith(ctx context.Context, url, token string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: requestTimeout}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// gaugeValue returns the value of the family's only gauge sample.
func gaugeValue(mf *dto.MetricFamily) (float64, error) {
	if mf.GetType() != dto.MetricType_GAUGE {
		return 0, fmt.Errorf("%s is a %s, want a gauge", mf.GetName(), mf.GetType())
	}
	if len(mf.GetMetric()) != 1 {
		return 0, fmt.Errorf("%s has %d samples, want 1", mf.GetName(), len(mf.GetMetric()))
	}
	return mf.GetMetric()[0].GetGauge().GetValue(), nil
}

// uniquePrompt is a prompt no other spec or run shares.
func uniquePrompt(what string) string {
	return fmt.Sprintf("e2e %s seed %d %s", strings.ReplaceAll(ginkgo.CurrentSpecReport().LeafNodeText, " ", "-"), e.seed, what)
}
