package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// ConnectionKind names what DiagnoseConnection found at an address.
type ConnectionKind string

// What can be wrong with the connection to an EPP, each with its own message (ConnectionError).
const (
	// ConnRefused: nothing listens at the address.
	ConnRefused ConnectionKind = "refused"
	// ConnTLSOnPlaintext: the harness speaks plaintext, the server TLS.
	ConnTLSOnPlaintext ConnectionKind = "speaks-tls"
	// ConnPlaintextOnTLS: the harness speaks TLS, the server plaintext.
	ConnPlaintextOnTLS ConnectionKind = "speaks-plaintext"
	// ConnUntrusted: TLS on both sides, but the server's certificate is not trusted.
	ConnUntrusted ConnectionKind = "untrusted-certificate"
	// ConnHTTP1: an HTTP/1 server listens there (a metrics or HTTP port, not gRPC).
	ConnHTTP1 ConnectionKind = "http1"
	// ConnNotHTTP2: the server answers the HTTP/2 preface with something else (not gRPC).
	ConnNotHTTP2 ConnectionKind = "not-http2"
	// ConnNoExtProc: a gRPC server that serves no envoy.service.ext_proc.v3.ExternalProcessor.
	ConnNoExtProc ConnectionKind = "no-ext-proc"
)

// ConnectionError is a connection mistake DiagnoseConnection named: the address, which of the
// target's addresses it is, what was found and which flag fixes it.
type ConnectionError struct {
	// Addr is the host:port; Role is "ext_proc" or "gRPC health".
	Addr, Role string
	// Kind is what was found.
	Kind ConnectionKind
	// Detail is the evidence (the handshake or protocol error).
	Detail string
	// Flag is the TLS flag of this address (--target-tls or --target-health-tls).
	Flag string
}

func (e *ConnectionError) Error() string {
	switch e.Kind {
	case ConnRefused:
		return fmt.Sprintf("nothing is listening at %s (the target's %s address): %s", e.Addr, e.Role, e.Detail)
	case ConnTLSOnPlaintext:
		return fmt.Sprintf("the EPP at %s (%s) speaks TLS; connect with %s insecure (any certificate) or %s ca:<file> (verified)",
			e.Addr, e.Role, e.Flag, e.Flag)
	case ConnPlaintextOnTLS:
		return fmt.Sprintf("the EPP at %s (%s) speaks plaintext, not TLS; connect with %s plaintext (%s)", e.Addr, e.Role, e.Flag, e.Detail)
	case ConnUntrusted:
		return fmt.Sprintf("the EPP at %s (%s) speaks TLS but its certificate is not trusted (%s); give its CA with %s ca:<file>, or %s insecure",
			e.Addr, e.Role, e.Detail, e.Flag, e.Flag)
	case ConnHTTP1:
		return fmt.Sprintf("an HTTP/1 server listens at %s, not a gRPC server (%s): is it the EPP's metrics or another HTTP port? "+
			"give the EPP's %s port", e.Addr, e.Detail, e.Role)
	case ConnNotHTTP2:
		return fmt.Sprintf("the server at %s does not speak HTTP/2, so it is no gRPC server (%s): give the EPP's %s port", e.Addr, e.Detail, e.Role)
	case ConnNoExtProc:
		return fmt.Sprintf("the gRPC server at %s serves no envoy.service.ext_proc.v3.ExternalProcessor (%s): is it the health port? "+
			"give the EPP's ext_proc port", e.Addr, e.Detail)
	}
	return fmt.Sprintf("%s (%s): %s: %s", e.Addr, e.Role, e.Kind, e.Detail)
}

// h2Preface is the HTTP/2 client connection preface followed by an empty SETTINGS frame.
var h2Preface = append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)

// DiagnoseConnection looks at what serves addr, the way the harness dials it (tlsCfg nil =
// plaintext), and returns a *ConnectionError naming the mistake when it finds one: nothing
// listening, TLS against plaintext either way, an untrusted certificate, an HTTP/1 or non-HTTP/2
// server, and (checkExtProc) a gRPC server without the ext_proc service. nil means it found none
// (a gRPC server with TLS as dialled; or something it cannot tell). role names the address
// ("ext_proc", "gRPC health"), flag its TLS flag. Each step is bounded by timeout.
func DiagnoseConnection(ctx context.Context, addr string, tlsCfg *tls.Config, role, flag string, checkExtProc bool, timeout time.Duration) *ConnectionError {
	cerr := func(kind ConnectionKind, detail string) *ConnectionError {
		return &ConnectionError{Addr: addr, Role: role, Kind: kind, Detail: detail, Flag: flag}
	}
	dial := func() (net.Conn, error) {
		d := net.Dialer{Timeout: timeout}
		return d.DialContext(ctx, "tcp", addr)
	}
	raw, err := dial()
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return cerr(ConnRefused, err.Error())
		}
		return nil
	}
	var conn net.Conn = raw
	if tlsCfg == nil {
		// Plaintext dial: does the server answer a TLS handshake? Then it speaks TLS.
		probe, err := dial()
		if err == nil {
			tc := tls.Client(probe, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}) //nolint:gosec // only asks whether the server speaks TLS
			_ = tc.SetDeadline(time.Now().Add(timeout))
			herr := tc.HandshakeContext(ctx)
			_ = tc.Close()
			if herr == nil {
				_ = raw.Close()
				return cerr(ConnTLSOnPlaintext, "a TLS handshake succeeded")
			}
		}
	} else {
		cfg := tlsCfg.Clone()
		if len(cfg.NextProtos) == 0 {
			cfg.NextProtos = []string{"h2"}
		}
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(raw, cfg)
		_ = tc.SetDeadline(time.Now().Add(timeout))
		if herr := tc.HandshakeContext(ctx); herr != nil {
			_ = raw.Close()
			var rh tls.RecordHeaderError
			var cv *tls.CertificateVerificationError
			var ua x509.UnknownAuthorityError
			var hn x509.HostnameError
			switch {
			case errors.As(herr, &rh):
				return cerr(ConnPlaintextOnTLS, "the server's first bytes are no TLS record")
			case errors.As(herr, &cv) || errors.As(herr, &ua) || errors.As(herr, &hn):
				return cerr(ConnUntrusted, herr.Error())
			}
			return nil
		}
		conn = tc
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(h2Preface); err != nil {
		return nil
	}
	head := make([]byte, 9)
	n, err := io.ReadFull(conn, head)
	switch {
	case n >= 5 && bytes.HasPrefix(head, []byte("HTTP/")):
		line := head[:n]
		rest := make([]byte, 32)
		m, _ := conn.Read(rest)
		line = append(line, rest[:m]...)
		if i := bytes.IndexAny(line, "\r\n"); i >= 0 {
			line = line[:i]
		}
		return cerr(ConnHTTP1, fmt.Sprintf("it answered the HTTP/2 preface with %q", line))
	case err != nil && n == 0:
		return nil // closed or silent: cannot tell
	case n == 9 && head[3] != 4:
		return cerr(ConnNotHTTP2, fmt.Sprintf("its first frame is of type %d, not SETTINGS", head[3]))
	case n < 9:
		return cerr(ConnNotHTTP2, fmt.Sprintf("it answered the HTTP/2 preface with %q", head[:n]))
	}
	if !checkExtProc {
		return nil
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	gc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil
	}
	defer gc.Close()
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(gc).Process(sctx)
	if err == nil {
		_ = st.CloseSend()
		_, err = st.Recv()
	}
	if status.Code(err) == codes.Unimplemented {
		return cerr(ConnNoExtProc, status.Convert(err).Message())
	}
	return nil
}

// isExtProcUnimplemented reports whether err is the status of a server without the ext_proc
// service.
func isExtProcUnimplemented(err error) bool {
	return status.Code(errors.Unwrap(err)) == codes.Unimplemented || status.Code(err) == codes.Unimplemented
}

// looksLikeTransport reports whether err is a connection-level failure worth diagnosing.
func looksLikeTransport(err error) bool {
	if err == nil {
		return false
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) && se.GRPCStatus().Code() == codes.Unavailable {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.EOF)
}
