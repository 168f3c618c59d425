package extproc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eppkit/eppkit/internal/promscrape"
	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/extproc"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
)

// staticSource is a test EndpointSource.
type staticSource struct {
	mu         sync.Mutex
	eps        []*framework.EndpointMetadata
	objectives map[string]int
}

func (s *staticSource) Endpoints() []*framework.EndpointMetadata {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.eps)
}

func (s *staticSource) Priority(name string) (int, bool) {
	p, ok := s.objectives[name]
	return p, ok
}

// fakeMetrics is a test MetricsSource.
type fakeMetrics struct {
	mu    sync.Mutex
	m     map[string]*framework.Metrics
	stale map[string]bool
}

func (f *fakeMetrics) Metrics(key string) *framework.Metrics {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[key].Clone()
}

func (f *fakeMetrics) Stale(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stale[key]
}

func md(addr string, port int) *framework.EndpointMetadata {
	return &framework.EndpointMetadata{Namespace: "default", Name: fmt.Sprintf("pod-%s-%d", addr, port), PodName: "pod-" + addr, Address: addr, Port: port}
}

// hooks is a test plugin behaving by request header:
//
//	x-test-bad-request → PrepareData returns ErrBadRequest (400)
//	x-test-shed        → the admitter refuses with ErrShed (429)
//	x-test-internal    → the admitter refuses with a plain error (500)
//	x-test-filter-all  → the filter removes every endpoint (429)
//
// PrepareData writes plugin state for every request, so tests can check that EndRequest ran.
// The response hooks record what they saw.
type hooks struct {
	tn    framework.TypedName
	state *framework.PluginState

	mu        sync.Mutex
	headers   []*framework.Response
	bodies    [][]byte
	completes []framework.Response
	preReqs   int
}

const hooksStateKey = "test-hooks-state"

func (h *hooks) TypedName() framework.TypedName { return h.tn }
func (h *hooks) Produces() map[string]any       { return map[string]any{"test-hooks-key": 0} }
func (h *hooks) PrepareRequestData(_ context.Context, req *framework.LLMRequest, _ []*framework.Endpoint) error {
	h.state.Write(req.RequestID, hooksStateKey, true)
	if _, ok := req.Headers["x-test-bad-request"]; ok {
		return fmt.Errorf("test plugin refuses the request: %w", framework.ErrBadRequest)
	}
	return nil
}
func (h *hooks) AdmitRequest(_ context.Context, req *framework.LLMRequest, _ []*framework.Endpoint) error {
	if _, ok := req.Headers["x-test-shed"]; ok {
		return fmt.Errorf("test admitter: %w", framework.ErrShed)
	}
	if _, ok := req.Headers["x-test-internal"]; ok {
		return errors.New("test admitter: something broke")
	}
	return nil
}
func (h *hooks) Filter(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest, eps []*framework.Endpoint) []*framework.Endpoint {
	if _, ok := req.Headers["x-test-filter-all"]; ok {
		return nil
	}
	return eps
}
func (h *hooks) PreRequest(context.Context, *framework.LLMRequest, *framework.SchedulingResult) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.preReqs++
}
func (h *hooks) ResponseHeader(_ context.Context, _ *framework.LLMRequest, resp *framework.Response) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := *resp
	h.headers = append(h.headers, &c)
}
func (h *hooks) ResponseBody(_ context.Context, _ *framework.LLMRequest, _ *framework.Response, chunk []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bodies = append(h.bodies, slices.Clone(chunk))
}
func (h *hooks) ResponseComplete(_ context.Context, _ *framework.LLMRequest, resp *framework.Response) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.completes = append(h.completes, *resp)
}

func (h *hooks) snapshot() (completes []framework.Response, headers []*framework.Response, preReqs int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.completes), slices.Clone(h.headers), h.preReqs
}

const testConfig = `
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: test-hooks
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: test-hooks
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
saturationDetector:
  metricsStalenessThreshold: 1h
`

type fixture struct {
	t      *testing.T
	client extprocv3.ExternalProcessorClient
	rt     *framework.Runtime
	src    *staticSource
	ms     *fakeMetrics
	hooks  *hooks
	d      *director.Director
	srv    *extproc.Server
	prom   *prometheus.Registry // the director's metrics
}

// requestCounts reads eppkit_epp_requests_total by code label.
func (f *fixture) requestCounts() map[string]float64 {
	f.t.Helper()
	fams, err := promscrape.Gather(f.prom)
	if err != nil {
		f.t.Fatal(err)
	}
	return fams.ByLabel(director.MetricRequests, "code")
}

// newFixture starts the ext_proc server over bufconn with three endpoints (10.0.0.1:8000 queue 0,
// 10.0.0.2:8000 queue 5, 10.0.0.3:8000 queue 5, all fresh), objectives "batch" = -1 and
// "critical" = 10.
//
// Each configure func is applied to the extproc.Server before it serves.
func newFixture(t *testing.T, configure ...func(*extproc.Server)) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h := &hooks{tn: framework.TypedName{Type: "test-hooks", Name: "test-hooks"}}
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	reg.MustRegister("test-hooks", func(name string, _ json.RawMessage, hd framework.Handle) (framework.Plugin, error) {
		h.tn.Name = name
		h.state = hd.PluginState()
		return h, nil
	})
	cfg, err := framework.LoadConfig([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	src := &staticSource{
		eps:        []*framework.EndpointMetadata{md("10.0.0.1", 8000), md("10.0.0.2", 8000), md("10.0.0.3", 8000)},
		objectives: map[string]int{"batch": -1, "critical": 10},
	}
	now := time.Now()
	ms := &fakeMetrics{m: map[string]*framework.Metrics{
		"10.0.0.1:8000": {WaitingQueueSize: 0, UpdateTime: now},
		"10.0.0.2:8000": {WaitingQueueSize: 5, UpdateTime: now},
		"10.0.0.3:8000": {WaitingQueueSize: 5, UpdateTime: now},
	}, stale: map[string]bool{}}
	rt, err := framework.NewRuntime(cfg, reg, framework.RuntimeOptions{Context: ctx, Seed: 1, Logger: logger, Endpoints: src.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	prom := prometheus.NewRegistry()
	obs, err := director.NewObserver(prom)
	if err != nil {
		t.Fatal(err)
	}
	d, err := director.New(director.Options{Runtime: rt, Endpoints: src, Metrics: ms, Logger: logger, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	srv := extproc.NewServer(d, logger)
	for _, c := range configure {
		c(srv)
	}
	extprocv3.RegisterExternalProcessorServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &fixture{t: t, client: extprocv3.NewExternalProcessorClient(conn), rt: rt, src: src, ms: ms, hooks: h, d: d, srv: srv, prom: prom}
}

// stream is a scripted ext_proc client stream.
type stream struct {
	t *testing.T
	s extprocv3.ExternalProcessor_ProcessClient
}

func (f *fixture) open() *stream {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	f.t.Cleanup(cancel)
	s, err := f.client.Process(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return &stream{t: f.t, s: s}
}

func headerMap(kv map[string]string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(kv[k])})
	}
	return hm
}

func (s *stream) send(m *extprocv3.ProcessingRequest) {
	s.t.Helper()
	if err := s.s.Send(m); err != nil {
		s.t.Fatalf("send: %v", err)
	}
}

func (s *stream) headers(kv map[string]string, eos bool, md *corev3.Metadata) {
	s.t.Helper()
	s.send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv), EndOfStream: eos}},
		MetadataContext: md,
	})
}

// body sends b in chunks of size bytes, the last with end_of_stream.
func (s *stream) body(b []byte, size int) {
	s.t.Helper()
	for i := 0; i < len(b) || i == 0; i += size {
		end := min(i+size, len(b))
		s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: b[i:end], EndOfStream: end == len(b)}}})
		if len(b) == 0 {
			break
		}
	}
}

func (s *stream) respHeaders(kv map[string]string, md *corev3.Metadata) {
	s.t.Helper()
	s.send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv)}},
		MetadataContext: md,
	})
}

func (s *stream) respBody(b []byte, eos bool) {
	s.t.Helper()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}})
}

func (s *stream) recv() *extprocv3.ProcessingResponse {
	s.t.Helper()
	r, err := s.s.Recv()
	if err != nil {
		s.t.Fatalf("recv: %v", err)
	}
	return r
}

// routed is what the EPP answered to one request: the header mutation and dynamic metadata of
// the request-headers response and the streamed body chunks.
type routed struct {
	immediate *extprocv3.ImmediateResponse
	// reason is the immediate response's x-llm-d-request-dropped-reason header; eppkitReason
	// whether it set the retired x-eppkit-reason.
	reason       string
	eppkitReason bool
	setHeaders   map[string][]string
	metadataDst  string
	chunks       [][]byte
}

// readRouting reads the answer to a request: an ImmediateResponse, or a request-headers
// response followed (when withBody) by body chunks up to the one with end_of_stream.
func (s *stream) readRouting(withBody bool) routed {
	s.t.Helper()
	var out routed
	r := s.recv()
	if im := r.GetImmediateResponse(); im != nil {
		out.immediate = im
		for _, h := range im.GetHeaders().GetSetHeaders() {
			mustOverwrite(s.t, h)
			switch h.GetHeader().GetKey() {
			case extproc.DroppedReasonHeader:
				out.reason = string(h.GetHeader().GetRawValue())
			case "x-eppkit-reason":
				out.eppkitReason = true
			}
		}
		return out
	}
	hr := r.GetRequestHeaders()
	if hr == nil {
		s.t.Fatalf("want a request_headers response, got %T", r.Response)
	}
	out.setHeaders = map[string][]string{}
	for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
		mustOverwrite(s.t, h)
		out.setHeaders[h.GetHeader().GetKey()] = append(out.setHeaders[h.GetHeader().GetKey()], string(h.GetHeader().GetRawValue()))
	}
	out.metadataDst = r.GetDynamicMetadata().GetFields()[extproc.DestinationEndpointNamespace].GetStructValue().
		GetFields()[extproc.DestinationEndpointKey].GetStringValue()
	for withBody {
		r := s.recv()
		br := r.GetRequestBody()
		if br == nil {
			s.t.Fatalf("want a request_body response, got %T", r.Response)
		}
		sr := br.GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			s.t.Fatal("request_body response without a streamed_response body mutation")
		}
		out.chunks = append(out.chunks, sr.GetBody())
		if sr.GetEndOfStream() {
			break
		}
	}
	return out
}

// closeAndDrain half-closes the stream and waits for the server to end it.
func (s *stream) closeAndDrain() {
	s.t.Helper()
	if err := s.s.CloseSend(); err != nil {
		s.t.Fatal(err)
	}
	for {
		if _, err := s.s.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				s.t.Fatalf("stream ended with %v, want EOF", err)
			}
			return
		}
	}
}

func subsetMetadata(list ...string) *corev3.Metadata {
	vals := make([]*structpb.Value, len(list))
	for i, s := range list {
		vals[i] = structpb.NewStringValue(s)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		extproc.SubsetHintNamespace: {Fields: map[string]*structpb.Value{
			extproc.SubsetHintKey: structpb.NewListValue(&structpb.ListValue{Values: vals}),
		}},
	}}
}

func servedMetadata(ep string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		extproc.DestinationEndpointNamespace: {Fields: map[string]*structpb.Value{
			extproc.DestinationEndpointServedKey: structpb.NewStringValue(ep),
		}},
	}}
}

// mustOverwrite fails the test unless the header mutation replaces any value the request already
// carries (SPEC §9.3: append_action OVERWRITE_IF_EXISTS_OR_ADD, the deprecated append unset).
func mustOverwrite(t *testing.T, h *corev3.HeaderValueOption) {
	t.Helper()
	// Released Envoy still honours the deprecated append field, so it must stay unset.
	legacy := h.GetAppend() //lint:ignore SA1019 the deprecated field is what released Envoy reads
	if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD || legacy != nil {
		t.Errorf("header %s: append_action %v (append %v), want OVERWRITE_IF_EXISTS_OR_ADD", h.GetHeader().GetKey(), h.GetAppendAction(), legacy)
	}
}
