package metricspage

import (
	"context"
	"fmt"
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
	srv := NewPageServer(ln, "/metrics", "text/plain; version=0.0.4", []byte(page))
	go srv.Serve()
	t.Cleanup(srv.Close)
	var dials int
	client := countingClient(&dials)
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

func TestRenderMetricsPages(t *testing.T) {
	pages, err := RenderVLLMPages(3)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"vllm:num_requests_waiting{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 2", "vllm:kv_cache_usage_perc"} {
		if !strings.Contains(string(pages[2]), want) {
			t.Errorf("page 2 lacks %q (check %d):\n%s", want, i, pages[2])
		}
	}
}

// TestStartFleet: n servers on Addr(0..n-1), one port, each serving its own pinned page.
func TestStartFleet(t *testing.T) {
	f, err := StartFleet(3)
	if err != nil {
		t.Skipf("loopback addresses 127.1.0.x unavailable here: %v", err)
	}
	defer f.Close()
	if len(f.Addrs) != 3 {
		t.Fatalf("addrs %v", f.Addrs)
	}
	for i, a := range f.Addrs {
		host, port, _ := net.SplitHostPort(a)
		_, port0, _ := net.SplitHostPort(f.Addrs[0])
		if host != Addr(i) || port != port0 {
			t.Errorf("server %d at %s, want %s on the shared port %s", i, a, Addr(i), port0)
		}
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("vllm:num_requests_waiting{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} %d", i%5); !strings.Contains(string(b), want) {
			t.Errorf("server %d lacks %q", i, want)
		}
	}
	if _, err := StartFleet(0); err == nil {
		t.Error("StartFleet(0) succeeded")
	}
}

// countingClient is an HTTP client (no proxy) that counts its connections in *dials.
func countingClient(dials *int) *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		*dials++
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
}
