package eppserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/reference/eppserver"
	"github.com/eppkit/eppkit/reference/extproc"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
)

// leader is a test Leader whose leadership the test sets (the real election, against a
// kube-apiserver, is tested in reference/discovery).
type leader struct {
	is   atomic.Bool
	done chan struct{}
}

func (l *leader) Start(ctx context.Context) error {
	go func() { <-ctx.Done(); l.is.Store(false); close(l.done) }()
	return nil
}
func (l *leader) IsLeader() bool        { return l.is.Load() }
func (l *leader) Done() <-chan struct{} { return l.done }

// eventually polls f every 10 ms until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func statusIs(t *testing.T, conn *grpc.ClientConn, service string, want healthpb.HealthCheckResponse_ServingStatus) func() error {
	return func() error {
		if got := healthStatus(t, conn, service); got != want {
			return fmt.Errorf("health %q: %v, want %v", service, got, want)
		}
		return nil
	}
}

// TestHealthFollowsLeadership: readiness, "" and the ext_proc name are SERVING only on a synced
// leader; liveness always; a drain turns readiness NOT_SERVING at once and keeps liveness
// SERVING (GIE proposal 004 as of v1.6.2, Health Checking; llm-d-router v0.10.0
// cmd/epp/runner/health.go healthServer.Check).
func TestHealthFollowsLeadership(t *testing.T) {
	src := &source{eps: []*framework.EndpointMetadata{{Address: "127.0.0.1", Port: 18001}}}
	src.synced.Store(true)
	le := &leader{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := eppserver.Start(ctx, eppserver.Options{Discovery: src, Leader: le, GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0",
		DrainTimeout: 5 * time.Second, DrainHandover: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := grpc.NewClient(srv.HealthAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	readiness := []string{"readiness", "", "envoy.service.ext_proc.v3.ExternalProcessor", "inference-extension"}
	for _, name := range readiness {
		eventually(t, time.Second, statusIs(t, hc, name, healthpb.HealthCheckResponse_NOT_SERVING))
	}
	eventually(t, time.Second, statusIs(t, hc, "liveness", healthpb.HealthCheckResponse_SERVING))

	le.is.Store(true)
	for _, name := range readiness {
		eventually(t, time.Second, statusIs(t, hc, name, healthpb.HealthCheckResponse_SERVING))
	}
	le.is.Store(false) // the lease lost: a follower again
	for _, name := range readiness {
		eventually(t, time.Second, statusIs(t, hc, name, healthpb.HealthCheckResponse_NOT_SERVING))
	}
	le.is.Store(true)
	eventually(t, time.Second, statusIs(t, hc, "readiness", healthpb.HealthCheckResponse_SERVING))

	cancel() // SIGTERM: the drain
	select {
	case <-le.done:
	case <-time.After(time.Second):
		t.Fatal("the leader election was not ended when the drain began")
	}
	for _, name := range readiness {
		eventually(t, 2*time.Second, statusIs(t, hc, name, healthpb.HealthCheckResponse_NOT_SERVING))
	}
	if got := healthStatus(t, hc, "liveness"); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness while draining: %v, want SERVING (a restart mid-drain would cut the requests in flight)", got)
	}
	select {
	case <-srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("no request in flight, yet the server did not stop after its handover")
	}
}

// slowFleet starts one fake vLLM server whose streamed tokens come every itl.
func slowFleet(t *testing.T, itl time.Duration) *fleet.Fleet {
	t.Helper()
	base := vllm.DefaultConfig()
	base.Model = "m"
	base.Seed = 1
	base.Latency.InterTokenLatency = vllm.Duration(itl)
	f, err := fleet.Start(fleet.Options{Count: 1, Base: base, DistinctPorts: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

func streamRequest(tokens int) *gateway.Request {
	return &gateway.Request{Path: "/v1/chat/completions", Headers: map[string]string{"content-type": "application/json"},
		Body: []byte(`{"model":"m","stream":true,"max_tokens":` + strconv.Itoa(tokens) + `,"ignore_eos":true,` +
			`"messages":[{"role":"user","content":"drain me"}]}`)}
}

// startDrainServer starts the reference over f with the given drain timings and a strict gateway
// in front of it.
func startDrainServer(t *testing.T, ctx context.Context, f *fleet.Fleet, timeout, handover time.Duration) (*eppserver.Server, *gateway.Gateway) {
	t.Helper()
	m := f.Member(0)
	src := &source{eps: []*framework.EndpointMetadata{{Address: m.Host, Port: m.Port}}}
	src.synced.Store(true)
	srv, err := eppserver.Start(ctx, eppserver.Options{Discovery: src, GRPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		DrainTimeout: timeout, DrainHandover: handover, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{EPPAddress: srv.GRPCAddr().String(), Endpoints: []string{m.Addr()}, MessageTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	return srv, gw
}

// inFlight reads eppkit_epp_requests_in_flight from the server's /metrics.
func inFlight(srv *eppserver.Server) (int, error) {
	resp, err := http.Get("http://" + srv.MetricsAddr().String() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, eppserver.MetricInFlight+" "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New(eppserver.MetricInFlight + " not exported")
}

type outcome struct {
	res *gateway.Result
	err error
	at  time.Time
}

// TestDrainFinishesInFlight: after the context ends (SIGTERM) the two streams in flight run to
// their end and are answered whole, a new request is refused with 503 and
// x-llm-d-request-dropped-reason: rejected-shutting-down, and the server stops once the streams
// have ended, well before its drain timeout.
func TestDrainFinishesInFlight(t *testing.T) {
	f := slowFleet(t, 40*time.Millisecond) // 40 tokens: 1.6 s a stream
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, gw := startDrainServer(t, ctx, f, 20*time.Second, 0)
	results := make(chan outcome, 2)
	for range 2 {
		go func() {
			res, err := gw.Do(context.Background(), streamRequest(40))
			results <- outcome{res, err, time.Now()}
		}()
	}
	eventually(t, 5*time.Second, func() error {
		n, err := inFlight(srv)
		if err == nil && n != 2 {
			err = fmt.Errorf("%d requests in flight, want 2", n)
		}
		return err
	})
	sigterm := time.Now()
	cancel()
	time.Sleep(50 * time.Millisecond) // the drain has begun: readiness and admission
	res, err := gw.Do(context.Background(), streamRequest(2))
	switch {
	case err != nil:
		t.Fatalf("a new request during the drain: %v", err)
	case res.Status != http.StatusServiceUnavailable || !res.Immediate:
		t.Fatalf("a new request during the drain: status %d (immediate %v), want an ImmediateResponse 503", res.Status, res.Immediate)
	case res.Headers.Get(extproc.DroppedReasonHeader) != extproc.DroppedShuttingDown:
		t.Fatalf("the refusal's %s: %q, want %q", extproc.DroppedReasonHeader, res.Headers.Get(extproc.DroppedReasonHeader), extproc.DroppedShuttingDown)
	}
	for range 2 {
		o := <-results
		if o.err != nil || o.res.Status != http.StatusOK || !bytes.HasSuffix(bytes.TrimSpace(o.res.Body), []byte("data: [DONE]")) {
			t.Fatalf("a stream in flight at SIGTERM: err %v, status %d, body ends %q; want 200 and the whole stream",
				o.err, o.res.Status, tail(o.res.Body))
		}
		t.Logf("a stream in flight at SIGTERM ended whole %v after it", o.at.Sub(sigterm).Round(time.Millisecond))
	}
	select {
	case <-srv.Done():
		t.Logf("the server stopped %v after SIGTERM (drain timeout 20s)", time.Since(sigterm).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the streams ended, yet the server did not stop within 10 s")
	}
}

// TestDrainHandoverServesNewRequests: during --drain-handover a new request is still routed.
func TestDrainHandoverServesNewRequests(t *testing.T) {
	f := slowFleet(t, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, gw := startDrainServer(t, ctx, f, 10*time.Second, 1500*time.Millisecond)
	cancel()
	time.Sleep(100 * time.Millisecond)
	res, err := gw.Do(context.Background(), streamRequest(4))
	if err != nil || res.Status != http.StatusOK || res.Endpoint == "" {
		t.Fatalf("a request during the handover: err %v, status %d, routed to %q; want it routed", err, res.Status, res.Endpoint)
	}
	select {
	case <-srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not stop after its handover")
	}
}

// TestDrainTimeoutCutsTheRest: a stream longer than the drain timeout is cut when it passes, and
// the server stops then.
func TestDrainTimeoutCutsTheRest(t *testing.T) {
	f := slowFleet(t, 50*time.Millisecond) // 100 tokens: 5 s
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, gw := startDrainServer(t, ctx, f, 700*time.Millisecond, 0)
	done := make(chan outcome, 1)
	go func() {
		res, err := gw.Do(context.Background(), streamRequest(100))
		done <- outcome{res, err, time.Now()}
	}()
	eventually(t, 5*time.Second, func() error {
		n, err := inFlight(srv)
		if err == nil && n != 1 {
			err = fmt.Errorf("%d requests in flight, want 1", n)
		}
		return err
	})
	sigterm := time.Now()
	cancel()
	select {
	case <-srv.Done():
		if d := time.Since(sigterm); d < 600*time.Millisecond || d > 5*time.Second {
			t.Fatalf("the server stopped %v after SIGTERM, want about its 700ms drain timeout", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not stop at its drain timeout")
	}
	o := <-done
	if o.err == nil && o.res.Status == http.StatusOK && bytes.HasSuffix(bytes.TrimSpace(o.res.Body), []byte("data: [DONE]")) {
		t.Fatalf("a 5 s stream ended whole although the drain timeout was 700ms")
	}
}

func tail(b []byte) string {
	if len(b) > 40 {
		b = b[len(b)-40:]
	}
	return string(b)
}

// TestMetricsEndpointAuth: with the API server's filter (--metrics-endpoint-auth) /metrics
// answers 401 without a bearer token, refuses a forged one, 403 to a ServiceAccount that may not
// get /metrics, and 200 to one bound to a ClusterRole that may, all checked by a real
// kube-apiserver (TokenReview, SubjectAccessReview).
func TestMetricsEndpointAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := apiserver.StartControlPlane(ctx, apiserver.ControlPlaneOptions{})
	if errors.Is(err, apiserver.ErrBinariesMissing) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	cs := cp.Clientset
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metrics-auth"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		if _, err := cs.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, stranger := token("scraper"), token("stranger")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "epp-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scraper"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "scraper", Namespace: ns.Name}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	src := &source{eps: []*framework.EndpointMetadata{{Address: "127.0.0.1", Port: 18001}}}
	src.synced.Store(true)
	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	srv, err := eppserver.Start(sctx, eppserver.Options{Discovery: src, GRPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		MetricsFilter: eppserver.APIServerMetricsFilter(cp.RestConfig, nil), DrainTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(bearer string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+srv.MetricsAddr().String()+"/metrics", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		who, token string
		want       int
	}{{"no token", "", http.StatusUnauthorized},
		// A token the API server cannot read: controller-runtime's filter answers 500
		// "Authentication failed" (its TokenReview errs), not 401; refused either way.
		{"a forged token", "not-a-token", -1},
		{"a ServiceAccount without get /metrics", stranger, http.StatusForbidden},
		{"a ServiceAccount bound to get /metrics", reader, http.StatusOK}} {
		code, body := scrape(c.token)
		if c.want == -1 && code != http.StatusOK && strings.Contains(body, "Authentication failed") || code == c.want {
			t.Logf("scrape with %s: %d", c.who, code)
		}
		if c.want == -1 {
			if code < 400 {
				t.Errorf("scrape with %s: %d, want a refusal", c.who, code)
			}
			continue
		}
		if code != c.want {
			t.Errorf("scrape with %s: %d, want %d (%.80s)", c.who, code, c.want, body)
			continue
		}
		if c.want == http.StatusOK && !strings.Contains(body, eppserver.MetricInFlight) {
			t.Errorf("the authorised scrape lacks %s", eppserver.MetricInFlight)
		}
	}
}

// completions is a test ResponseComplete plugin that records how each response ended.
type completions struct {
	tn  framework.TypedName
	mu  sync.Mutex
	eos []bool
}

func (c *completions) TypedName() framework.TypedName { return c.tn }
func (c *completions) Score(context.Context, *framework.CycleState, *framework.LLMRequest, []*framework.Endpoint) map[string]float64 {
	return nil
}
func (c *completions) ResponseComplete(_ context.Context, _ *framework.LLMRequest, resp *framework.Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eos = append(c.eos, resp.EndOfStream)
}

// TestAbortIsAFailedRequest: a response that ends with a non-zero grpc-status in its trailers (a
// gRPC model server's abort), forwarded by the gateway stand-in as Envoy does, is a failed request
// in the reference: its plugins see it ended without its natural end (no training sample, no
// usage as a completed response's), it leaves the in-flight count, and it is counted aborted; the
// same response with grpc-status 0 is completed.
func TestAbortIsAFailedRequest(t *testing.T) {
	var status atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Grpc-Status")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"usage":{"prompt_tokens":3,"completion_tokens":5}}`))
		w.Header().Set("Grpc-Status", status.Load().(string))
	}))
	defer up.Close()
	host, port := splitHostPort(t, up.Listener.Addr().String())
	src := &source{eps: []*framework.EndpointMetadata{{Address: host, Port: port}}}
	src.synced.Store(true)
	rec := &completions{}
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	reg.MustRegister("test-completions", func(name string, _ json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
		rec.tn = framework.TypedName{Type: "test-completions", Name: name}
		return rec, nil
	})
	cfg, err := framework.LoadConfig([]byte("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: test-completions\n- type: queue-scorer\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := eppserver.Start(ctx, eppserver.Options{Config: cfg, Registry: reg, Discovery: src, GRPCAddr: "127.0.0.1:0",
		MetricsAddr: "127.0.0.1:0", DrainTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{EPPAddress: srv.GRPCAddr().String(), Endpoints: []string{up.Listener.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	for _, st := range []string{"14", "0"} {
		status.Store(st)
		res, err := gw.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"p"}`)})
		if err != nil || res.Trailers.Get("Grpc-Status") != st {
			t.Fatalf("grpc-status %s: err %v, client trailers %v", st, err, res.Trailers)
		}
	}
	eventually(t, 2*time.Second, func() error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if !slices.Equal(rec.eos, []bool{false, true}) {
			return fmt.Errorf("ResponseComplete saw EndOfStream %v, want [false true] (the abort is no natural end)", rec.eos)
		}
		return nil
	})
	metrics := scrapeAll(t, srv)
	for _, want := range []string{eppserver.MetricInFlight + " 0", eppserver.MetricResponses + `{outcome="aborted"} 1`,
		eppserver.MetricResponses + `{outcome="completed"} 1`, eppserver.MetricResponses + `{outcome="abandoned"} 0`} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func scrapeAll(t *testing.T, srv *eppserver.Server) string {
	t.Helper()
	resp, err := http.Get("http://" + srv.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func splitHostPort(t *testing.T, a string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return h, n
}
