package sim

import (
	"sync"
	"testing"
	"time"
)

func TestClockMovesOnlyWhenSet(t *testing.T) {
	c := NewClock()
	if !c.Now().Equal(Epoch) || c.Elapsed() != 0 {
		t.Fatalf("new clock at %v (elapsed %v), want Epoch", c.Now(), c.Elapsed())
	}
	time.Sleep(2 * time.Millisecond)
	if c.Elapsed() != 0 {
		t.Fatalf("the clock moved by itself: %v", c.Elapsed())
	}
	at := Epoch.Add(1500 * time.Millisecond)
	c.Set(at)
	if !c.Now().Equal(at) || c.Since(Epoch) != 1500*time.Millisecond || c.Elapsed() != 1500*time.Millisecond {
		t.Errorf("after Set(+1.5s): Now %v, Since(Epoch) %v, Elapsed %v", c.Now(), c.Since(Epoch), c.Elapsed())
	}
	c.Set(at) // the same instant again is allowed: several events share a time
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Set to an earlier time did not panic")
			}
		}()
		c.Set(at.Add(-time.Nanosecond))
	}()
	if !c.Now().Equal(at) {
		t.Errorf("a refused Set moved the clock to %v", c.Now())
	}
}

// TestClockTimersNeverFire: nothing in a simulation may wait on virtual time, so timers, tickers,
// After and AfterFunc never fire however far the clock moves, and Sleep returns at once.
func TestClockTimersNeverFire(t *testing.T) {
	c := NewClock()
	tm := c.NewTimer(time.Millisecond)
	tk := c.NewTicker(time.Millisecond)
	after := c.After(time.Millisecond)
	tick := c.Tick(time.Millisecond)
	called := false
	af := c.AfterFunc(time.Millisecond, func() { called = true })
	c.Set(Epoch.Add(time.Hour))
	start := time.Now()
	c.Sleep(time.Hour)
	if time.Since(start) > time.Second {
		t.Error("Sleep waited")
	}
	select {
	case <-tm.C():
		t.Error("timer fired")
	case <-tk.C():
		t.Error("ticker ticked")
	case <-after:
		t.Error("After fired")
	case <-tick:
		t.Error("Tick ticked")
	case <-time.After(20 * time.Millisecond):
	}
	if called {
		t.Error("AfterFunc ran its function")
	}
	if !tm.Stop() || !tm.Reset(time.Second) || !af.Stop() {
		t.Error("Stop/Reset of an idle timer should report true")
	}
	tk.Stop()
}

// TestClockConcurrentReads: plugins read the clock on their own goroutines while the loop sets
// it (run with -race).
func TestClockConcurrentReads(t *testing.T) {
	c := NewClock()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := Epoch
			for {
				select {
				case <-stop:
					return
				default:
				}
				now := c.Now()
				if now.Before(last) {
					t.Errorf("a reader saw time go backwards: %v after %v", now, last)
					return
				}
				last = now
			}
		}()
	}
	for i := range 10000 {
		c.Set(Epoch.Add(time.Duration(i) * time.Microsecond))
	}
	close(stop)
	wg.Wait()
}
