package interceptor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
	"github.com/eppkit/eppkit/selfcheck/mutant"
)

const (
	pickA = "127.0.10.1:8000"
	pickB = "127.0.10.2:8000"
)

// epp is a scripted upstream: it picks pickA, then pickB, alternately (header and metadata
// agree), echoes the body in 1000-byte chunks with Content-Length and a generated x-request-id
// when the request has none, sets x-eppkit-profile on the response headers, and refuses with
// 400 a body "bad", with 503 a request whose subset hint names 10.9.9.9.
func epp(t *testing.T) *extproctest.Server {
	t.Helper()
	n := 0
	srv, err := extproctest.Start(extproctest.Script{
		OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
			switch string(seen.Body) {
			case "ttl", "full":
				reason := map[string]string{"ttl": "rejected-ttl-expired", "full": "rejected-saturated"}[string(seen.Body)]
				return []*extprocv3.ProcessingResponse{extproctest.Immediate(429, map[string]string{"x-llm-d-request-dropped-reason": reason}, []byte("flow control"))}
			}
			if string(seen.Body) == "bad" {
				return []*extprocv3.ProcessingResponse{extproctest.Immediate(400, map[string]string{"content-type": "text/plain"}, []byte("bad body"))}
			}
			if hint, ok := extproctest.SubsetHint(seen.RequestMetadata); ok && len(hint) > 0 && hint[0] == "10.9.9.9:8000" {
				return []*extprocv3.ProcessingResponse{extproctest.Immediate(503, nil, []byte("no endpoint"))}
			}
			pick := pickA
			if n%2 == 1 {
				pick = pickB
			}
			n++
			extra := map[string]string{}
			if seen.Headers["x-request-id"] == "" {
				extra["x-request-id"] = "generated-" + strconv.Itoa(n)
			}
			out := extproctest.PickResponses(pick, extra, seen.Body, 1000, !seen.HeadersEOS)
			// Every candidate's score, as llm-d-router v0.10.0 with --emit-endpoint-scores.
			lb := out[0].GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue()
			lb.Fields["x-gateway-destination-endpoint-scores"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				pickA: structpb.NewNumberValue(2), pickB: structpb.NewNumberValue(1)}})
			return out
		},
		OnResponseHeaders: func(*extproctest.Seen) []*extprocv3.ProcessingResponse {
			return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
					extproctest.HeaderOption("x-eppkit-profile", "default"), extproctest.HeaderOption("x-session-token", "dG9rZW4=")}}}}}}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func start(t *testing.T, upstream string, m mutant.Name) *Interceptor {
	t.Helper()
	i, err := Start("127.0.0.1:0", Options{Upstream: upstream, Mutant: m, SheddableObjective: "sheddable"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = i.Close() })
	return i
}

func open(t *testing.T, addr string) *extprocclient.Stream {
	t.Helper()
	c, err := extprocclient.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	st, err := c.Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

func request(body string, hint []string, extra map[string]string) extprocclient.Request {
	return extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", "/v1/completions", "gw", []byte(body), extra),
		Body: []byte(body), SubsetHint: hint}
}

// requestTo is a request with body to path.
func requestTo(path, body string) extprocclient.Request {
	return extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", path, "gw", []byte(body), nil), Body: []byte(body)}
}

// mustRefuse400 fails unless req is refused with 400 and the next request on the stream, a
// plain completion, is routed (the refused request's EPP answers do not leak into it).
func mustRefuse400(t *testing.T, st *extprocclient.Stream, req extprocclient.Request) {
	t.Helper()
	if d := exchange(t, st, req); d.Immediate == nil || d.Immediate.Status != 400 {
		t.Errorf("%s %s: %+v, want a 400 refusal", req.Headers, req.Body, d)
	}
	if d := exchange(t, st, request("after", nil, nil)); d.Immediate != nil || d.Pick() == "" || string(d.Body) != "after" {
		t.Errorf("the request after the refusal: %+v", d)
	}
}

// mustRoute fails unless req is routed with its body.
func mustRoute(t *testing.T, st *extprocclient.Stream, req extprocclient.Request) {
	t.Helper()
	if d := exchange(t, st, req); d.Immediate != nil || d.Pick() == "" || !bytes.Equal(d.Body, req.Body) {
		t.Errorf("%s: %+v, want it routed", req.Body, d)
	}
}

func exchange(t *testing.T, st *extprocclient.Stream, req extprocclient.Request) *extprocclient.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	d, err := st.Exchange(ctx, req)
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	return d
}

// endOf returns how the stream ends after the gateway half-closes it: nil for status OK.
func endOf(t *testing.T, st *extprocclient.Stream) error {
	t.Helper()
	_ = st.CloseSend()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for {
		_, err := st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// TestTransparent: without a mutant the gateway sees exactly what the EPP sends, the EPP sees
// exactly what the gateway sends, and health is proxied.
func TestTransparent(t *testing.T) {
	up := epp(t)
	i := start(t, up.Addr(), "")
	body := strings.Repeat("x", 2500)
	for _, addr := range []string{up.Addr(), i.Addr()} {
		st := open(t, addr)
		d := exchange(t, st, request(body, []string{pickA}, map[string]string{"x-gateway-inference-objective": "o", "x-slo-ttft-ms": "5"}))
		if d.PickHeader != d.PickMetadata || d.ContentLength != "2500" || !bytes.Equal(d.Body, []byte(body)) || d.BodyChunks != 3 ||
			d.Headers["x-request-id"] == "" || d.Headers["x-gateway-inference-objective"] != "" {
			t.Errorf("%s: decision %+v", addr, d)
		}
		bad := exchange(t, st, request("bad", nil, nil))
		if bad.Immediate == nil || bad.Immediate.Status != 400 {
			t.Errorf("%s: bad body answered %+v", addr, bad.Immediate)
		}
		if err := endOf(t, st); err != nil {
			t.Errorf("%s: stream ended with %v, want OK", addr, err)
		}
	}
	seen := up.Seen()
	if len(seen) != 4 || seen[2].Headers["x-slo-ttft-ms"] != "5" || seen[2].Headers["x-gateway-inference-objective"] != "o" {
		t.Fatalf("the EPP saw %d requests; through the interceptor: %+v", len(seen), seen[2].Headers)
	}
	if hint, ok := extproctest.SubsetHint(seen[2].RequestMetadata); !ok || len(hint) != 1 {
		t.Errorf("subset hint through the interceptor: %v %v", hint, ok)
	}

	hs := health.NewServer()
	hs.SetServingStatus("readiness", healthpb.HealthCheckResponse_SERVING)
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	hi, err := Start("127.0.0.1:0", Options{Upstream: up.Addr(), UpstreamHealth: lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hi.Close() })
	conn, err := grpc.NewClient(hi.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "readiness"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health through the interceptor: %v, %v", resp, err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown health service through the interceptor: %v, want NotFound", err)
	}
}

// TestEachMutantBreaksItsRule: every protocol mutant changes what its rule looks at, in front
// of the scripted EPP.
func TestEachMutantBreaksItsRule(t *testing.T) {
	long := strings.Repeat("y", 2500)
	cases := map[mutant.Name]func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server){
		mutant.HeaderMetadataDisagree: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			exchange(t, st, request("a", nil, nil))
			d := exchange(t, st, request("b", nil, nil))
			if d.PickHeader == d.PickMetadata || d.PickHeader != pickB || d.PickMetadata != pickA {
				t.Errorf("second pick: header %q metadata %q, want %q and %q", d.PickHeader, d.PickMetadata, pickB, pickA)
			}
		},
		mutant.SubsetIgnored: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", []string{pickB}, nil))
			exchange(t, st, request("a", []string{}, nil))
			seen := up.Seen()
			if _, ok := extproctest.SubsetHint(seen[0].RequestMetadata); ok {
				t.Error("a non-empty hint reached the EPP")
			}
			if hint, ok := extproctest.SubsetHint(seen[1].RequestMetadata); !ok || len(hint) != 0 {
				t.Errorf("the empty hint: %v %v, want it to reach the EPP", hint, ok)
			}
		},
		mutant.NoEndpoints500: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			if d := exchange(t, st, request("a", []string{"10.9.9.9:8000"}, nil)); d.Immediate == nil || d.Immediate.Status != 500 {
				t.Errorf("503 became %+v, want 500", d.Immediate)
			}
		},
		mutant.BadRequest500: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			if d := exchange(t, st, request("bad", nil, nil)); d.Immediate == nil || d.Immediate.Status != 500 {
				t.Errorf("400 became %+v, want 500", d.Immediate)
			}
		},
		mutant.StreamClosedAfterRefuse: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			exchange(t, st, request("bad", nil, nil))
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if _, err := st.Recv(ctx); !errors.Is(err, io.EOF) {
				t.Errorf("after the refusal: %v, want the stream ended (EOF) without a half-close", err)
			}
		},
		mutant.RefusalBreaksStream: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			exchange(t, st, request("bad", nil, nil))
			if err := endOf(t, st); status.Code(err) != codes.Internal {
				t.Errorf("after the refusal the stream ended with %v, want Internal", err)
			}
		},
		mutant.BodyNotChunked: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			if d := exchange(t, st, request(long, nil, nil)); d.BodyChunks != 1 || d.MaxChunk != len(long) || string(d.Body) != long {
				t.Errorf("body in %d chunks (max %d), want one of %d", d.BodyChunks, d.MaxChunk, len(long))
			}
		},
		mutant.ContentLengthWrong: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			if d := exchange(t, st, request(long, nil, nil)); d.ContentLength != "2501" {
				t.Errorf("Content-Length %q, want 2501", d.ContentLength)
			}
		},
		mutant.SLOIgnored: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", nil, map[string]string{"x-slo-ttft-ms": "5", "x-slo-tpot-ms": "1", "x-other": "k"}))
			if h := up.Seen()[0].Headers; h["x-slo-ttft-ms"] != "" || h["x-slo-tpot-ms"] != "" || h["x-other"] != "k" {
				t.Errorf("the EPP saw %v", h)
			}
		},
		mutant.CriticalShed: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", nil, nil))
			exchange(t, st, request("a", nil, map[string]string{"x-gateway-inference-objective": "critical"}))
			for _, s := range up.Seen() {
				if s.Headers["x-gateway-inference-objective"] != "sheddable" {
					t.Errorf("the EPP saw objective %q, want sheddable", s.Headers["x-gateway-inference-objective"])
				}
			}
		},
		mutant.UsageSplitDonePanics: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			d := exchange(t, st, request("a", nil, nil))
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_, err := st.Respond(ctx, extprocclient.Response{
				Headers: []extprocclient.Header{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "text/event-stream"}},
				Chunks:  [][]byte{[]byte("data: {}\n\ndata: [DO"), []byte("NE]\n\n")}, Served: d.Pick()})
			if err == nil {
				t.Error("a response with data: [DONE] split across chunks passed")
			}
		},
		mutant.RequestIDMissing: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			if d := exchange(t, st, request("a", nil, nil)); d.Headers["x-request-id"] != "" {
				t.Errorf("generated x-request-id %q reached the gateway", d.Headers["x-request-id"])
			}
		},
		mutant.ModelRewriteIgnored: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", nil, map[string]string{"x-gateway-model-name-rewrite": "m2"}))
			if h := up.Seen()[0].Headers; h["x-gateway-model-name-rewrite"] != "" {
				t.Errorf("the EPP saw %v", h)
			}
		},
		mutant.InputHeadersEchoed: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			if d := exchange(t, st, request("a", nil, map[string]string{"x-gateway-inference-objective": "o"})); d.Headers["x-gateway-inference-objective"] != "o" {
				t.Errorf("headers set %v, want the objective echoed", d.Headers)
			}
		},
		mutant.LLMDRewriteHeaderIgnored: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", nil, map[string]string{"x-llm-d-model-name-rewrite": "m2", "x-gateway-model-name-rewrite": "m3"}))
			if h := up.Seen()[0].Headers; h["x-llm-d-model-name-rewrite"] != "" || h["x-gateway-model-name-rewrite"] != "m3" {
				t.Errorf("the EPP saw %v, want only the legacy name", h)
			}
		},
		mutant.LLMDObjectiveHeaderIgnored: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", nil, map[string]string{"x-llm-d-inference-objective": "o", "x-llm-d-model-name-rewrite": "m"}))
			if h := up.Seen()[0].Headers; h["x-llm-d-inference-objective"] != "" || h["x-llm-d-model-name-rewrite"] != "m" {
				t.Errorf("the EPP saw %v, want no objective and the rewrite", h)
			}
		},
		mutant.LegacyControlHeaderWins: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", nil, map[string]string{"x-llm-d-model-name-rewrite": "new", "x-gateway-model-name-rewrite": "old",
				"x-llm-d-slo-ttft-ms": "5"}))
			h := up.Seen()[0].Headers
			if h["x-llm-d-model-name-rewrite"] != "" || h["x-gateway-model-name-rewrite"] != "old" || h["x-llm-d-slo-ttft-ms"] != "5" {
				t.Errorf("the EPP saw %v, want the new rewrite name dropped and the lone new SLO kept", h)
			}
		},
		mutant.LLMDInputHeadersEchoed: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			if d := exchange(t, st, request("a", nil, map[string]string{"x-llm-d-inference-objective": "o"})); d.Headers["x-llm-d-inference-objective"] != "o" {
				t.Errorf("headers set %v, want the objective echoed", d.Headers)
			}
		},
		mutant.MalformedObjectiveIgnored: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", nil, map[string]string{"x-llm-d-inference-objective": "Bad Name", "x-gateway-inference-objective": "good-name"}))
			h := up.Seen()[0].Headers
			if _, ok := h["x-llm-d-inference-objective"]; ok || h["x-gateway-inference-objective"] != "good-name" {
				t.Errorf("the EPP saw %v, want the malformed objective removed and the valid one kept", h)
			}
		},
		mutant.ModelNameNotRestored: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			body := `{"model":"base","prompt":"x"}`
			d := exchange(t, st, request(body, nil, map[string]string{"x-llm-d-model-name-rewrite": "lora"}))
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			rr, err := st.Respond(ctx, extprocclient.Response{Headers: []extprocclient.Header{{Key: ":status", Value: "200"}}, Served: d.Pick(),
				Chunks: [][]byte{[]byte(`{"model":`), []byte(`"lora"}`)}})
			if err != nil || string(rr.Body) != `{"model":"lora"}` || rr.BodyChunks != 2 {
				t.Errorf("response %q in %d chunks (%v), want the model server's body chunk for chunk", rr.Body, rr.BodyChunks, err)
			}
		},
		mutant.ModelNameRestoredPerChunk: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			body := `{"model":"base","prompt":"x"}`
			d := exchange(t, st, request(body, nil, map[string]string{"x-gateway-model-name-rewrite": "lora"}))
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			rr, err := st.Respond(ctx, extprocclient.Response{Headers: []extprocclient.Header{{Key: ":status", Value: "200"}}, Served: d.Pick(),
				Chunks: [][]byte{[]byte("data: {\"model\":\"lora\"}\n\ndata: {\"mod"), []byte("el\":\"lora\"}\n\n")}})
			want := "data: {\"model\":\"base\"}\n\ndata: {\"model\":\"lora\"}\n\n"
			if err != nil || string(rr.Body) != want {
				t.Errorf("response %q (%v), want %q: whole members restored, the split one missed", rr.Body, err, want)
			}
		},
		mutant.EndpointScoresPickedOnly: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			d := exchange(t, st, request("a", nil, nil))
			scores := d.DynamicMetadata.GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint-scores"].GetStructValue().GetFields()
			if len(scores) != 1 || scores[d.Pick()] == nil {
				t.Errorf("scores %v, want only the pick %s", scores, d.Pick())
			}
		},
		mutant.SessionTokenIgnored: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", nil, map[string]string{"x-session-token": "dG9rZW4="}))
			if h := up.Seen()[0].Headers; h["x-session-token"] != "" {
				t.Errorf("the EPP saw %v", h)
			}
		},
		mutant.SessionTokenNotReturned: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			d := exchange(t, st, request("a", nil, nil))
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			rr, err := st.Respond(ctx, extprocclient.Response{Headers: []extprocclient.Header{{Key: ":status", Value: "200"}}, Served: d.Pick()})
			if err != nil || rr.Headers["x-session-token"] != "" || rr.Headers["x-eppkit-profile"] != "default" {
				t.Errorf("response headers %v, %v; want no x-session-token, the rest kept", rr.Headers, err)
			}
		},
		mutant.MalformedSessionTokenIgnored: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", nil, map[string]string{"x-session-token": "%%%"}))
			exchange(t, st, request("b", nil, map[string]string{"x-session-token": "dG9rZW4="}))
			seen := up.Seen()
			if _, ok := seen[0].Headers["x-session-token"]; ok || seen[1].Headers["x-session-token"] != "dG9rZW4=" {
				t.Errorf("the EPP saw %v then %v; want the malformed token removed, the valid one kept", seen[0].Headers, seen[1].Headers)
			}
		},
		mutant.FCPriorityIgnored: func(t *testing.T, st *extprocclient.Stream, up *extproctest.Server) {
			exchange(t, st, request("a", nil, map[string]string{"x-llm-d-inference-objective": "o", "x-gateway-inference-objective": "p", "x-keep": "1"}))
			if h := up.Seen()[0].Headers; h["x-llm-d-inference-objective"] != "" || h["x-gateway-inference-objective"] != "" || h["x-keep"] != "1" {
				t.Errorf("the EPP saw %v, want no objective", h)
			}
		},
		mutant.FCTTLNeverExpires: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			st.SetMessageTimeout(300 * time.Millisecond)
			if err := st.SendRequest(request("ttl", nil, nil)); err != nil {
				t.Fatal(err)
			}
			if d, err := st.ReadDecision(t.Context(), false); !errors.Is(err, extprocclient.ErrMessageTimeout) {
				t.Errorf("the TTL refusal reached the gateway: %+v, %v", d, err)
			}
		},
		mutant.FCFullBandWaits: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			st.SetMessageTimeout(10 * time.Second)
			began := time.Now()
			d := exchange(t, st, request("full", nil, nil))
			if d.Immediate == nil || d.Immediate.Headers["x-llm-d-request-dropped-reason"] != "rejected-saturated" || time.Since(began) < fcFullBandDelay {
				t.Errorf("refusal %+v after %v, want it after %v", d.Immediate, time.Since(began), fcFullBandDelay)
			}
		},
		mutant.FCDroppedReasonMissing: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			d := exchange(t, st, request("ttl", nil, nil))
			if d.Immediate == nil || d.Immediate.Status != 429 || d.Immediate.Headers["x-llm-d-request-dropped-reason"] != "" {
				t.Errorf("refusal %+v, want 429 without a dropped reason", d.Immediate)
			}
		},
		mutant.FCCancelNotPropagated: func(t *testing.T, _ *extprocclient.Stream, _ *extproctest.Server) {
			// The mutant and the transparent proxy in front of an EPP that records when its stream ends.
			for _, tc := range []struct {
				m        mutant.Name
				detached bool
			}{{"", false}, {mutant.FCCancelNotPropagated, true}} {
				ended := make(chan struct{})
				srv := grpc.NewServer()
				extprocv3.RegisterExternalProcessorServer(srv, &waitingEPP{ended: ended})
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go func() { _ = srv.Serve(lis) }()
				i := start(t, lis.Addr().String(), tc.m)
				st := open(t, i.Addr())
				if err := st.SendRequestHeaders([]extprocclient.Header{{Key: ":path", Value: "/v1/completions"}}, false, extprocclient.Metadata{}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond)
				st.Close()
				select {
				case <-ended:
					if tc.detached {
						t.Errorf("%s: the EPP's stream ended with the gateway's", tc.m)
					}
				case <-time.After(500 * time.Millisecond):
					if !tc.detached {
						t.Errorf("transparent: the EPP's stream outlived the gateway's")
					}
				}
				srv.Stop()
			}
		},
		mutant.ConversationsRefused: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			mustRoute(t, st, requestTo("/v1/completions", `{"model":"m","prompt":"one"}`))
			mustRefuse400(t, st, requestTo("/v1/conversations", `{"model":"m","items":[{"type":"message"}]}`))
		},
		mutant.RenderRefused: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			mustRoute(t, st, requestTo("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`))
			mustRefuse400(t, st, requestTo("/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"x"}]}`))
		},
		mutant.ImagesRefused: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			mustRefuse400(t, st, requestTo("/v1/images/generations", `{"model":"m","prompt":"x"}`))
		},
		mutant.CountTokensModelRequired: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			mustRoute(t, st, requestTo("/v1/messages/count_tokens", `{"model":"m","messages":[]}`))
			mustRefuse400(t, st, requestTo("/v1/messages/count_tokens", `{"messages":[]}`))
		},
		mutant.GenerateRefused: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			mustRefuse400(t, st, requestTo("/inference/v1/generate", `{"model":"m","token_ids":[1]}`))
		},
		mutant.GRPCRefused: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			mustRoute(t, st, requestTo("/inference/v1/generate", `{"model":"m","token_ids":[1]}`))
			mustRefuse400(t, st, requestTo("/vllm.grpc.engine.VllmEngine/Generate", "\x00\x00\x00\x00\x03\x1a\x01x"))
		},
		mutant.PromptListRefused: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			mustRoute(t, st, requestTo("/v1/completions", `{"model":"m","prompt":"one"}`))
			mustRoute(t, st, requestTo("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":["x"]}]}`))
			mustRefuse400(t, st, requestTo("/v1/completions", `{"model":"m","prompt":["one","two"]}`))
			mustRefuse400(t, st, requestTo("/v1/completions?x=1", `{"model":"m","prompt":[1,2,3]}`))
		},
		mutant.EmbeddingsAsCompletions: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			mustRoute(t, st, requestTo("/v1/completions", `{"model":"m","prompt":"one"}`))
			mustRefuse400(t, st, requestTo("/v1/embeddings", `{"model":"m","input":"one"}`))
		},
		mutant.ResponsesRefused: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			mustRoute(t, st, requestTo("/v1/completions", `{"model":"m","prompt":"one"}`))
			mustRefuse400(t, st, requestTo("/v1/responses", `{"model":"m","input":"one"}`))
		},
		mutant.HeadersAppended: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			d := exchange(t, st, request(long, nil, nil))
			set := d.Responses[0].GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()
			if len(set) == 0 {
				t.Fatal("no header set")
			}
			for _, o := range set {
				if o.GetAppendAction() != corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD {
					t.Errorf("header %s: append_action %v, want APPEND_IF_EXISTS_OR_ADD", o.GetHeader().GetKey(), o.GetAppendAction())
				}
			}
		},
		mutant.DroppedReasonEverywhere: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			d := exchange(t, st, request("bad", nil, nil))
			if d.Immediate == nil || d.Immediate.Status != 400 || string(d.Immediate.Body) != "bad body" ||
				d.Immediate.Headers["x-llm-d-request-dropped-reason"] != "rejected-shutting-down" || d.Immediate.Headers["content-type"] != "text/plain" {
				t.Errorf("refusal %+v, want 400 with its body, its headers and a dropped reason", d.Immediate)
			}
			d = exchange(t, st, request("x", []string{"10.9.9.9:8000"}, nil))
			if d.Immediate == nil || d.Immediate.Headers["x-llm-d-request-dropped-reason"] != "rejected-no-endpoints" {
				t.Errorf("refusal %+v, want 503 rejected-no-endpoints", d.Immediate)
			}
		},
		mutant.MetadataWithoutPort: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			d := exchange(t, st, request("a", nil, nil))
			if d.PickHeader != pickA || d.PickMetadata != "127.0.10.1" {
				t.Errorf("header %q metadata %q, want the header %q intact and the metadata without its port", d.PickHeader, d.PickMetadata, pickA)
			}
		},
		mutant.BodyNotStreamedBack: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			st.SetMessageTimeout(300 * time.Millisecond)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			d, err := st.Exchange(ctx, request(long, nil, nil))
			var se *extprocclient.StallError
			if !errors.As(err, &se) || se.Phase != extprocclient.PhaseRequestBody || d.BodyChunks != 0 || d.PickHeader != pickA {
				t.Errorf("exchange: %v, %d body responses, pick %q; want the headers answered (pick %s) and the body chunks unanswered",
					err, d.BodyChunks, d.PickHeader, pickA)
			}
		},
		mutant.RefusalAsGRPCError: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			d, err := st.Exchange(ctx, request("a", []string{"10.9.9.9:8000"}, nil))
			if status.Code(errors.Unwrap(err)) != codes.Unavailable || d.Immediate != nil {
				t.Errorf("503 refusal: %v, immediate %+v; want the stream ended with Unavailable and no ImmediateResponse", err, d.Immediate)
			}
		},
		mutant.LatePick: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			d := exchange(t, st, request(long, nil, nil))
			rt, err := d.Routing(extprocclient.SemanticsEnvoyExtProc)
			if err != nil || d.PickHeader != "" || d.PickMetadata != pickA || rt.Pick() != "" {
				t.Errorf("header %q, metadata %q, routed on %q (%v); want the pick only as metadata after the router chose", d.PickHeader, d.PickMetadata, rt.Pick(), err)
			}
		},
		mutant.ServingBeforeReady: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			if d := exchange(t, st, request("a", nil, nil)); d.Immediate == nil || d.Immediate.Status != 503 {
				t.Errorf("a request right after start: %+v, want ImmediateResponse 503", d.Immediate)
			}
		},
		mutant.ProfileHeaderMissing: func(t *testing.T, st *extprocclient.Stream, _ *extproctest.Server) {
			d := exchange(t, st, request("a", nil, nil))
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			rr, err := st.Respond(ctx, extprocclient.Response{Headers: []extprocclient.Header{{Key: ":status", Value: "200"}}, Served: d.Pick()})
			if err != nil || rr.Headers["x-eppkit-profile"] != "" {
				t.Errorf("response headers %v, %v; want no x-eppkit-profile", rr, err)
			}
		},
	}
	for _, m := range Mutants() {
		check, ok := cases[m]
		if !ok {
			check, ok = protocolCases[m]
		}
		if !ok {
			t.Errorf("mutant %s has no case here", m)
			continue
		}
		t.Run(string(m), func(t *testing.T) {
			up := epp(t)
			check(t, open(t, start(t, up.Addr(), m).Addr()), up)
		})
	}
}

// waitingEPP answers nothing; it closes ended when its stream's context ends.
type waitingEPP struct {
	extprocv3.UnimplementedExternalProcessorServer
	ended chan struct{}
}

func (w *waitingEPP) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	<-srv.Context().Done()
	close(w.ended)
	return nil
}

func TestStartErrors(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{}, "Upstream"},
		{Options{Upstream: "127.0.0.1:1", Mutant: mutant.KVIgnored}, "not a protocol mutant"},
		{Options{Upstream: "127.0.0.1:1", Mutant: mutant.CriticalShed}, "SheddableObjective"},
	} {
		if _, err := Start("127.0.0.1:0", tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start(%+v) error %v, want %q", tc.opts, err, tc.want)
		}
	}
}
