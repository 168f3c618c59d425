package datalayer

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/reference/framework"
)

// serve starts an HTTP server with h and returns its endpoint and its count of new connections.
func serve(t *testing.T, h http.HandlerFunc, idle time.Duration) (*framework.EndpointMetadata, *atomic.Int64) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Config.IdleTimeout = idle
	srv.Start()
	t.Cleanup(srv.Close)
	f := &fakeServer{Server: srv}
	return f.endpoint(t), &conns
}

// scrapeN runs n scrapes of ep (fake clock, 10 ms interval) and returns the metrics after each.
func scrapeN(t *testing.T, ep *framework.EndpointMetadata, n int, between func()) []*framework.Metrics {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c, _ := startCollector(t, Config{Interval: 10 * time.Millisecond, Timeout: 5 * time.Second, Clock: clk})
	c.SetEndpoints([]*framework.EndpointMetadata{ep})
	var out []*framework.Metrics
	for i := range n {
		if i > 0 {
			if between != nil {
				between()
			}
			last := out[len(out)-1].UpdateTime
			waitFor(t, fmt.Sprintf("scrape %d", i+1), func() { clk.Step(10 * time.Millisecond) }, func() bool {
				m := c.Metrics(ep.Key())
				return m.UpdateTime.After(last) || (m.ScrapeError != nil && m != out[len(out)-1])
			})
		} else {
			waitFor(t, "first scrape", nil, func() bool { return c.Metrics(ep.Key()) != nil })
		}
		out = append(out, c.Metrics(ep.Key()))
	}
	return out
}

// TestDirectScrapeFraming: the direct path reads chunked, Content-Length and close-delimited
// bodies, and follows a server's Connection: close.
func TestDirectScrapeFraming(t *testing.T) {
	for _, tc := range []struct {
		name      string
		write     func(w http.ResponseWriter, text string)
		wantConns func(scrapes int) int64
	}{
		{"content-length", func(w http.ResponseWriter, text string) {
			w.Header().Set("Content-Length", fmt.Sprint(len(text)))
			fmt.Fprint(w, text)
		}, func(int) int64 { return 1 }},
		{"chunked", func(w http.ResponseWriter, text string) {
			half := len(text) / 2
			fmt.Fprint(w, text[:half])
			w.(http.Flusher).Flush()
			fmt.Fprint(w, text[half:])
		}, func(int) int64 { return 1 }},
		{"connection close", func(w http.ResponseWriter, text string) {
			w.Header().Set("Connection", "close")
			fmt.Fprint(w, text)
		}, func(n int) int64 { return int64(n) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			ep, conns := serve(t, func(w http.ResponseWriter, r *http.Request) {
				i := int(n.Add(1))
				tc.write(w, vllmText(i, 2, 0.5))
			}, 0)
			got := scrapeN(t, ep, 5, nil)
			// scrapeN steps the fake clock until a new result shows, so a slow scrape can let a
			// second tick through before the test looks: every page read is fresh (the queue
			// counts the handler's calls), not necessarily the next one.
			prev := 0
			for i, m := range got {
				if m.ScrapeError != nil || m.WaitingQueueSize <= prev || m.RunningRequests != 2 {
					t.Fatalf("scrape %d: queue %d running %d err %v, want queue > %d, running 2, no error",
						i+1, m.WaitingQueueSize, m.RunningRequests, m.ScrapeError, prev)
				}
				prev = m.WaitingQueueSize
			}
			if c, want := conns.Load(), tc.wantConns(5); c < want || (want == 1 && c != 1) {
				t.Errorf("%d scrapes used %d connections, want %d", 5, c, want)
			}
		})
	}
}

// TestDirectScrapeRedirect: a 307 (vLLM's /metrics → /metrics/) is followed by handing the
// endpoint to net/http, which keeps following it.
func TestDirectScrapeRedirect(t *testing.T) {
	var n atomic.Int64
	ep, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			http.Redirect(w, r, "/metrics/", http.StatusTemporaryRedirect)
			return
		}
		fmt.Fprint(w, vllmText(int(n.Add(1)), 1, 0))
	}, 0)
	prev := 0 // strictly increasing: each scrape read a fresh page (see TestDirectScrapeFraming)
	for i, m := range scrapeN(t, ep, 3, nil) {
		if m.ScrapeError != nil || m.WaitingQueueSize <= prev {
			t.Fatalf("scrape %d: queue %d err %v, want queue > %d and no error", i+1, m.WaitingQueueSize, m.ScrapeError, prev)
		}
		prev = m.WaitingQueueSize
	}
}

// TestDirectScrapeIdleClosedConnection: a keep-alive connection the server closed while idle is
// replaced without a failed scrape.
func TestDirectScrapeIdleClosedConnection(t *testing.T) {
	ep, conns := serve(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, vllmText(3, 1, 0))
	}, 5*time.Millisecond)
	got := scrapeN(t, ep, 4, func() { time.Sleep(50 * time.Millisecond) })
	for i, m := range got {
		if m.ScrapeError != nil {
			t.Fatalf("scrape %d failed: %v", i+1, m.ScrapeError)
		}
	}
	if c := conns.Load(); c < 2 {
		t.Errorf("connections = %d, want a new one after each idle close", c)
	}
}

// TestDirectScrapeStopUnblocks: stopping the collector while a scrape waits on a slow server
// ends the scrape at once, not after Timeout.
func TestDirectScrapeStopUnblocks(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Bool
	ep, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		started.Store(true)
		<-release
	}, 0)
	t.Cleanup(func() { close(release) }) // runs before serve's srv.Close, which waits for handlers
	c, err := New(Config{Interval: time.Hour, Timeout: time.Minute, StaleThreshold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	c.SetEndpoints([]*framework.EndpointMetadata{ep})
	waitFor(t, "the request to arrive", nil, started.Load)
	cancel()
	waitStopped(t, c, "Wait did not return within 5 s of the context ending (Timeout is 1 min)")
}

// TestDirectScrapeBodyTooLong: a body over MaxBodyBytes fails the scrape with the same error as
// on the net/http path.
func TestDirectScrapeBodyTooLong(t *testing.T) {
	ep, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		line := strings.Repeat("#", 1023) + "\n"
		for written := 0; written <= MaxBodyBytes; written += len(line) {
			if _, err := fmt.Fprint(w, line); err != nil {
				return
			}
		}
	}, 0)
	m := scrapeN(t, ep, 1, nil)[0]
	if m.ScrapeError == nil || !strings.Contains(m.ScrapeError.Error(), "body longer than") {
		t.Fatalf("ScrapeError = %v, want body longer than %d bytes", m.ScrapeError, MaxBodyBytes)
	}
}

// BenchmarkScrape measures one scrape of an unchanged fake vLLM page (the pinned-metrics case of
// `eppkit bench extproc`: the body is read and compared, not parsed again) over loopback, on the
// direct path and through net/http (Config.HTTPClient set). The server's cost is included.
func BenchmarkScrape(b *testing.B) {
	text := vllmText(3, 1, 0.5)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, text)
	}))
	defer srv.Close()
	f := &fakeServer{Server: srv}
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(f.URL, "http://"))
	key := net.JoinHostPort(host, port)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{{"direct", Config{}}, {"net-http", Config{HTTPClient: defaultHTTPClient()}}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := New(tc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := &scraper{key: key, url: "http://" + key + c.path, req: directRequest(key, c.path, acceptHeader)}
			defer func() {
				if s.conn != nil {
					s.conn.close()
				}
			}()
			b.ReportAllocs()
			for b.Loop() {
				if m, err := c.fetch(ctx, s); err != nil || m.WaitingQueueSize != 3 {
					b.Fatalf("fetch: %v %v", m, err)
				}
			}
		})
	}
}
