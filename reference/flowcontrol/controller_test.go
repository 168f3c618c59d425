package flowcontrol

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/eppkit/eppkit/reference/framework"
)

// fakePool is n endpoints without metrics.
type fakePool int

func (p fakePool) Len() int                       { return int(p) }
func (p fakePool) Metrics(int) *framework.Metrics { return nil }

func q(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.DecimalSI) }

// start returns a controller over n endpoints with concurrency-detector maxConcurrency 1, so
// exactly n requests run at a time, and cfg.
func start(t *testing.T, n int, cfg *framework.FlowControlConfig) *Controller {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := New(ctx, Options{Config: cfg, Pool: func() Pool { return fakePool(n) },
		Detector: &ConcurrencyDetector{typed: framework.TypedName{Type: ConcurrencyDetectorType, Name: "c"}, MaxConcurrency: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type result struct {
	release func()
	err     error
}

func admit(c *Controller, ctx context.Context, prio int) chan result {
	ch := make(chan result, 1)
	go func() {
		err := c.Admit(ctx, Request{Priority: prio, Bytes: 10})
		ch <- result{c.Release, err}
	}()
	return ch
}

func mustWait(t *testing.T, ch chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("no outcome within %v", within)
	}
	return result{}
}

func mustQueue(t *testing.T, ch chan result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("the request left the queue: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
}

func reasonOf(err error) string { return framework.DroppedReason(err) }

func TestIdleDispatchAndPriorityOrder(t *testing.T) {
	c := start(t, 1, nil)
	first := mustWait(t, admit(c, context.Background(), 0), time.Second) // the idle path
	if first.err != nil {
		t.Fatal(first.err)
	}
	low := admit(c, context.Background(), 0)
	mustQueue(t, low)
	high := admit(c, context.Background(), 10)
	mustQueue(t, high)
	first.release()
	r := mustWait(t, high, time.Second) // capacity for one: the higher band goes first
	if r.err != nil {
		t.Fatal(r.err)
	}
	mustQueue(t, low)
	r.release()
	if r := mustWait(t, low, time.Second); r.err != nil {
		t.Fatal(r.err)
	}
	if c.Dispatched() != 3 {
		t.Errorf("dispatched %d", c.Dispatched())
	}
}

func TestTTLCapacityAndCancel(t *testing.T) {
	ttl := framework.Duration{Duration: 150 * time.Millisecond}
	c := start(t, 1, &framework.FlowControlConfig{DefaultRequestTTL: &ttl,
		PriorityBands: []framework.PriorityBandConfig{{Priority: 0, MaxRequests: q(2)}}})
	busy := mustWait(t, admit(c, context.Background(), 0), time.Second)
	defer busy.release()
	// TTL: a queued request is refused 429 rejected-ttl-expired after the TTL.
	began := time.Now()
	r := mustWait(t, admit(c, context.Background(), 0), 2*time.Second)
	if reasonOf(r.err) != framework.DroppedTTLExpired || !errors.Is(r.err, framework.ErrShed) || time.Since(began) < ttl.Duration {
		t.Fatalf("after %v: %v, want rejected-ttl-expired after the TTL", time.Since(began), r.err)
	}
	// Capacity: 2 queued fill band 0; the third is refused at once.
	ctx1, cancel1 := context.WithCancel(context.Background())
	a, b := admit(c, ctx1, 0), admit(c, context.Background(), 0)
	mustQueue(t, a)
	began = time.Now()
	r = mustWait(t, admit(c, context.Background(), 0), time.Second)
	if reasonOf(r.err) != framework.DroppedSaturated || !errors.Is(r.err, framework.ErrShed) || time.Since(began) > 50*time.Millisecond {
		t.Fatalf("%v after %v, want rejected-saturated at once", r.err, time.Since(began))
	}
	// A client going away leaves the queue: there is room again.
	cancel1()
	r = mustWait(t, a, time.Second)
	if reasonOf(r.err) != framework.DroppedContextCancelled || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled: %v", r.err)
	}
	mustQueue(t, admit(c, context.Background(), 0))
	_ = b
}

func TestEmptyPoolAndStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, _ := New(ctx, Options{Config: &framework.FlowControlConfig{PriorityBands: []framework.PriorityBandConfig{{Priority: 0, MaxRequests: q(1)}}},
		Pool: func() Pool { return fakePool(0) }, Detector: NewUtilizationDetector("", 0, 0, 0)})
	waiting := admit(c, context.Background(), 0) // an empty pool is saturated: it waits
	mustQueue(t, waiting)
	r := mustWait(t, admit(c, context.Background(), 0), time.Second)
	if reasonOf(r.err) != framework.DroppedNoEndpoints || !errors.Is(r.err, framework.ErrNoEndpoints) {
		t.Fatalf("full band, empty pool: %v", r.err)
	}
	cancel()
	r = mustWait(t, waiting, time.Second)
	if reasonOf(r.err) != framework.DroppedShuttingDown {
		t.Fatalf("stopped: %v", r.err)
	}
	if err := c.Admit(context.Background(), Request{}); reasonOf(err) != framework.DroppedShuttingDown {
		t.Fatalf("after stop: %v", err)
	}
}

func TestUtilizationDetector(t *testing.T) {
	now := time.Now()
	d := NewUtilizationDetector("", 5, 0.8, time.Second)
	fresh := func(q int, kv float64) *framework.Metrics {
		return &framework.Metrics{WaitingQueueSize: q, KVCacheUsage: kv, UpdateTime: now}
	}
	for _, tc := range []struct {
		ms   []*framework.Metrics
		want float64
	}{
		{[]*framework.Metrics{fresh(0, 0), fresh(10, 0)}, 1},               // (0 + 2) / 2
		{[]*framework.Metrics{fresh(0, 0.4), fresh(5, 0)}, 0.75},           // (0.5 + 1) / 2
		{[]*framework.Metrics{nil, fresh(0, 0)}, 0.5},                      // missing = 1.0
		{[]*framework.Metrics{{UpdateTime: now.Add(-2 * time.Second)}}, 1}, // stale
		{nil, 1},
	} {
		if got := d.Saturation(metricsPool(tc.ms), now, 0); got != tc.want {
			t.Errorf("Saturation(%v) = %v, want %v", tc.ms, got, tc.want)
		}
	}
}

type metricsPool []*framework.Metrics

func (p metricsPool) Len() int                         { return len(p) }
func (p metricsPool) Metrics(i int) *framework.Metrics { return p[i] }
