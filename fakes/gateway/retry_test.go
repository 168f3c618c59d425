package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/eppkit/eppkit/fakes/gateway"
)

// closingServer is a raw HTTP/1.1 model server that answers the first closeAt-1 requests of every
// connection with keep-alive and closes the connection, without a response byte, after reading
// request number closeAt on it. It counts every request it read.
func closingServer(t *testing.T, closeAt int) (addr string, reqs *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	reqs = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					reqs.Add(1)
					if n == closeAt {
						return
					}
					body := `{"ok":true}`
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nx-inference-pod: pod-a\r\nContent-Length: "+
						strconv.Itoa(len(body))+"\r\n\r\n"+body)
				}
			}(c)
		}
	}()
	return ln.Addr().String(), reqs
}

// A pooled keep-alive connection the model server closed before answering is retried once on a
// new connection: the POST succeeds and the server saw it twice.
func TestRetryOnReusedConnectionClosedBeforeResponse(t *testing.T) {
	addr, reqs := closingServer(t, 2)
	g := newGateway(t, gateway.Config{Mode: gateway.ModeRoundRobin, Endpoints: []string{addr}})
	for i := range 2 {
		res, err := g.Do(context.Background(), &gateway.Request{Body: []byte(`{"model":"m"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != http.StatusOK {
			t.Fatalf("request %d: status %d, body %s; want 200 (the reused connection's close is retried)", i, res.Status, res.Body)
		}
	}
	if got := reqs.Load(); got != 3 {
		t.Errorf("server read %d requests, want 3 (1, then 1 closed on the reused connection, then its retry)", got)
	}
}

// A request whose fresh connection is closed before a response is not retried: a model server
// that really drops requests still shows as a 503.
func TestNoRetryOnFreshConnection(t *testing.T) {
	addr, reqs := closingServer(t, 1)
	g := newGateway(t, gateway.Config{Mode: gateway.ModeRoundRobin, Endpoints: []string{addr}})
	res, err := g.Do(context.Background(), &gateway.Request{Body: []byte(`{"model":"m"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusServiceUnavailable || !strings.Contains(string(res.Body), "upstream connect error") {
		t.Errorf("status %d body %s, want 503 upstream connect error", res.Status, res.Body)
	}
	if got := reqs.Load(); got != 1 {
		t.Errorf("server read %d requests, want 1 (no retry)", got)
	}
}
