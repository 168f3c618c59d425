package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

// upstream is an httptest model server that records what it received and names itself.
type upstream struct {
	name string
	srv  *httptest.Server
	mu   sync.Mutex
	got  []received
}

type received struct {
	body          []byte
	contentLength int64
	header        http.Header
	path          string
}

func newUpstream(t *testing.T, name string, handler func(w http.ResponseWriter, r *http.Request)) *upstream {
	t.Helper()
	u := &upstream{name: name}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.got = append(u.got, received{body: body, contentLength: r.ContentLength, header: r.Header.Clone(), path: r.URL.RequestURI()})
		u.mu.Unlock()
		w.Header().Set("x-inference-pod", name)
		if handler != nil {
			handler(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"served_by":"` + name + `"}`))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) addr() string { return u.srv.Listener.Addr().String() }

func (u *upstream) requests() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]received(nil), u.got...)
}

func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	_ = ln.Close()
	return a
}

func startEPP(t *testing.T, script extproctest.Script) *extproctest.Server {
	t.Helper()
	srv, err := extproctest.Start(script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func newGateway(t *testing.T, cfg gateway.Config) *gateway.Gateway {
	t.Helper()
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// pickScript picks pick and replaces the body with mutate(body) in chunks of chunk bytes.
func pickScript(pick string, mutate func([]byte) []byte, chunk int) extproctest.Script {
	return extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		body := seen.Body
		if mutate != nil {
			body = mutate(body)
		}
		return extproctest.PickResponses(pick, map[string]string{"x-picked": "yes"}, body, chunk, !seen.HeadersEOS)
	}}
}

func TestRoutesToFirstAddressWithMutatedBody(t *testing.T) {
	a, b := newUpstream(t, "pod-a", nil), newUpstream(t, "pod-b", nil)
	mutated := func(in []byte) []byte { return bytes.Repeat(append(in, ' '), 3000) } // > 3 streamed chunks
	epp := startEPP(t, pickScript(a.addr()+","+b.addr(), mutated, 62000))
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), BodyChunkSize: 1000})
	body := []byte(`{"model":"m","prompt":"hello world, this is a prompt"}`)
	res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: body, Headers: map[string]string{"Content-Type": "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 || res.Endpoint != a.addr() || res.ServedPod != "pod-a" || res.Headers.Get(gateway.RoutedToHeader) != a.addr() {
		t.Fatalf("status %d endpoint %q pod %q routed-to %q, want 200 %s pod-a", res.Status, res.Endpoint, res.ServedPod, res.Headers.Get(gateway.RoutedToHeader), a.addr())
	}
	if res.Headers.Get(gateway.DestinationHeader) != "" {
		t.Errorf("client response carries %s", gateway.DestinationHeader)
	}
	if res.PickHeader != a.addr()+","+b.addr() || res.PickMetadata != res.PickHeader {
		t.Errorf("pick header %q metadata %q", res.PickHeader, res.PickMetadata)
	}
	if len(b.requests()) != 0 {
		t.Errorf("second address got %d requests, want 0", len(b.requests()))
	}
	got := a.requests()
	want := mutated(body)
	if len(got) != 1 || !bytes.Equal(got[0].body, want) || got[0].contentLength != int64(len(want)) {
		t.Fatalf("upstream got %d requests; body %d bytes, content-length %d; want %d", len(got), len(got[0].body), got[0].contentLength, len(want))
	}
	if got[0].header.Get("x-picked") != "yes" || got[0].path != "/v1/completions" {
		t.Errorf("upstream headers %v path %q", got[0].header, got[0].path)
	}
	if res.Decision.BodyChunks < 3 {
		t.Errorf("mutated body came in %d chunks, want ≥ 3", res.Decision.BodyChunks)
	}
	seen := epp.Seen()
	if len(seen) != 1 || seen[0].BodyChunks != (len(body)+999)/1000 || !bytes.Equal(seen[0].Body, body) {
		t.Errorf("EPP saw %d requests, body chunks %d", len(seen), seen[0].BodyChunks)
	}
	if served := extproctest.Served(seen[0].ResponseMetadata); served != a.addr() {
		t.Errorf("served-endpoint metadata %q, want %s", served, a.addr())
	}
	if seen[0].ResponseHeaders[":status"] != "200" || string(seen[0].ResponseBody) != `{"served_by":"pod-a"}` || !seen[0].ResponseDone {
		t.Errorf("EPP response phase: headers %v body %q done %v", seen[0].ResponseHeaders, seen[0].ResponseBody, seen[0].ResponseDone)
	}
	if string(res.Body) != `{"served_by":"pod-a"}` {
		t.Errorf("client body %q", res.Body)
	}
}

func TestStrictAndLenientWithDeadFirstAddress(t *testing.T) {
	for _, tc := range []struct {
		mode       gateway.Mode
		wantStatus int
		wantHits   int
	}{
		{gateway.ModeStrict, http.StatusServiceUnavailable, 0},
		{gateway.ModeLenient, http.StatusOK, 1},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			b := newUpstream(t, "pod-b", nil)
			epp := startEPP(t, pickScript(deadAddr(t)+","+b.addr(), nil, 0))
			g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), Mode: tc.mode})
			res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: []byte(`{"model":"m"}`)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.wantStatus || len(b.requests()) != tc.wantHits {
				t.Errorf("status %d, second address hits %d; want %d and %d (body %s)", res.Status, len(b.requests()), tc.wantStatus, tc.wantHits, res.Body)
			}
		})
	}
}

func TestImmediateResponsePassedThrough(t *testing.T) {
	a := newUpstream(t, "pod-a", nil)
	epp := startEPP(t, extproctest.Script{OnRequest: func(*extproctest.Seen) []*extprocv3.ProcessingResponse {
		return []*extprocv3.ProcessingResponse{extproctest.Immediate(429, map[string]string{"content-type": "application/json", "x-why": "shed"}, []byte(`{"error":"shed"}`))}
	}})
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), Endpoints: []string{a.addr()}})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 429 || string(body) != `{"error":"shed"}` || resp.Header.Get("x-why") != "shed" {
		t.Errorf("client got %d %q headers %v", resp.StatusCode, body, resp.Header)
	}
	if len(a.requests()) != 0 {
		t.Errorf("upstream got %d requests after an ImmediateResponse", len(a.requests()))
	}
}

func TestFailureModes(t *testing.T) {
	stalled := startEPP(t, extproctest.Script{OnRequest: func(*extproctest.Seen) []*extprocv3.ProcessingResponse { return nil }})
	for _, tc := range []struct {
		name       string
		epp        string
		mode       gateway.FailureMode
		wantStatus int
		wantOpen   bool
	}{
		{"EPP down, close", deadAddr(t), gateway.FailClose, http.StatusInternalServerError, false},
		{"EPP down, open", deadAddr(t), gateway.FailOpen, http.StatusOK, true},
		{"EPP silent, close", stalled.Addr(), gateway.FailClose, http.StatusGatewayTimeout, false},
		{"EPP silent, open", stalled.Addr(), gateway.FailOpen, http.StatusOK, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newUpstream(t, "pod-a", nil)
			g := newGateway(t, gateway.Config{EPPAddress: tc.epp, FailureMode: tc.mode, Endpoints: []string{a.addr()}, MessageTimeout: 300 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := g.Do(ctx, &gateway.Request{Path: "/v1/completions", Body: []byte(`{"model":"m"}`)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.wantStatus || res.FailedOpen != tc.wantOpen {
				t.Errorf("status %d failed-open %v, want %d %v (body %s)", res.Status, res.FailedOpen, tc.wantStatus, tc.wantOpen, res.Body)
			}
			if tc.wantOpen && (res.Endpoint != a.addr() || len(a.requests()) != 1 || string(a.requests()[0].body) != `{"model":"m"}`) {
				t.Errorf("fail-open went to %q with %d upstream requests", res.Endpoint, len(a.requests()))
			}
		})
	}
}

func TestSubsetHint(t *testing.T) {
	a := newUpstream(t, "pod-a", nil)
	epp := startEPP(t, pickScript(a.addr(), nil, 0))
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr()})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"model":"m"}`))
	req.Header.Set(gateway.SubsetHintHeader, "10.0.0.1:8000, 10.0.0.2:8000")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if _, err := g.Do(context.Background(), &gateway.Request{Body: []byte(`{"model":"m"}`), SubsetHint: []string{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(context.Background(), &gateway.Request{Body: []byte(`{"model":"m"}`)}); err != nil {
		t.Fatal(err)
	}
	seen := epp.Seen()
	if len(seen) != 3 {
		t.Fatalf("EPP saw %d requests, want 3", len(seen))
	}
	type hint struct {
		List    []string
		Present bool
	}
	var got []hint
	for _, s := range seen {
		l, ok := extproctest.SubsetHint(s.RequestMetadata)
		got = append(got, hint{l, ok})
	}
	want := []hint{{[]string{"10.0.0.1:8000", "10.0.0.2:8000"}, true}, {[]string{}, true}, {nil, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("subset hints (-want +got):\n%s", diff)
	}
	if _, ok := seen[0].Headers[gateway.SubsetHintHeader]; ok {
		t.Error("the subset-hint header reached the EPP")
	}
	if a.requests()[0].header.Get(gateway.SubsetHintHeader) != "" {
		t.Error("the subset-hint header reached the upstream")
	}
}

func TestSSEStreamsUnbuffered(t *testing.T) {
	release := make(chan struct{})
	a := newUpstream(t, "pod-a", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: first\n\n"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	})
	epp := startEPP(t, pickScript(a.addr(), nil, 0))
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr()})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	rd := bufio.NewReader(resp.Body)
	first := make(chan string, 1)
	go func() {
		line, _ := rd.ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		if line != "data: first\n" {
			t.Errorf("first line %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first SSE event did not reach the client before the upstream finished")
	}
	close(release)
	rest, _ := io.ReadAll(rd)
	if string(rest) != "\ndata: [DONE]\n\n" {
		t.Errorf("rest %q", rest)
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get(gateway.RoutedToHeader) != a.addr() {
		t.Errorf("headers %v", resp.Header)
	}
	if seen := epp.Seen(); seen[0].ResponseChunks < 2 {
		t.Errorf("EPP saw the response in %d chunks, want ≥ 2 (streamed)", seen[0].ResponseChunks)
	}
}

func TestRoundRobinWithoutEPP(t *testing.T) {
	a, b := newUpstream(t, "pod-a", nil), newUpstream(t, "pod-b", nil)
	g := newGateway(t, gateway.Config{Mode: gateway.ModeRoundRobin, Endpoints: []string{a.addr(), b.addr()}})
	var pods []string
	for range 4 {
		res, err := g.Do(context.Background(), &gateway.Request{Body: []byte(`{"model":"m"}`)})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, res.ServedPod)
	}
	if diff := cmp.Diff([]string{"pod-a", "pod-b", "pod-a", "pod-b"}, pods); diff != "" {
		t.Errorf("round-robin order (-want +got):\n%s", diff)
	}
}

func TestContentLengthMismatchIsRefused(t *testing.T) {
	a := newUpstream(t, "pod-a", nil)
	epp := startEPP(t, extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		rs := extproctest.PickResponses(a.addr(), map[string]string{"content-length": "3"}, seen.Body, 0, true)
		return rs
	}})
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr()})
	res, err := g.Do(context.Background(), &gateway.Request{Body: []byte(`{"model":"m"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusBadGateway || len(a.requests()) != 0 {
		t.Errorf("status %d, upstream hits %d; want 502 and 0", res.Status, len(a.requests()))
	}
}

func TestResponsePhaseFailOpenReplaysBody(t *testing.T) {
	a := newUpstream(t, "pod-a", nil)
	// The EPP answers the request, then drops the stream at the response headers.
	epp := startEPP(t, extproctest.Script{
		OnRequest: pickScript(a.addr(), nil, 0).OnRequest,
		OnResponseHeaders: func(*extproctest.Seen) []*extprocv3.ProcessingResponse {
			return []*extprocv3.ProcessingResponse{extproctest.StreamedBody(true, nil, true)} // spurious: a protocol error
		},
	})
	for _, tc := range []struct {
		mode       gateway.FailureMode
		wantStatus int
		wantBody   string
	}{
		{gateway.FailOpen, 200, `{"served_by":"pod-a"}`},
		{gateway.FailClose, 500, ""},
	} {
		g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), FailureMode: tc.mode})
		res, err := g.Do(context.Background(), &gateway.Request{Body: []byte(`{"model":"m"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.wantStatus || (tc.wantBody != "" && string(res.Body) != tc.wantBody) {
			t.Errorf("%s: status %d body %q, want %d %q", tc.mode, res.Status, res.Body, tc.wantStatus, tc.wantBody)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  gateway.Config
		want string
	}{
		{"no EPP", gateway.Config{}, "EPPAddress"},
		{"round-robin without endpoints", gateway.Config{Mode: gateway.ModeRoundRobin}, "Endpoints"},
		{"bad endpoint", gateway.Config{EPPAddress: "x:1", Endpoints: []string{"nope"}}, "Endpoints"},
		{"bad mode", gateway.Config{EPPAddress: "x:1", Mode: 7}, "Mode"},
		{"negative chunk", gateway.Config{EPPAddress: "x:1", BodyChunkSize: -1}, "BodyChunkSize"},
		{"chunk above gRPC limit", gateway.Config{EPPAddress: "x:1", BodyChunkSize: 4 << 20}, "BodyChunkSize"},
		{"status 99", gateway.Config{EPPAddress: "x:1", StatusOnError: 99}, "StatusOnError"},
		{"status 200", gateway.Config{EPPAddress: "x:1", StatusOnError: 200}, "StatusOnError"},
		{"EPP without port", gateway.Config{EPPAddress: "x"}, "EPPAddress"},
		{"hostname endpoint", gateway.Config{EPPAddress: "x:1", Endpoints: []string{"localhost:8000"}}, "Endpoints"},
		{"duplicate endpoint", gateway.Config{EPPAddress: "x:1", Endpoints: []string{"10.0.0.1:8000", "10.0.0.1:8000"}}, "Endpoints"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gateway.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
	for _, s := range []string{"strict", "lenient", "round-robin"} {
		if m, err := gateway.ParseMode(s); err != nil || m.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := gateway.ParseFailureMode("maybe"); err == nil {
		t.Error("ParseFailureMode accepted maybe")
	}
	_ = extprocclient.DefaultChunkSize
}

func TestResponseHeaderMutation(t *testing.T) {
	a := newUpstream(t, "pod-a", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("x-drop-me", "1")
		_, _ = w.Write([]byte("ok"))
	})
	epp := startEPP(t, extproctest.Script{
		OnRequest: pickScript(a.addr(), nil, 0).OnRequest,
		OnResponseHeaders: func(*extproctest.Seen) []*extprocv3.ProcessingResponse {
			return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
					SetHeaders: []*corev3.HeaderValueOption{
						extproctest.HeaderOption("x-eppkit-profile", "default"),
						extproctest.HeaderOption(gateway.DestinationHeader, a.addr()),
					},
					RemoveHeaders: []string{"x-drop-me"},
				}},
			}}}}
		},
	})
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr()})
	res, err := g.Do(context.Background(), &gateway.Request{Body: []byte(`{"model":"m"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Headers.Get("x-eppkit-profile") != "default" || res.Headers.Get("x-drop-me") != "" || res.Headers.Get(gateway.DestinationHeader) != "" || string(res.Body) != "ok" {
		t.Errorf("client headers %v body %q: want x-eppkit-profile set, x-drop-me removed, no %s", res.Headers, res.Body, gateway.DestinationHeader)
	}
}

func TestHeadersOnlyRequest(t *testing.T) {
	a := newUpstream(t, "pod-a", nil)
	epp := startEPP(t, pickScript(a.addr(), nil, 0))
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr()})
	res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/models"})
	if err != nil {
		t.Fatal(err)
	}
	seen := epp.Seen()
	if res.Status != 200 || res.Endpoint != a.addr() || len(seen) != 1 || !seen[0].HeadersEOS || seen[0].BodyChunks != 0 || seen[0].Headers[":method"] != "GET" {
		t.Fatalf("status %d endpoint %q; EPP saw %+v", res.Status, res.Endpoint, seen)
	}
	if got := a.requests(); len(got) != 1 || got[0].contentLength != 0 || got[0].path != "/v1/models" {
		t.Errorf("upstream got %+v", got)
	}
}

// TestDialReachesPodsThroughTheDialer: with Config.Dial every connection — the EPP's and the
// picked endpoint's — goes through it with the address the pool names (as a port-forward
// dialer sees pod IPs), and nothing is dialled directly.
func TestDialReachesPodsThroughTheDialer(t *testing.T) {
	up := newUpstream(t, "pod-a", nil)
	// The names the pool uses: unused loopback addresses with nothing listening.
	podAddr, eppName := deadAddr(t), deadAddr(t)
	epp := startEPP(t, pickScript(podAddr, nil, 0))
	var mu sync.Mutex
	var dialed []string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		to := map[string]string{podAddr: up.addr(), eppName: epp.Addr()}[addr]
		if to == "" {
			return nil, fmt.Errorf("no forward for %s", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, to)
	}
	g := newGateway(t, gateway.Config{EPPAddress: eppName, Endpoints: []string{podAddr}, Dial: dial})
	res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"p"}`),
		Headers: map[string]string{"Content-Type": "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 || res.ServedPod != "pod-a" || res.Endpoint != podAddr {
		t.Fatalf("status %d pod %q endpoint %q; want 200 pod-a %s", res.Status, res.ServedPod, res.Endpoint, podAddr)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(dialed, eppName) || !slices.Contains(dialed, podAddr) {
		t.Errorf("dialled %v, want both the EPP %s and the pod %s through Dial", dialed, eppName, podAddr)
	}
}

// appendingScript picks pick like upstream v1.5.0 does, leaving append_action at its zero value
// (APPEND_IF_EXISTS_OR_ADD) on x-gateway-destination-endpoint and Content-Length.
func appendingScript(pick string) extproctest.Script {
	return extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		out := extproctest.PickResponses(pick, nil, seen.Body, 0, !seen.HeadersEOS)
		for _, o := range out[0].GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
			o.AppendAction = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
		}
		return out
	}}
}

// TestDuplicatedHeaders: with append-action semantics an EPP that appends instead of overwriting
// sends a second x-gateway-destination-endpoint (beside the client's forged one) and a second
// Content-Length. Strict mode refuses the request naming the header; lenient mode forwards it;
// Envoy's ext_proc filter as released (the default semantics) overwrites.
func TestDuplicatedHeaders(t *testing.T) {
	pick, forged := newUpstream(t, "pod-pick", nil), newUpstream(t, "pod-forged", nil)
	epp := startEPP(t, appendingScript(pick.addr()))
	body := []byte(`{"model":"m","prompt":"x"}`)
	req := func() *gateway.Request {
		return &gateway.Request{Path: "/v1/completions", Body: body, Headers: map[string]string{gateway.DestinationHeader: forged.addr()}}
	}
	strict := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), HeaderSemantics: extprocclient.SemanticsAppendAction})
	res, err := strict.Do(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusBadGateway || res.Headers.Get(gateway.GatewayErrorHeader) != "duplicated-header" ||
		!strings.Contains(string(res.Body), gateway.DestinationHeader) || !strings.Contains(string(res.Body), "content-length") {
		t.Errorf("strict: status %d headers %v body %s; want a 502 naming both duplicated headers", res.Status, res.Headers, res.Body)
	}
	if n := len(pick.requests()) + len(forged.requests()); n != 0 {
		t.Errorf("strict: %d requests reached a model server", n)
	}

	lenient := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), Mode: gateway.ModeLenient, HeaderSemantics: extprocclient.SemanticsAppendAction})
	res, err = lenient.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: body,
		Headers: map[string]string{gateway.DestinationHeader: forged.addr()}})
	if err != nil {
		t.Fatal(err)
	}
	// The metadata (the pick) decides here; the forwarded request still carries both headers.
	got := pick.requests()
	if res.Status != 200 || len(got) != 1 || len(got[0].header.Values(gateway.DestinationHeader)) != 2 {
		t.Errorf("lenient: status %d, requests to the pick %d, destination values %v", res.Status, len(got), got)
	}

	envoy := newGateway(t, gateway.Config{EPPAddress: epp.Addr()})
	res, err = envoy.Do(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	if got := pick.requests(); res.Status != 200 || len(got) != 2 || len(got[1].header.Values(gateway.DestinationHeader)) != 1 {
		t.Errorf("envoy-ext-proc: status %d body %s; the zero append_action must overwrite", res.Status, res.Body)
	}
}

// TestHeaderOnlyPickWithForgedHeaderGoesToTheForgery: without metadata, an appending EPP's pick
// loses to the client's forged x-gateway-destination-endpoint in lenient mode (Envoy reads the
// first entry) — the agentgateway #905 failure the strict mode reports.
func TestHeaderOnlyPickWithForgedHeaderGoesToTheForgery(t *testing.T) {
	pick, forged := newUpstream(t, "pod-pick", nil), newUpstream(t, "pod-forged", nil)
	script := appendingScript(pick.addr())
	inner := script.OnRequest
	script.OnRequest = func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		out := inner(seen)
		out[0].DynamicMetadata = nil
		return out
	}
	epp := startEPP(t, script)
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), Mode: gateway.ModeLenient, HeaderSemantics: extprocclient.SemanticsAppendAction})
	res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/models", Headers: map[string]string{gateway.DestinationHeader: forged.addr()}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 || res.ServedPod != "pod-forged" {
		t.Errorf("status %d served by %q, want the forged destination (first entry)", res.Status, res.ServedPod)
	}
}

// TestLatePickIsNotRouted: a pick delivered only on the last of several streamed body responses
// comes after Envoy released the request headers to the router: 503, late-pick.
func TestLatePickIsNotRouted(t *testing.T) {
	a := newUpstream(t, "pod-a", nil)
	epp := startEPP(t, extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		out := extproctest.PickResponses("", nil, seen.Body, 1000, true)
		md := extproctest.PickResponses(a.addr(), nil, nil, 0, false)[0]
		out[len(out)-1].DynamicMetadata = md.DynamicMetadata
		return out
	}})
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr()})
	res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: bytes.Repeat([]byte("x"), 5000)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusServiceUnavailable || res.Headers.Get(gateway.GatewayErrorHeader) != "late-pick" || len(a.requests()) != 0 {
		t.Errorf("status %d headers %v body %s requests %d; want 503 late-pick", res.Status, res.Headers, res.Body, len(a.requests()))
	}
}

// TestRejectedMutationIsStatusOnError: a mutation Envoy rejects (value and raw_value both set)
// is a local reply with status_on_error.
func TestRejectedMutationIsStatusOnError(t *testing.T) {
	a := newUpstream(t, "pod-a", nil)
	epp := startEPP(t, extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		out := extproctest.PickResponses(a.addr(), nil, seen.Body, 0, true)
		hm := out[0].GetRequestHeaders().GetResponse().GetHeaderMutation()
		hm.SetHeaders = append(hm.SetHeaders, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-both", Value: "a", RawValue: []byte("a")}})
		return out
	}})
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), StatusOnError: 599})
	res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 599 || !strings.Contains(string(res.Body), "raw_value") || len(a.requests()) != 0 {
		t.Errorf("status %d body %s", res.Status, res.Body)
	}
}

// TestDeprecatedAppendDuplicatesOnEnvoy: Envoy's ext_proc filter as released (the default) honours
// the deprecated append: an EPP that sets append=true on Content-Length sends two values, which
// strict mode refuses.
func TestDeprecatedAppendDuplicatesOnEnvoy(t *testing.T) {
	a := newUpstream(t, "pod-a", nil)
	epp := startEPP(t, extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		out := extproctest.PickResponses(a.addr(), nil, seen.Body, 0, true)
		for _, o := range out[0].GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
			if o.GetHeader().GetKey() == "Content-Length" {
				o.Append = wrapperspb.Bool(true) //lint:ignore SA1019 the deprecated field is what this test sends
			}
		}
		return out
	}})
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr()})
	res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: []byte(`{"model":"m"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusBadGateway || res.Headers.Get(gateway.GatewayErrorHeader) != "duplicated-header" || len(a.requests()) != 0 {
		t.Errorf("status %d headers %v body %s", res.Status, res.Headers, res.Body)
	}
}

// TestTrailersForwarded: an upstream response that ends with trailers (a gRPC server's
// grpc-status) reaches the EPP as Envoy sends it — the body without end_of_stream, then
// response_trailers — and the client with its trailers.
func TestTrailersForwarded(t *testing.T) {
	a := newUpstream(t, "pod-a", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		w.Header().Set("Content-Type", "application/grpc")
		_, _ = w.Write([]byte("partial"))
		w.Header().Set("Grpc-Status", "14")
		w.Header().Set("Grpc-Message", "engine aborted")
	})
	epp := startEPP(t, pickScript(a.addr(), nil, 0))
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), Endpoints: []string{a.addr()}})
	res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: []byte(`{"model":"m"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Trailers.Get("Grpc-Status"); got != "14" || string(res.Body) != "partial" {
		t.Fatalf("client: body %q, trailers %v; want the body and grpc-status 14", res.Body, res.Trailers)
	}
	seen := epp.Seen()
	if len(seen) != 1 {
		t.Fatalf("%d exchanges", len(seen))
	}
	if s := seen[0]; s.ResponseTrailers["grpc-status"] != "14" || string(s.ResponseBody) != "partial" {
		t.Fatalf("the EPP saw body %q and trailers %v; want the body then response_trailers with grpc-status 14", s.ResponseBody, s.ResponseTrailers)
	}
}

// TestMalformedPickIsNotRouted: a pick whose metadata lacks the port (the header has it) is not
// an address Envoy can route to: 503, malformed-pick, a message naming the metadata; the count of
// malformed picks in a row resets once a request is forwarded.
func TestMalformedPickIsNotRouted(t *testing.T) {
	a := newUpstream(t, "pod-a", nil)
	host, _, _ := net.SplitHostPort(a.addr())
	var broken atomic.Bool
	broken.Store(true)
	epp := startEPP(t, extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		out := extproctest.PickResponses(a.addr(), nil, seen.Body, 0, true)
		if broken.Load() {
			out[0].DynamicMetadata = extproctest.PickResponses(host, nil, nil, 0, false)[0].DynamicMetadata
		}
		return out
	}})
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr()})
	for i := 1; i <= 2; i++ {
		res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: []byte(`{"model":"m"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != http.StatusServiceUnavailable || res.Headers.Get(gateway.GatewayErrorHeader) != "malformed-pick" ||
			!strings.Contains(string(res.Body), "dynamic metadata") || !strings.Contains(string(res.Body), "has no port") || len(a.requests()) != 0 {
			t.Fatalf("status %d headers %v body %s; want 503 malformed-pick naming the metadata", res.Status, res.Headers, res.Body)
		}
		if n, msg := g.MalformedPicks(); n != i || msg == "" {
			t.Errorf("MalformedPicks = %d %q, want %d in a row", n, msg, i)
		}
	}
	broken.Store(false)
	if res, err := g.Do(context.Background(), &gateway.Request{Path: "/v1/completions", Body: []byte(`{"model":"m"}`)}); err != nil || res.Status != 200 {
		t.Fatalf("well-formed pick: %v %+v", err, res)
	}
	if n, _ := g.MalformedPicks(); n != 0 {
		t.Errorf("MalformedPicks = %d after a forwarded request, want 0", n)
	}
}

// TestResponseBodyMutationReachesClient: the client gets the body the EPP returns in the response
// phases (FULL_DUPLEX_STREAMED: the EPP's streamed_response chunks replace the model server's,
// whatever their number; here it holds every chunk and answers once at end of stream), not the
// model server's, framed by the gateway once the EPP removed the stale Content-Length.
func TestResponseBodyMutationReachesClient(t *testing.T) {
	const served = `{"id":"1","model":"lora-a","choices":[{"text":"hello"}]}`
	a := newUpstream(t, "pod-a", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(served)))
		_, _ = w.Write([]byte(served[:20]))
		w.(http.Flusher).Flush()
		_, _ = w.Write([]byte(served[20:]))
	})
	var held []byte
	epp := startEPP(t, extproctest.Script{
		OnRequest: pickScript(a.addr(), nil, 0).OnRequest,
		OnResponseHeaders: func(*extproctest.Seen) []*extprocv3.ProcessingResponse {
			return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{"content-length"}}},
			}}}}
		},
		OnResponseBody: func(_ *extproctest.Seen, chunk []byte, eos bool) []*extprocv3.ProcessingResponse {
			held = append(held, chunk...)
			if !eos {
				return nil
			}
			return []*extprocv3.ProcessingResponse{extproctest.StreamedBody(false, bytes.ReplaceAll(held, []byte("lora-a"), []byte("base")), true)}
		},
	})
	g := newGateway(t, gateway.Config{EPPAddress: epp.Addr(), BodyChunkSize: 16})
	res, err := g.Do(context.Background(), &gateway.Request{Body: []byte(`{"model":"base"}`)})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(served, "lora-a", "base")
	if string(res.Body) != want || res.Status != http.StatusOK {
		t.Fatalf("client got %d %q, want 200 %q (the EPP's body)", res.Status, res.Body, want)
	}
	if cl := res.Headers.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(want)) {
		t.Errorf("Content-Length %s, body %d bytes", cl, len(want))
	}
}

// TestEndpointScoresShown: the scores the EPP publishes with its pick reach the client as
// x-eppkit-endpoint-scores (JSON); without scores the header is absent.
func TestEndpointScoresShown(t *testing.T) {
	a := newUpstream(t, "pod-a", nil)
	for _, withScores := range []bool{true, false} {
		epp := startEPP(t, extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
			out := extproctest.PickResponses(a.addr(), nil, seen.Body, 0, !seen.HeadersEOS)
			if withScores {
				lb := out[0].GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue()
				lb.Fields["x-gateway-destination-endpoint-scores"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
					a.addr(): structpb.NewNumberValue(2.5), "10.0.0.9:8000": structpb.NewNumberValue(1)}})
			}
			return out
		}})
		g := newGateway(t, gateway.Config{EPPAddress: epp.Addr()})
		res, err := g.Do(context.Background(), &gateway.Request{Body: []byte(`{"model":"m"}`)})
		if err != nil {
			t.Fatal(err)
		}
		got := res.Headers.Get(gateway.ScoresHeader)
		want := ""
		if withScores {
			want = `{"10.0.0.9:8000":1,"` + a.addr() + `":2.5}`
		}
		if got != want {
			t.Errorf("scores %v: %s = %q, want %q", withScores, gateway.ScoresHeader, got, want)
		}
	}
}
