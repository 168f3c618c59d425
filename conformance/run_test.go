package conformance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"

	"github.com/eppkit/eppkit/conformance/harness"
)

// withTests registers tests for one test and removes them at its end (this package's tests run
// without conformance/tests).
func withTests(t *testing.T, tests ...ConformanceTest) {
	t.Helper()
	for _, ct := range tests {
		Register(ct)
	}
	t.Cleanup(func() {
		registryMu.Lock()
		defer registryMu.Unlock()
		for _, ct := range tests {
			delete(registry, ct.ShortName)
		}
	})
}

func TestOptionsValidate(t *testing.T) {
	if err := (Options{Target: "address", Address: "127.0.0.1:1"}).Validate(); err == nil ||
		!strings.Contains(err.Error(), `import _ "github.com/eppkit/eppkit/conformance/tests"`) {
		t.Fatalf("no tests registered: %v, want an error saying what to import", err)
	}
	withTests(t, fakeTest("RunProbeCore", ProfileEPP, LevelMUST), fakeTest("RunProbePrefix", ProfileEPPRouting, LevelUpstream, FeaturePrefixCacheAffinity))
	dir := t.TempDir()
	addr := Options{Target: "address", Address: "127.0.0.1:1"}
	with := func(f func(*Options)) Options { o := addr; f(&o); return o }
	for _, tc := range []struct {
		name string
		o    Options
		want string // substring of the error; "" = valid
	}{
		{"valid", addr, ""},
		{"all features", with(func(o *Options) { o.AllFeatures = true }), ""},
		{"no target", Options{}, "Target (--target): required"},
		{"unknown target", Options{Target: "nope"}, "--target: unknown target"},
		{"address missing", with(func(o *Options) { o.Address = "" }), "--address"},
		{"command with address target", with(func(o *Options) { o.Command = "x" }), "--command"},
		{"unknown source", with(func(o *Options) { o.EndpointSource = "dns" }), "--endpoint-source"},
		{"unknown profile", with(func(o *Options) { o.Profiles = []Profile{"Gateway"} }), "--profiles"},
		{"unknown feature", with(func(o *Options) { o.SupportedFeatures = []Feature{"Teleport"} }), "--supported-features"},
		{"unknown test", with(func(o *Options) { o.RunTest = "NoSuchTest" }), "--run-test"},
		{"run-test of a feature not claimed", with(func(o *Options) { o.RunTest = "RunProbePrefix" }),
			"--run-test RunProbePrefix cannot run: feature PrefixCacheAffinity is not claimed: add it to --supported-features"},
		{"run-test of a claimed feature", with(func(o *Options) {
			o.RunTest, o.SupportedFeatures = "RunProbePrefix", []Feature{FeaturePrefixCacheAffinity}
		}), ""},
		{"run-test of a profile not selected", with(func(o *Options) { o.RunTest, o.Profiles = "RunProbeCore", []Profile{ProfileEPPRouting} }),
			"its profile EPP is not selected (--profiles EPP-Routing): add EPP to --profiles"},
		{"run-test of an exempt feature", with(func(o *Options) {
			o.RunTest, o.SupportedFeatures, o.ExemptFeatures = "RunProbePrefix", []Feature{FeaturePrefixCacheAffinity}, []Feature{FeaturePrefixCacheAffinity}
		}), "is exempt"},
		{"skip-tests of a test that would not run", with(func(o *Options) { o.SkipTests = []string{"RunProbePrefix"} }),
			"--skip-tests RunProbePrefix: it would not run anyway (feature PrefixCacheAffinity is not claimed)"},
		{"skip-tests outside --run-test", with(func(o *Options) { o.RunTest, o.SkipTests = "RunProbeCore", []string{"RunProbePrefix"} }),
			"--skip-tests RunProbePrefix: it would not run anyway"},
		{"publish without a reproduction", with(func(o *Options) { o.PublishDir = dir }), "--publish-dir: Options.Reproduce is empty"},
		{"publish a narrowed run", with(func(o *Options) { o.PublishDir, o.RunTest, o.Reproduce = dir, "RunProbeCore", []string{"x"} }),
			"--publish-dir: a publication must be a full run"},
		{"Endpoints with the apiserver source", Options{Target: "command", Command: "my-epp --endpoints {{.Endpoints}}", EndpointSource: "apiserver"},
			"{{.Endpoints}} is empty with --endpoint-source apiserver"},
		{"ModelRewritesFile with the apiserver source", Options{Target: "command", Command: "my-epp --model-rewrites {{.ModelRewritesFile}}", EndpointSource: "apiserver"},
			"{{.ModelRewritesFile}} is empty with --endpoint-source apiserver"},
		{"bad timeouts", with(func(o *Options) { o.Timeouts.Poll = -1 }), "Timeouts (--timeout-config)"},
		{"bad tls", with(func(o *Options) { o.TargetTLS = "maybe" }), "--target-tls"},
		{"bad health tls", with(func(o *Options) { o.TargetHealthTLS = "maybe" }), "--target-health-tls"},
		{"bad probe", with(func(o *Options) { o.ReadinessProbe = "ping" }), "--readiness-probe"},
		{"missing config", with(func(o *Options) { o.ConfigFile = filepath.Join(dir, "none.yaml") }), "--config-file"},
		{"fleet size", with(func(o *Options) { o.FleetSize = 251 }), "--fleet-size"},
		{"fleet", with(func(o *Options) { o.Fleet = "real" }), "--fleet"},
		{"report without implementation", with(func(o *Options) { o.ReportDir = dir }), "--report-output needs"},
	} {
		err := tc.o.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var ee *ExitError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ee) || ee.Code != ExitBadOptions {
			t.Errorf("%s: error %v, want exit %d naming %q", tc.name, err, ExitBadOptions, tc.want)
		}
	}
}

// TestRunRefusesNothingToRun: a selection under which no test runs is never green on nothing: Run
// refuses it before anything starts (exit 3, naming what to add) and writes nothing.
func TestRunRefusesNothingToRun(t *testing.T) {
	withTests(t, fakeTest("RunProbeCore", ProfileEPP, LevelMUST), fakeTest("RunProbePrefix", ProfileEPPRouting, LevelUpstream, FeaturePrefixCacheAffinity))
	dir := t.TempDir()
	var out strings.Builder
	o := Options{Target: "address", Address: "127.0.0.1:1", Profiles: []Profile{ProfileEPP, ProfileEPPRouting}, SkipTests: []string{"RunProbeCore"},
		ReportDir: filepath.Join(dir, "reports"), ResultsFile: filepath.Join(dir, "results.json"), Out: &out,
		Implementation: confv1.Implementation{Organization: "o", Project: "p", URL: "u", Version: "v", Contact: []string{"c"}}}
	_, err := Run(context.Background(), o)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitBadOptions || !strings.Contains(err.Error(), "no test runs") ||
		!strings.Contains(err.Error(), "--supported-features") {
		t.Fatalf("Run: %v, want exit %d saying no test runs and what to claim", err, ExitBadOptions)
	}
	for _, f := range []string{o.ReportDir, o.ResultsFile} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s written for a refused run (%v)", f, err)
		}
	}
	if strings.Contains(out.String(), "harness ready") {
		t.Errorf("a harness started:\n%s", out.String())
	}
}

// TestRunWritesReportsWhenNotReady: a target that starts but never gets ready (a command that
// serves nothing) ends the run with exit 2 and still writes every report, each selected test
// reported not run, the verdict naming the readiness phase.
func TestRunWritesReportsWhenNotReady(t *testing.T) {
	withTests(t, fakeTest("ReadyProbeCore", ProfileEPP, LevelMUST), fakeTest("ReadyProbePrefix", ProfileEPPRouting, LevelUpstream, FeaturePrefixCacheAffinity))
	dir := t.TempDir()
	to := harness.DefaultTimeoutConfig()
	to.TargetReady = harness.Duration(2 * time.Second)
	var out strings.Builder
	o := Options{Target: "command", Command: "sleep 30", Profiles: []Profile{ProfileEPP, ProfileEPPRouting},
		SupportedFeatures: []Feature{FeaturePrefixCacheAffinity}, Timeouts: to, LogDir: filepath.Join(dir, "log"),
		ReportDir: filepath.Join(dir, "reports"), ResultsFile: filepath.Join(dir, "results.json"), Out: &out,
		Implementation: confv1.Implementation{Organization: "o", Project: "p", URL: "u", Version: "v", Contact: []string{"c"}}}
	_, err := Run(context.Background(), o)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitHarness || !strings.Contains(err.Error(), "readiness") {
		t.Fatalf("Run: %v, want exit %d naming the readiness phase", err, ExitHarness)
	}
	junit := mustRead(t, filepath.Join(o.ReportDir, "junit.xml"))
	for _, want := range []string{`tests="2"`, `skipped="2"`, "not run: the harness could not start", `name="eppkit.exitCode" value="2"`, "readiness"} {
		if !strings.Contains(junit, want) {
			t.Errorf("junit.xml lacks %q:\n%s", want, junit)
		}
	}
	for _, f := range []string{"epp-report.yaml", "epp-routing-report.yaml", "summary.md"} {
		if _, err := os.Stat(filepath.Join(o.ReportDir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(mustRead(t, filepath.Join(o.ReportDir, "summary.md")), "NOT STARTED (the harness could not start)") {
		t.Errorf("summary.md does not say the harness could not start")
	}
	rf, err := ReadResultsFile(o.ResultsFile)
	if err != nil || rf.ExitCode != ExitHarness || len(rf.Tests) != 2 || !strings.Contains(rf.Error, "readiness") {
		t.Errorf("results file: %+v, %v", rf, err)
	}
}

// TestFormerNamesResolve: a renamed test answers to its former name in --run-test and
// --skip-tests, with a warning naming the new name.
func TestFormerNamesResolve(t *testing.T) {
	renamed := fakeTest("NewName", ProfileEPP, LevelMUST)
	renamed.FormerNames = []string{"OldName"}
	withTests(t, renamed, fakeTest("Other", ProfileEPP, LevelMUST))
	p, err := Options{Target: "address", Address: "127.0.0.1:1", RunTest: "OldName"}.plan()
	if err != nil || p.sel.RunTest != "NewName" || len(p.warnings) != 1 || !strings.Contains(p.warnings[0], "now named NewName") {
		t.Fatalf("--run-test OldName: %v, selection %q, warnings %q", err, p.sel.RunTest, p.warnings)
	}
	p, err = Options{Target: "address", Address: "127.0.0.1:1", SkipTests: []string{"OldName"}}.plan()
	if err != nil || p.sel.SkipTests[0] != "NewName" || len(p.warnings) != 1 {
		t.Fatalf("--skip-tests OldName: %v, selection %q, warnings %q", err, p.sel.SkipTests, p.warnings)
	}
	if n, was := ResolveName(All(), "Other"); n != "Other" || was {
		t.Errorf("ResolveName(Other) = %s %v", n, was)
	}
}

// TestPublicationWarnings: a publication from an eppkit or an EPP without a version is warned
// about by name.
func TestPublicationWarnings(t *testing.T) {
	withTests(t, fakeTest("PubProbe", ProfileEPP, LevelMUST))
	o := Options{Target: "address", Address: "127.0.0.1:1", PublishDir: t.TempDir(), Reproduce: []string{"eppkit conformance ..."},
		Implementation: confv1.Implementation{Organization: "o", Project: "p", URL: "u", Version: "dev", Contact: []string{"c"}}}
	p, err := o.plan()
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(p.warnings, "\n")
	if !strings.Contains(joined, `--version "dev" names no release of your EPP`) {
		t.Errorf("warnings %q lack the EPP version", joined)
	}
	if v := p.meta.EppkitVersion; (v == "dev" || v == "(devel)") != strings.Contains(joined, "this eppkit has no version") {
		t.Errorf("eppkit version %q, warnings %q", v, joined)
	}
}
