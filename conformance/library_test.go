package conformance

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/eppkit/eppkit/conformance/harness"
)

func fakeTest(name string, p Profile, l Level, fs ...Feature) ConformanceTest {
	return ConformanceTest{ShortName: name, Description: "The EPP MUST do " + name + ".", Level: l, Profile: p,
		Features: fs, Source: "SPEC §5.1", Run: func(harness.TestingT, *harness.Suite) {}}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		ct   ConformanceTest
		want string // substring of the error, "" = valid
	}{
		{"valid core", fakeTest("PickHeader", ProfileEPP, LevelMUST), ""},
		{"valid routing", fakeTest("Prefix", ProfileEPPRouting, LevelUpstream, FeaturePrefixCacheAffinity), ""},
		{"lower case name", fakeTest("pickHeader", ProfileEPP, LevelMUST), "ShortName"},
		{"EPP with upstream level", fakeTest("X", ProfileEPP, LevelUpstream), "only MUST"},
		{"EPP with feature", fakeTest("X", ProfileEPP, LevelMUST, FeatureQueueAwareness), "not feature-gated"},
		{"routing without feature", fakeTest("X", ProfileEPPRouting, LevelUpstream), "at least one feature"},
		{"routing eppkit level", fakeTest("X", ProfileEPPRouting, LevelEppkit, FeatureQueueAwareness), "Reference"},
		{"unknown profile", fakeTest("X", "Gateway", LevelMUST), "Profile"},
		{"unknown feature", fakeTest("X", ProfileEPPRouting, LevelUpstream, "Teleport"), "unknown feature"},
		{"no run", func() ConformanceTest { c := fakeTest("X", ProfileEPP, LevelMUST); c.Run = nil; return c }(), "Run is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.ct.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestSkipReason(t *testing.T) {
	core := fakeTest("Core", ProfileEPP, LevelMUST)
	prefix := fakeTest("Prefix", ProfileEPPRouting, LevelUpstream, FeaturePrefixCacheAffinity)
	ref := fakeTest("Ref", ProfileReference, LevelEppkit)
	all := []Profile{ProfileEPP, ProfileEPPRouting, ProfileReference}
	for _, tc := range []struct {
		name string
		sel  Selection
		ct   ConformanceTest
		want string // substring; "" = runs
	}{
		{"core runs", Selection{Profiles: all}, core, ""},
		{"profile not selected", Selection{Profiles: []Profile{ProfileEPP}}, ref, "not selected"},
		{"feature unsupported", Selection{Profiles: all}, prefix, "not in --supported-features"},
		{"feature supported", Selection{Profiles: all, SupportedFeatures: []Feature{FeaturePrefixCacheAffinity}}, prefix, ""},
		{"feature exempt wins", Selection{Profiles: all, SupportedFeatures: []Feature{FeaturePrefixCacheAffinity},
			ExemptFeatures: []Feature{FeaturePrefixCacheAffinity}}, prefix, "exempt"},
		{"skip-tests", Selection{Profiles: all, SkipTests: []string{"Core"}}, core, "--skip-tests"},
		{"run-test other", Selection{Profiles: all, RunTest: "Ref"}, core, "--run-test"},
		{"run-test this", Selection{Profiles: all, RunTest: "Core"}, core, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.sel.SkipReason(tc.ct)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("SkipReason = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSelectionValidate(t *testing.T) {
	tests := []ConformanceTest{fakeTest("Core", ProfileEPP, LevelMUST)}
	for _, tc := range []struct {
		name string
		sel  Selection
		want string
	}{
		{"ok", Selection{Profiles: []Profile{ProfileEPP}, RunTest: "Core"}, ""},
		{"no profile", Selection{}, "--profiles"},
		{"unknown skip", Selection{Profiles: []Profile{ProfileEPP}, SkipTests: []string{"Nope"}}, "--skip-tests"},
		{"unknown run", Selection{Profiles: []Profile{ProfileEPP}, RunTest: "Nope"}, "--run-test"},
		{"unknown feature", Selection{Profiles: []Profile{ProfileEPP}, ExemptFeatures: []Feature{"X"}}, "--exempt-features"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sel.Validate(tests)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseLists(t *testing.T) {
	ps, err := ParseProfiles("EPP, Reference")
	if err != nil || !cmp.Equal(ps, []Profile{ProfileEPP, ProfileReference}) {
		t.Fatalf("ParseProfiles = %v, %v", ps, err)
	}
	if ps, _ := ParseProfiles("all"); !cmp.Equal(ps, Profiles) {
		t.Fatalf("ParseProfiles(all) = %v", ps)
	}
	if _, err := ParseProfiles("EPP,Gateway"); err == nil || !strings.Contains(err.Error(), `"Gateway"`) {
		t.Fatalf("ParseProfiles(Gateway) = %v", err)
	}
	fs, err := ParseFeatures("")
	if err != nil || len(fs) != 0 {
		t.Fatalf("ParseFeatures(\"\") = %v, %v", fs, err)
	}
	if _, err := ParseFeatures("QueueAwareness,queueawareness"); err == nil {
		t.Fatal("feature names must be case-sensitive")
	}
}

func TestNewTargetUnknown(t *testing.T) {
	if _, err := NewTarget("nope", TargetOptions{}); err == nil || !strings.Contains(err.Error(), "--target") {
		t.Errorf("unknown target: %v", err)
	}
}

func sampleResults() []TestResult {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	prov := fakeTest("Served", ProfileEPP, LevelMUST)
	prov.Provisional = true
	return []TestResult{
		{Test: fakeTest("PickHeader", ProfileEPP, LevelMUST), Outcome: Passed, Start: now, Duration: time.Second},
		{Test: prov, Outcome: Passed, Start: now},
		{Test: fakeTest("Prefix", ProfileEPPRouting, LevelUpstream, FeaturePrefixCacheAffinity), Outcome: Failed,
			Message: "picked 127.0.10.2:8000 in 40 of 100 requests\nbound 0.05", Start: now},
		{Test: fakeTest("Queue", ProfileEPPRouting, LevelUpstream, FeatureQueueAwareness), Outcome: Skipped,
			Message: "feature QueueAwareness is not in --supported-features", Start: now},
	}
}

func sampleMeta() ReportMeta {
	return ReportMeta{
		Implementation: confv1.Implementation{Organization: "eppkit", Project: "reference", URL: "https://example.com",
			Version: "v0.1.0", Contact: []string{"@eppkit"}},
		EppkitVersion: "test", Date: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Selection: Selection{Profiles: []Profile{ProfileEPP, ProfileEPPRouting},
			SupportedFeatures: []Feature{FeaturePrefixCacheAffinity}},
	}
}

func TestReportRoundTrip(t *testing.T) {
	meta, res := sampleMeta(), sampleResults()
	for _, tc := range []struct {
		p    Profile
		want confv1.ProfileReport
	}{
		{ProfileEPP, confv1.ProfileReport{Name: "EPP", Summary: "Result: success (2 passed, 0 failed, 0 skipped, 0 not supported). Core tests succeeded.",
			Core: confv1.Status{Result: confv1.Success, Statistics: confv1.Statistics{Passed: 2}}}},
		{ProfileEPPRouting, confv1.ProfileReport{Name: "EPP-Routing",
			Summary: "Result: failure (0 passed, 1 failed, 0 skipped, 1 not supported). No core tests in this profile. Extended tests failed with 1 test failures.",
			Core:    confv1.Status{Result: confv1.Success},
			Extended: &confv1.ExtendedStatus{
				// Queue's feature is not claimed: NOT_SUPPORTED, counted nowhere (gateway-api).
				Status: confv1.Status{Result: confv1.Failure, Statistics: confv1.Statistics{Failed: 1},
					FailedTests: []string{"Prefix"}},
				SupportedFeatures: []string{"PrefixCacheAffinity"}, UnsupportedFeatures: []string{"OpenAIRequestParsing",
					"QueueAwareness", "KVCacheAwareness", "LoRAAffinity", "PredictedLatency", "RequestShedding",
					"EndpointChurn", "DataParallelRanks", "SubsetHintIPMatching", "HighAvailability", "PrecisePrefixCache", "EndpointScores", "SessionAffinity", "FlowControl", "VLLMGRPC"}}}},
	} {
		t.Run(string(tc.p), func(t *testing.T) {
			b, err := MarshalReport(BuildReport(tc.p, meta, res, judge(meta, res)))
			if err != nil {
				t.Fatal(err)
			}
			// Our wrapper parses strictly...
			ours, err := UnmarshalReport(b)
			if err != nil {
				t.Fatalf("UnmarshalReport: %v\n%s", err, b)
			}
			// ...and the Gateway API type reads the same file.
			var gw confv1.ConformanceReport
			if err := yaml.Unmarshal(b, &gw); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ours.ConformanceReport, gw); diff != "" {
				t.Fatalf("gateway-api view differs (-ours +gw):\n%s", diff)
			}
			if diff := cmp.Diff([]confv1.ProfileReport{tc.want}, gw.ProfileReports); diff != "" {
				t.Fatalf("profile report (-want +got):\n%s", diff)
			}
			for _, key := range []string{"gatewayAPIInferenceExtensionVersion: v1.6.2", "mode: default",
				"gatewayAPIChannel: standard", "gatewayAPIVersion: ", "kind: ConformanceReport",
				"apiVersion: gateway.networking.k8s.io/v1", "eppkitVersion: test", "specVersion: " + SpecVersion,
				"eppProtocol: GIE v1.6.2 proposal 004 (endpoint picker protocol)", "upstreamEPP: llm-d-router v0.10.0"} {
				if !strings.Contains(string(b), key) {
					t.Errorf("report lacks %q:\n%s", key, b)
				}
			}
			if strings.Contains(string(b), "GatewayAPIInferenceExtensionVersion") {
				t.Error("capitalised GIE version key leaked")
			}
			if tc.p == ProfileEPP && !cmp.Equal(gw.SucceededProvisionalTests, []string{"Served"}) {
				t.Errorf("succeededProvisionalTests = %v", gw.SucceededProvisionalTests)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	md := Summary(sampleMeta(), sampleResults(), judge(sampleMeta(), sampleResults()))
	for _, want := range []string{
		"| EPP | success | 2 | 0 | 0 | 0 | 0 | 0 |\n| EPP-Routing | failure | 0 | 1 | 0 | 0 | 0 | 1 |\n",
		"## Profile EPP: success: 2 passed, 0 failed, 0 skipped, 0 not supported",
		"## Profile EPP-Routing: failure: 0 passed, 1 failed, 0 skipped, 1 not supported",
		"**exit 1: 1 conformance test(s) failed**",
		"### Not supported (feature not claimed)",
		"- **Prefix** [PrefixCacheAffinity] — The EPP MUST do Prefix.",
		"  ```\n  picked 127.0.10.2:8000 in 40 of 100 requests\n  bound 0.05\n  ```",
		"- Queue [QueueAwareness] — The EPP MUST do Queue. (feature QueueAwareness is not in --supported-features)",
		"- PickHeader — The EPP MUST do PickHeader.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "Profile Reference") {
		t.Error("unselected profile in the summary")
	}
}

func TestWriteReports(t *testing.T) {
	dir := t.TempDir()
	meta := sampleMeta()
	files, err := WriteReports(dir, meta, sampleResults(), meta.Date, judge(meta, sampleResults()))
	if err != nil {
		t.Fatal(err)
	}
	if len(files.Reports) != 2 || filepath.Base(files.Reports[1]) != "epp-routing-report.yaml" {
		t.Fatalf("reports = %v", files.Reports)
	}
	junit, err := os.ReadFile(files.JUnit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`tests="3"`, `failures="1"`, `skipped="0"`, "Prefix", "picked 127.0.10.2:8000", `name="eppkit.notSupported" value="Queue"`} {
		if !strings.Contains(string(junit), want) {
			t.Errorf("junit lacks %q", want)
		}
	}
	meta.Implementation.Contact = nil
	if _, err := WriteReports(dir, meta, nil, meta.Date, judge(meta, nil)); err == nil || !strings.Contains(err.Error(), "contact") {
		t.Fatalf("missing contact accepted: %v", err)
	}
}

func TestCatalogue(t *testing.T) {
	ct := fakeTest("Prefix", ProfileEPPRouting, LevelUpstream, FeaturePrefixCacheAffinity)
	ct.Preconditions = []string{"prefix-cache-scorer | enabled"}
	md := Catalogue([]ConformanceTest{ct})
	for _, want := range []string{"## Profile EPP-Routing (1 tests)", "| PrefixCacheAffinity | Prefix | upstream |",
		`prefix-cache-scorer \| enabled`,
		"`eppkit conformance --target reference --profiles EPP-Routing --run-test Prefix --supported-features PrefixCacheAffinity --config-file manifests/epp-configs/conformance.yaml`",
		"## Profile EPP (0 tests)"} {
		if !strings.Contains(md, want) {
			t.Errorf("catalogue lacks %q:\n%s", want, md)
		}
	}
}

func TestRunner(t *testing.T) {
	var order []string
	tests := []ConformanceTest{
		{ShortName: "Fatal", Profile: ProfileEPP, Level: LevelMUST, Run: func(t harness.TestingT, _ *harness.Suite) {
			t.Cleanup(func() { order = append(order, "cleanup1") })
			t.Cleanup(func() { order = append(order, "cleanup2") })
			t.Fatalf("stop at %d", 1)
			order = append(order, "after fatal")
		}},
		{ShortName: "Panics", Profile: ProfileEPP, Level: LevelMUST, Run: func(harness.TestingT, *harness.Suite) { panic("boom") }},
		{ShortName: "Errors", Profile: ProfileEPP, Level: LevelMUST, Run: func(t harness.TestingT, _ *harness.Suite) {
			t.Errorf("first")
			t.Errorf("second")
			if !t.Failed() {
				panic("Failed() false after Errorf")
			}
		}},
		{ShortName: "Ok", Profile: ProfileEPP, Level: LevelMUST, Run: func(t harness.TestingT, _ *harness.Suite) { t.Logf("hello %s", t.Name()) }},
		{ShortName: "Gated", Profile: ProfileEPPRouting, Level: LevelUpstream, Features: []Feature{FeatureLoRAAffinity},
			Run: func(harness.TestingT, *harness.Suite) { panic("must not run") }},
		{ShortName: "Other", Profile: ProfileReference, Level: LevelEppkit, Run: func(harness.TestingT, *harness.Suite) { panic("must not run") }},
	}
	var progress strings.Builder
	r := &Runner{Selection: Selection{Profiles: []Profile{ProfileEPP, ProfileEPPRouting}}, Progress: &progress}
	res := r.Run(tests)
	got := map[string]Outcome{}
	for _, x := range res {
		got[x.Test.ShortName] = x.Outcome
	}
	want := map[string]Outcome{"Fatal": Failed, "Panics": Failed, "Errors": Failed, "Ok": Passed, "Gated": Skipped}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("outcomes (-want +got):\n%s", diff)
	}
	if !cmp.Equal(order, []string{"cleanup2", "cleanup1"}) {
		t.Errorf("cleanup order %v, want LIFO and nothing after Fatalf", order)
	}
	if res[0].Message != "stop at 1" || !strings.Contains(res[1].Message, "panic: boom") || res[2].Message != "first" {
		t.Errorf("messages: %q %q %q", res[0].Message, res[1].Message, res[2].Message)
	}
	if !strings.Contains(res[3].Log, "hello Ok") {
		t.Errorf("log = %q", res[3].Log)
	}
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	// Gated's feature is not claimed: not supported, counted in the profile line only, no line
	// of its own.
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "FAIL  EPP/Fatal") || !strings.HasPrefix(lines[3], "PASS  EPP/Ok") ||
		strings.Contains(progress.String(), "Gated") {
		t.Errorf("progress:\n%s", progress.String())
	}
}

func TestRunnerTimeout(t *testing.T) {
	s := &harness.Suite{Timeouts: harness.DefaultTimeoutConfig()}
	s.Timeouts.TestTimeout = harness.Duration(50 * time.Millisecond)
	release := make(chan struct{})
	defer close(release)
	r := &Runner{Suite: s, Selection: Selection{Profiles: []Profile{ProfileEPP}}}
	res := r.Run([]ConformanceTest{{ShortName: "Hangs", Profile: ProfileEPP, Level: LevelMUST,
		Run: func(harness.TestingT, *harness.Suite) { <-release }}})
	if res[0].Outcome != Failed || !strings.Contains(res[0].Message, "did not finish within 50ms") {
		t.Fatalf("result %+v", res[0])
	}
}

// TestRunnerAbort: closing Abort (a second Ctrl-C) ends the hanging test at once as an interrupted
// skip, far before its testTimeout.
func TestRunnerAbort(t *testing.T) {
	s := &harness.Suite{Timeouts: harness.DefaultTimeoutConfig()} // testTimeout 3 min
	release := make(chan struct{})
	defer close(release)
	abort := make(chan struct{})
	time.AfterFunc(100*time.Millisecond, func() { close(abort) })
	r := &Runner{Suite: s, Selection: Selection{Profiles: []Profile{ProfileEPP}}, Abort: abort}
	start := time.Now()
	res := r.Run([]ConformanceTest{{ShortName: "Hangs", Profile: ProfileEPP, Level: LevelMUST,
		Run: func(harness.TestingT, *harness.Suite) { <-release }}})
	if res[0].Outcome != Skipped || !res[0].Interrupted || res[0].Message != AbandonedMessage || time.Since(start) > time.Minute {
		t.Fatalf("result %+v after %s, want an interrupted skip right after the abort", res[0], time.Since(start))
	}
}

func TestRegisterAll(t *testing.T) {
	before := len(All())
	name := "ZzRegistryProbe"
	Register(fakeTest(name, ProfileReference, LevelEppkit))
	defer func() {
		registryMu.Lock()
		delete(registry, name)
		registryMu.Unlock()
	}()
	all := All()
	if len(all) != before+1 {
		t.Fatalf("All() has %d, want %d", len(all), before+1)
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if profileIndex(a.Profile) > profileIndex(b.Profile) || (a.Profile == b.Profile && a.ShortName >= b.ShortName) {
			t.Fatalf("All() not sorted at %d: %s/%s then %s/%s", i, a.Profile, a.ShortName, b.Profile, b.ShortName)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("duplicate Register did not panic")
		}
	}()
	Register(fakeTest(name, ProfileReference, LevelEppkit))
}

func TestRunnerTargetDied(t *testing.T) {
	// harness.Suite.TargetDown's message stands in for a target that stopped answering: the test
	// that saw it fails, no later test runs, and the verdict is one diagnosis with exit 2.
	died := errors.New("the target stopped answering: its ext_proc address 127.0.0.1:1 refused connections for 5s\n" +
		"--- last lines of the target log (t.log) ---\ndying words")
	var ran []string
	down := false
	sel := Selection{Profiles: []Profile{ProfileEPP}}
	r := &Runner{Suite: &harness.Suite{Timeouts: harness.DefaultTimeoutConfig()}, Selection: sel,
		downForTest: func(probe bool) error {
			if down && probe {
				return died
			}
			return nil
		}}
	test := func(name string, fail bool) ConformanceTest {
		return ConformanceTest{ShortName: name, Profile: ProfileEPP, Level: LevelMUST, Run: func(t harness.TestingT, _ *harness.Suite) {
			ran = append(ran, name)
			if fail {
				down = true
				t.Fatalf("dial the target: connection refused")
			}
		}}
	}
	res := r.Run([]ConformanceTest{test("First", false), test("Dies", true), test("Third", false), test("Fourth", false)})
	if !slices.Equal(ran, []string{"First", "Dies"}) {
		t.Fatalf("ran %v, want First and Dies only", ran)
	}
	if res[1].Outcome != Failed || res[2].Outcome != Skipped || !res[2].Interrupted || res[2].Message != TargetStoppedMessage ||
		res[3].Message != TargetStoppedMessage {
		t.Fatalf("results %+v", res)
	}
	v := Judge(JudgeInput{Selection: sel, TargetDown: r.Stopped().Error()}, res)
	if v.ExitCode != ExitHarness || !strings.Contains(v.Reason, "dying words") || !strings.Contains(v.Reason, "2 tests ran, 2 did not run") {
		t.Fatalf("verdict %d %q, want exit 2 with the diagnosis", v.ExitCode, v.Reason)
	}
	if l := InterruptionLine(res); !strings.Contains(l, "STOPPED (the target stopped answering)") {
		t.Errorf("line %q", l)
	}

	// A process target found exited before a test: nothing more runs, no test fails for it.
	ran = nil
	r = &Runner{Selection: sel, downForTest: func(bool) error { return died }}
	res = r.Run([]ConformanceTest{test("Any", false)})
	if len(ran) != 0 || res[0].Outcome != Skipped || !res[0].Interrupted || r.Stopped() == nil {
		t.Fatalf("ran=%v result %+v", ran, res[0])
	}
}

// Claiming fewer features keeps a profile's result success (gateway-api's NOT_SUPPORTED); a test
// skipped for another reason (here --skip-tests, and a precondition) still makes it partial.
func TestReportUnsupportedIsNotPartial(t *testing.T) {
	meta := sampleMeta()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	res := []TestResult{
		{Test: fakeTest("Prefix", ProfileEPPRouting, LevelUpstream, FeaturePrefixCacheAffinity), Outcome: Passed, Start: now},
		{Test: fakeTest("Queue", ProfileEPPRouting, LevelUpstream, FeatureQueueAwareness), Outcome: Skipped, Start: now},
	}
	ext := BuildReport(ProfileEPPRouting, meta, res, judge(meta, res)).ProfileReports[0].Extended
	if ext.Result != confv1.Success || ext.Statistics != (confv1.Statistics{Passed: 1}) || len(ext.SkippedTests) != 0 {
		t.Errorf("unsupported feature only: extended = %+v, want success with 1 passed and nothing skipped", ext.Status)
	}
	meta.Selection.SkipTests = []string{"Queue"}
	meta.Selection.SupportedFeatures = append(meta.Selection.SupportedFeatures, FeatureQueueAwareness)
	ext = BuildReport(ProfileEPPRouting, meta, res, judge(meta, res)).ProfileReports[0].Extended
	if ext.Result != confv1.Partial || ext.Statistics.Skipped != 1 {
		t.Errorf("--skip-tests: extended = %+v, want partial with 1 skipped", ext.Status)
	}
	meta.Selection.SkipTests = nil
	ext = BuildReport(ProfileEPPRouting, meta, res, judge(meta, res)).ProfileReports[0].Extended
	if ext.Result != confv1.Partial || ext.Statistics.Skipped != 1 {
		t.Errorf("claimed but skipped (precondition): extended = %+v, want partial with 1 skipped", ext.Status)
	}
}

// judge is the verdict of a run of meta's selection without expected failures or interruption.
func judge(meta ReportMeta, res []TestResult) Verdict {
	return Judge(JudgeInput{Selection: meta.Selection}, res)
}
