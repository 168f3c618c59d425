package sim

import (
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Epoch is virtual time zero: every simulation starts its clock here, so the times a picker
// stamps (metrics' UpdateTime, dispatch times) are the same in every run of a seed.
var Epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is the simulation's virtual clock, a k8s.io/utils/clock.WithTicker for the engines and the
// picker under test. Time moves only when the event loop sets it (Set), never by itself, and
// never backwards. Now and Since are safe for concurrent use (the reference's PrepareData runs
// plugins on goroutines while the loop waits).
//
// Timers and tickers made from it never fire, and Sleep returns at once: the event loop calls
// every component at the virtual time things happen, so nothing in the simulation waits on a
// timer. What that leaves out is documented where it matters: background sweepers (the reference's
// plugin-state, prefix-index and predicted-latency flight sweepers) do not run, and the
// PrepareData phase budget never expires (virtual time does not pass during a decision).
type Clock struct {
	now atomic.Int64 // nanoseconds since Epoch
}

var _ clock.WithTicker = (*Clock)(nil)

// NewClock returns a clock at Epoch.
func NewClock() *Clock { return &Clock{} }

// Set moves the clock to t. A t before the clock's time is a programming error of the event
// loop, and panics.
func (c *Clock) Set(t time.Time) {
	d := int64(t.Sub(Epoch))
	if d < c.now.Load() {
		panic("sim: clock moved backwards from " + c.Now().String() + " to " + t.String())
	}
	c.now.Store(d)
}

// Elapsed is the virtual time since Epoch.
func (c *Clock) Elapsed() time.Duration { return time.Duration(c.now.Load()) }

// Now returns the virtual time.
func (c *Clock) Now() time.Time { return Epoch.Add(c.Elapsed()) }

// Since returns Now() − t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// After returns a channel that never receives.
func (c *Clock) After(time.Duration) <-chan time.Time { return never }

// NewTimer returns a timer that never fires.
func (c *Clock) NewTimer(time.Duration) clock.Timer { return idleTimer{} }

// AfterFunc returns a timer that never fires: f is never called.
func (c *Clock) AfterFunc(time.Duration, func()) clock.Timer { return idleTimer{} }

// Tick returns a channel that never receives.
func (c *Clock) Tick(time.Duration) <-chan time.Time { return never }

// NewTicker returns a ticker that never ticks.
func (c *Clock) NewTicker(time.Duration) clock.Ticker { return idleTicker{} }

// Sleep returns at once: nothing in a simulation may wait for virtual time to pass.
func (c *Clock) Sleep(time.Duration) {}

// never is a channel nothing sends on.
var never = make(chan time.Time)

type idleTimer struct{}

func (idleTimer) C() <-chan time.Time      { return never }
func (idleTimer) Stop() bool               { return true }
func (idleTimer) Reset(time.Duration) bool { return true }
func (idleTicker) C() <-chan time.Time     { return never }
func (idleTicker) Stop()                   {}

type idleTicker struct{}
