package conformance

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
)

// ExpectedFailures is a committed list of the tests one target is known to fail (the interop
// runs: reports/interop/expected-failures/<target>.txt), so a run can tell an explained result
// from a change.
type ExpectedFailures struct {
	// Path is the file it was read from.
	Path string
	// Tests are the ShortNames expected to fail, sorted.
	Tests []string
	// Reasons are the comments of the tests' lines (the one-line explanation), by ShortName;
	// a test listed without a comment has none.
	Reasons map[string]string
	// Renamed are warnings for lines that name a test by a former name (ConformanceTest.FormerNames);
	// Tests holds its ShortName.
	Renamed []string
}

// LoadExpectedFailures reads an expected-failures file: one test ShortName per line, anything
// after '#' a comment (the reason), blank lines ignored. A name not in tests or listed twice is an
// error naming the file and line.
func LoadExpectedFailures(path string, tests []ConformanceTest) (ExpectedFailures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return ExpectedFailures{}, fmt.Errorf("--expect-failures: %w", err)
	}
	known := map[string]bool{}
	for _, ct := range tests {
		known[ct.ShortName] = true
	}
	ef := ExpectedFailures{Path: path}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		text, reason, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 1 {
			if n, renamed := ResolveName(tests, fields[0]); renamed {
				ef.Renamed = append(ef.Renamed, fmt.Sprintf("--expect-failures %s:%d: %s is now named %s; use the new name", path, line, fields[0], n))
				fields[0] = n
			}
		}
		switch {
		case len(fields) == 0:
			continue
		case len(fields) > 1:
			return ef, fmt.Errorf("--expect-failures %s:%d: one ShortName per line, got %q", path, line, strings.TrimSpace(text))
		case !known[fields[0]]:
			return ef, fmt.Errorf("--expect-failures %s:%d: no test named %q", path, line, fields[0])
		case slices.Contains(ef.Tests, fields[0]):
			return ef, fmt.Errorf("--expect-failures %s:%d: %s listed twice", path, line, fields[0])
		}
		ef.Tests = append(ef.Tests, fields[0])
		if reason = strings.TrimSpace(reason); reason != "" {
			if ef.Reasons == nil {
				ef.Reasons = map[string]string{}
			}
			ef.Reasons[fields[0]] = reason
		}
	}
	if err := sc.Err(); err != nil {
		return ef, fmt.Errorf("--expect-failures %s: %w", path, err)
	}
	slices.Sort(ef.Tests)
	return ef, nil
}

// ExpectationDiff is how a run's failures differ from the expected ones. Only tests that ran
// (passed or failed) are checked against the list: a listed test the selection left out
// (--run-test, --skip-tests, another profile) is not mentioned, and one that was selected but did
// not run (an unmet precondition, an exempt or unclaimed feature, an interruption) is
// ListedButSkipped, which is reported on its own line and is not a change.
type ExpectationDiff struct {
	// UnexpectedFailures failed but are not listed.
	UnexpectedFailures []string
	// NoLongerFailing are listed, ran and passed.
	NoLongerFailing []string
	// ListedButSkipped are listed and selected but did not run, with the reason: "Name (reason)".
	ListedButSkipped []string
}

// Matched reports whether every test that ran failed exactly as listed.
func (d ExpectationDiff) Matched() bool {
	return len(d.UnexpectedFailures) == 0 && len(d.NoLongerFailing) == 0
}

// String says what differs, or that the failures are the expected ones, then the listed tests
// that did not run.
func (d ExpectationDiff) String() string {
	var parts []string
	if d.Matched() {
		parts = append(parts, "the failed tests are exactly the expected ones")
	}
	if len(d.UnexpectedFailures) > 0 {
		parts = append(parts, "failed but not expected: "+strings.Join(d.UnexpectedFailures, ", "))
	}
	if len(d.NoLongerFailing) > 0 {
		parts = append(parts, "expected to fail but passed: "+strings.Join(d.NoLongerFailing, ", "))
	}
	if len(d.ListedButSkipped) > 0 {
		parts = append(parts, "listed but skipped (not checked): "+strings.Join(d.ListedButSkipped, ", "))
	}
	return strings.Join(parts, "; ")
}

// Compare sets the failed tests of the run against the expected list (ExpectationDiff says which
// tests are checked). An expected test that ran and passed counts as a change, so an explanation
// cannot outlive the failure it explains.
func (ef ExpectedFailures) Compare(sel Selection, results []TestResult) ExpectationDiff {
	var d ExpectationDiff
	for _, r := range results {
		if !sel.Selected(r.Test) {
			continue
		}
		name, listed := r.Test.ShortName, slices.Contains(ef.Tests, r.Test.ShortName)
		switch {
		case r.Outcome == Failed && !listed:
			d.UnexpectedFailures = append(d.UnexpectedFailures, name)
		case r.Outcome == Passed && listed:
			d.NoLongerFailing = append(d.NoLongerFailing, name)
		case r.Outcome == Skipped && listed && !narrowedOut(sel, r):
			d.ListedButSkipped = append(d.ListedButSkipped, fmt.Sprintf("%s (%s)", name, firstLine(r.Message)))
		}
	}
	slices.Sort(d.UnexpectedFailures)
	slices.Sort(d.NoLongerFailing)
	return d
}

// narrowedOut reports whether a skipped test was left out by --run-test or --skip-tests (or a
// go test -run filter): the run never meant to check it.
func narrowedOut(sel Selection, r TestResult) bool {
	return (sel.RunTest != "" && sel.RunTest != r.Test.ShortName) || slices.Contains(sel.SkipTests, r.Test.ShortName) ||
		r.Message == NotRunMessage
}
