// Package metricspage serves fixed Prometheus /metrics pages cheaply, as load fixtures: the
// endpoints of eppkit's picker-overhead matrix (`eppkit bench extproc --targets`) are metrics-only
// servers, one per loopback address, each serving the page a gauge-only fake vLLM server with
// pinned metrics would serve, so the bench measures the picker, not a fleet of model servers.
package metricspage

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"

	"github.com/eppkit/eppkit/fakes/vllm"
)

// MaxEndpoints bounds a Fleet: its servers take loopback addresses 127.1.x.y (x < 40, y in
// 1..250).
const MaxEndpoints = 10000

// Addr is the loopback address of metrics server i: 127.1.<i/250>.<i%250+1>.
func Addr(i int) string { return fmt.Sprintf("127.1.%d.%d", i/250, i%250+1) }

// Fleet serves a fixed vLLM /metrics page on each of N loopback addresses, one port
// shared by all (as the pods of an InferencePool). The pages are rendered once by fake vLLM
// servers in gauge-only mode with pinned metrics (queue i%5, running i%7, KV usage (i%10)/10), so
// they are exactly what `eppkit fake-vllm --gauge-only --fake-metrics ...` serves, without a model
// server behind them: the bench measures the picker, not the fleet. Each page is served by a
// PageServer, whose whole answer is precomputed, because the fleet shares the machine with the
// EPP under test (100 endpoints scraped every 50 ms is 2,000 requests/s).
type Fleet struct {
	Addrs []string // "ip:port"
	srvs  []*PageServer
}

// StartFleet serves RenderVLLMPages(n) on Addr(0..n-1), one free port shared by all (n at most
// MaxEndpoints). It retries a few times when another process took the port on one of the
// addresses first.
func StartFleet(n int) (*Fleet, error) {
	if n < 1 || n > MaxEndpoints {
		return nil, fmt.Errorf("metricspage: %d servers, want 1..%d", n, MaxEndpoints)
	}
	pages, err := RenderVLLMPages(n)
	if err != nil {
		return nil, err
	}
	const ctype = "text/plain; version=0.0.4; charset=utf-8"
	answers := make([][][]byte, n)
	for i, page := range pages {
		answers[i] = [][]byte{httpAnswer("200 OK", ctype, page)}
	}
	return serveFleet(answers)
}

// serveFleet serves answers[i] (one precomputed HTTP answer, or several in rotation) on Addr(i),
// one free port shared by all, retrying a few times when another process took the port on one
// of the addresses first.
func serveFleet(answers [][][]byte) (*Fleet, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		lns, err := listenLoopback(len(answers))
		if err != nil {
			lastErr = err
			continue
		}
		f := &Fleet{}
		for i, ln := range lns {
			var srv *PageServer
			if len(answers[i]) == 1 {
				srv = NewPageServer(ln, "/metrics", "", nil)
				srv.page = answers[i][0]
			} else {
				srv = newRotatingServer(ln, "/metrics", answers[i])
			}
			f.srvs = append(f.srvs, srv)
			f.Addrs = append(f.Addrs, ln.Addr().String())
			go srv.Serve()
		}
		return f, nil
	}
	return nil, fmt.Errorf("metrics servers on 127.1.x.y: %w", lastErr)
}

// Close stops every server.
func (f *Fleet) Close() {
	for _, s := range f.srvs {
		s.Close()
	}
}

// PageServer answers every HTTP/1.1 GET of one path with one fixed page and anything else with
// 404, on keep-alive connections, writing a precomputed answer (status line, Content-Type,
// Content-Length, body) in one write. It reads request lines and headers (a request body, which
// no scraper sends, is skipped by its Content-Length) and honours "Connection: close". It is a
// load fixture, not a general HTTP server.
type PageServer struct {
	ln            net.Listener
	pagePath      string
	page, missing []byte
	rot           *rotation // non-nil: successive answers instead of page (NewRotatingPageServer)

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewPageServer returns a server of page (with this Content-Type) at path on ln; Serve runs it.
func NewPageServer(ln net.Listener, path, contentType string, page []byte) *PageServer {
	answer := func(status, ctype string, body []byte) []byte {
		return append(fmt.Appendf(nil, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", status, ctype, len(body)), body...)
	}
	return &PageServer{ln: ln, page: answer("200 OK", contentType, page),
		missing: answer("404 Not Found", "text/plain; charset=utf-8", []byte("404 page not found\n")),
		conns:   map[net.Conn]struct{}{}, pagePath: path}
}

// Serve accepts connections until Close (or ln fails).
func (p *PageServer) Serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go p.handle(c)
	}
}

// Close stops accepting and closes every open connection.
func (p *PageServer) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
}

func (p *PageServer) handle(c net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		_ = c.Close()
	}()
	br := bufio.NewReaderSize(c, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		// "GET /metrics HTTP/1.1"
		fields := bytes.Fields(line)
		if len(fields) != 3 {
			return
		}
		target := fields[1]
		if i := bytes.IndexByte(target, '?'); i >= 0 {
			target = target[:i]
		}
		ok := string(fields[0]) == http.MethodGet && string(target) == p.pagePath
		closeAfter, bodyLen := string(fields[2]) == "HTTP/1.0", 0
		for {
			h, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			h = bytes.TrimRight(h, "\r\n")
			if len(h) == 0 {
				break
			}
			name, value, _ := bytes.Cut(h, []byte(":"))
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Connection")):
				closeAfter = bytes.EqualFold(value, []byte("close"))
			case bytes.EqualFold(name, []byte("Content-Length")):
				if bodyLen, err = strconv.Atoi(string(value)); err != nil || bodyLen < 0 {
					return
				}
			}
		}
		if _, err := br.Discard(bodyLen); err != nil {
			return
		}
		answer := p.page
		if ok && p.rot != nil {
			answer = p.rot.next()
		}
		if !ok {
			answer = p.missing
		}
		if _, err := c.Write(answer); err != nil || closeAfter {
			return
		}
	}
}

// RenderVLLMPages renders the gauge-only /metrics page of n fake vLLM servers with pinned
// metrics (see Fleet).
func RenderVLLMPages(n int) ([][]byte, error) {
	pages := make([][]byte, n)
	for i := range pages {
		cfg := vllm.DefaultConfig()
		cfg.Model = "meta-llama/Llama-3.1-8B-Instruct"
		cfg.GaugeOnly = true
		cfg.PodName = fmt.Sprintf("bench-%d", i)
		cfg.FakeMetrics = &vllm.FakeMetrics{WaitingRequests: int64(i % 5), RunningRequests: int64(i % 7), KVCacheUsage: float64(i%10) / 10}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("fake vLLM config: %w", err)
		}
		s, err := vllm.NewServer(cfg, 0, nil, vllm.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		_ = s.Close()
		if rec.Code != http.StatusOK {
			return nil, fmt.Errorf("fake vLLM /metrics: HTTP %d", rec.Code)
		}
		pages[i] = rec.Body.Bytes()
	}
	return pages, nil
}
