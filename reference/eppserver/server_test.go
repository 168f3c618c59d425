package eppserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/eppkit/eppkit/reference/eppserver"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
)

// source is a test Discovery whose sync and membership the test drives.
type source struct {
	mu     sync.Mutex
	eps    []*framework.EndpointMetadata
	synced atomic.Bool
	subs   []func(added, removed []*framework.EndpointMetadata)
}

func (s *source) Start(context.Context) error { return nil }
func (s *source) Synced() bool                { return s.synced.Load() }
func (s *source) Endpoints() []*framework.EndpointMetadata {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.eps)
}
func (s *source) Subscribe(fn func(added, removed []*framework.EndpointMetadata)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = append(s.subs, fn)
}
func (s *source) Priority(string) (int, bool) { return 0, false }
func (s *source) remove(key string) {
	s.mu.Lock()
	var removed []*framework.EndpointMetadata
	s.eps = slices.DeleteFunc(s.eps, func(m *framework.EndpointMetadata) bool {
		if m.Key() == key {
			removed = append(removed, m)
			return true
		}
		return false
	})
	subs := slices.Clone(s.subs)
	s.mu.Unlock()
	for _, fn := range subs {
		fn(nil, removed)
	}
}

// remover is a test plugin that records RemoveEndpoint calls.
type remover struct {
	tn      framework.TypedName
	mu      sync.Mutex
	removed []string
}

func (r *remover) TypedName() framework.TypedName { return r.tn }
func (r *remover) Score(context.Context, *framework.CycleState, *framework.LLMRequest, []*framework.Endpoint) map[string]float64 {
	return nil
}
func (r *remover) RemoveEndpoint(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, key)
}

func healthStatus(t *testing.T, conn *grpc.ClientConn, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health %q: %v", service, err)
	}
	return resp.GetStatus()
}

func TestServerLifecycle(t *testing.T) {
	src := &source{eps: []*framework.EndpointMetadata{
		{Address: "127.0.0.1", Port: 18001}, {Address: "127.0.0.1", Port: 18002}}}
	rm := &remover{}
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	reg.MustRegister("test-remover", func(name string, _ json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
		rm.tn = framework.TypedName{Type: "test-remover", Name: name}
		return rm, nil
	})
	cfg, err := framework.LoadConfig([]byte(`
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: test-remover
- type: queue-scorer
- type: prefix-cache-scorer
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := eppserver.Start(ctx, eppserver.Options{
		Config: cfg, Registry: reg, Discovery: src,
		GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := grpc.NewClient(srv.HealthAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	if got := healthStatus(t, hc, "liveness"); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness before sync: %v", got)
	}
	if got := healthStatus(t, hc, "readiness"); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("readiness before sync: %v, want NOT_SERVING", got)
	}
	src.synced.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for _, name := range eppserver.HealthServices {
		for healthStatus(t, hc, name) != healthpb.HealthCheckResponse_SERVING {
			if time.Now().After(deadline) {
				t.Fatalf("health %q not SERVING after sync", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// One request through ext_proc so the request metrics have samples.
	conn, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := healthStatus(t, conn, extprocv3.ExternalProcessor_ServiceDesc.ServiceName); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health on the ext_proc port: %v", got)
	}
	pick := process(t, conn)
	if pick != "127.0.0.1:18001" && pick != "127.0.0.1:18002" {
		t.Fatalf("pick %q", pick)
	}

	resp, err := http.Get("http://" + srv.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`eppkit_epp_scheduling_duration_seconds_count 1`,
		`eppkit_epp_requests_total{code="200"} 1`,
		`eppkit_epp_plugin_duration_seconds_count{extension_point="Scorer",plugin="queue-scorer/queue-scorer"} 1`,
		`eppkit_epp_plugin_duration_seconds_count{extension_point="PrepareData",plugin="approx-prefix-cache-producer/approx-prefix-cache-producer"} 1`,
		`eppkit_epp_prefix_index_size{plugin="approx-prefix-cache-producer/approx-prefix-cache-producer"}`,
		`eppkit_epp_pool_ready_endpoints 2`,
		`eppkit_epp_pool_average_queue_size 0`,
		`eppkit_epp_prefix_hit_ratio 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	src.remove("127.0.0.1:18002")
	rm.mu.Lock()
	removed := slices.Clone(rm.removed)
	rm.mu.Unlock()
	if !slices.Equal(removed, []string{"127.0.0.1:18002"}) {
		t.Fatalf("RemoveEndpoint calls %v, want [127.0.0.1:18002]", removed)
	}

	cancel()
	select {
	case <-srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("server did not shut down")
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

// process sends one completions request and returns the pick.
func process(t *testing.T, conn *grpc.ClientConn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdrs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(`{"model":"m","prompt":"hello there"}`), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var pick string
	for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			pick = string(h.GetHeader().GetRawValue())
		}
	}
	_ = st.CloseSend()
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	return pick
}

func TestSecureServing(t *testing.T) {
	tlsCfg, err := eppserver.SelfSignedTLS()
	if err != nil {
		t.Fatal(err)
	}
	src := &source{eps: []*framework.EndpointMetadata{{Address: "127.0.0.1", Port: 18001}}}
	src.synced.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := eppserver.Start(ctx, eppserver.Options{Discovery: src, GRPCAddr: "127.0.0.1:0", TLS: tlsCfg,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(nil, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A client that verifies the chain must refuse the self-signed certificate…
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if _, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a verifying client accepted the self-signed certificate")
	}
	// …and one that skips verification gets an answer over TLS; plaintext gets none.
	ins, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(insecureTLS())))
	if err != nil {
		t.Fatal(err)
	}
	defer ins.Close()
	deadline := time.Now().Add(5 * time.Second)
	for healthStatus(t, ins, "") != healthpb.HealthCheckResponse_SERVING {
		if time.Now().After(deadline) {
			t.Fatal("not SERVING over TLS")
		}
		time.Sleep(10 * time.Millisecond)
	}
	plain, _ := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer plain.Close()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	if _, err := healthpb.NewHealthClient(plain).Check(pctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a plaintext client got an answer from the TLS server")
	}
}

func TestBadConfigFailsStart(t *testing.T) {
	cfg, err := framework.LoadConfig([]byte(`
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-scorer
  parameters:
    blockSze: 3
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = eppserver.Start(context.Background(), eppserver.Options{Config: cfg, Discovery: &source{}, GRPCAddr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "blockSze") {
		t.Fatalf("Start error %v, want one naming blockSze", err)
	}
}
