package conformance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
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
		{"publish a narrowed run", with(func(o *Options) { o.PublishDir, o.RunTest = dir, "RunProbeCore" }),
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
