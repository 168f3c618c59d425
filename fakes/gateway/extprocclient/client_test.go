package extprocclient_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

func start(t *testing.T, script extproctest.Script) (*extproctest.Server, *extprocclient.Stream) {
	t.Helper()
	srv, err := extproctest.Start(script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	c, err := extprocclient.Dial(srv.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	c.MessageTimeout = 2 * time.Second
	st, err := c.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return srv, st
}

func TestExchangeReassemblesChunkedBodyAndReadsPick(t *testing.T) {
	mutated := bytes.Repeat([]byte("m"), 150_000)
	srv, st := start(t, extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		return extproctest.PickResponses("10.0.0.7:8000", map[string]string{"x-extra": "1"}, mutated, extprocclient.MaxStreamedChunk, true)
	}})
	body := bytes.Repeat([]byte("b"), 40_000)
	d, err := st.Exchange(context.Background(), extprocclient.Request{
		Headers: extprocclient.RequestHeaders("POST", "/v1/completions", "gw", body, map[string]string{"X-Request-Id": "r1"}),
		Body:    body, ChunkSize: 16384, SubsetHint: []string{"10.0.0.7:8000", "10.0.0.8:8000"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.PickHeader != "10.0.0.7:8000" || d.PickMetadata != "10.0.0.7:8000" || d.Pick() != "10.0.0.7:8000" {
		t.Errorf("pick header %q metadata %q, want 10.0.0.7:8000 both", d.PickHeader, d.PickMetadata)
	}
	if !bytes.Equal(d.Body, mutated) || d.BodyChunks != 3 || d.MaxChunk != extprocclient.MaxStreamedChunk {
		t.Errorf("body %d bytes in %d chunks (max %d), want %d in 3 (max %d)", len(d.Body), d.BodyChunks, d.MaxChunk, len(mutated), extprocclient.MaxStreamedChunk)
	}
	if d.ContentLength != "150000" || d.Headers["x-extra"] != "1" || !d.ClearRouteCache {
		t.Errorf("headers %v clear route cache %v", d.Headers, d.ClearRouteCache)
	}
	seen := srv.Seen()
	if len(seen) != 1 {
		t.Fatalf("server saw %d requests, want 1", len(seen))
	}
	if seen[0].BodyChunks != 3 || !bytes.Equal(seen[0].Body, body) {
		t.Errorf("server got %d bytes in %d chunks, want %d in 3", len(seen[0].Body), seen[0].BodyChunks, len(body))
	}
	if seen[0].ProtocolConfig.GetRequestBodyMode().String() != "FULL_DUPLEX_STREAMED" {
		t.Errorf("protocol config %v, want FULL_DUPLEX_STREAMED bodies", seen[0].ProtocolConfig)
	}
	hint, ok := extproctest.SubsetHint(seen[0].RequestMetadata)
	if diff := cmp.Diff([]string{"10.0.0.7:8000", "10.0.0.8:8000"}, hint); !ok || diff != "" {
		t.Errorf("subset hint (present=%v) mismatch (-want +got):\n%s", ok, diff)
	}
	if seen[0].Headers[":path"] != "/v1/completions" || seen[0].Headers["x-request-id"] != "r1" || seen[0].Headers["content-length"] != "40000" {
		t.Errorf("request headers %v", seen[0].Headers)
	}
}

func TestEmptySubsetHintIsPresent(t *testing.T) {
	srv, st := start(t, extproctest.Script{})
	if _, err := st.Exchange(context.Background(), extprocclient.Request{Headers: extprocclient.RequestHeaders("GET", "/", "gw", nil, nil), SubsetHint: []string{}}); err != nil {
		t.Fatal(err)
	}
	hint, ok := extproctest.SubsetHint(srv.Seen()[0].RequestMetadata)
	if !ok || len(hint) != 0 {
		t.Errorf("hint %v present %v, want present and empty", hint, ok)
	}
	if !srv.Seen()[0].HeadersEOS {
		t.Error("headers-only request did not set end_of_stream on request_headers")
	}
}

func TestImmediateThenSecondRequestOnSameStream(t *testing.T) {
	n := 0
	_, st := start(t, extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		n++
		if n == 1 {
			return []*extprocv3.ProcessingResponse{extproctest.Immediate(400, map[string]string{"content-type": "application/json"}, []byte(`{"error":"bad"}`))}
		}
		return extproctest.PickResponses("10.0.0.2:80", nil, seen.Body, 0, true)
	}})
	body := []byte(`{"prompt":"x"}`)
	req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", "/v1/completions", "gw", body, nil), Body: body}
	d, err := st.Exchange(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := &extprocclient.ImmediateInfo{Status: 400, Headers: map[string]string{"content-type": "application/json"}, Body: []byte(`{"error":"bad"}`)}
	if diff := cmp.Diff(want, d.Immediate); diff != "" {
		t.Fatalf("immediate mismatch (-want +got):\n%s", diff)
	}
	d, err = st.Exchange(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if d.Immediate != nil || d.Pick() != "10.0.0.2:80" || !bytes.Equal(d.Body, body) {
		t.Errorf("second request: immediate %v pick %q body %q", d.Immediate, d.Pick(), d.Body)
	}
}

func TestRespondSendsServedMetadataAndReassembles(t *testing.T) {
	srv, st := start(t, extproctest.Script{OnResponseBody: func(_ *extproctest.Seen, chunk []byte, eos bool) []*extprocv3.ProcessingResponse {
		return []*extprocv3.ProcessingResponse{extproctest.StreamedBody(false, []byte(strings.ToUpper(string(chunk))), eos)}
	}})
	body := []byte(`{"prompt":"x"}`)
	if _, err := st.Exchange(context.Background(), extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", "/v1/completions", "gw", body, nil), Body: body}); err != nil {
		t.Fatal(err)
	}
	rr, err := st.Respond(context.Background(), extprocclient.Response{
		Headers: []extprocclient.Header{{Key: ":status", Value: "200"}},
		Chunks:  [][]byte{[]byte("data: a\n\n"), []byte("data: b\n\n")},
		Served:  "10.0.0.2:80",
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(rr.Body) != "DATA: A\n\nDATA: B\n\n" || rr.BodyChunks != 2 {
		t.Errorf("response body %q in %d chunks", rr.Body, rr.BodyChunks)
	}
	seen := srv.Seen()[0]
	if got := extproctest.Served(seen.ResponseMetadata); got != "10.0.0.2:80" {
		t.Errorf("served metadata %q, want 10.0.0.2:80", got)
	}
	if seen.ResponseHeaders[":status"] != "200" || !seen.ResponseDone {
		t.Errorf("response headers %v done %v", seen.ResponseHeaders, seen.ResponseDone)
	}
}

func TestTimeoutAndProtocolErrors(t *testing.T) {
	cases := []struct {
		name    string
		answer  []*extprocv3.ProcessingResponse
		wantErr error
	}{
		{name: "no answer times out", answer: nil, wantErr: extprocclient.ErrMessageTimeout},
		{name: "body before headers", answer: []*extprocv3.ProcessingResponse{extproctest.StreamedBody(true, []byte("x"), true)}, wantErr: extprocclient.ErrProtocol},
		{name: "buffered body mutation", answer: []*extprocv3.ProcessingResponse{
			extproctest.PickResponses("1.2.3.4:5", nil, nil, 0, false)[0],
			{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("x")}}}}}},
		}, wantErr: extprocclient.ErrProtocol},
		{name: "response-phase message during request phase", answer: []*extprocv3.ProcessingResponse{
			{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}}, wantErr: extprocclient.ErrProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, st := start(t, extproctest.Script{OnRequest: func(*extproctest.Seen) []*extprocv3.ProcessingResponse { return tc.answer }})
			st.SetMessageTimeout(200 * time.Millisecond)
			body := []byte(`{}`)
			_, err := st.Exchange(context.Background(), extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", "/", "gw", body, nil), Body: body})
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestDeadEPP(t *testing.T) {
	c, err := extprocclient.Dial("127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Open(ctx)
	if err == nil {
		_, err = st.Exchange(ctx, extprocclient.Request{Headers: extprocclient.RequestHeaders("GET", "/", "gw", nil, nil)})
	}
	if err == nil {
		t.Fatal("exchange with nothing listening succeeded")
	}
}

// selfSigned returns a server TLS config for 127.0.0.1 and its certificate in PEM.
func selfSigned(t *testing.T) (*tls.Config, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "eppkit-test-epp"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestTLS(t *testing.T) {
	serverCfg, caPEM := selfSigned(t)
	_, otherCA := selfSigned(t)
	srv, err := extproctest.StartTLS(extproctest.Script{}, serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	dir := t.TempDir()
	caFile, otherFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(otherFile, otherCA, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec   string
		wantOK bool
	}{
		{"insecure", true},
		{"ca:" + caFile, true},
		{"ca:" + otherFile, false}, // wrong root: the handshake must fail
		{"plaintext", false},       // plaintext against a TLS server
	} {
		t.Run(tc.spec, func(t *testing.T) {
			cfg, err := extprocclient.ParseTLSSpec("--epp-tls", tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			c, err := extprocclient.Dial(srv.Addr(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			c.MessageTimeout = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := c.Open(ctx)
			if err == nil {
				defer st.Close()
				_, err = st.Exchange(ctx, extprocclient.Request{Headers: extprocclient.RequestHeaders("GET", "/", "gw", nil, nil)})
			}
			if (err == nil) != tc.wantOK {
				t.Errorf("exchange error %v, want ok=%v", err, tc.wantOK)
			}
		})
	}
	for _, bad := range []string{"tls", "ca:" + filepath.Join(dir, "missing.pem")} {
		if _, err := extprocclient.ParseTLSSpec("--epp-tls", bad); err == nil || !strings.Contains(err.Error(), "--epp-tls") {
			t.Errorf("ParseTLSSpec(%q) error %v, want one naming --epp-tls", bad, err)
		}
	}
}

// latePick builds the request-phase answer of an EPP that picks pick but delivers it only on its
// body responses: the request_headers response carries no destination, body response number
// `on` (0-based) carries the metadata, and with header the destination header too.
func latePick(pick string, body []byte, chunk, on int, header bool) []*extprocv3.ProcessingResponse {
	out := extproctest.PickResponses("", nil, body, chunk, true)
	md := extproctest.PickResponses(pick, nil, nil, 0, false)[0]
	bodyResp := out[1+on]
	bodyResp.DynamicMetadata = md.DynamicMetadata
	if header {
		bodyResp.GetRequestBody().GetResponse().HeaderMutation = md.GetRequestHeaders().GetResponse().GetHeaderMutation()
	}
	return out
}

// TestRoutingAtRelease: Envoy's router sees the pick of the request_headers response, and of the
// metadata received by the first body chunk (the whole body was sent before the EPP answered),
// never a later one, and never a header set on a body response (FULL_DUPLEX_STREAMED).
func TestRoutingAtRelease(t *testing.T) {
	const pick = "10.0.0.7:8000"
	body := bytes.Repeat([]byte("b"), 150_000) // three 62,000-byte chunks back
	tests := []struct {
		name      string
		answer    func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse
		wantPick  string
		released  int
		lateHdrMs int
	}{
		{"pick on the headers response", func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
			return extproctest.PickResponses(pick, nil, seen.Body, extprocclient.MaxStreamedChunk, true)
		}, pick, 1, 0},
		{"metadata on the first body chunk: still in time", func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
			return latePick(pick, seen.Body, extprocclient.MaxStreamedChunk, 0, false)
		}, pick, 1, 0},
		{"metadata only on the last body chunk: too late", func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
			return latePick(pick, seen.Body, extprocclient.MaxStreamedChunk, 2, false)
		}, "", 1, 0},
		{"destination header on a body response: never applied", func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
			out := latePick(pick, seen.Body, extprocclient.MaxStreamedChunk, 0, true)
			out[1].DynamicMetadata = nil
			return out
		}, "", 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, st := start(t, extproctest.Script{OnRequest: tc.answer})
			d, err := st.Exchange(context.Background(), extprocclient.Request{
				Headers: extprocclient.RequestHeaders("POST", "/v1/completions", "gw", body, nil), Body: body})
			if err != nil {
				t.Fatal(err)
			}
			if d.Pick() != pick {
				t.Fatalf("the EPP's stated pick %q, want %q (the scenario always states it)", d.Pick(), pick)
			}
			rt, err := d.Routing(extprocclient.SemanticsAppendAction)
			if err != nil {
				t.Fatal(err)
			}
			if rt.Pick() != tc.wantPick || d.ReleasedAt != tc.released || d.LateHeaderMutations != tc.lateHdrMs {
				t.Errorf("routed pick %q released at %d late header mutations %d; want %q %d %d",
					rt.Pick(), d.ReleasedAt, d.LateHeaderMutations, tc.wantPick, tc.released, tc.lateHdrMs)
			}
		})
	}
	t.Run("headers-only request: released at the headers response", func(t *testing.T) {
		_, st := start(t, extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
			return extproctest.PickResponses(pick, nil, nil, 0, false)
		}})
		d, err := st.Exchange(context.Background(), extprocclient.Request{Headers: extprocclient.RequestHeaders("GET", "/v1/models", "gw", nil, nil)})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := d.Routing(extprocclient.SemanticsAppendAction)
		if err != nil || rt.Pick() != pick || d.ReleasedAt != 0 {
			t.Errorf("routed pick %q released at %d (err %v)", rt.Pick(), d.ReleasedAt, err)
		}
	})
}
