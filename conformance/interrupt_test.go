package conformance

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"

	"github.com/eppkit/eppkit/conformance/harness"
)

// TestInterruptedRun: a run whose context is cancelled (Ctrl-C / SIGTERM) while a test runs lets
// that test finish, marks every later test interrupted, and every verdict and report says the run
// was interrupted instead of PASS for the tests that ran.
func TestInterruptedRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := map[string]bool{}
	pass := func(name string) func(harness.TestingT, *harness.Suite) {
		return func(harness.TestingT, *harness.Suite) { ran[name] = true }
	}
	tests := []ConformanceTest{
		{ShortName: "First", Profile: ProfileEPP, Level: LevelMUST, Run: pass("First")},
		{ShortName: "Second", Profile: ProfileEPP, Level: LevelMUST, Run: func(t harness.TestingT, s *harness.Suite) {
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

	// The verdict: interrupted profiles, exit 2 (ExitHarness).
	v := Judge(JudgeInput{Selection: meta.Selection, Interrupted: true}, res)
	if pv := v.Profile(ProfileEPP); pv.Result != ResultInterrupted ||
		pv.Line() != "interrupted: 2 passed, 0 failed, 1 skipped (1 not run: interrupted), 0 not supported" {
		t.Errorf("EPP verdict %q, want interrupted (2 passed, 1 not run)", pv.Line())
	}
	if pv := v.Profile(ProfileEPPRouting); pv.Result != ResultInterrupted {
		t.Errorf("EPP-Routing verdict %q, want interrupted (nothing ran)", pv.Line())
	}
	if v.ExitCode != ExitHarness {
		t.Errorf("exit code %d, want %d", v.ExitCode, ExitHarness)
	}
	if l := InterruptionLine(res); !strings.Contains(l, "run INTERRUPTED") || !strings.Contains(l, "2 tests ran, 2 did not run") {
		t.Errorf("interruption line %q", l)
	}

	// A failure wins the profile's result, but an interrupted run still exits 2, never 1.
	failed := append([]TestResult(nil), res...)
	failed[0].Outcome = Failed
	if fv := Judge(JudgeInput{Selection: meta.Selection, Interrupted: true}, failed); fv.Profile(ProfileEPP).Result != confv1.Failure ||
		fv.ExitCode != ExitHarness {
		t.Errorf("with a failure: %q exit %d, want failure and exit %d", fv.Profile(ProfileEPP).Line(), fv.ExitCode, ExitHarness)
	}

	// Reports: the tests not run are skipped (gateway-api partial), and the summary says why.
	rep := BuildReport(ProfileEPP, meta, res, v).ProfileReports[0]
	if rep.Core.Result != confv1.Partial || rep.Core.Statistics != (confv1.Statistics{Passed: 2, Skipped: 1}) ||
		len(rep.Core.SkippedTests) != 1 || rep.Core.SkippedTests[0] != "Third" {
		t.Errorf("EPP core %+v, want partial, 2 passed, Third skipped", rep.Core)
	}
	if !strings.Contains(rep.Summary, "Result: interrupted") || !strings.Contains(rep.Summary, "Run stopped early (interrupted (Ctrl-C or SIGTERM)): 1 tests did not run") {
		t.Errorf("report summary %q", rep.Summary)
	}
	dir := t.TempDir()
	files, err := WriteReports(dir, meta, res, meta.Date, v)
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(files.Summary)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run INTERRUPTED", "| EPP | interrupted | 2 | 0 | 0 | 1 | 0 |",
		"## Profile EPP: interrupted: 2 passed, 0 failed, 1 skipped (1 not run: interrupted), 0 not supported", "- Third — "} {
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
	if readme := PublicationREADME(meta, res, nil, v); !strings.Contains(readme, "interrupted (2 passed, 0 failed, 1 skipped (1 not run: interrupted), 0 not supported)") ||
		!strings.Contains(readme, "Rerun it to completion before publishing") {
		t.Errorf("publication README:\n%s", readme)
	}

	// An uninterrupted run prints no interruption line and succeeds.
	clean := res[:2]
	sel := meta.Selection
	sel.Profiles = []Profile{ProfileEPP}
	if cv := Judge(JudgeInput{Selection: sel}, clean); InterruptionLine(clean) != "" || cv.Profile(ProfileEPP).Result != confv1.Success || cv.ExitCode != 0 {
		t.Errorf("uninterrupted: line %q verdict %q exit %d", InterruptionLine(clean), cv.Profile(ProfileEPP).Line(), cv.ExitCode)
	}
}

// TestNotifyInterrupt: the first SIGINT cancels the context, the second closes abort.
func TestNotifyInterrupt(t *testing.T) {
	var stderr strings.Builder
	ctx, abort, stop := NotifyInterrupt(context.Background(), &stderr)
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first SIGINT did not cancel the context")
	}
	select {
	case <-abort:
		t.Fatal("abort closed after one signal")
	case <-time.After(50 * time.Millisecond):
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-abort:
	case <-time.After(5 * time.Second):
		t.Fatal("the second SIGINT did not close abort")
	}
	if !strings.Contains(stderr.String(), "second interrupt") {
		t.Errorf("stderr %q", stderr.String())
	}
}
