package conformance

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// Runner runs registry tests in process, one at a time, each in its own goroutine with a
// TestingT whose Fatalf/FailNow end the test (runtime.Goexit, as testing.T does). A test that
// panics fails with the panic and stack; a test that outlives Timeouts.TestTimeout fails and is
// abandoned (its goroutine is left running; the run continues).
type Runner struct {
	// Suite is the harness; nil only for runs where every test is skipped.
	Suite *Suite
	// Selection decides what runs.
	Selection Selection
	// Progress receives one line per finished test ("PASS  EPP/ShortName (1.2s)"); nil = none.
	Progress io.Writer
	// Context, when set and done (Ctrl-C), makes the remaining tests skipped as interrupted.
	Context context.Context
	// Abort, when closed (a second Ctrl-C), abandons the test in progress at once: it is reported
	// skipped as interrupted (AbandonedMessage) and its goroutine is left running, as after
	// testTimeout. Nil = never.
	Abort <-chan struct{}
}

// AbandonedMessage is the skip reason of a test abandoned while it ran (Runner.Abort).
const AbandonedMessage = "run interrupted (a second Ctrl-C) while this test ran; abandoned"

// Run runs the tests of the selected profiles in order and returns their results (tests of
// unselected profiles are left out).
func (r *Runner) Run(tests []ConformanceTest) []TestResult {
	var out []TestResult
	for _, ct := range tests {
		if !r.Selection.Selected(ct) {
			continue
		}
		var res TestResult
		if reason := r.Selection.SkipReason(ct); reason != "" {
			res = TestResult{Test: ct, Outcome: Skipped, Message: reason, Start: time.Now()}
		} else if r.Context != nil && r.Context.Err() != nil {
			res = TestResult{Test: ct, Outcome: Skipped, Message: InterruptedMessage, Start: time.Now(), Interrupted: true}
		} else if err := r.Suite.TargetExited(); err != nil {
			// A dead target fails every remaining test with the reason, not with a dial error.
			res = TestResult{Test: ct, Outcome: Failed, Message: err.Error(), Start: time.Now()}
		} else {
			res = r.runOne(ct)
		}
		out = append(out, res)
		if r.Progress != nil {
			fmt.Fprintln(r.Progress, ProgressLine(res))
		}
	}
	return out
}

// ProgressLine formats one finished test for the console.
func ProgressLine(res TestResult) string {
	tag := map[Outcome]string{Passed: "PASS", Failed: "FAIL", Skipped: "SKIP"}[res.Outcome]
	line := fmt.Sprintf("%-4s  %s/%s (%s)", tag, res.Test.Profile, res.Test.ShortName, res.Duration.Round(time.Millisecond))
	if res.Outcome != Passed && res.Message != "" {
		line += ": " + firstLine(res.Message)
	}
	return line
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

func (r *Runner) runOne(ct ConformanceTest) TestResult {
	t := &runT{name: ct.ShortName}
	res := TestResult{Test: ct, Start: time.Now()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer t.runCleanups()
		defer func() {
			if p := recover(); p != nil {
				t.fail(fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
			}
		}()
		if r.Suite != nil {
			t.Logf("seed %d; reproduce with --run-test %s and EPPKIT_SEED=%d", r.Suite.Seed, ct.ShortName, r.Suite.Seed)
		}
		ct.Run(t, r.Suite)
	}()
	timeout := DefaultTimeoutConfig().TestTimeout.D()
	if r.Suite != nil {
		timeout = r.Suite.Timeouts.TestTimeout.D()
	}
	aborted := false
	select {
	case <-done:
	case <-time.After(timeout):
		t.fail(fmt.Sprintf("test did not finish within %s (testTimeout); abandoned", timeout))
	case <-r.Abort:
		aborted = true
	}
	res.Duration = time.Since(res.Start)
	t.mu.Lock()
	defer t.mu.Unlock()
	res.Log = t.log.String()
	if aborted {
		res.Outcome, res.Message, res.Interrupted = Skipped, AbandonedMessage, true
		return res
	}
	if t.failed {
		res.Outcome, res.Message = Failed, t.firstFailure
	} else if t.skipped {
		res.Outcome, res.Message = Skipped, t.skipReason
	} else {
		res.Outcome = Passed
	}
	return res
}

// runT is the runner's TestingT.
type runT struct {
	name         string
	mu           sync.Mutex
	log          strings.Builder
	failed       bool
	firstFailure string
	skipped      bool
	skipReason   string
	cleanups     []func()
}

var _ TestingT = (*runT)(nil)

func (t *runT) Helper()      {}
func (t *runT) Name() string { return t.name }

func (t *runT) Logf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(&t.log, format+"\n", args...)
}

func (t *runT) fail(msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.failed {
		t.failed, t.firstFailure = true, msg
	}
	t.log.WriteString(msg + "\n")
}

func (t *runT) Errorf(format string, args ...any) { t.fail(fmt.Sprintf(format, args...)) }

func (t *runT) Fatalf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// Skipf logs the reason, marks the test skipped and stops it (as testing.T.Skipf); a test that
// already failed stays failed.
func (t *runT) Skipf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	t.mu.Lock()
	if !t.skipped {
		t.skipped, t.skipReason = true, msg
	}
	fmt.Fprintf(&t.log, "SKIP: %s\n", msg)
	t.mu.Unlock()
	runtime.Goexit()
}

func (t *runT) FailNow() {
	t.mu.Lock()
	if !t.failed {
		t.failed, t.firstFailure = true, "FailNow called"
	}
	t.mu.Unlock()
	runtime.Goexit()
}

func (t *runT) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *runT) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// runCleanups runs cleanups last-in first-out; a panicking cleanup fails the test and the rest
// still run.
func (t *runT) runCleanups() {
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
					t.fail(fmt.Sprintf("cleanup panicked: %v", p))
				}
			}()
			f()
		}()
	}
}
