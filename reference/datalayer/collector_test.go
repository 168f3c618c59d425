package datalayer

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/reference/framework"
)

// fakeServer serves Prometheus text that a test can change, or fail with a status.
type fakeServer struct {
	*httptest.Server
	mu       sync.Mutex
	text     string
	status   int
	delay    time.Duration
	requests atomic.Int64
	conns    atomic.Int64
}

func newFakeServer(t *testing.T, text string) *fakeServer {
	t.Helper()
	f := &fakeServer{text: text, status: http.StatusOK}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		f.mu.Lock()
		text, status, delay := f.text, f.status, f.delay
		f.mu.Unlock()
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.WriteHeader(status)
		fmt.Fprint(w, text)
	}))
	f.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.Start()
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) set(text string, status int) {
	f.mu.Lock()
	f.text, f.status = text, status
	f.mu.Unlock()
}

func (f *fakeServer) endpoint(t *testing.T) *framework.EndpointMetadata {
	t.Helper()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(f.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return &framework.EndpointMetadata{Name: "pod-" + port, PodName: "pod-" + port, Address: host, Port: p}
}

func vllmText(waiting, running int, kv float64) string {
	return fmt.Sprintf(`# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} %d
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} %d
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} %g
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql",waiting_lora_adapters=""} 1.7e+09
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1
`, waiting, running, kv)
}

// waitFor polls cond (real time, up to 10 s); step, when set, runs before each poll to advance a
// fake clock so tickers fire even if their goroutine registered late.
func waitFor(t *testing.T, what string, step func(), cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		if step != nil {
			step()
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func startCollector(t *testing.T, cfg Config) (*Collector, context.CancelFunc) {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	t.Cleanup(func() {
		cancel()
		c.Wait()
	})
	return c, cancel
}

func TestCollectorScrapesAndRefreshes(t *testing.T) {
	srv := newFakeServer(t, vllmText(3, 2, 0.5))
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c, _ := startCollector(t, Config{Interval: 50 * time.Millisecond, Clock: clk})
	ep := srv.endpoint(t)
	if got := c.Metrics(ep.Key()); got != nil {
		t.Fatalf("Metrics before any endpoint = %+v, want nil", got)
	}
	c.SetEndpoints([]*framework.EndpointMetadata{ep})
	waitFor(t, "first scrape", nil, func() bool { return c.Metrics(ep.Key()) != nil })
	m := c.Metrics(ep.Key())
	if m.ScrapeError != nil || m.WaitingQueueSize != 3 || m.RunningRequests != 2 || m.KVCacheUsage != 0.5 ||
		m.MaxActiveModels != 2 || m.CacheBlockSize != 16 || m.CacheNumGPUBlocks != 100 {
		t.Fatalf("first scrape = %+v", m)
	}
	if _, ok := m.ActiveModels["sql"]; !ok {
		t.Errorf("ActiveModels = %v, want sql", m.ActiveModels)
	}
	if !m.UpdateTime.Equal(clk.Now()) {
		t.Errorf("UpdateTime = %v, want the fake clock's %v", m.UpdateTime, clk.Now())
	}
	if c.Stale(ep.Key()) {
		t.Error("Stale right after a good scrape")
	}

	// The clone is the caller's: changing it changes nothing inside.
	m.ActiveModels["x"] = struct{}{}
	if _, ok := c.Metrics(ep.Key()).ActiveModels["x"]; ok {
		t.Error("Metrics returned shared state")
	}

	srv.set(vllmText(7, 1, 0.9), http.StatusOK)
	waitFor(t, "refresh on the next tick", func() { clk.Step(50 * time.Millisecond) },
		func() bool { m := c.Metrics(ep.Key()); return m.WaitingQueueSize == 7 && m.KVCacheUsage == 0.9 })
}

func TestCollectorStaleness(t *testing.T) {
	srv := newFakeServer(t, vllmText(1, 1, 0.1))
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	// An hour between scrapes: only the first scrape happens unless the test steps an hour.
	c, _ := startCollector(t, Config{Interval: time.Hour, StaleThreshold: time.Second, Clock: clk})
	ep := srv.endpoint(t)
	key := ep.Key()
	if !c.Stale(key) {
		t.Error("an unknown endpoint must be stale")
	}
	c.SetEndpoints([]*framework.EndpointMetadata{ep})
	waitFor(t, "first scrape", nil, func() bool { return c.Metrics(key) != nil })
	waitFor(t, "ticker registered", nil, clk.HasWaiters)

	if c.Stale(key) {
		t.Fatal("stale at age 0")
	}
	clk.Step(time.Second)
	if c.Stale(key) {
		t.Error("stale at age == StaleThreshold (1 s); the bound is inclusive")
	}
	clk.Step(time.Millisecond)
	if !c.Stale(key) {
		t.Error("not stale at age 1.001 s > StaleThreshold")
	}

	// A failed scrape: stale at once, last good values kept with the error.
	srv.set("oops", http.StatusInternalServerError)
	before := c.Metrics(key)
	clk.Step(time.Hour)
	waitFor(t, "failed scrape recorded", nil, func() bool { return c.Metrics(key).ScrapeError != nil })
	m := c.Metrics(key)
	if !strings.Contains(m.ScrapeError.Error(), "HTTP status 500") {
		t.Errorf("ScrapeError = %v", m.ScrapeError)
	}
	if m.WaitingQueueSize != 1 || !m.UpdateTime.Equal(before.UpdateTime) {
		t.Errorf("a failed scrape must keep the last values and their UpdateTime: %+v", m)
	}
	if !c.Stale(key) {
		t.Error("not stale after a failed scrape")
	}

	// Recovery.
	srv.set(vllmText(4, 4, 0.4), http.StatusOK)
	waitFor(t, "ticker re-registered", nil, clk.HasWaiters)
	clk.Step(time.Hour)
	waitFor(t, "recovered scrape", nil, func() bool { return c.Metrics(key).ScrapeError == nil })
	if c.Stale(key) || c.Metrics(key).WaitingQueueSize != 4 {
		t.Errorf("after recovery: stale=%v metrics=%+v", c.Stale(key), c.Metrics(key))
	}
}

func TestCollectorScrapeFailures(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name    string
		setup   func(t *testing.T) *framework.EndpointMetadata
		cfg     Config
		wantErr string
	}{
		{"status 503", func(t *testing.T) *framework.EndpointMetadata {
			s := newFakeServer(t, "")
			s.set("busy", http.StatusServiceUnavailable)
			return s.endpoint(t)
		}, Config{}, "HTTP status 503"},
		{"not Prometheus text", func(t *testing.T) *framework.EndpointMetadata {
			return newFakeServer(t, "{\"json\": true}\n").endpoint(t)
		}, Config{}, "parse text format"},
		{"required family missing", func(t *testing.T) *framework.EndpointMetadata {
			return newFakeServer(t, "vllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0\n").endpoint(t)
		}, Config{}, `"vllm:num_requests_waiting" not found`},
		{"connection refused", func(t *testing.T) *framework.EndpointMetadata {
			host, port, _ := net.SplitHostPort(strings.TrimPrefix(closedURL, "http://"))
			p, _ := strconv.Atoi(port)
			return &framework.EndpointMetadata{Address: host, Port: p}
		}, Config{}, "connect"},
		{"slower than Timeout", func(t *testing.T) *framework.EndpointMetadata {
			s := newFakeServer(t, vllmText(1, 1, 0))
			s.mu.Lock()
			s.delay = 2 * time.Second
			s.mu.Unlock()
			return s.endpoint(t)
		}, Config{Timeout: 50 * time.Millisecond}, "context deadline exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep := tc.setup(t)
			cfg := tc.cfg
			cfg.Interval = time.Hour // one scrape
			c, _ := startCollector(t, cfg)
			c.SetEndpoints([]*framework.EndpointMetadata{ep})
			waitFor(t, "first scrape", nil, func() bool { return c.Metrics(ep.Key()) != nil })
			m := c.Metrics(ep.Key())
			if m.ScrapeError == nil || !strings.Contains(m.ScrapeError.Error(), tc.wantErr) {
				t.Fatalf("ScrapeError = %v, want one containing %q", m.ScrapeError, tc.wantErr)
			}
			if !strings.Contains(m.ScrapeError.Error(), ep.Key()) {
				t.Errorf("ScrapeError %q does not name the endpoint %s", m.ScrapeError, ep.Key())
			}
			if !c.Stale(ep.Key()) {
				t.Error("an endpoint whose scrape failed must be stale")
			}
		})
	}
}

func TestCollectorSetEndpointsStopsRemovedScrapers(t *testing.T) {
	a := newFakeServer(t, vllmText(1, 0, 0))
	b := newFakeServer(t, vllmText(2, 0, 0))
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c, cancel := startCollector(t, Config{Interval: 10 * time.Millisecond, Clock: clk})
	epA, epB := a.endpoint(t), b.endpoint(t)
	c.SetEndpoints([]*framework.EndpointMetadata{epA, epB, nil})
	if n := c.running(); n != 2 {
		t.Fatalf("running scrapers = %d, want 2", n)
	}
	waitFor(t, "both scraped", nil, func() bool { return c.Metrics(epA.Key()) != nil && c.Metrics(epB.Key()) != nil })

	// Setting the same endpoints again starts nothing new.
	c.SetEndpoints([]*framework.EndpointMetadata{epB, epA})
	if n := c.running(); n != 2 {
		t.Fatalf("running scrapers after an unchanged set = %d, want 2", n)
	}

	c.SetEndpoints([]*framework.EndpointMetadata{epA})
	waitFor(t, "b's scraper to exit", nil, func() bool { return c.running() == 1 })
	if c.Metrics(epB.Key()) != nil || !c.Stale(epB.Key()) {
		t.Error("a removed endpoint must be forgotten")
	}
	seenB := b.requests.Load()
	for range 20 {
		clk.Step(10 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	waitFor(t, "a keeps being scraped", func() { clk.Step(10 * time.Millisecond) },
		func() bool { return a.requests.Load() >= 5 })
	if got := b.requests.Load(); got != seenB {
		t.Errorf("removed endpoint b was scraped %d more times", got-seenB)
	}

	cancel()
	waitStopped(t, c, "Wait did not return after the context ended")
	if n := c.running(); n != 0 {
		t.Errorf("running scrapers after shutdown = %d", n)
	}
	// Endpoints set after shutdown start nothing.
	c.SetEndpoints([]*framework.EndpointMetadata{epA, epB})
	if n := c.running(); n != 0 {
		t.Errorf("scrapers started after the context ended: %d", n)
	}
}

func TestCollectorKeepsConnectionsAlive(t *testing.T) {
	srv := newFakeServer(t, vllmText(1, 1, 0.1))
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	// A generous Timeout: a scrape cut off by its deadline closes its connection, which is
	// right, but not what this test is about.
	c, _ := startCollector(t, Config{Interval: 10 * time.Millisecond, Timeout: 10 * time.Second, Clock: clk})
	c.SetEndpoints([]*framework.EndpointMetadata{srv.endpoint(t)})
	waitFor(t, "20 scrapes", func() { clk.Step(10 * time.Millisecond) }, func() bool { return srv.requests.Load() >= 20 })
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("%d scrapes opened %d connections, want 1 (keep-alive)", srv.requests.Load(), n)
	}
}

func TestCollectorEndpointsBeforeStart(t *testing.T) {
	srv := newFakeServer(t, vllmText(6, 0, 0))
	c, err := New(Config{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ep := srv.endpoint(t)
	c.SetEndpoints([]*framework.EndpointMetadata{ep})
	if c.running() != 0 {
		t.Fatal("scraping before Start")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); c.Wait() }()
	c.Start(ctx)
	c.Start(ctx) // a second Start is a no-op
	if c.running() != 1 {
		t.Fatalf("running = %d after Start, want 1", c.running())
	}
	waitFor(t, "scrape", nil, func() bool { m := c.Metrics(ep.Key()); return m != nil && m.WaitingQueueSize == 6 })
}

// waitStopped fails the test with msg unless c.Wait returns within 5 s.
func waitStopped(t *testing.T, c *Collector, msg string) {
	t.Helper()
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal(msg)
	}
}
