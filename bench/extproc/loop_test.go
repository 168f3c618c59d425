package extproc

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpenLoopCapsInflight: fixed arrivals at 200/s for 300 ms are 60 arrivals; with at most one in
// flight and each taking 25 ms (5 arrival gaps), about one in five runs and the rest are dropped,
// and every arrival is one or the other.
func TestOpenLoopCapsInflight(t *testing.T) {
	var ran, dropped, running, maxRunning atomic.Int64
	end := time.Now().Add(300 * time.Millisecond)
	openLoop(context.Background(), 1, 200, "fixed", end, 1, func() { dropped.Add(1) }, func(time.Time) {
		n := running.Add(1)
		if n > maxRunning.Load() {
			maxRunning.Store(n)
		}
		time.Sleep(25 * time.Millisecond)
		running.Add(-1)
		ran.Add(1)
	})
	if maxRunning.Load() != 1 {
		t.Errorf("at most %d in flight, want 1", maxRunning.Load())
	}
	if total := ran.Load() + dropped.Load(); total < 55 || total > 61 {
		t.Errorf("%d ran + %d dropped = %d arrivals, want about 60", ran.Load(), dropped.Load(), total)
	}
	if ran.Load() < 5 || dropped.Load() < 30 {
		t.Errorf("%d ran and %d dropped: the cap did not drop the arrivals beyond it", ran.Load(), dropped.Load())
	}
	if running.Load() != 0 {
		t.Errorf("openLoop returned with %d still running", running.Load())
	}
}

// TestClosedLoopStopsWithContext: n workers call back to back and all stop when ctx ends.
func TestClosedLoopStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var calls atomic.Int64
	closedLoop(ctx, 3, time.Now().Add(time.Hour), func(time.Time) { calls.Add(1); time.Sleep(time.Millisecond) })
	if calls.Load() < 3 {
		t.Errorf("%d calls from 3 workers in 50 ms", calls.Load())
	}
}
