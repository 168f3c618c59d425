package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eppkit/eppkit/conformance/cluster/portforward"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/gateway/clustergw"
	"github.com/eppkit/eppkit/manifests"
)

// How the suite reaches the cluster (--gateway, --reach; default Envoy through port-forwards).
const (
	// gatewayStandin is fakes/gateway/clustergw in this process: it resolves InferencePool →
	// endpointPickerRef Service → EndpointSlice itself and dials pod IPs, directly or through
	// port-forwards.
	gatewayStandin = "standin"
	// gatewayEnvoy is the Envoy Deployment of manifests/k8s, reached by port-forward (or
	// directly): listener EnvoyFailOpenPort behaves as FailOpen, EnvoyFailClosePort as FailClose.
	gatewayEnvoy = "envoy"
	// reachDirect dials pod IPs (clusters whose pod network this machine routes to).
	reachDirect = "direct"
	// reachPortForward goes through the API server's pods/portforward (kind, most existing
	// clusters; conformance/cluster/portforward).
	reachPortForward = "port-forward"
)

// checkModes refuses combinations that cannot work.
func checkModes(gw, reach string) error {
	switch {
	case gw != gatewayStandin && gw != gatewayEnvoy:
		return fmt.Errorf("--gateway %q: want %s or %s", gw, gatewayStandin, gatewayEnvoy)
	case reach != reachDirect && reach != reachPortForward:
		return fmt.Errorf("--reach %q: want %s or %s", reach, reachDirect, reachPortForward)
	}
	return nil
}

// kindGateway is the kind provider's gateway: Envoy when the engine holds its image (the node
// cannot pull it), else the stand-in; the reason says which and why.
func kindGateway(ctx context.Context) (gw, why string) {
	engine := "docker"
	if err := exec.CommandContext(ctx, engine, "image", "inspect", manifests.EnvoyImage).Run(); err != nil {
		return gatewayStandin, fmt.Sprintf("%s is not in %s (no registry to pull it from): eppkit's gateway stand-in, through port-forwards", manifests.EnvoyImage, engine)
	}
	return gatewayEnvoy, manifests.EnvoyImage + " is in " + engine + ", loaded into the node"
}

// podAddr returns a host:port reaching the pod's port from this process: the pod IP (direct) or
// a local port-forward.
func podAddr(ctx context.Context, pod *corev1.Pod, port int) string {
	ginkgo.GinkgoHelper()
	if e.reach == reachDirect {
		gomega.Expect(pod.Status.PodIP).NotTo(gomega.BeEmpty(), "pod %s has no IP", pod.Name)
		return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))
	}
	addr, err := e.forwards.Addr(ctx, portforward.Target{Namespace: pod.Namespace, Pod: pod.Name, Port: port})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "port-forward to %s/%s:%d", pod.Namespace, pod.Name, port)
	return addr
}

// gatewayClient is what the specs send requests through.
type gatewayClient interface {
	// Do sends one request and returns what the client saw; Result.ServedPod is the model
	// server's x-inference-pod and Result.FailedOpen whether the request bypassed the EPP.
	Do(ctx context.Context, req *gateway.Request) (*gateway.Result, error)
	// EPPResolved reports whether the gateway still has an EPP endpoint to call.
	EPPResolved(ctx context.Context) (bool, error)
	// String names the gateway in failure messages.
	String() string
}

// standin is the in-process gateway stand-in for one pool.
type standin struct{ gw *clustergw.Gateway }

func (s standin) Do(ctx context.Context, req *gateway.Request) (*gateway.Result, error) {
	return s.gw.Do(ctx, req)
}

func (s standin) EPPResolved(context.Context) (bool, error) {
	res, err := s.gw.Resolve()
	return res.EPP != "", err
}

func (s standin) String() string { return "gateway stand-in" }

// envoyGW sends through one listener of the Envoy Deployment.
type envoyGW struct {
	port int // manifests.EnvoyFailOpenPort or EnvoyFailClosePort
	mu   sync.Mutex
	pod  *corev1.Pod // the Ready Envoy pod last used
}

func (g *envoyGW) String() string { return fmt.Sprintf("Envoy :%d", g.port) }

// addr returns the local address of the Envoy listener (a Ready Envoy pod, looked up again when
// the one used last is gone).
func (g *envoyGW) addr(ctx context.Context, fresh bool) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pod == nil || fresh {
		pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + manifests.EnvoyDeployment})
		if err != nil {
			return "", err
		}
		g.pod = nil
		for i := range pods.Items {
			if podReady(&pods.Items[i]) {
				g.pod = &pods.Items[i]
				break
			}
		}
		if g.pod == nil {
			return "", fmt.Errorf("no Ready Envoy pod in %s (%d pods)", e.ns, len(pods.Items))
		}
	}
	if e.reach == reachDirect {
		return net.JoinHostPort(g.pod.Status.PodIP, strconv.Itoa(g.port)), nil
	}
	return e.forwards.Addr(ctx, portforward.Target{Namespace: e.ns, Pod: g.pod.Name, Port: g.port})
}

func (g *envoyGW) Do(ctx context.Context, req *gateway.Request) (*gateway.Result, error) {
	var lastErr error
	// One retry with a fresh pod lookup and forward: a forward dies with its connection.
	for attempt := 0; attempt < 2; attempt++ {
		addr, err := g.addr(ctx, attempt > 0)
		if err != nil {
			return nil, err
		}
		res, err := sendHTTP(ctx, "http://"+addr, req)
		if err == nil {
			res.ServedPod = res.Headers.Get(gateway.PodHeader)
			res.FailedOpen = res.Headers.Get(manifests.EnvoyRouteHeader) == manifests.EnvoyRouteFailOpen
			return res, nil
		}
		lastErr = fmt.Errorf("%s via %s: %w", g, addr, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// EPPResolved: Envoy's epp cluster resolves the EPP Service by DNS and kube-proxy forwards new
// connections to its Ready endpoints, but an established connection outlives them (recycled after
// the bootstrap's max_connection_duration). So the EPP counts as gone when the Service has no Ready
// endpoint and a request through this listener shows it: failed open on the FailOpen listener, a
// 5xx on the FailClose one.
func (g *envoyGW) EPPResolved(ctx context.Context) (bool, error) {
	addrs, err := serviceAddresses(ctx, manifests.EPPService)
	if err != nil || len(addrs) > 0 {
		return true, err
	}
	body := fmt.Sprintf(`{"model":%q,"prompt":"eppkit e2e: is the EPP gone %d","max_tokens":1}`, manifests.FakeVLLMModel, time.Now().UnixNano())
	r, err := g.Do(ctx, &gateway.Request{Method: http.MethodPost, Path: "/v1/completions",
		Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(body)})
	if err != nil {
		return true, err
	}
	if g.port == manifests.EnvoyFailOpenPort {
		return !r.FailedOpen, nil
	}
	return r.Status < 500, nil
}

// sendHTTP sends req to base (scheme://host:port) and reads the whole response.
func sendHTTP(ctx context.Context, base string, req *gateway.Request) (*gateway.Result, error) {
	method := req.Method
	if method == "" {
		method = http.MethodGet
		if len(req.Body) > 0 {
			method = http.MethodPost
		}
	}
	path := req.Path
	if path == "" {
		path = "/"
	}
	hr, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(req.Body))
	if err != nil {
		return nil, err
	}
	for k, v := range req.Headers {
		hr.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: requestTimeout, Transport: &http.Transport{DisableKeepAlives: true}}).Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &gateway.Result{Status: resp.StatusCode, Headers: resp.Header, Body: body}, nil
}

// waitEnvoy waits (rolloutTimeout) until exactly one Envoy pod is Ready.
func waitEnvoy(ctx context.Context) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(func(g gomega.Gomega) {
		pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + manifests.EnvoyDeployment})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(pods.Items).NotTo(gomega.BeEmpty(), "Envoy pods")
		ready := 0
		for i := range pods.Items {
			if podReady(&pods.Items[i]) {
				ready++
			}
		}
		g.Expect(ready).To(gomega.Equal(1), "Ready Envoy pods")
	}).WithContext(ctx).WithTimeout(rolloutTimeout).WithPolling(250 * time.Millisecond).Should(gomega.Succeed())
}

// serviceAddresses returns the Ready addresses of the Service's EndpointSlices, sorted.
func serviceAddresses(ctx context.Context, svc string) ([]string, error) {
	slices, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out = append(out, ep.Addresses...)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}
