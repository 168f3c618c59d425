package conformance

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"time"

	"github.com/eppkit/eppkit/conformance/harness"
)

// Runner runs registry tests in process, one at a time, each in its own goroutine with a
// TestingT whose Fatalf/FailNow end the test (runtime.Goexit, as testing.T does). A test that
// panics fails with the panic and stack; a test that outlives Timeouts.TestTimeout fails and is
// abandoned (its goroutine is left running; the run continues).
type Runner struct {
	// Suite is the harness; nil only for runs where every test is skipped.
	Suite *harness.Suite
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
	// Reproduce, when set, is the command that reruns one test alone with the run's seed, logged
	// at the start of each test (the CLI's --run-test, or go test -run for RunTest); nil logs the
	// CLI's flags.
	Reproduce func(ct ConformanceTest, seed int64) string

	// stopped is the diagnosis of a target found down (Suite.TargetDown): once set, every later
	// test is reported not run (TargetStoppedMessage) instead of failing on dial errors.
	stopped error

	// downForTest stands in for Suite.TargetExited and Suite.TargetDown in this package's tests,
	// which cannot build a Suite around a dead target (its fields are the harness's).
	downForTest func(probe bool) error
}

// targetDown is Suite.TargetExited (probe false: cheap, before each test) or Suite.TargetDown
// (probe true: after a failed test, does the target still answer?); nil while it runs.
func (r *Runner) targetDown(probe bool) error {
	if r.downForTest != nil {
		return r.downForTest(probe)
	}
	if !probe {
		return r.Suite.TargetExited()
	}
	ctx := r.Context
	if ctx == nil {
		ctx = context.Background()
	}
	return r.Suite.TargetDown(ctx)
}

// Stopped is the diagnosis of the target that stopped answering during the run, nil while it
// answers.
func (r *Runner) Stopped() error { return r.stopped }

// TargetStoppedMessage is the skip reason of a test that did not run because the target stopped
// answering earlier in the run (Runner.Stopped has the diagnosis).
const TargetStoppedMessage = "not run: the target stopped answering earlier in the run"

// AbandonedMessage is the skip reason of a test abandoned while it ran (Runner.Abort).
const AbandonedMessage = "run interrupted (a second Ctrl-C) while this test ran; abandoned"

// Run runs the tests of the selected profiles in order and returns their results (tests of
// unselected profiles are left out). After a failed test it checks that the target still
// answers (Suite.TargetDown); once it does not, the remaining tests are skipped as not run
// (TargetStoppedMessage, Interrupted) and Stopped has the diagnosis.
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
		} else if r.stopped != nil {
			res = TestResult{Test: ct, Outcome: Skipped, Message: TargetStoppedMessage, Start: time.Now(), Interrupted: true}
		} else if err := r.targetDown(false); err != nil {
			// A dead target ends the run with one diagnosis, not a failure per remaining test.
			r.stopped = err
			res = TestResult{Test: ct, Outcome: Skipped, Message: TargetStoppedMessage, Start: time.Now(), Interrupted: true}
		} else {
			res = r.runOne(ct)
			if res.Outcome == Failed {
				r.stopped = r.targetDown(true)
			}
		}
		out = append(out, res)
		// A test of a feature not claimed did not run and is counted only as not supported, in
		// the profile line (as in the YAML and junit.xml): no line of its own.
		if r.Progress != nil && !r.Selection.NotSupported(ct) {
			fmt.Fprintln(r.Progress, ProgressLine(res))
		}
	}
	return out
}

// ProgressLine formats one finished test for the console: PASS, FAIL, SKIP (the selection or
// the run's end left it out) or N/A (not applicable: a precondition unmet), the test and its
// time, and for all but PASS the first line of the message.
func ProgressLine(res TestResult) string {
	tag := map[Outcome]string{Passed: "PASS", Failed: "FAIL", Skipped: "SKIP"}[res.Outcome]
	if res.Outcome == Skipped && strings.HasPrefix(res.Message, harness.NotApplicablePrefix) {
		tag = "N/A"
	}
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
	t := harness.NewRecorder(ct.ShortName)
	res := TestResult{Test: ct, Start: time.Now()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer t.RunCleanups()
		defer func() {
			if p := recover(); p != nil {
				t.Fail(fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
			}
		}()
		if r.Suite != nil {
			repro := fmt.Sprintf("EPPKIT_SEED=%d with --run-test %s", r.Suite.Seed, ct.ShortName)
			if r.Reproduce != nil {
				repro = r.Reproduce(ct, r.Suite.Seed)
			}
			t.Logf("seed %d; reproduce: %s", r.Suite.Seed, repro)
		}
		ct.Run(t, r.Suite)
	}()
	timeout := harness.DefaultTimeoutConfig().TestTimeout.D()
	if r.Suite != nil {
		timeout = r.Suite.Timeouts.TestTimeout.D()
	}
	aborted := false
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fail(fmt.Sprintf("test did not finish within %s (testTimeout); abandoned", timeout))
	case <-r.Abort:
		aborted = true
	}
	res.Duration = time.Since(res.Start)
	rec := t.Record()
	res.Log = rec.Log
	if aborted {
		res.Outcome, res.Message, res.Interrupted = Skipped, AbandonedMessage, true
		return res
	}
	switch {
	case rec.Failed:
		res.Outcome, res.Message = Failed, rec.FirstFailure
	case rec.Skipped:
		// A test that stops itself does so for an unmet precondition: not applicable.
		res.Outcome, res.Message = Skipped, harness.NotApplicableReason(rec.SkipReason)
	default:
		res.Outcome = Passed
	}
	return res
}
