package harness

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrUnsupported is returned by an EndpointSource or Target that cannot do what was asked (the
// static source cannot take an endpoint out of the pool); tests skip or fail with its message.
var ErrUnsupported = errors.New("not supported by this endpoint source or target")

// MustEventually calls fn every Poll until it returns nil `consecutive` times in a row, and fails
// the test (Fatalf, with fn's last error and the attempt count) if that does not happen within
// timeout. Any error resets the run of successes: this is the anti-flake primitive (a condition
// holds only after N consecutive successes inside a bound). consecutive < 1 is treated as 1.
//
// Once the run knows the EPP's answers are broken (Suite.BrokenCause), the first failed attempt
// fails the test at once with fn's error and the cause, instead of polling until timeout.
func MustEventually(t TestingT, s *Suite, timeout time.Duration, consecutive int, fn func() error) {
	t.Helper()
	if err := eventually(timeout, s.Timeouts.Poll.D(), consecutive, fn, s.BrokenCause); err != nil {
		t.Fatalf("%v", err)
	}
}

// Eventually is Eventually bounded by the run's poll interval that, like MustEventually, stops at
// the first failed attempt once the run knows the EPP's answers are broken (BrokenCause): for
// waits whose failure a test only logs (awaiting the EPP's view of pinned metrics, cleanups).
func (s *Suite) Eventually(timeout time.Duration, consecutive int, fn func() error) error {
	return eventually(timeout, s.Timeouts.Poll.D(), consecutive, fn, s.BrokenCause)
}

// Eventually is MustEventually without a test: nil once fn succeeded `consecutive` times in a row,
// else an error saying how many attempts ran, the longest run of successes and fn's last error.
func Eventually(timeout, poll time.Duration, consecutive int, fn func() error) error {
	return eventually(timeout, poll, consecutive, fn, nil)
}

// eventually is Eventually that, after a failed attempt, stops at once when broken (nil = never)
// names a cause.
func eventually(timeout, poll time.Duration, consecutive int, fn func() error, broken func() string) error {
	if consecutive < 1 {
		consecutive = 1
	}
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	deadline := time.Now().Add(timeout)
	run, best, attempts := 0, 0, 0
	var last error
	for {
		attempts++
		if err := fn(); err != nil {
			run, last = 0, err
			if broken != nil {
				if cause := broken(); cause != "" {
					return fmt.Errorf("%w (gave up after %d attempts, not waiting the %v bound: %s)", err, attempts, timeout, cause)
				}
			}
		} else {
			run++
			best = max(best, run)
			if run >= consecutive {
				return nil
			}
		}
		if time.Now().Add(poll).After(deadline) {
			break
		}
		time.Sleep(poll)
	}
	if last == nil {
		last = errors.New("condition held but not long enough")
	}
	return &EventuallyError{Timeout: timeout, Attempts: attempts, Consecutive: consecutive, BestRun: best, Last: last}
}

// EventuallyError is the failure of Eventually.
type EventuallyError struct {
	Timeout     time.Duration
	Attempts    int
	Consecutive int
	BestRun     int
	Last        error
}

func (e *EventuallyError) Error() string {
	return "condition did not hold " + itoa(e.Consecutive) + " consecutive times within " + e.Timeout.String() +
		" (" + itoa(e.Attempts) + " attempts, longest run " + itoa(e.BestRun) + "): last error: " + e.Last.Error()
}

// Unwrap returns fn's last error.
func (e *EventuallyError) Unwrap() error { return e.Last }

func itoa(i int) string { return strconv.Itoa(i) }
