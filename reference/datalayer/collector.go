package datalayer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/framework"
)

// Defaults of Config.
const (
	DefaultInterval       = 50 * time.Millisecond
	DefaultStaleThreshold = time.Second
	// DefaultTimeoutIntervals is how many intervals one scrape may take by default (see
	// Config.Timeout).
	DefaultTimeoutIntervals = 10
	DefaultMetricsPath      = "/metrics"
	// MaxBodyBytes caps one /metrics response; a longer one fails the scrape.
	MaxBodyBytes = 16 << 20
)

// Config configures a Collector. The zero value of each field means its default.
type Config struct {
	// Interval between the starts of two scrapes of one endpoint (default 50 ms, upstream's
	// --refresh-metrics-interval default). A scrape slower than Interval delays the next one; ticks
	// are not queued.
	Interval time.Duration
	// StaleThreshold is the age after which an endpoint's metrics are stale (default 1 s,
	// SPEC §3 "Stale endpoints").
	StaleThreshold time.Duration
	// Timeout bounds one scrape, connection included. Default: DefaultTimeoutIntervals × Interval
	// (500 ms at the default interval), capped at StaleThreshold, since a slower answer would be
	// stale on arrival. It runs on the wall clock, not on Clock.
	Timeout time.Duration
	// Names selects the metric families; the zero value means DefaultMetricNames().
	Names MetricNames
	// MetricsPath is the HTTP path scraped on each endpoint (default "/metrics").
	MetricsPath string
	// HTTPClient makes the scrapes. Default: a keep-alive client of its own that ignores proxy
	// environment variables (pod IPs are reached directly) and keeps up to 2 idle connections per
	// endpoint for 30 s.
	HTTPClient *http.Client
	// Clock drives the scrape ticker and stamps UpdateTime; staleness is judged on it
	// (default: the real clock).
	Clock clock.WithTicker
	// Logger receives scrape failures and recoveries (one line per change, not per scrape);
	// default: discard.
	Logger *slog.Logger
}

// Collector scrapes every endpoint it was given until its context ends. All methods are safe for
// concurrent use.
type Collector struct {
	interval, stale, timeout time.Duration
	path                     string
	specs                    specs
	families                 familySet // the families specs reads (filter.go)
	client                   *http.Client
	direct                   bool // scrape with directGet (Config.HTTPClient not set); see scrape.go
	clock                    clock.WithTicker
	log                      *slog.Logger

	mu       sync.Mutex
	idle     *sync.Cond // signalled when live drops to 0; uses mu
	ctx      context.Context
	scrapers map[string]*scraper
	live     int // running scraper goroutines
	// view is a read-only copy of scrapers, replaced (never modified) by SetEndpoints, so that the
	// per-request readers (Metrics, Stale, Read) take no lock.
	view atomic.Pointer[map[string]*scraper]
}

// scraper is one endpoint's loop and its latest result.
type scraper struct {
	key, url string
	cancel   context.CancelFunc // nil until started

	// metrics is the latest result, nil until the first scrape finished. A stored value is never
	// modified (each scrape stores a new one), so readers share it.
	metrics atomic.Pointer[framework.Metrics]

	// Used only by the scraper's own goroutine: the last body read and what it parsed to, so an
	// unchanged body (pinned or idle metrics) is not parsed again.
	buf       []byte
	kept      []byte // the lines of buf's families the specs read (filter.go)
	keptLines []int  // kept's line numbers in buf
	lastBody  []byte // the kept lines last parsed
	lastFresh *framework.Metrics
	lastErr   error

	// The direct scrape path (scrape.go): the request's bytes, the keep-alive connection (nil
	// when none is open) and its reader, and whether this endpoint has been handed to net/http.
	req     []byte
	conn    *directConn
	br      *bufio.Reader
	useHTTP bool
}

// New validates cfg and returns a Collector that scrapes nothing until SetEndpoints and Start.
// Errors name the field: a negative Interval, StaleThreshold or Timeout, or a malformed metric
// selector in Names.
func New(cfg Config) (*Collector, error) {
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("datalayer: Interval %v must be positive", cfg.Interval)
	}
	if cfg.StaleThreshold < 0 {
		return nil, fmt.Errorf("datalayer: StaleThreshold %v must be positive", cfg.StaleThreshold)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("datalayer: Timeout %v must be positive", cfg.Timeout)
	}
	c := &Collector{
		interval: cfg.Interval, stale: cfg.StaleThreshold, timeout: cfg.Timeout,
		path: cfg.MetricsPath, client: cfg.HTTPClient, clock: cfg.Clock, log: cfg.Logger,
		scrapers: map[string]*scraper{},
	}
	c.idle = sync.NewCond(&c.mu)
	if c.interval == 0 {
		c.interval = DefaultInterval
	}
	if c.stale == 0 {
		c.stale = DefaultStaleThreshold
	}
	if c.timeout == 0 {
		c.timeout = min(DefaultTimeoutIntervals*c.interval, c.stale)
	}
	if c.path == "" {
		c.path = DefaultMetricsPath
	}
	if c.path[0] != '/' {
		return nil, fmt.Errorf("datalayer: MetricsPath %q must start with '/'", cfg.MetricsPath)
	}
	names := cfg.Names
	if names == (MetricNames{}) {
		names = DefaultMetricNames()
	}
	sp, err := names.compile()
	if err != nil {
		return nil, fmt.Errorf("datalayer: %w", err)
	}
	c.specs, c.families = sp, sp.families()
	if c.client == nil {
		c.client = defaultHTTPClient()
		c.direct = true
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

func defaultHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}}
}

// SetEndpoints makes eps the set of scraped endpoints, identified by Key(): scrapers of endpoints
// no longer listed stop (their goroutines exit and their metrics are forgotten), new endpoints
// get a scraper that starts at once if the Collector is running. Nil entries are ignored.
func (c *Collector) SetEndpoints(eps []*framework.EndpointMetadata) {
	want := make(map[string]struct{}, len(eps))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ep := range eps {
		if ep == nil {
			continue
		}
		key := ep.Key()
		want[key] = struct{}{}
		if _, ok := c.scrapers[key]; ok {
			continue
		}
		s := &scraper{key: key, url: "http://" + key + c.path, req: directRequest(key, c.path, acceptHeader)}
		c.scrapers[key] = s
		c.startLocked(s)
	}
	for key, s := range c.scrapers {
		if _, ok := want[key]; ok {
			continue
		}
		if s.cancel != nil {
			s.cancel()
		}
		delete(c.scrapers, key)
	}
	view := maps.Clone(c.scrapers)
	c.view.Store(&view)
}

// lookup returns the scraper of key, nil when unknown, without locking.
func (c *Collector) lookup(key string) *scraper {
	if v := c.view.Load(); v != nil {
		return (*v)[key]
	}
	return nil
}

// Start starts the scrapers of the endpoints set so far, and of those set later, until ctx ends.
// A second call does nothing.
func (c *Collector) Start(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx != nil {
		return
	}
	c.ctx = ctx
	for _, s := range c.scrapers {
		c.startLocked(s)
	}
}

// Wait blocks until every scraper goroutine has returned: after Start's context ended, or while
// no endpoint is set.
func (c *Collector) Wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.live > 0 {
		c.idle.Wait()
	}
}

// startLocked launches s's loop when the Collector runs. c.mu must be held.
func (c *Collector) startLocked(s *scraper) {
	if c.ctx == nil || c.ctx.Err() != nil || s.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	s.cancel = cancel
	c.live++
	go c.run(ctx, s)
}

// running returns how many scraper goroutines are live (for tests).
func (c *Collector) running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

func (c *Collector) run(ctx context.Context, s *scraper) {
	defer func() {
		c.mu.Lock()
		c.live--
		if c.live == 0 {
			c.idle.Broadcast()
		}
		c.mu.Unlock()
	}()
	ticker := c.clock.NewTicker(c.interval)
	defer ticker.Stop()
	defer func() {
		if s.conn != nil {
			s.conn.close()
			s.conn = nil
		}
	}()
	for {
		c.scrapeOnce(ctx, s)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// scrapeOnce runs one scrape and stores its result. A scrape cut short because the scraper was
// stopped is not recorded.
func (c *Collector) scrapeOnce(ctx context.Context, s *scraper) {
	fresh, err := c.fetch(ctx, s)
	if ctx.Err() != nil {
		return
	}
	prev := s.metrics.Load()
	var next *framework.Metrics
	switch {
	case fresh != nil: // parsed: new values, maybe with a partial error
		next = fresh
		next.UpdateTime = c.clock.Now()
		next.ScrapeError = err
	default: // nothing read: keep the last good values
		next = prev.Clone()
		if next == nil {
			next = &framework.Metrics{}
		}
		next.ScrapeError = err
	}
	s.metrics.Store(next)

	wasFailing := prev != nil && prev.ScrapeError != nil
	switch {
	case err != nil && !wasFailing:
		c.log.Warn("metrics scrape failing", "endpoint", s.key, "url", s.url, "error", err)
	case err == nil && wasFailing:
		c.log.Info("metrics scrape recovered", "endpoint", s.key)
	}
}

// fetch GETs and parses one endpoint's metrics. It returns nil metrics when nothing could be
// read (transport, status or format error), or new metrics plus the extraction error. A body
// byte-identical to the previous successful one is not parsed again: its result is reused.
func (c *Collector) fetch(ctx context.Context, s *scraper) (*framework.Metrics, error) {
	url := s.url
	if c.direct && !s.useHTTP {
		status, err := c.directGet(ctx, s)
		switch {
		case errors.Is(err, errUseHTTPClient):
			s.useHTTP = true
			return c.fetchHTTP(ctx, s)
		case errors.Is(err, errBodyTooLong):
			return nil, fmt.Errorf("scrape %s: body longer than %d bytes", url, MaxBodyBytes)
		case err != nil && status == 0:
			return nil, fmt.Errorf("scrape %s: %w", url, err)
		case err != nil:
			return nil, fmt.Errorf("scrape %s: reading the body: %w", url, err)
		case status != http.StatusOK:
			return nil, fmt.Errorf("scrape %s: HTTP status %d", url, status)
		}
		return c.parse(s)
	}
	return c.fetchHTTP(ctx, s)
}

// acceptHeader is the Accept header of a scrape: the Prometheus text format.
var acceptHeader = string(expfmt.NewFormat(expfmt.TypeTextPlain))

// fetchHTTP reads s's body into s.buf with the net/http client and parses it.
func (c *Collector) fetchHTTP(ctx context.Context, s *scraper) (*framework.Metrics, error) {
	url := s.url
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", acceptHeader)
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer func() {
		// Drain a little so the keep-alive connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: HTTP status %d", url, resp.StatusCode)
	}
	body := &limitedReader{r: resp.Body, n: MaxBodyBytes}
	buf := bytes.NewBuffer(s.buf[:0])
	_, rerr := buf.ReadFrom(body)
	s.buf = buf.Bytes()
	if body.exceeded {
		return nil, fmt.Errorf("scrape %s: body longer than %d bytes", url, MaxBodyBytes)
	}
	if rerr != nil {
		return nil, fmt.Errorf("scrape %s: reading the body: %w", url, rerr)
	}
	return c.parse(s)
}

// parse turns the body in s.buf into metrics: it keeps the lines of the families the specs read
// (keepFamilies) and parses those, reusing the last result when they are byte-identical to the
// last ones parsed. A parse error names the line of the page.
func (c *Collector) parse(s *scraper) (*framework.Metrics, error) {
	url := s.url
	s.kept, s.keptLines = keepFamilies(s.kept[:0], s.keptLines[:0], s.buf, c.families)
	if s.lastFresh != nil && bytes.Equal(s.kept, s.lastBody) {
		// A new value (scrapeOnce stamps it) sharing the adapter sets: stored metrics are never
		// modified, and Metrics hands out deep copies.
		again := *s.lastFresh
		return &again, s.lastErr
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(s.kept))
	if err != nil {
		s.lastFresh = nil
		var pe expfmt.ParseError
		if errors.As(err, &pe) {
			pe.Line = pageLine(s.keptLines, pe.Line)
			err = pe
		}
		return nil, fmt.Errorf("scrape %s: parse text format: %w", url, err)
	}
	m, err := extract(fams, c.specs)
	if err != nil {
		err = fmt.Errorf("scrape %s: %w", url, err)
	}
	s.lastBody = append(s.lastBody[:0], s.kept...)
	last := *m // m itself is stamped by scrapeOnce; the adapter sets are shared read-only
	s.lastFresh, s.lastErr = &last, err
	return m, err
}

// limitedReader reads at most n bytes and remembers whether the source had more.
type limitedReader struct {
	r        io.Reader
	n        int64
	exceeded bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		var one [1]byte
		if k, _ := l.r.Read(one[:]); k > 0 {
			l.exceeded = true
			return 0, errors.New("metrics body too long")
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	k, err := l.r.Read(p)
	l.n -= int64(k)
	return k, err
}

// Metrics returns a copy of the latest metrics of the endpoint with that Key(): the last values
// read, UpdateTime (Clock time of the last scrape that read values) and ScrapeError (the last
// scrape's error, nil when it succeeded). Nil when the endpoint is unknown or no scrape of it has
// finished yet.
func (c *Collector) Metrics(key string) *framework.Metrics {
	s := c.lookup(key)
	if s == nil {
		return nil
	}
	return s.metrics.Load().Clone()
}

// Read returns the endpoint's latest metrics without copying them, and Stale(key), in one lookup.
// The returned value is shared with every other reader and must not be modified. Nil metrics
// (and stale true) when the endpoint is unknown or no scrape of it has finished. Added for the
// director, which reads every endpoint on every request.
func (c *Collector) Read(key string) (m *framework.Metrics, stale bool) {
	s := c.lookup(key)
	if s == nil {
		return nil, true
	}
	m = s.metrics.Load()
	return m, c.staleMetrics(m)
}

func (c *Collector) staleMetrics(m *framework.Metrics) bool {
	if m == nil || m.ScrapeError != nil || m.UpdateTime.IsZero() {
		return true
	}
	return c.clock.Since(m.UpdateTime) > c.stale
}

// Stale reports whether the endpoint's metrics must not be trusted: unknown endpoint, no finished
// scrape, the last scrape failed (ScrapeError set), or the last values are older than
// StaleThreshold by Clock.
func (c *Collector) Stale(key string) bool {
	s := c.lookup(key)
	if s == nil {
		return true
	}
	return c.staleMetrics(s.metrics.Load())
}

// StaleThreshold returns the configured (or default) staleness bound.
func (c *Collector) StaleThreshold() time.Duration { return c.stale }
