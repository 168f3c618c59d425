package flowcontrol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/framework"
)

// Outcomes of a request in flow control, upstream's labels (pkg/epp/flowcontrol/types
// QueueOutcome strings, metric llm_d_epp_flow_control_requests_total).
const (
	OutcomeDispatched              = "Dispatched"
	OutcomeRejectedCapacity        = "RejectedCapacity"
	OutcomeRejectedNoEndpoints     = "RejectedNoEndpoints"
	OutcomeRejectedOther           = "RejectedOther"
	OutcomeEvictedTTL              = "EvictedTTL"
	OutcomeEvictedContextCancelled = "EvictedContextCancelled"
)

// retryInterval is how often a controller with queued requests re-reads the pool's saturation
// (metrics change without an event; upstream runs dispatch cycles continuously).
const retryInterval = 5 * time.Millisecond

// Observer records flow control's metrics (reference/director.Observer implements it).
type Observer interface {
	// QueueSize adds delta to the number of requests queued at priority.
	QueueSize(priority int, delta int)
	// QueueWait records how long a request spent in flow control and how it left.
	QueueWait(priority int, outcome string, d time.Duration)
}

// Options configure a Controller. Detector and Pool are required.
type Options struct {
	// Config is the flowControl section (nil = upstream's defaults).
	Config *framework.FlowControlConfig
	// Detector decides saturation.
	Detector SaturationDetector
	// Pool returns the pool as it is now (all ready endpoints, whatever a request's subset hint).
	Pool func() Pool
	// Clock gives the time the detector judges metrics' age by; nil = the real clock. Waits (TTL,
	// retries) use real timers.
	Clock clock.PassiveClock
	// Observer records queue size and wait; nil = none.
	Observer Observer
	// Logger receives the controller's logs; nil = slog.Default().
	Logger *slog.Logger
}

// Request is what the controller needs of a request.
type Request struct {
	// Priority is the InferenceObjective's priority (0 without one): its band.
	Priority int
	// FairnessID is the request's flow (logs only: the reference's fairness policy is upstream's
	// default, global-strict: the oldest head across flows first).
	FairnessID string
	// Bytes is the request body's size, counted against maxBytes.
	Bytes int64
}

// Controller admits requests (Admit) under flow control. Safe for concurrent use.
type Controller struct {
	opts   Options
	ttl    time.Duration
	global framework.BandLimits

	mu        sync.Mutex
	bands     map[int]*band
	order     []int // priorities of bands, highest first
	queued    int64 // requests waiting, every band
	queuedB   int64 // their bytes
	inFlight  int64 // dispatched and not released
	stopped   bool
	wake      chan struct{}
	dispatchN atomic.Int64
}

type band struct {
	limits framework.BandLimits
	items  []*item // FCFS: enqueue order
	bytes  int64
}

type item struct {
	req      Request
	enqueued time.Time
	done     chan error // buffered; nil = dispatched
	queued   bool       // guarded by Controller.mu
}

// New starts a controller; it stops when ctx ends, refusing every queued and later request with
// 503 rejected-shutting-down (upstream: the flow controller's parent is the process context).
func New(ctx context.Context, opts Options) (*Controller, error) {
	if opts.Detector == nil || opts.Pool == nil {
		return nil, errors.New("flowcontrol: Options.Detector and Options.Pool are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Controller{opts: opts, ttl: opts.Config.RequestTTL(), global: opts.Config.GlobalLimits(),
		bands: map[int]*band{}, wake: make(chan struct{}, 1)}
	go c.dispatchLoop(ctx)
	return c, nil
}

// Dispatched returns how many requests the controller dispatched (for tests and benchmarks).
func (c *Controller) Dispatched() int64 { return c.dispatchN.Load() }

// Admit blocks until the request may be scheduled; once it returns nil the caller must call
// Release exactly once when the request ends (its in-flight count, which concurrency-detector
// reads). It refuses with a *framework.Dropped:
//
//   - its band's or the global queue is at capacity: 429 rejected-saturated (503
//     rejected-no-endpoints when the pool is empty), at once;
//   - it waited past defaultRequestTTL: 429 rejected-ttl-expired (503 rejected-no-endpoints when
//     the pool is empty);
//   - ctx ended while it waited (the client went away): 503 rejected-context-cancelled, wrapping
//     ctx's error;
//   - the controller stopped: 503 rejected-shutting-down.
//
// A request finding no queue and an unsaturated pool is dispatched at once (the idle path).
func (c *Controller) Admit(ctx context.Context, r Request) error {
	start := c.opts.Clock.Now()
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		c.observeWait(r.Priority, OutcomeRejectedOther, 0)
		return shuttingDown()
	}
	if c.queued == 0 && c.saturation() < 1 {
		c.inFlight++
		c.mu.Unlock()
		c.dispatchN.Add(1)
		c.observeWait(r.Priority, OutcomeDispatched, 0)
		return nil
	}
	b := c.band(r.Priority)
	full := ""
	switch {
	case int64(len(b.items)) >= b.limits.MaxRequests:
		full = fmt.Sprintf("band %d holds %d requests (maxRequests %d)", r.Priority, len(b.items), b.limits.MaxRequests)
	case b.bytes+r.Bytes > b.limits.MaxBytes:
		full = fmt.Sprintf("band %d holds %d bytes, the request %d (maxBytes %d)", r.Priority, b.bytes, r.Bytes, b.limits.MaxBytes)
	case c.global.MaxRequests > 0 && c.queued >= c.global.MaxRequests:
		full = fmt.Sprintf("%d requests queued (flowControl.maxRequests %d)", c.queued, c.global.MaxRequests)
	case c.global.MaxBytes > 0 && c.queuedB+r.Bytes > c.global.MaxBytes:
		full = fmt.Sprintf("%d bytes queued, the request %d (flowControl.maxBytes %d)", c.queuedB, r.Bytes, c.global.MaxBytes)
	}
	if full != "" {
		empty := c.opts.Pool().Len() == 0
		c.mu.Unlock()
		if empty {
			c.observeWait(r.Priority, OutcomeRejectedNoEndpoints, 0)
			return &framework.Dropped{Reason: framework.DroppedNoEndpoints, Err: fmt.Errorf(
				"no endpoints available: request rejected pre-queue: queue at capacity (%s): %w", full, framework.ErrNoEndpoints)}
		}
		c.observeWait(r.Priority, OutcomeRejectedCapacity, 0)
		return &framework.Dropped{Reason: framework.DroppedSaturated, Err: fmt.Errorf(
			"request rejected pre-queue: queue at capacity (%s): %w", full, framework.ErrShed)}
	}
	it := &item{req: r, enqueued: start, done: make(chan error, 1), queued: true}
	b.items = append(b.items, it)
	b.bytes += r.Bytes
	c.queued++
	c.queuedB += r.Bytes
	c.mu.Unlock()
	if c.opts.Observer != nil {
		c.opts.Observer.QueueSize(r.Priority, 1)
	}
	c.signal()

	var ttl <-chan time.Time
	if c.ttl > 0 {
		t := time.NewTimer(c.ttl)
		defer t.Stop()
		ttl = t.C
	}
	select {
	case err := <-it.done:
		return c.finish(it, err)
	case <-ctx.Done():
		if c.dequeue(it) {
			c.observeLeft(it, OutcomeEvictedContextCancelled)
			return &framework.Dropped{Reason: framework.DroppedContextCancelled, Err: fmt.Errorf(
				"client disconnected: request evicted from queue: %w: %w", ctx.Err(), framework.ErrNoEndpoints)}
		}
		// Dispatched meanwhile: nobody will run it.
		if c.finish(it, <-it.done) == nil {
			c.Release()
		}
		return &framework.Dropped{Reason: framework.DroppedContextCancelled, Err: fmt.Errorf(
			"client disconnected: %w: %w", ctx.Err(), framework.ErrNoEndpoints)}
	case <-ttl:
		if c.dequeue(it) {
			c.observeLeft(it, OutcomeEvictedTTL)
			if c.poolEmpty() {
				return &framework.Dropped{Reason: framework.DroppedNoEndpoints, Err: fmt.Errorf(
					"request timed out in queue and no endpoints are available: request TTL %s expired: %w", c.ttl, framework.ErrNoEndpoints)}
			}
			return &framework.Dropped{Reason: framework.DroppedTTLExpired, Err: fmt.Errorf(
				"request timed out in queue: request evicted from queue: request TTL %s expired: %w", c.ttl, framework.ErrShed)}
		}
		return c.finish(it, <-it.done)
	}
}

// finish ends a wait whose item left the queue by dispatch (err nil) or shutdown.
func (c *Controller) finish(it *item, err error) error {
	if err != nil {
		c.observeWait(it.req.Priority, OutcomeRejectedOther, c.opts.Clock.Since(it.enqueued))
		return err
	}
	c.observeWait(it.req.Priority, OutcomeDispatched, c.opts.Clock.Since(it.enqueued))
	return nil
}

func (c *Controller) observeLeft(it *item, outcome string) {
	if c.opts.Observer != nil {
		c.opts.Observer.QueueSize(it.req.Priority, -1)
	}
	c.observeWait(it.req.Priority, outcome, c.opts.Clock.Since(it.enqueued))
}

func (c *Controller) observeWait(priority int, outcome string, d time.Duration) {
	if c.opts.Observer != nil {
		c.opts.Observer.QueueWait(priority, outcome, d)
	}
}

// Release ends one admitted request's flight (call it once per Admit that returned nil).
func (c *Controller) Release() {
	c.mu.Lock()
	c.inFlight--
	queued := c.queued > 0
	c.mu.Unlock()
	if queued {
		c.signal() // capacity may have returned
	}
}

// dequeue removes it from its band when it is still queued, and reports whether it was.
func (c *Controller) dequeue(it *item) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !it.queued {
		return false
	}
	b := c.bands[it.req.Priority]
	if i := slices.Index(b.items, it); i >= 0 {
		b.items = slices.Delete(b.items, i, i+1)
	}
	it.queued = false
	b.bytes -= it.req.Bytes
	c.queued--
	c.queuedB -= it.req.Bytes
	return true
}

func (c *Controller) poolEmpty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opts.Pool().Len() == 0
}

// band returns priority's band, provisioned from the config on first use (mu held). Upstream
// provisions a band per InferenceObjective priority; every priority the reference sees comes from
// a known objective (or is 0), so provisioning on first use gives the same bands.
func (c *Controller) band(priority int) *band {
	b, ok := c.bands[priority]
	if !ok {
		b = &band{limits: c.opts.Config.Band(priority)}
		c.bands[priority] = b
		c.order = append(c.order, priority)
		slices.SortFunc(c.order, func(a, b int) int { return b - a })
	}
	return b
}

// saturation reads the detector (mu held).
func (c *Controller) saturation() float64 {
	return c.opts.Detector.Saturation(c.opts.Pool(), c.opts.Clock.Now(), c.inFlight)
}

func (c *Controller) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// dispatchLoop dispatches queued requests, highest band first and first come first served in a
// band, one at a time while the pool is below saturation 1.0 (head-of-line: a saturated pool
// holds every band, as upstream's static usage-limit policy). It sleeps while nothing is queued.
func (c *Controller) dispatchLoop(ctx context.Context) {
	for {
		var retry <-chan time.Time
		c.mu.Lock()
		for c.queued > 0 && c.saturation() < 1 {
			it := c.popHighest()
			c.inFlight++
			c.dispatchN.Add(1)
			it.done <- nil
			if c.opts.Observer != nil {
				c.opts.Observer.QueueSize(it.req.Priority, -1)
			}
		}
		if c.queued > 0 {
			retry = time.After(retryInterval)
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			c.stop()
			return
		case <-c.wake:
		case <-retry:
		}
	}
}

// popHighest removes and returns the oldest request of the highest non-empty band (mu held,
// c.queued > 0).
func (c *Controller) popHighest() *item {
	for _, p := range c.order {
		b := c.bands[p]
		if len(b.items) == 0 {
			continue
		}
		it := b.items[0]
		b.items[0] = nil
		b.items = b.items[1:]
		b.bytes -= it.req.Bytes
		c.queued--
		c.queuedB -= it.req.Bytes
		it.queued = false
		return it
	}
	panic("flowcontrol: popHighest with nothing queued")
}

// stop refuses every queued request and every later one (rejected-shutting-down).
func (c *Controller) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	for _, p := range c.order {
		b := c.bands[p]
		for _, it := range b.items {
			it.queued = false
			it.done <- shuttingDown()
			if c.opts.Observer != nil {
				c.opts.Observer.QueueSize(p, -1)
			}
		}
		b.items, b.bytes = nil, 0
	}
	c.queued, c.queuedB = 0, 0
	c.opts.Logger.Info("flow control stopped")
}

func shuttingDown() error {
	return &framework.Dropped{Reason: framework.DroppedShuttingDown, Err: fmt.Errorf(
		"flow controller shutting down: %w", framework.ErrNoEndpoints)}
}
