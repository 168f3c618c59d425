package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

// serverTLS is a self-signed server certificate for 127.0.0.1.
func serverTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "eppkit-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
}

// healthOnly is a gRPC server with the health service and no ext_proc.
func healthOnly(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// TestDiagnoseConnection: each connection mistake is named, with the flag that fixes it; a
// plaintext ext_proc server dialled in plaintext is no mistake.
func TestDiagnoseConnection(t *testing.T) {
	insecureTLS := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // test: any certificate
	plain, err := extproctest.Start(extproctest.Script{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Stop)
	secure, err := extproctest.StartTLS(extproctest.Script{}, serverTLS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(secure.Stop)
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	cases := []struct {
		name     string
		addr     string
		tls      *tls.Config
		want     ConnectionKind // "" = no mistake
		wantText string
	}{
		{"plaintext ext_proc dialled in plaintext", plain.Addr(), nil, "", ""},
		{"TLS ext_proc dialled with TLS", secure.Addr(), insecureTLS, "", ""},
		{"TLS ext_proc dialled in plaintext", secure.Addr(), nil, ConnTLSOnPlaintext,
			"the EPP at " + secure.Addr() + " (ext_proc) speaks TLS; connect with --target-tls insecure"},
		{"plaintext ext_proc dialled with TLS", plain.Addr(), insecureTLS, ConnPlaintextOnTLS, "speaks plaintext, not TLS; connect with --target-tls plaintext"},
		{"untrusted certificate", secure.Addr(), &tls.Config{MinVersion: tls.VersionTLS12}, ConnUntrusted, "certificate is not trusted"},
		{"an HTTP/1 server", strings.TrimPrefix(web.URL, "http://"), nil, ConnHTTP1, "an HTTP/1 server listens at"},
		{"a gRPC server without ext_proc", healthOnly(t), nil, ConnNoExtProc, "serves no envoy.service.ext_proc.v3.ExternalProcessor"},
		{"nothing listening", freeAddr(t), nil, ConnRefused, "nothing is listening at"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := DiagnoseConnection(t.Context(), tc.addr, tc.tls, "ext_proc", "--target-tls", true, 2*time.Second)
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("found %s (%v), want no mistake", got.Kind, got)
			case tc.want == "":
			case got == nil || got.Kind != tc.want:
				t.Fatalf("found %v, want %s", got, tc.want)
			case !strings.Contains(got.Error(), tc.wantText):
				t.Errorf("message %q lacks %q", got.Error(), tc.wantText)
			}
		})
	}
}

// TestWaitReadyNamesTLSMismatch: a plaintext harness against an EPP that serves TLS on both
// ports gives up after mismatchGrace with the mistake named, not after the full timeout with
// "error reading server preface".
func TestWaitReadyNamesTLSMismatch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentialsFromTLS(serverTLS(t))))
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	addr := ln.Addr().String()
	const timeout = 30 * time.Second
	start := time.Now()
	_, err = WaitReadyRecord(context.Background(), runningTarget{}, TargetAddrs{GRPC: addr, Health: addr}, ReadyProbe{}, "m", timeout, 50*time.Millisecond)
	var ce *ConnectionError
	if !errors.As(err, &ce) || ce.Kind != ConnTLSOnPlaintext || !strings.Contains(err.Error(), "speaks TLS; connect with --target-tls insecure") {
		t.Fatalf("err = %v, want the TLS mismatch named", err)
	}
	if took := time.Since(start); took > timeout/2 {
		t.Errorf("gave up after %s, want about mismatchGrace %s", took, mismatchGrace)
	}
}

func credentialsFromTLS(c *tls.Config) credentials.TransportCredentials { return credentials.NewTLS(c) }
