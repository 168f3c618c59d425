package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWritePublication(t *testing.T) {
	root := t.TempDir()
	meta := sampleMeta()
	meta.Implementation.Organization, meta.Implementation.Project = "EPP Kit", "Reference EPP"
	meta.Implementation.Version = "v0.1.0-3-gabc/dirty"
	repro := []string{"make build", "./bin/eppkit conformance --target reference --publish-dir out/publish"}
	files, err := WritePublication(root, meta, sampleResults(), repro, judge(meta, sampleResults()))
	if err != nil {
		t.Fatal(err)
	}
	wantDir := filepath.Join(root, "v1.6.2", "epp", "epp-kit-reference-epp")
	if files.Dir != wantDir {
		t.Fatalf("Dir = %q, want %q", files.Dir, wantDir)
	}
	var names []string
	for _, p := range files.Reports {
		names = append(names, filepath.Base(p))
	}
	want := []string{"standard-v0.1.0-3-gabc-dirty-default-epp-report.yaml", "standard-v0.1.0-3-gabc-dirty-default-epp-routing-report.yaml"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("report names (-want +got):\n%s", diff)
	}
	// The published report is the same report WriteReports writes, channel included.
	b, err := os.ReadFile(files.Reports[1])
	if err != nil {
		t.Fatal(err)
	}
	rep, err := UnmarshalReport(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(BuildReport(ProfileEPPRouting, meta, sampleResults(), judge(meta, sampleResults())), rep); diff != "" {
		t.Errorf("published report (-built +read):\n%s", diff)
	}
	if rep.GatewayAPIInferenceExtensionChannel != "standard" {
		t.Errorf("channel = %q", rep.GatewayAPIInferenceExtensionChannel)
	}
	readme, err := os.ReadFile(files.README)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"# Reference EPP (EPP Profile Conformance) - v1.6.2",
		"| Extension Channel | Extension Version Tested | Profile Tested | Implementation Version | Mode | Report | Status |",
		"| standard | v1.6.2 | EPP | [v0.1.0-3-gabc/dirty](https://example.com) | default | [standard-v0.1.0-3-gabc-dirty-default-epp-report.yaml](./standard-v0.1.0-3-gabc-dirty-default-epp-report.yaml) | success (2 passed, 0 failed, 0 skipped, 0 not supported) |",
		"| EPP-Routing | ", "| failure (0 passed, 1 failed, 0 skipped, 1 not supported) |",
		"Supported features: PrefixCacheAffinity.",
		"Failed tests: Prefix (EPP-Routing).",
		"## Reproduce",
		"```sh\nmake build\n./bin/eppkit conformance --target reference --publish-dir out/publish\n```",
	} {
		if !strings.Contains(string(readme), s) {
			t.Errorf("README lacks %q:\n%s", s, readme)
		}
	}

	meta.Implementation.Version = "///"
	if _, err := WritePublication(root, meta, nil, nil, judge(meta, nil)); err == nil || !strings.Contains(err.Error(), "--version") {
		t.Errorf("a version with no letters or digits: err = %v", err)
	}
	meta.Implementation.URL = ""
	if _, err := WritePublication(root, meta, nil, nil, judge(meta, nil)); err == nil || !strings.Contains(err.Error(), "--url") {
		t.Errorf("missing url: err = %v", err)
	}
}

func TestPublishImplementationDir(t *testing.T) {
	for _, tc := range []struct{ org, project, want string }{
		{"eppkit", "reference-epp", "eppkit-reference-epp"},
		{"kubernetes-sigs", "gateway-api-inference-extension", "kubernetes-sigs-gateway-api-inference-extension"},
		{"istio", "istio", "istio"},
		{"llm-d", "llm-d-inference-scheduler", "llm-d-inference-scheduler"},
	} {
		m := ReportMeta{}
		m.Implementation.Organization, m.Implementation.Project = tc.org, tc.project
		if got := PublishImplementationDir(m); got != tc.want {
			t.Errorf("PublishImplementationDir(%q, %q) = %q, want %q", tc.org, tc.project, got, tc.want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"--profiles":              "--profiles",
		"EPP,EPP-Routing":         "EPP,EPP-Routing",
		"KUBECONFIG={{.X}} exec":  "'KUBECONFIG={{.X}} exec'",
		"it's":                    `'it'\''s'`,
		"":                        "''",
		"https://x.io/a?b=c":      "'https://x.io/a?b=c'",
		"out/reports/v1.6.2/epp/": "out/reports/v1.6.2/epp/",
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestExpectedFailures(t *testing.T) {
	tests := []ConformanceTest{
		fakeTest("PickHeader", ProfileEPP, LevelMUST), fakeTest("Served", ProfileEPP, LevelMUST),
		fakeTest("Prefix", ProfileEPPRouting, LevelUpstream, FeaturePrefixCacheAffinity),
		fakeTest("Queue", ProfileEPPRouting, LevelUpstream, FeatureQueueAwareness),
		fakeTest("Survives", ProfileReference, LevelEppkit),
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok.txt", "# upstream v1.5.0\nPrefix   # no prefix scorer\n\nSurvives # ends the stream\n")
	ef, err := LoadExpectedFailures(ok, tests)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Prefix", "Survives"}, ef.Tests); diff != "" {
		t.Fatalf("Tests (-want +got):\n%s", diff)
	}
	for name, tc := range map[string]struct{ body, wantErr string }{
		"unknown.txt": {"Prefix\nNope\n", "unknown.txt:2: no test named \"Nope\""},
		"twice.txt":   {"Prefix\nPrefix # again\n", "twice.txt:2: Prefix listed twice"},
		"two.txt":     {"Prefix Queue\n", "two.txt:1: one ShortName per line"},
	} {
		if _, err := LoadExpectedFailures(write(name, tc.body), tests); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.wantErr)
		}
	}
	if _, err := LoadExpectedFailures(filepath.Join(dir, "missing.txt"), tests); err == nil || !strings.Contains(err.Error(), "--expect-failures") {
		t.Errorf("missing file: err = %v", err)
	}

	all := Selection{Profiles: []Profile{ProfileEPP, ProfileEPPRouting, ProfileReference}}
	res := func(outcomes map[string]Outcome) []TestResult {
		var out []TestResult
		for _, ct := range tests {
			if o, ok := outcomes[ct.ShortName]; ok {
				r := TestResult{Test: ct, Outcome: o}
				if o == Skipped {
					r.Message = "the EPP cannot be configured for it"
				}
				out = append(out, r)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		sel      Selection
		outcomes map[string]Outcome
		want     ExpectationDiff
	}{
		{"exactly the expected", all, map[string]Outcome{"PickHeader": Passed, "Prefix": Failed, "Queue": Passed, "Survives": Failed}, ExpectationDiff{}},
		{"a new failure", all, map[string]Outcome{"PickHeader": Failed, "Prefix": Failed, "Survives": Failed},
			ExpectationDiff{UnexpectedFailures: []string{"PickHeader"}}},
		{"an explained failure now passes", all, map[string]Outcome{"Prefix": Passed, "Survives": Failed},
			ExpectationDiff{NoLongerFailing: []string{"Prefix"}}},
		{"an explained failure is skipped: its own line, not a change", all, map[string]Outcome{"Prefix": Skipped, "Survives": Failed, "Served": Failed},
			ExpectationDiff{UnexpectedFailures: []string{"Served"}, ListedButSkipped: []string{"Prefix (the EPP cannot be configured for it)"}}},
		{"--run-test narrows the list to the test that ran", Selection{Profiles: all.Profiles, RunTest: "Survives"},
			map[string]Outcome{"Prefix": Skipped, "Survives": Failed}, ExpectationDiff{}},
		{"--skip-tests leaves a listed test unchecked", Selection{Profiles: all.Profiles, SkipTests: []string{"Prefix"}},
			map[string]Outcome{"Prefix": Skipped, "Survives": Failed}, ExpectationDiff{}},
		{"profiles outside the run are ignored", Selection{Profiles: []Profile{ProfileEPPRouting}},
			map[string]Outcome{"Prefix": Failed, "Survives": Passed}, ExpectationDiff{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := ef.Compare(tc.sel, res(tc.outcomes))
			if diff := cmp.Diff(tc.want, d); diff != "" {
				t.Fatalf("Compare (-want +got):\n%s", diff)
			}
			if d.Matched() != (len(tc.want.UnexpectedFailures)+len(tc.want.NoLongerFailing) == 0) {
				t.Errorf("Matched = %v for %+v", d.Matched(), d)
			}
			if !d.Matched() && !strings.Contains(d.String(), "expected") {
				t.Errorf("String = %q", d.String())
			}
		})
	}
}
