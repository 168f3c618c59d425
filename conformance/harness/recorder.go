package harness

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
)

// Recorder is the TestingT a test runs with in the conformance runner (conformance.Runner): it
// records everything the test logs and its first failure or skip reason; Fatalf, FailNow and
// Skipf end the calling goroutine (runtime.Goexit, as testing.T does), so the runner runs each
// test in a goroutine of its own. It is safe for concurrent use (a test may log from helpers'
// goroutines).
type Recorder struct {
	name         string
	mu           sync.Mutex
	log          strings.Builder
	failed       bool
	firstFailure string
	skipped      bool
	skipReason   string
	cleanups     []func()
}

// Record is what a Recorder recorded.
type Record struct {
	// Log is every line logged, in order (failures and skips included).
	Log string
	// Failed and FirstFailure: the test failed, with its first failure message.
	Failed       bool
	FirstFailure string
	// Skipped and SkipReason: the test skipped itself (Skipf), with the reason.
	Skipped    bool
	SkipReason string
}

var _ TestingT = (*Recorder)(nil)

// NewRecorder returns a Recorder for the test named name.
func NewRecorder(name string) *Recorder { return &Recorder{name: name} }

// Helper implements TestingT (a no-op: the log has no file positions).
func (t *Recorder) Helper() {}

// Name implements TestingT.
func (t *Recorder) Name() string { return t.name }

// Logf implements TestingT.
func (t *Recorder) Logf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(&t.log, format+"\n", args...)
}

// Fail records a failure from outside the test (a panic, testTimeout); the first one is the
// test's message.
func (t *Recorder) Fail(msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.failed {
		t.failed, t.firstFailure = true, msg
	}
	t.log.WriteString(msg + "\n")
}

// Errorf implements TestingT.
func (t *Recorder) Errorf(format string, args ...any) { t.Fail(fmt.Sprintf(format, args...)) }

// Fatalf implements TestingT: it records the failure and ends the goroutine.
func (t *Recorder) Fatalf(format string, args ...any) {
	t.Fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// Skipf logs the reason, marks the test skipped and stops it (as testing.T.Skipf); a test that
// already failed stays failed.
func (t *Recorder) Skipf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	t.mu.Lock()
	if !t.skipped {
		t.skipped, t.skipReason = true, msg
	}
	fmt.Fprintf(&t.log, "SKIP: %s\n", msg)
	t.mu.Unlock()
	runtime.Goexit()
}

// FailNow implements TestingT: it marks the test failed ("FailNow called" unless it failed
// before) and ends the goroutine.
func (t *Recorder) FailNow() {
	t.mu.Lock()
	if !t.failed {
		t.failed, t.firstFailure = true, "FailNow called"
	}
	t.mu.Unlock()
	runtime.Goexit()
}

// Failed implements TestingT.
func (t *Recorder) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

// Cleanup implements TestingT; RunCleanups runs the functions.
func (t *Recorder) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// RunCleanups runs the cleanups last-in first-out; a panicking cleanup fails the test and the
// rest still run.
func (t *Recorder) RunCleanups() {
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fail(fmt.Sprintf("cleanup panicked: %v", p))
				}
			}()
			f()
		}()
	}
}

// Record returns what was recorded so far.
func (t *Recorder) Record() Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Record{Log: t.log.String(), Failed: t.failed, FirstFailure: t.firstFailure, Skipped: t.skipped, SkipReason: t.skipReason}
}
