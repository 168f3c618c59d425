package conformance

import (
	"context"
	"os"
	"strings"
	"testing"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
)

// TestInterruptedRun: a run whose context is cancelled (Ctrl-C / SIGTERM) while a test runs lets
// that test finish, marks every later test interrupted, and every verdict and report says the run
// was interrupted instead of PASS for the tests that ran.
func TestInterruptedRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := map[string]bool{}
	pass := func(name string) func(TestingT, *Suite) {
		return func(TestingT, *Suite) { ran[name] = true }
	}
	tests := []ConformanceTest{
		{ShortName: "First", Profile: ProfileEPP, Level: LevelMUST, Run: pass("First")},
		{ShortName: "Second", Profile: ProfileEPP, Level: LevelMUST, Run: func(t TestingT, s *Suite) {
			ran["Second"] = true
			cancel() // the signal arrives while this test runs
		}},
		{ShortName: "Third", Profile: ProfileEPP, Level: LevelMUST, Run: pass("Third")},
		{ShortName: "Prefix", Profile: ProfileEPPRouting, Level: LevelUpstream, Features: []Feature{FeaturePrefixCacheAffinity},
			Run: pass("Prefix")},
	}
	meta := sampleMeta()
	var progress strings.Builder
	r := &Runner{Selection: meta.Selection, Progress: &progress, Context: ctx}
	res := r.Run(tests)
	if !ran["First"] || !ran["Second"] || ran["Third"] || ran["Prefix"] {
		t.Fatalf("ran %v, want First and Second only", ran)
	}
	for i, want := range []struct {
		outcome     Outcome
		interrupted bool
	}{{Passed, false}, {Passed, false}, {Skipped, true}, {Skipped, true}} {
		if res[i].Outcome != want.outcome || res[i].Interrupted != want.interrupted {
			t.Errorf("%s: outcome %s interrupted %v, want %s %v", res[i].Test.ShortName, res[i].Outcome, res[i].Interrupted,
				want.outcome, want.interrupted)
		}
	}
	if !strings.Contains(progress.String(), "SKIP  EPP/Third (0s): "+InterruptedMessage) {
		t.Errorf("progress:\n%s", progress.String())
	}

	// Console lines.
	if v := ProfileVerdict(ProfileEPP, res); v != "INTERRUPTED" {
		t.Errorf("EPP verdict %q, want INTERRUPTED (2 passed, 1 not run)", v)
	}
	if l := ProfileLine(ProfileEPP, res); l != "2 passed, 0 failed, 1 skipped (1 of them not run: interrupted)" {
		t.Errorf("EPP line %q", l)
	}
	if v := ProfileVerdict(ProfileEPPRouting, res); v != "INTERRUPTED" {
		t.Errorf("EPP-Routing verdict %q, want INTERRUPTED (nothing ran)", v)
	}
	if l := InterruptionLine(res); !strings.Contains(l, "run INTERRUPTED") || !strings.Contains(l, "2 tests ran, 2 did not run") {
		t.Errorf("interruption line %q", l)
	}

	// A failure still wins: the verdict stays FAIL, and the line still counts the tests not run.
	failed := append([]TestResult(nil), res...)
	failed[0].Outcome = Failed
	if v := ProfileVerdict(ProfileEPP, failed); v != "FAIL" {
		t.Errorf("verdict with a failure %q, want FAIL", v)
	}

	// Reports: the tests not run are skipped (gateway-api partial), and the summary says why.
	rep := BuildReport(ProfileEPP, meta, res).ProfileReports[0]
	if rep.Core.Result != confv1.Partial || rep.Core.Statistics != (confv1.Statistics{Passed: 2, Skipped: 1}) ||
		len(rep.Core.SkippedTests) != 1 || rep.Core.SkippedTests[0] != "Third" {
		t.Errorf("EPP core %+v, want partial, 2 passed, Third skipped", rep.Core)
	}
	if !strings.Contains(rep.Summary, "Run interrupted (Ctrl-C or SIGTERM): 1 tests did not run") {
		t.Errorf("report summary %q", rep.Summary)
	}
	dir := t.TempDir()
	files, err := WriteReports(dir, meta, res, meta.Date)
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(files.Summary)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run INTERRUPTED", "| EPP | INTERRUPTED | 2 | 0 | 1 |", "## Profile EPP: INTERRUPTED — 2 passed, 0 failed, 1 skipped (1 of them not run: interrupted)",
		"- Third — "} {
		if !strings.Contains(string(md), want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
	junit, err := os.ReadFile(files.JUnit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(junit), "Interrupted by User") || !strings.Contains(string(junit), InterruptedMessage) {
		t.Errorf("junit.xml does not say the run was interrupted:\n%s", junit)
	}
	if readme := PublicationREADME(meta, res, nil); !strings.Contains(readme, "INTERRUPTED (2 passed, 0 failed, 1 skipped (1 of them not run: interrupted))") ||
		!strings.Contains(readme, "Rerun it to completion before publishing") {
		t.Errorf("publication README:\n%s", readme)
	}

	// An uninterrupted run prints no interruption line and keeps PASS.
	clean := res[:2]
	if InterruptionLine(clean) != "" || ProfileVerdict(ProfileEPP, clean) != "PASS" {
		t.Errorf("uninterrupted: line %q verdict %q", InterruptionLine(clean), ProfileVerdict(ProfileEPP, clean))
	}
}
