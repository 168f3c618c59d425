package gateway_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/internal/vllmgrpc"
)

// startFakeVLLM starts a fake vLLM (HTTP and, over h2c, vLLM's gRPC engine API on one port).
func startFakeVLLM(t *testing.T, pod string) *vllm.Instance {
	t.Helper()
	cfg := vllm.DefaultConfig()
	cfg.Model, cfg.Port, cfg.Seed, cfg.PodName, cfg.Host = "m", 0, 1, pod, "127.0.0.1"
	cfg.Mode = vllm.ModeEcho
	inst, err := vllm.Start(cfg, vllm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.Close)
	return inst
}

// serveGateway serves g on a loopback listener with gateway.NewServer (HTTP/1.1 and h2c).
func serveGateway(t *testing.T, g *gateway.Gateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := gateway.NewServer(g)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestGRPCThroughH2CPool sends a real grpc-go Generate stream through the gateway stand-in to an
// h2c pool of two fake vLLMs: the EPP sees gRPC's headers and the framed GenerateRequest, the
// picked endpoint serves it, the tokens and the OK status (a trailer) come back.
func TestGRPCThroughH2CPool(t *testing.T) {
	a, b := startFakeVLLM(t, "pod-a"), startFakeVLLM(t, "pod-b")
	bAddr := strings.TrimPrefix(b.URL(), "http://")
	epp := startEPP(t, pickScript(bAddr, nil, 0))
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), AppProtocol: gateway.AppProtocolH2C,
		Endpoints: []string{strings.TrimPrefix(a.URL(), "http://"), bAddr}})
	cc, err := grpc.NewClient(serveGateway(t, g), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := vllmgrpc.NewVllmEngineClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := uint32(5)
	req := &vllmgrpc.GenerateRequest{RequestId: "g1", Stream: true, SamplingParams: &vllmgrpc.SamplingParams{MaxTokens: &n},
		Input: &vllmgrpc.GenerateRequest_Tokenized{Tokenized: &vllmgrpc.TokenizedInput{InputIds: []uint32{11, 12, 13, 14, 15, 16}}}}
	var hdr metadata.MD
	st, err := client.Generate(ctx, req, grpc.Header(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	var tokens []uint32
	var complete *vllmgrpc.GenerateComplete
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		tokens = append(tokens, r.GetChunk().GetTokenIds()...)
		if r.GetComplete() != nil {
			complete = r.GetComplete()
		}
	}
	if len(tokens) != 5 || tokens[0] != 11 || complete == nil || complete.CompletionTokens != 5 {
		t.Fatalf("tokens %v complete %v, want the 5 echoed ids 11.. and a GenerateComplete", tokens, complete)
	}
	if got := hdr.Get("x-inference-pod"); len(got) != 1 || got[0] != "pod-b" {
		t.Errorf("x-inference-pod %v, want [pod-b] (the pick)", got)
	}
	if got := hdr.Get(gateway.RoutedToHeader); len(got) != 1 || got[0] != bAddr {
		t.Errorf("%s %v, want [%s]", gateway.RoutedToHeader, got, bAddr)
	}
	seen := epp.Seen()
	if len(seen) != 1 {
		t.Fatalf("EPP saw %d requests, want 1", len(seen))
	}
	s := seen[0]
	if s.Headers[":path"] != "/vllm.grpc.engine.VllmEngine/Generate" || !strings.HasPrefix(s.Headers["content-type"], "application/grpc") || s.Headers[":method"] != "POST" {
		t.Errorf("EPP headers :path %q content-type %q :method %q, want gRPC's", s.Headers[":path"], s.Headers["content-type"], s.Headers[":method"])
	}
	if len(s.Body) < 5 || s.Body[0] != 0 || int(binary.BigEndian.Uint32(s.Body[1:5])) != len(s.Body)-5 {
		t.Fatalf("EPP body %x is not one uncompressed gRPC frame", s.Body)
	}
	var got vllmgrpc.GenerateRequest
	if err := proto.Unmarshal(s.Body[5:], &got); err != nil || !proto.Equal(&got, req) {
		t.Errorf("EPP body decodes to %v (%v), want the request sent", &got, err)
	}
	if s.ResponseTrailers["grpc-status"] != "0" {
		t.Errorf("EPP response trailers %v, want grpc-status 0", s.ResponseTrailers)
	}
}

// TestGRPCStatusThroughGateway: a gRPC error status (a trailers-only response) reaches the
// client with its code and message.
func TestGRPCStatusThroughGateway(t *testing.T) {
	a := startFakeVLLM(t, "pod-a")
	epp := startEPP(t, pickScript(strings.TrimPrefix(a.URL(), "http://"), nil, 0))
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), AppProtocol: gateway.AppProtocolH2C})
	cc, err := grpc.NewClient(serveGateway(t, g), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := vllmgrpc.NewVllmEngineClient(cc).Generate(context.Background(), &vllmgrpc.GenerateRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"input"`) {
		t.Fatalf("err = %v, want InvalidArgument naming \"input\"", err)
	}
}

// TestAppProtocolHTTPStaysHTTP1: without appProtocol h2c the gateway speaks HTTP/1.1 upstream.
func TestAppProtocolHTTPStaysHTTP1(t *testing.T) {
	for _, tc := range []struct {
		proto string
		major int
	}{{"", 1}, {gateway.AppProtocolHTTP, 1}, {gateway.AppProtocolH2C, 2}} {
		var major atomic.Int32
		// An upstream that speaks both, so the gateway's choice is what the test sees; its
		// protocols are set before it starts (the server reads them when it serves).
		u := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			major.Store(int32(r.ProtoMajor))
			w.Header().Set("x-inference-pod", "pod-a")
			w.WriteHeader(http.StatusOK)
		}))
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		u.Config.Protocols = p
		u.Start()
		t.Cleanup(u.Close)
		epp := startEPP(t, pickScript(u.Listener.Addr().String(), nil, 0))
		g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), AppProtocol: tc.proto})
		res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"x"}`)})
		if err != nil || res.Status != 200 {
			t.Fatalf("%q: %v %v", tc.proto, res, err)
		}
		if got := int(major.Load()); got != tc.major {
			t.Errorf("appProtocol %q: upstream saw HTTP/%d, want HTTP/%d", tc.proto, got, tc.major)
		}
	}
	if _, err := gateway.New(gateway.Config{Mode: gateway.ModeRoundRobin, Endpoints: []string{"127.0.0.1:1"}, AppProtocol: "h2"}); err == nil || !strings.Contains(err.Error(), "AppProtocol") {
		t.Errorf("AppProtocol h2: err %v, want one naming AppProtocol", err)
	}
}
