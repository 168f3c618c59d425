package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Results file identity: a reader checks both before it trusts the fields.
const (
	// ResultsAPIVersion is the schema version of the results file; a change that removes or
	// renames a field bumps it.
	ResultsAPIVersion = "eppkit.dev/v1alpha1"
	// ResultsKind is the results file's kind.
	ResultsKind = "ConformanceResults"
	// ResultsFileName is the name `eppkit flake-check` gives each run's results file (in the
	// run's log directory).
	ResultsFileName = "results.json"
)

// Results is the machine-readable record of one conformance run (Options.ResultsFile,
// `eppkit conformance --results-file`), for programs that drive runs (`make flake-check`, `make
// mutants`, CI): JSON, keys lowerCamelCase, durations in seconds. It is written once the options
// are valid, whatever the run's end — every test done, a test failed, the harness could not start
// (Error set, no Tests) or the run interrupted — so a reader never parses the console.
type Results struct {
	// APIVersion is ResultsAPIVersion; Kind is ResultsKind.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// EppkitVersion is the version of the eppkit that ran the suite.
	EppkitVersion string `json:"eppkitVersion"`
	// Target and EndpointSource are the run's --target and --endpoint-source.
	Target         string `json:"target"`
	EndpointSource string `json:"endpointSource"`
	// Seed is the run's seed (EPPKIT_SEED=<seed> reproduces it).
	Seed int64 `json:"seed"`
	// Start is when the run started (RFC 3339); DurationSeconds its wall time.
	Start           time.Time `json:"start"`
	DurationSeconds float64   `json:"durationSeconds"`
	// ExitCode is the code `eppkit conformance` exits with: 0 every test that ran passed (or,
	// with expected failures, exactly the expected tests failed), 1 a test failed (or the
	// failures differ from the expected ones), 2 the harness or target could not start, the run
	// was interrupted, or a report could not be written.
	ExitCode int `json:"exitCode"`
	// Error is the run's error message when ExitCode is not 0, "" otherwise.
	Error string `json:"error,omitempty"`
	// Interrupted is true when Ctrl-C or SIGTERM (a cancelled context) stopped the run early.
	Interrupted bool `json:"interrupted"`
	// Profiles has one entry per selected profile, in report order.
	Profiles []ProfileResults `json:"profiles"`
	// Tests has one entry per test of the selected profiles, in run order (empty when the
	// harness could not start).
	Tests []TestRecord `json:"tests"`
	// ExpectedFailures is the comparison with the expected failures, nil without them.
	ExpectedFailures *ExpectedFailuresRecord `json:"expectedFailures,omitempty"`
}

// ProfileResults is one profile's counts in Results.
type ProfileResults struct {
	// Name is the profile ("EPP", "EPP-Routing", "Reference").
	Name Profile `json:"name"`
	// Verdict is the profile's result, as every report prints it: success, partial, failure or
	// interrupted (Judge).
	Verdict string `json:"verdict"`
	// Counts are the profile's tests by outcome (Counts: passed, failed, skipped, notSupported,
	// expectedFailures, interrupted, preconditions).
	Counts `json:",inline"`
}

// TestRecord is one test's result in Results.
type TestRecord struct {
	// Profile and ShortName identify the test.
	Profile   Profile `json:"profile"`
	ShortName string  `json:"shortName"`
	// Outcome is "passed", "failed" or "skipped".
	Outcome Outcome `json:"outcome"`
	// Kind is how every report classifies the result (TestKind: "passed", "failed", "expected
	// failure", "skipped", "precondition", "interrupted", "not supported").
	Kind TestKind `json:"kind"`
	// DurationSeconds is how long the test ran (0 for a test that did not run).
	DurationSeconds float64 `json:"durationSeconds"`
	// Message is the first failure (failed) or the skip reason (skipped).
	Message string `json:"message,omitempty"`
	// Interrupted marks a skipped test that did not run because the run was interrupted.
	Interrupted bool `json:"interrupted,omitempty"`
}

// ExpectedFailuresRecord is the expected-failures comparison in Results.
type ExpectedFailuresRecord struct {
	// File is the expected-failures file; Tests the ShortNames it lists.
	File  string   `json:"file"`
	Tests []string `json:"tests"`
	// Matched is true when the run failed exactly the listed tests.
	Matched bool `json:"matched"`
	// UnexpectedFailures failed but are not listed; NoLongerFailing are listed, ran and passed;
	// ListedButSkipped are listed and selected but did not run ("Name (reason)"; not a change).
	UnexpectedFailures []string `json:"unexpectedFailures,omitempty"`
	NoLongerFailing    []string `json:"noLongerFailing,omitempty"`
	ListedButSkipped   []string `json:"listedButSkipped,omitempty"`
}

// NewResults builds the Results of a run from its test results (nil when the harness did not
// start) and its verdict (Judge: the profiles, the exit code and its reason); the caller sets
// Interrupted and ExpectedFailures, and ExitCode and Error when the run failed for another
// reason (a report not written).
func NewResults(meta ReportMeta, target, source string, seed int64, start time.Time, results []TestResult, v Verdict) Results {
	r := Results{APIVersion: ResultsAPIVersion, Kind: ResultsKind, EppkitVersion: meta.EppkitVersion, Target: target,
		EndpointSource: source, Seed: seed, Start: start.UTC(), DurationSeconds: time.Since(start).Seconds(),
		Profiles: []ProfileResults{}, Tests: []TestRecord{}}
	for _, pv := range v.Profiles {
		r.Profiles = append(r.Profiles, ProfileResults{Name: pv.Profile, Verdict: string(pv.Result), Counts: pv.Counts})
	}
	if v.ExitCode != ExitPassed {
		r.ExitCode, r.Error = v.ExitCode, v.Reason
	}
	for _, res := range results {
		r.Tests = append(r.Tests, TestRecord{Profile: res.Test.Profile, ShortName: res.Test.ShortName, Outcome: res.Outcome,
			Kind: v.Kind(res), DurationSeconds: res.Duration.Seconds(), Message: res.Message, Interrupted: res.Interrupted})
	}
	return r
}

// RecordExpectedFailures sets r.ExpectedFailures from the comparison d with the list in file.
func (r *Results) RecordExpectedFailures(file string, ef ExpectedFailures, d ExpectationDiff) {
	r.ExpectedFailures = &ExpectedFailuresRecord{File: file, Tests: append([]string{}, ef.Tests...), Matched: d.Matched(),
		UnexpectedFailures: d.UnexpectedFailures, NoLongerFailing: d.NoLongerFailing, ListedButSkipped: d.ListedButSkipped}
}

// WriteResultsFile writes r as indented JSON to path (its directory is created), through a
// temporary file renamed into place, so a reader never sees half a file.
func WriteResultsFile(path string, r Results) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("results file: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("results file: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("results file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("results file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("results file: %w", err)
	}
	return nil
}

// ReadResultsFile reads a results file and checks its apiVersion and kind.
func ReadResultsFile(path string) (Results, error) {
	var r Results
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	if r.APIVersion != ResultsAPIVersion || r.Kind != ResultsKind {
		return r, fmt.Errorf("%s: apiVersion %q kind %q, want %s %s", path, r.APIVersion, r.Kind, ResultsAPIVersion, ResultsKind)
	}
	return r, nil
}
