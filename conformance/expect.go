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
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
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
	}
	if err := sc.Err(); err != nil {
		return ef, fmt.Errorf("--expect-failures %s: %w", path, err)
	}
	slices.Sort(ef.Tests)
	return ef, nil
}

// ExpectationDiff is how a run's failures differ from the expected ones.
type ExpectationDiff struct {
	// UnexpectedFailures failed but are not listed.
	UnexpectedFailures []string
	// NoLongerFailing are listed but passed or were skipped in this run.
	NoLongerFailing []string
}

// Matched reports whether the run failed exactly the expected tests.
func (d ExpectationDiff) Matched() bool {
	return len(d.UnexpectedFailures) == 0 && len(d.NoLongerFailing) == 0
}

// String says what differs, or that the failures are the expected ones.
func (d ExpectationDiff) String() string {
	if d.Matched() {
		return "the failed tests are exactly the expected ones"
	}
	var parts []string
	if len(d.UnexpectedFailures) > 0 {
		parts = append(parts, "failed but not expected: "+strings.Join(d.UnexpectedFailures, ", "))
	}
	if len(d.NoLongerFailing) > 0 {
		parts = append(parts, "expected to fail but did not fail: "+strings.Join(d.NoLongerFailing, ", "))
	}
	return strings.Join(parts, "; ")
}

// Compare sets the run's failed tests against the expected list. An expected test that passed
// or was skipped counts as a change, so an explanation cannot outlive the failure it explains.
// Expected tests outside the run's profiles are ignored.
func (ef ExpectedFailures) Compare(sel Selection, results []TestResult) ExpectationDiff {
	var d ExpectationDiff
	failed := map[string]bool{}
	inRun := map[string]bool{}
	for _, r := range results {
		if !profileSelected(sel, r.Test.Profile) {
			continue
		}
		inRun[r.Test.ShortName] = true
		if r.Outcome == Failed {
			failed[r.Test.ShortName] = true
			if !slices.Contains(ef.Tests, r.Test.ShortName) {
				d.UnexpectedFailures = append(d.UnexpectedFailures, r.Test.ShortName)
			}
		}
	}
	for _, n := range ef.Tests {
		if inRun[n] && !failed[n] {
			d.NoLongerFailing = append(d.NoLongerFailing, n)
		}
	}
	slices.Sort(d.UnexpectedFailures)
	return d
}
