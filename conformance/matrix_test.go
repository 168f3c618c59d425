package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMatrix(t *testing.T) {
	tests := []ConformanceTest{
		{ShortName: "Alpha", Profile: ProfileEPP},
		{ShortName: "Beta", Profile: ProfileEPP},
		{ShortName: "Gamma", Profile: ProfileEPPRouting, Features: []Feature{FeatureQueueAwareness}},
	}
	a := MatrixRun{Name: "epp-a-v1.0.0", Results: Results{Tests: []TestRecord{
		{ShortName: "Alpha", Outcome: Passed, Kind: KindPassed},
		{ShortName: "Beta", Outcome: Failed, Kind: KindExpectedFailure},
		{ShortName: "Gamma", Outcome: Skipped, Kind: KindNotSupported},
	}}, Expected: ExpectedFailures{Tests: []string{"Beta"}, Reasons: map[string]string{"Beta": `answers "gRPC Internal" | not 503`}}}
	b := MatrixRun{Name: "epp-b", Results: Results{Tests: []TestRecord{
		{ShortName: "Alpha", Outcome: Skipped, Kind: KindNotApplicable, Message: "needs apiserver"},
		{ShortName: "Beta", Outcome: Passed, Kind: KindPassed},
	}}}
	got, err := Matrix([]MatrixRun{a, b}, tests)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"**Profile EPP** (2 tests)",
		"| test | epp-a-v1.0.0 | epp-b |",
		"| Alpha | ✅ | <abbr title=\"needs apiserver\">n/a</abbr> |",
		"| Beta | [❌](#epp-a-v100 \"answers 'gRPC Internal' / not 503\") | ✅ |",
		"| **passed / ran** | 1 / 2 | 1 / 1 |",
		"**Profile EPP-Routing** (1 tests)",
		"| Gamma | n/s | — |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("matrix lacks %q:\n%s", want, got)
		}
	}

	// A failure nobody explained is an error, and marked.
	b.Results.Tests[1] = TestRecord{ShortName: "Beta", Outcome: Failed, Kind: KindFailed}
	got, err = Matrix([]MatrixRun{a, b}, tests)
	if err == nil || !strings.Contains(err.Error(), "epp-b: Beta") || !strings.Contains(got, "❌ unexplained") {
		t.Errorf("unexplained failure: err %v, table:\n%s", err, got)
	}
}

func TestReplaceMatrixAndExplanations(t *testing.T) {
	doc := "# Interop\n\n" + MatrixBegin + "\nold table\n" + MatrixEnd + "\n\n### `epp-a`\nwhy\n"
	got, err := ReplaceMatrix(doc, "new table\n")
	if err != nil || !strings.Contains(got, MatrixBegin+"\nnew table\n"+MatrixEnd) || strings.Contains(got, "old table") {
		t.Fatalf("ReplaceMatrix = %q, %v", got, err)
	}
	if _, err := ReplaceMatrix("# no markers", "x"); err == nil || !strings.Contains(err.Error(), "no matrix block") {
		t.Errorf("no markers: %v", err)
	}
	failed := []TestRecord{{ShortName: "Alpha", Outcome: Failed}}
	runs := []MatrixRun{{Name: "epp-a", Results: Results{Tests: failed}}, {Name: "epp-b", Results: Results{Tests: failed}},
		{Name: "epp-c", Results: Results{Tests: []TestRecord{{ShortName: "Alpha", Outcome: Passed}}}}}
	if missing := MissingExplanations(got, runs); len(missing) != 1 || missing[0] != "epp-b" {
		t.Errorf("MissingExplanations = %v, want [epp-b]", missing)
	}
	if a := ExplanationAnchor("upstream-epp-v1.5.0"); a != "upstream-epp-v150" {
		t.Errorf("anchor %q", a)
	}
}

func TestLoadMatrixRuns(t *testing.T) {
	dir := t.TempDir()
	tests := []ConformanceTest{{ShortName: "Alpha", Profile: ProfileEPP}}
	if _, err := LoadMatrixRuns(dir, tests); err == nil || !strings.Contains(err.Error(), "no run under") {
		t.Fatalf("empty dir: %v", err)
	}
	r := Results{APIVersion: ResultsAPIVersion, Kind: ResultsKind, Tests: []TestRecord{{ShortName: "Alpha", Outcome: Failed, Kind: KindExpectedFailure}}}
	if err := WriteResultsFile(filepath.Join(dir, "run-x", ResultsFileName), r); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "expected-failures"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "expected-failures", "run-x.txt"), []byte("Alpha # the reason\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "not-a-run"), 0o755); err != nil {
		t.Fatal(err)
	}
	runs, err := LoadMatrixRuns(dir, tests)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Name != "run-x" || runs[0].Expected.Reasons["Alpha"] != "the reason" {
		t.Fatalf("runs = %+v", runs)
	}
}
