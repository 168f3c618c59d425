package kubelet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
)

// portForwardProtocolV1 is the SPDY sub-protocol of pod port-forwarding: every forwarded TCP
// connection is a pair of streams (streamType "error" and "data") carrying the same "port" and
// "requestID" headers. Protocol as served by the kubelet (kubernetes
// pkg/kubelet/cri/streaming/portforward/httpstream.go) and spoken by client-go
// tools/portforward/portforward.go; the constants are core/v1's.
const portForwardProtocolV1 = "portforward.k8s.io"

// Timeouts of the kubelet API server.
const (
	// streamPairTimeout bounds the wait for the second stream of a pair.
	streamPairTimeout = 30 * time.Second
	// portForwardIdleTimeout closes an SPDY connection without traffic (the kubelet's
	// --streaming-connection-idle-timeout defaults to 4 h; shorter suffices for tests).
	portForwardIdleTimeout = 30 * time.Minute
)

// serveAPI serves the part of the kubelet API the process kubelet implements on NodeIP:ServerPort
// over HTTPS with a self-signed certificate (the API server does not verify kubelet certificates
// unless --kubelet-certificate-authority is set, and the local control plane does not set it):
//
//   - /portForward/{namespace}/{pod}[/{uid}]: pod port-forwarding (the pods/portforward
//     subresource the API server proxies here), so `kubectl port-forward` and client-go's
//     tools/portforward reach the process kubelet's pods as they do kind's.
//   - /healthz: "ok".
//
// exec, attach, logs and the metrics endpoints are not served (404). It returns the port the
// listener got; the server stops when ctx ends.
func (k *Kubelet) serveAPI(ctx context.Context) (int, error) {
	cert, err := selfSignedCert(k.cfg.NodeName, k.cfg.NodeIP)
	if err != nil {
		return 0, fmt.Errorf("kubelet: serving certificate: %w", err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(k.cfg.NodeIP, strconv.Itoa(k.cfg.ServerPort)))
	if err != nil {
		return 0, fmt.Errorf("kubelet: API listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/portForward/", k.handlePortForward)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
			// SPDY upgrades need HTTP/1.1 (an HTTP/2 connection cannot be hijacked).
			NextProtos: []string{"http/1.1"}}}
	k.wg.Add(2)
	go func() {
		defer k.wg.Done()
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			k.log.Warn("kubelet API server stopped", "err", err)
		}
	}()
	go func() {
		defer k.wg.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// podIP returns the IP of a running pod of this kubelet by namespace and name (and UID when
// uid is not empty).
func (k *Kubelet) podIP(namespace, name, uid string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, w := range k.workers {
		if w.key != namespace+"/"+name || (uid != "" && string(id) != uid) {
			continue
		}
		for ip, owner := range k.ips {
			if owner == id {
				return ip.String(), nil
			}
		}
		return "", fmt.Errorf("pod %s/%s has no IP yet", namespace, name)
	}
	return "", fmt.Errorf("pod %s/%s is not running on node %s", namespace, name, k.cfg.NodeName)
}

// handlePortForward upgrades the request to SPDY and forwards every stream pair to the pod IP.
func (k *Kubelet) handlePortForward(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.Trim(strings.TrimPrefix(req.URL.Path, "/portForward/"), "/"), "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		http.Error(w, "want /portForward/{namespace}/{pod}[/{uid}]", http.StatusNotFound)
		return
	}
	uid := ""
	if len(parts) == 3 {
		uid = parts[2]
	}
	ip, err := k.podIP(parts[0], parts[1], uid)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if _, err := httpstream.Handshake(req, w, []string{portForwardProtocolV1}); err != nil {
		return // Handshake wrote the error response
	}
	streams := make(chan httpstream.Stream, 16)
	stop := make(chan struct{})
	defer close(stop)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, req, func(s httpstream.Stream, _ <-chan struct{}) error {
		select {
		case streams <- s:
			return nil
		case <-stop:
			return errors.New("port-forward connection closed")
		}
	})
	if conn == nil {
		return // UpgradeResponse wrote the error response
	}
	defer conn.Close()
	conn.SetIdleTimeout(portForwardIdleTimeout)
	k.log.Info("port-forward connection", "pod", parts[0]+"/"+parts[1], "ip", ip)
	pf := &portForwarder{ip: ip, pairs: map[string]*streamPair{}}
	for {
		select {
		case <-conn.CloseChan():
			pf.wg.Wait()
			return
		case s := <-streams:
			pf.add(conn, s)
		}
	}
}

// streamPair is the data and error stream of one forwarded connection.
type streamPair struct {
	data, errs httpstream.Stream
	timer      *time.Timer
}

type portForwarder struct {
	ip    string
	mu    sync.Mutex
	pairs map[string]*streamPair
	wg    sync.WaitGroup
}

// add files a new stream under its requestID and starts forwarding once its pair is complete.
// A stream without the headers, or a pair left incomplete for streamPairTimeout, is reset.
func (pf *portForwarder) add(conn httpstream.Connection, s httpstream.Stream) {
	h := s.Headers()
	id := h.Get(corev1.PortForwardRequestIDHeader)
	typ := h.Get(corev1.StreamType)
	if id == "" || (typ != corev1.StreamTypeData && typ != corev1.StreamTypeError) {
		_ = s.Reset()
		return
	}
	pf.mu.Lock()
	defer pf.mu.Unlock()
	p := pf.pairs[id]
	if p == nil {
		p = &streamPair{}
		pf.pairs[id] = p
		p.timer = time.AfterFunc(streamPairTimeout, func() {
			pf.mu.Lock()
			defer pf.mu.Unlock()
			if pf.pairs[id] == p {
				delete(pf.pairs, id)
				for _, st := range []httpstream.Stream{p.data, p.errs} {
					if st != nil {
						_ = st.Reset()
					}
				}
				conn.RemoveStreams(p.data, p.errs)
			}
		})
	}
	if typ == corev1.StreamTypeData {
		p.data = s
	} else {
		p.errs = s
	}
	if p.data == nil || p.errs == nil {
		return
	}
	p.timer.Stop()
	delete(pf.pairs, id)
	pf.wg.Add(1)
	go func() {
		defer pf.wg.Done()
		defer conn.RemoveStreams(p.data, p.errs)
		pf.forward(p)
	}()
}

// forward dials the pod port and copies both ways; a failure is written to the error stream,
// which the client reads to its end.
func (pf *portForwarder) forward(p *streamPair) {
	defer p.errs.Close()
	portStr := p.data.Headers().Get(corev1.PortHeader)
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		fmt.Fprintf(p.errs, "invalid port %q", portStr)
		_ = p.data.Reset()
		return
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(pf.ip, portStr), 5*time.Second)
	if err != nil {
		fmt.Fprintf(p.errs, "error forwarding port %d to pod %s: %v", port, pf.ip, err)
		_ = p.data.Reset()
		return
	}
	defer c.Close()
	done := make(chan struct{})
	go func() {
		// Client → pod; the client closing its side half-closes ours.
		_, _ = io.Copy(c, p.data)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	// Pod → client, then tell the client there is no more data.
	_, _ = io.Copy(p.data, c)
	_ = p.data.Close()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

// selfSignedCert is an ECDSA P-256 certificate for the node's name and IP, valid for a year.
func selfSignedCert(name, ip string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name + "@" + Component},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name},
	}
	if a := net.ParseIP(ip); a != nil {
		tmpl.IPAddresses = []net.IP{a}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
