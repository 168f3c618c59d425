package conformance

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
)

// ResultInterrupted is a profile's result when some of its tests did not run because the run was
// interrupted (Ctrl-C, SIGTERM) or stopped because the target stopped answering, and none failed.
// gateway-api's schema has no such value, so a ConformanceReport's core and extended `result`
// carry confv1.Partial for it and the report's summary says "interrupted".
const ResultInterrupted confv1.Result = "interrupted"

// Counts are one profile's (or one half's: core, extended) tests by outcome, in gateway-api's
// report semantics (kubernetes-sigs/gateway-api conformance/utils/suite/reports.go): a test
// skipped only because its feature is not claimed is NotSupported and counted in none of Passed,
// Failed, Skipped; any other skip counts as Skipped and makes the result partial.
type Counts struct {
	// Passed, Failed and Skipped are the ConformanceReport statistics.
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
	// NotSupported counts the tests whose feature is not in --supported-features.
	NotSupported int `json:"notSupported"`
	// ExpectedFailures counts the Failed tests listed in --expect-failures.
	ExpectedFailures int `json:"expectedFailures"`
	// Interrupted counts the Skipped tests that did not run because the run was interrupted or
	// stopped (TestResult.Interrupted).
	Interrupted int `json:"interrupted"`
	// NotApplicable counts the Skipped tests that stopped themselves because a precondition is
	// unmet (the catalogue's Preconditions): the EPP lacks an optional behaviour the rule is
	// about, or the run lacks what the test needs (harness.NotApplicable). Never a failure; like
	// any skip it makes the result partial.
	NotApplicable int `json:"notApplicable"`
}

// Result is gateway-api's rule over the counts, plus interruption: failure if a test failed,
// interrupted if a test did not run because the run stopped, partial if a test was skipped,
// success otherwise (also when nothing of this kind was counted: nothing was left unmet).
func (c Counts) Result() confv1.Result {
	switch {
	case c.Failed > 0:
		return confv1.Failure
	case c.Interrupted > 0:
		return ResultInterrupted
	case c.Skipped > 0:
		return confv1.Partial
	default:
		return confv1.Success
	}
}

// Line is the counts as every writer prints them: "3 passed, 1 failed (1 expected), 2 skipped
// (1 not applicable), 8 not supported". Skipped includes the not-applicable and interrupted
// tests (the ConformanceReport's skipped statistic); not supported tests are counted nowhere
// else (gateway-api's NOT_SUPPORTED), on the console, in junit.xml and in the YAML alike.
func (c Counts) Line() string {
	failed := fmt.Sprintf("%d failed", c.Failed)
	if c.ExpectedFailures > 0 {
		failed += fmt.Sprintf(" (%d expected)", c.ExpectedFailures)
	}
	skipped := fmt.Sprintf("%d skipped", c.Skipped)
	var why []string
	if c.NotApplicable > 0 {
		why = append(why, fmt.Sprintf("%d not applicable", c.NotApplicable))
	}
	if c.Interrupted > 0 {
		why = append(why, fmt.Sprintf("%d not run: interrupted", c.Interrupted))
	}
	if len(why) > 0 {
		skipped += " (" + strings.Join(why, ", ") + ")"
	}
	return fmt.Sprintf("%d passed, %s, %s, %d not supported", c.Passed, failed, skipped, c.NotSupported)
}

func (c *Counts) add(k TestKind) {
	switch k {
	case KindPassed:
		c.Passed++
	case KindFailed:
		c.Failed++
	case KindExpectedFailure:
		c.Failed++
		c.ExpectedFailures++
	case KindNotSupported:
		c.NotSupported++
	case KindInterrupted:
		c.Skipped++
		c.Interrupted++
	case KindNotApplicable:
		c.Skipped++
		c.NotApplicable++
	default:
		c.Skipped++
	}
}

// TestKind is how every writer classifies one test's result.
type TestKind string

const (
	KindPassed          TestKind = "passed"
	KindFailed          TestKind = "failed"
	KindExpectedFailure TestKind = "expected failure" // failed, and listed in --expect-failures
	KindSkipped         TestKind = "skipped"          // by the selection: --skip-tests, --run-test, --exempt-features
	KindNotApplicable   TestKind = "not applicable"   // the test stopped itself: a precondition is unmet (named in the message)
	KindInterrupted     TestKind = "interrupted"      // not run: the run was interrupted or stopped
	KindNotSupported    TestKind = "not supported"    // its feature is not claimed (counted nowhere)
)

// ProfileVerdict is one profile's result and counts; Core and Extended split them as the
// ConformanceReport does (tests without features, feature-gated tests).
type ProfileVerdict struct {
	Profile  Profile
	Result   confv1.Result
	Counts   Counts
	Core     Counts
	Extended Counts
	// HasExtended is true when the profile has feature-gated tests in the run.
	HasExtended bool
}

// Line is "<result>: <counts>", the profile's line in the console, summary.md and the
// publication README.
func (pv ProfileVerdict) Line() string { return string(pv.Result) + ": " + pv.Counts.Line() }

// Verdict is the run's outcome, computed once by Judge and printed by every writer (console,
// summary.md, the ConformanceReport YAMLs, junit.xml, the publication README, the results file).
type Verdict struct {
	// Profiles has one entry per selected profile, in Selection.Profiles order.
	Profiles []ProfileVerdict
	// Kinds classifies every test of the selected profiles by ShortName.
	Kinds map[string]TestKind
	// ExitCode is the process exit code (Exit* constants); Reason says why it is not ExitPassed.
	ExitCode int
	Reason   string
	// Expected is the comparison with --expect-failures, nil without it; ExpectFile is that file.
	Expected   *ExpectationDiff
	ExpectFile string
	// Stopped is the harness-level reason the run ended early ("" when it did not): the
	// interruption, or the target that stopped answering.
	Stopped string

	// unclaimed are the features of the run's tests that the selection does not claim.
	unclaimed []Feature
}

// Profile returns p's verdict (zero when p is not selected).
func (v Verdict) Profile(p Profile) ProfileVerdict {
	for _, pv := range v.Profiles {
		if pv.Profile == p {
			return pv
		}
	}
	return ProfileVerdict{Profile: p, Result: confv1.Success}
}

// Kind returns the test's classification in this verdict.
func (v Verdict) Kind(r TestResult) TestKind { return v.Kinds[r.Test.ShortName] }

// JudgeInput is what Judge needs besides the results.
type JudgeInput struct {
	// Selection is the run's selection.
	Selection Selection
	// Expect is the --expect-failures list, nil without it.
	Expect *ExpectedFailures
	// Interrupted is true when Ctrl-C or SIGTERM cancelled the run.
	Interrupted bool
	// TargetDown, when not "", is the diagnosis of a target that stopped answering mid-run.
	TargetDown string
	// HarnessError, when not "", is why the harness could not start although the target was
	// started: no test ran, the exit code is ExitHarness.
	HarnessError string
}

// Judge computes every profile's result and the run's exit code from its results. The exit code:
// ExitHarness when the run was interrupted or the target stopped answering while selected tests
// were still to run (whatever failed before; a target that died in the last selected test only
// adds its diagnosis to Reason); ExitTestFailed when the failures differ from the expected list (with Expect), a test
// failed (without it), or no selected test ran at all; ExitPassed otherwise. A selected test that
// skipped itself for an unmet precondition leaves the exit code 0 but the profile partial, and
// Reason names it.
func Judge(in JudgeInput, results []TestResult) Verdict {
	v := Verdict{Kinds: map[string]TestKind{}}
	for _, f := range AllFeatures {
		if !slices.Contains(in.Selection.SupportedFeatures, f) {
			v.unclaimed = append(v.unclaimed, f)
		}
	}
	listed := func(name string) bool { return in.Expect != nil && slices.Contains(in.Expect.Tests, name) }
	for _, r := range results {
		if !in.Selection.Selected(r.Test) {
			continue
		}
		var k TestKind
		switch {
		case r.Outcome == Passed:
			k = KindPassed
		case r.Outcome == Failed && listed(r.Test.ShortName):
			k = KindExpectedFailure
		case r.Outcome == Failed:
			k = KindFailed
		case r.Interrupted:
			k = KindInterrupted
		case in.Selection.NotSupported(r.Test):
			k = KindNotSupported
		case in.Selection.SkipReason(r.Test) != "" || r.Message == NotRunMessage:
			k = KindSkipped
		default:
			k = KindNotApplicable
		}
		v.Kinds[r.Test.ShortName] = k
	}
	var total Counts
	var preconditions []string
	for _, p := range in.Selection.Profiles {
		pv := ProfileVerdict{Profile: p}
		for _, r := range results {
			if r.Test.Profile != p {
				continue
			}
			k := v.Kinds[r.Test.ShortName]
			pv.Counts.add(k)
			if len(r.Test.Features) > 0 {
				pv.Extended.add(k)
				pv.HasExtended = true
			} else {
				pv.Core.add(k)
			}
			if k == KindNotApplicable {
				preconditions = append(preconditions, r.Test.ShortName)
			}
		}
		pv.Result = pv.Counts.Result()
		v.Profiles = append(v.Profiles, pv)
		total.Passed += pv.Counts.Passed
		total.Failed += pv.Counts.Failed
		total.ExpectedFailures += pv.Counts.ExpectedFailures
	}
	if in.Expect != nil {
		d := in.Expect.Compare(in.Selection, results)
		v.Expected, v.ExpectFile = &d, in.Expect.Path
	}
	ran, notRun := Interruption(results)
	switch {
	case in.HarnessError != "":
		v.ExitCode, v.Stopped = ExitHarness, firstLine(in.HarnessError)
		v.Reason = fmt.Sprintf("%s (%d selected tests did not run)", in.HarnessError, notRun)
	case in.TargetDown != "" && notRun > 0:
		v.ExitCode, v.Stopped = ExitHarness, in.TargetDown
		v.Reason = fmt.Sprintf("%s (%d tests ran, %d did not run)", in.TargetDown, ran, notRun)
	case in.Interrupted:
		v.ExitCode, v.Stopped = ExitHarness, "interrupted (Ctrl-C or SIGTERM)"
		v.Reason = fmt.Sprintf("interrupted (Ctrl-C or SIGTERM): %d tests ran, %d did not run", ran, notRun)
	case total.Passed+total.Failed == 0:
		v.ExitCode = ExitTestFailed
		v.Reason = "no selected test ran: every one was skipped (see each test's reason); a run that checks nothing does not pass"
	case v.Expected != nil && !v.Expected.Matched():
		v.ExitCode = ExitTestFailed
		v.Reason = fmt.Sprintf("the results changed against %s: %s", in.Expect.Path, v.Expected)
	case v.Expected == nil && total.Failed > 0:
		v.ExitCode = ExitTestFailed
		v.Reason = fmt.Sprintf("%d conformance test(s) failed", total.Failed)
	case len(preconditions) > 0:
		v.Reason = fmt.Sprintf("passed, but %d selected test(s) not applicable (a precondition unmet): %s", len(preconditions),
			strings.Join(preconditions, ", "))
	}
	if in.TargetDown != "" && notRun == 0 {
		// The target died in (or after) the last selected test, so no result was lost: the exit
		// code is the results' (a crash that fails its test is that test's failure), and the
		// diagnosis is still said.
		note := "after every selected test had run, " + firstLine(in.TargetDown)
		if v.Reason == "" {
			v.Reason = note
		} else {
			v.Reason += "; " + note
		}
	}
	return v
}

// ConsoleVerdict is what the console prints after the tests: one line per profile ("profile EPP
// partial: 3 passed, ..."), the stop line of a run that ended early, and the expected-failures
// comparison. The last line, Verdict.Line, follows the report paths.
func ConsoleVerdict(v Verdict, results []TestResult) string {
	var b strings.Builder
	for _, pv := range v.Profiles {
		fmt.Fprintf(&b, "profile %-14s %s\n", pv.Profile, pv.Line())
	}
	if line := NotSupportedLine(v, results); line != "" {
		fmt.Fprintln(&b, line)
	}
	if line := InterruptionLine(results); line != "" {
		fmt.Fprintln(&b, line)
	}
	if v.Expected != nil {
		fmt.Fprintf(&b, "expected failures (%s): %s\n", v.ExpectFile, v.Expected)
	}
	return b.String()
}

// Line is the console's last verdict line: "verdict: exit 0 (...)".
func (v Verdict) Line() string {
	if v.Reason == "" {
		return fmt.Sprintf("verdict: exit %d", v.ExitCode)
	}
	return fmt.Sprintf("verdict: exit %d: %s", v.ExitCode, v.Reason)
}

// testLocation is the file and line of ct.Run, for JUnit's failure location.
func testLocation(ct ConformanceTest) (string, int) {
	if ct.Run == nil {
		return "", 0
	}
	f := runtime.FuncForPC(reflect.ValueOf(ct.Run).Pointer())
	if f == nil {
		return "", 0
	}
	return f.FileLine(f.Entry())
}

// NotSupportedLine names the features whose tests did not run because they are not claimed, with
// how many tests each has: "not supported (features not claimed): LoRAAffinity (1 test),
// QueueAwareness (2 tests)"; "" when there are none.
func NotSupportedLine(v Verdict, results []TestResult) string {
	counts := map[Feature]int{}
	var order []Feature
	for _, r := range results {
		if v.Kind(r) != KindNotSupported {
			continue
		}
		for _, f := range r.Test.Features {
			if slices.Contains(v.unclaimed, f) {
				if counts[f] == 0 {
					order = append(order, f)
				}
				counts[f]++
			}
		}
	}
	if len(order) == 0 {
		return ""
	}
	slices.Sort(order)
	parts := make([]string, len(order))
	for i, f := range order {
		unit := "tests"
		if counts[f] == 1 {
			unit = "test"
		}
		parts[i] = fmt.Sprintf("%s (%d %s)", f, counts[f], unit)
	}
	return "not supported (features not claimed): " + strings.Join(parts, ", ")
}
