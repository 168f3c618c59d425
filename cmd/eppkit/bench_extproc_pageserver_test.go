package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestPageServer: the metrics fleet's page server answers GETs of its path with the page on one
// keep-alive connection, anything else with 404, and closes after "Connection: close".
func TestPageServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	page := "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n"
	srv := newPageServer(ln, "/metrics", "text/plain; version=0.0.4", []byte(page))
	go srv.serve()
	t.Cleanup(srv.close)
	var dials int
	client := &http.Client{Transport: &http.Transport{Proxy: nil, Dial: func(network, addr string) (net.Conn, error) {
		dials++
		return net.Dial(network, addr)
	}}}
	get := func(path string, close bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+path, nil)
		req.Close = close
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s body: %v", path, err)
		}
		return resp.StatusCode, string(b)
	}
	for i := range 3 {
		if code, body := get("/metrics", false); code != 200 || body != page {
			t.Fatalf("GET /metrics #%d = %d %q, want 200 and the page", i+1, code, body)
		}
	}
	if code, body := get("/metrics?x=1", false); code != 200 || body != page {
		t.Fatalf("GET /metrics?x=1 = %d %q, want 200 and the page", code, body)
	}
	if code, _ := get("/other", false); code != 404 {
		t.Fatalf("GET /other = %d, want 404", code)
	}
	if dials != 1 {
		t.Errorf("5 requests dialled %d connections, want 1 (keep-alive)", dials)
	}
	if code, body := get("/metrics", true); code != 200 || !strings.Contains(body, "vllm:num_requests_waiting 3") {
		t.Fatalf("GET with Connection: close = %d %q", code, body)
	}
	if code, _ := get("/metrics", false); code != 200 || dials != 2 {
		t.Errorf("after Connection: close: status %d, dials %d, want 200 on a new connection (2)", code, dials)
	}
}
