package conformance

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/onsi/ginkgo/v2/reporters"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
)

// verdictSample is a run with every kind of result: in EPP a pass, a precondition skip and a
// --skip-tests skip (partial); in EPP-Routing a pass, an expected failure, an unexpected failure
// and a feature not claimed (failure).
func verdictSample() (ReportMeta, []TestResult, *ExpectedFailures) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	meta := sampleMeta()
	meta.Selection.SkipTests = []string{"Skipped"}
	meta.Selection.SupportedFeatures = []Feature{FeaturePrefixCacheAffinity, FeatureKVCacheAwareness, FeatureLoRAAffinity}
	res := []TestResult{
		{Test: fakeTest("PickHeader", ProfileEPP, LevelMUST), Outcome: Passed, Start: now},
		{Test: fakeTest("Skipped", ProfileEPP, LevelMUST), Outcome: Skipped, Message: "skipped by --skip-tests", Start: now},
		{Test: fakeTest("NeedsAliases", ProfileEPP, LevelMUST), Outcome: Skipped, Message: "needs loopback aliases", Start: now},
		{Test: fakeTest("Prefix", ProfileEPPRouting, LevelUpstream, FeaturePrefixCacheAffinity), Outcome: Passed, Start: now},
		{Test: fakeTest("KV", ProfileEPPRouting, LevelUpstream, FeatureKVCacheAwareness), Outcome: Failed, Message: "known", Start: now},
		{Test: fakeTest("LoRA", ProfileEPPRouting, LevelUpstream, FeatureLoRAAffinity), Outcome: Failed, Message: "new", Start: now},
		{Test: fakeTest("Queue", ProfileEPPRouting, LevelUpstream, FeatureQueueAwareness), Outcome: Skipped,
			Message: "feature QueueAwareness is not in --supported-features", Start: now},
	}
	return meta, res, &ExpectedFailures{Path: "expected.txt", Tests: []string{"KV"}}
}

// TestWritersAgree: the console, summary.md, every ConformanceReport YAML, junit.xml, the
// publication README and the results file print the one verdict Judge computed: the same result
// and the same counts per profile.
func TestWritersAgree(t *testing.T) {
	meta, res, expect := verdictSample()
	v := Judge(JudgeInput{Selection: meta.Selection, Expect: expect}, res)
	want := map[Profile]ProfileVerdict{
		ProfileEPP: {Profile: ProfileEPP, Result: confv1.Partial,
			Counts: Counts{Passed: 1, Skipped: 2, NotApplicable: 1}},
		ProfileEPPRouting: {Profile: ProfileEPPRouting, Result: confv1.Failure,
			Counts: Counts{Passed: 1, Failed: 2, ExpectedFailures: 1, NotSupported: 1}},
	}
	for _, pv := range v.Profiles {
		if diff := cmp.Diff(want[pv.Profile].Counts, pv.Counts); diff != "" || pv.Result != want[pv.Profile].Result {
			t.Fatalf("%s: %s, counts (-want +got):\n%s", pv.Profile, pv.Result, diff)
		}
	}
	if v.ExitCode != ExitTestFailed || !strings.Contains(v.Reason, "failed but not expected: LoRA") {
		t.Fatalf("exit %d %q, want 1 for the unexpected LoRA failure", v.ExitCode, v.Reason)
	}

	dir := t.TempDir()
	files, err := WriteReports(filepath.Join(dir, "reports"), meta, res, meta.Date, v)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := WritePublication(filepath.Join(dir, "publish"), meta, res, nil, v)
	if err != nil {
		t.Fatal(err)
	}
	rf := NewResults(meta, "command", "static", 1, meta.Date, res, v)
	console := ConsoleVerdict(v, res)
	summary := mustRead(t, files.Summary)
	readme := mustRead(t, pub.README)
	junit := readJUnit(t, files.JUnit)

	for i, p := range meta.Selection.Profiles {
		w := want[p]
		c := w.Counts
		t.Run(string(p), func(t *testing.T) {
			// Console.
			if !strings.Contains(console, fmt.Sprintf("profile %-14s %s\n", p, w.Line())) {
				t.Errorf("console lacks %q:\n%s", w.Line(), console)
			}
			// summary.md: the table row and the section title.
			row := fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d | %d |", p, w.Result, c.Passed, c.Failed, c.ExpectedFailures, c.Skipped, c.NotApplicable, c.NotSupported)
			if !strings.Contains(summary, row) || !strings.Contains(summary, "## Profile "+string(p)+": "+w.Line()) {
				t.Errorf("summary.md lacks %q or the section title:\n%s", row, summary)
			}
			// The report YAMLs (reports and publication): gateway-api statistics and the result.
			for _, path := range []string{files.Reports[i], pub.Reports[i]} {
				rep, err := UnmarshalReport([]byte(mustRead(t, path)))
				if err != nil {
					t.Fatal(err)
				}
				pr := rep.ProfileReports[0]
				st := pr.Core.Statistics
				if pr.Extended != nil {
					st.Passed += pr.Extended.Statistics.Passed
					st.Failed += pr.Extended.Statistics.Failed
					st.Skipped += pr.Extended.Statistics.Skipped
				}
				if st != (confv1.Statistics{Passed: uint32(c.Passed), Failed: uint32(c.Failed), Skipped: uint32(c.Skipped)}) ||
					!strings.HasPrefix(pr.Summary, fmt.Sprintf("Result: %s (%s).", w.Result, c.Line())) {
					t.Errorf("%s: statistics %+v summary %q", path, st, pr.Summary)
				}
			}
			// junit.xml: the verdict property, and the test cases classified by their state.
			if got := junit.props["eppkit.profile."+string(p)]; got != w.Line() {
				t.Errorf("junit property %q, want %q", got, w.Line())
			}
			// Not-supported tests are no test cases (counted nowhere, as in the YAML); the
			// property lists them.
			if got := junit.counts[p]; got != (Counts{Passed: c.Passed, Failed: c.Failed, Skipped: c.Skipped, NotApplicable: c.NotApplicable,
				ExpectedFailures: c.ExpectedFailures}) {
				t.Errorf("junit test cases count %+v, want %+v", got, c)
			}
			// Publication README.
			if !strings.Contains(readme, fmt.Sprintf("| %s (%s) |", w.Result, c.Line())) {
				t.Errorf("README lacks the %s status:\n%s", p, readme)
			}
			// Results file.
			if got := rf.Profiles[i]; got.Name != p || got.Verdict != string(w.Result) || got.Counts != c {
				t.Errorf("results file %+v", got)
			}
		})
	}
	if junit.props["eppkit.exitCode"] != strconv.Itoa(v.ExitCode) || rf.ExitCode != v.ExitCode || rf.Error != v.Reason {
		t.Errorf("exit code: junit %q, results file %d %q, verdict %d", junit.props["eppkit.exitCode"], rf.ExitCode, rf.Error, v.ExitCode)
	}
	if !strings.Contains(summary, "### Failed as expected (--expect-failures)\n\n- **KV**") {
		t.Errorf("summary.md does not list the expected failure apart:\n%s", summary)
	}
	if regexp.MustCompile(`at: :0 @ 0?1/01/01`).MatchString(junit.raw) || !strings.Contains(junit.raw, "library_test.go:") {
		t.Errorf("junit failures lack a location:\n%s", junit.raw)
	}
}

type junitView struct {
	raw    string
	props  map[string]string
	counts map[Profile]Counts
}

// readJUnit parses junit.xml: suite properties, and per profile the test cases by state
// (skipped ones by JUnitReport's message prefix).
func readJUnit(t *testing.T, path string) junitView {
	t.Helper()
	raw := mustRead(t, path)
	var suites reporters.JUnitTestSuites
	if err := xml.Unmarshal([]byte(raw), &suites); err != nil {
		t.Fatal(err)
	}
	jv := junitView{raw: raw, props: map[string]string{}, counts: map[Profile]Counts{}}
	for _, p := range suites.TestSuites[0].Properties.Properties {
		jv.props[p.Name] = p.Value
	}
	for _, tc := range suites.TestSuites[0].TestCases {
		var p Profile
		for _, cand := range Profiles {
			if strings.HasPrefix(tc.Name, "[It] "+string(cand)+" ") {
				p = cand
			}
		}
		c := jv.counts[p]
		switch {
		case tc.Failure != nil:
			c.Failed++
		case tc.Skipped != nil && strings.HasPrefix(tc.Skipped.Message, "skipped - expected failure"):
			c.Failed++
			c.ExpectedFailures++
		case tc.Skipped != nil && strings.HasPrefix(tc.Skipped.Message, "skipped - not applicable:"):
			c.Skipped++
			c.NotApplicable++
		case tc.Skipped != nil:
			c.Skipped++
		default:
			c.Passed++
		}
		jv.counts[p] = c
	}
	return jv
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJudgeExitCodes: the exit code of each way a run can end.
func TestJudgeExitCodes(t *testing.T) {
	meta, res, expect := verdictSample()
	sel := meta.Selection
	// A run the target left before its last test: that test did not run.
	cut := append(slices.Clone(res), TestResult{Test: fakeTest("Later", ProfileEPP, LevelMUST), Outcome: Skipped,
		Message: TargetStoppedMessage, Interrupted: true})
	both := &ExpectedFailures{Path: "e", Tests: []string{"KV", "LoRA"}}
	down := "the target stopped answering: its ext_proc address 127.0.0.1:1 refused connections for 5s\n--- last lines ---\npanic"
	for _, tc := range []struct {
		name string
		in   JudgeInput
		res  []TestResult
		code int
		want string
	}{
		{"a failure", JudgeInput{Selection: sel}, res, ExitTestFailed, "2 conformance test(s) failed"},
		{"failures differ from the list", JudgeInput{Selection: sel, Expect: expect}, res, ExitTestFailed, "failed but not expected: LoRA"},
		{"exactly the listed failures", JudgeInput{Selection: sel, Expect: &ExpectedFailures{Path: "e", Tests: []string{"KV", "LoRA"}}}, res,
			ExitPassed, "not applicable (a precondition unmet): NeedsAliases"},
		{"interrupted after a failure", JudgeInput{Selection: sel, Interrupted: true}, res, ExitHarness, "interrupted"},
		{"target stopped", JudgeInput{Selection: sel, TargetDown: down}, cut, ExitHarness, "stopped answering"},
		{"target stopped, with the list", JudgeInput{Selection: sel, Expect: both, TargetDown: down}, cut, ExitHarness, "1 did not run"},
		// The target died in the last selected test (the usage-crash interop runs): nothing was
		// lost, so the results decide, and the diagnosis is still given (its first line).
		{"target died in the last test, listed", JudgeInput{Selection: sel, Expect: both, TargetDown: down}, res, ExitPassed,
			"NeedsAliases; after every selected test had run, the target stopped answering: " +
				"its ext_proc address 127.0.0.1:1 refused connections for 5s …"},
		{"target died in the last test, not listed", JudgeInput{Selection: sel, Expect: expect, TargetDown: down}, res, ExitTestFailed,
			"failed but not expected: LoRA; after every selected test had run, the target stopped answering"},
		{"nothing ran", JudgeInput{Selection: sel}, res[1:3], ExitTestFailed, "no selected test ran"},
		{"a clean pass", JudgeInput{Selection: sel}, res[:1], ExitPassed, ""},
	} {
		v := Judge(tc.in, tc.res)
		if v.ExitCode != tc.code || !strings.Contains(v.Reason, tc.want) || (tc.want == "" && v.Reason != "") {
			t.Errorf("%s: exit %d %q, want %d %q", tc.name, v.ExitCode, v.Reason, tc.code, tc.want)
		}
	}
}
