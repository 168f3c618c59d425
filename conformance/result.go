package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Outcome is what happened to one test in a run.
type Outcome string

const (
	// Passed: the test ran and no check failed.
	Passed Outcome = "passed"
	// Failed: a check failed, the test panicked or timed out.
	Failed Outcome = "failed"
	// Skipped: the test did not run; TestResult.Message says why.
	Skipped Outcome = "skipped"
)

// TestResult is the outcome of one test.
type TestResult struct {
	// Test is the registry entry.
	Test ConformanceTest
	// Outcome is passed, failed or skipped.
	Outcome Outcome
	// Message is the first failure message (Failed) or the skip reason (Skipped).
	Message string
	// Log is everything the test logged (Logf, Errorf, Fatalf), in order.
	Log string
	// Start is when the test started; Duration how long it ran.
	Start    time.Time
	Duration time.Duration
	// Interrupted marks a Skipped test that did not run because the run was interrupted
	// (Ctrl-C or SIGTERM) before its turn, or stopped because the target stopped answering;
	// Message is then InterruptedMessage, AbandonedMessage or TargetStoppedMessage. Reports count it
	// as skipped (a partial result, as gateway-api counts any skip) and say the run was
	// interrupted.
	Interrupted bool
}

// InterruptedMessage is the skip reason of a test that did not run because the run was
// interrupted.
const InterruptedMessage = "run interrupted (Ctrl-C or SIGTERM) before this test"

// Selection is the part of a run's flags that decides which tests run (the gateway-api
// conformance skip rules).
type Selection struct {
	// Profiles are the profiles to run and report; tests of other profiles are not reported.
	Profiles []Profile
	// SupportedFeatures are the extended features the implementation claims.
	SupportedFeatures []Feature
	// ExemptFeatures are features whose tests are skipped even when supported.
	ExemptFeatures []Feature
	// SkipTests are ShortNames to skip.
	SkipTests []string
	// RunTest, when set, runs only the test with this ShortName.
	RunTest string
}

// Validate checks every name against the registry and the known profiles and features; the error
// names the flag.
func (sel Selection) Validate(tests []ConformanceTest) error {
	if len(sel.Profiles) == 0 {
		return fmt.Errorf("--profiles: at least one profile is required (have %v)", Profiles)
	}
	for _, p := range sel.Profiles {
		if profileIndex(p) == len(Profiles) {
			return fmt.Errorf("--profiles: unknown profile %q (have %v)", p, Profiles)
		}
	}
	for _, fs := range []struct {
		flag string
		fs   []Feature
	}{{"--supported-features", sel.SupportedFeatures}, {"--exempt-features", sel.ExemptFeatures}} {
		for _, f := range fs.fs {
			if !knownFeature(f) {
				return fmt.Errorf("%s: unknown feature %q (have %v)", fs.flag, f, AllFeatures)
			}
		}
	}
	names := map[string]bool{}
	for _, ct := range tests {
		names[ct.ShortName] = true
	}
	for _, n := range sel.SkipTests {
		if !names[n] {
			return fmt.Errorf("--skip-tests: no test named %q", n)
		}
	}
	if sel.RunTest != "" && !names[sel.RunTest] {
		return fmt.Errorf("--run-test: no test named %q", sel.RunTest)
	}
	return sel.checkRunnable(tests)
}

// checkRunnable refuses a selection that would be green on nothing: a --run-test test that
// cannot run under the claimed profiles and features, a --skip-tests name that would not run
// anyway, or a selection under which no test runs. Each error says why and what to add.
func (sel Selection) checkRunnable(tests []ConformanceTest) error {
	find := func(name string) ConformanceTest {
		for _, ct := range tests {
			if ct.ShortName == name {
				return ct
			}
		}
		return ConformanceTest{}
	}
	// blocked is why ct would not run apart from --run-test and --skip-tests, with the fix.
	blocked := func(ct ConformanceTest) string {
		if !sel.Selected(ct) {
			return fmt.Sprintf("its profile %s is not selected (--profiles %s): add %s to --profiles", ct.Profile,
				profileList(sel.Profiles), ct.Profile)
		}
		exempt, missing := sel.featureGaps(ct)
		if len(exempt) > 0 {
			return fmt.Sprintf("feature %s is exempt (--exempt-features): remove it from --exempt-features", strings.Join(exempt, ", "))
		}
		if len(missing) > 0 {
			return fmt.Sprintf("feature %s is not claimed: add it to --supported-features (or use --all-features), "+
				"and configure your EPP for it (the catalogue's Preconditions)", strings.Join(missing, ", "))
		}
		return ""
	}
	if sel.RunTest != "" {
		if slices.Contains(sel.SkipTests, sel.RunTest) {
			return fmt.Errorf("--run-test %s: it is also in --skip-tests, so nothing would run", sel.RunTest)
		}
		if why := blocked(find(sel.RunTest)); why != "" {
			return fmt.Errorf("--run-test %s cannot run: %s", sel.RunTest, why)
		}
	}
	for _, n := range sel.SkipTests {
		ct := find(n)
		why := blocked(ct)
		if why == "" && sel.RunTest != "" && sel.RunTest != n {
			why = "only " + sel.RunTest + " runs (--run-test)"
		}
		if why != "" {
			why, _, _ = strings.Cut(why, ":")
			return fmt.Errorf("--skip-tests %s: it would not run anyway (%s); remove it from --skip-tests", n, why)
		}
	}
	for _, ct := range tests {
		if sel.SkipReason(ct) == "" {
			return nil
		}
	}
	return fmt.Errorf("no test runs with --profiles %s, --supported-features %s: every test of these profiles is skipped "+
		"or needs a feature not claimed; add profiles or claim features (--supported-features, --all-features)",
		profileList(sel.Profiles), featureList(sel.SupportedFeatures))
}

func profileList(ps []Profile) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ",")
}

// Selected reports whether the test's profile is selected (only those tests are reported).
func (sel Selection) Selected(ct ConformanceTest) bool {
	return slices.Contains(sel.Profiles, ct.Profile)
}

// SkipReason returns why the test must not run, or "" when it runs. Order: profile, --run-test,
// --skip-tests, exempt features, unsupported features.
func (sel Selection) SkipReason(ct ConformanceTest) string {
	if !sel.Selected(ct) {
		return fmt.Sprintf("profile %s is not selected (--profiles)", ct.Profile)
	}
	if sel.RunTest != "" && sel.RunTest != ct.ShortName {
		return fmt.Sprintf("only %s runs (--run-test)", sel.RunTest)
	}
	if slices.Contains(sel.SkipTests, ct.ShortName) {
		return "skipped by --skip-tests"
	}
	exempt, missing := sel.featureGaps(ct)
	if len(exempt) > 0 {
		return "feature " + strings.Join(exempt, ", ") + " is exempt (--exempt-features)"
	}
	if len(missing) > 0 {
		return "feature " + strings.Join(missing, ", ") + " is not in --supported-features"
	}
	return ""
}

// NotSupported reports whether the test does not run only because a feature it needs is not in
// --supported-features (SkipReason's last reason). Reports count such tests nowhere, as
// gateway-api's conformance suite does with its NOT_SUPPORTED results
// (kubernetes-sigs/gateway-api conformance/utils/suite/reports.go, addTestResults): claiming
// fewer features leaves a profile's result success, not partial; the features are listed as
// unsupported instead.
func (sel Selection) NotSupported(ct ConformanceTest) bool {
	if !sel.Selected(ct) || (sel.RunTest != "" && sel.RunTest != ct.ShortName) || slices.Contains(sel.SkipTests, ct.ShortName) {
		return false
	}
	exempt, missing := sel.featureGaps(ct)
	return len(exempt) == 0 && len(missing) > 0
}

// featureGaps splits the test's features the selection does not run into exempt ones and ones
// not claimed.
func (sel Selection) featureGaps(ct ConformanceTest) (exempt, missing []string) {
	for _, f := range ct.Features {
		if slices.Contains(sel.ExemptFeatures, f) {
			exempt = append(exempt, string(f))
		} else if !slices.Contains(sel.SupportedFeatures, f) {
			missing = append(missing, string(f))
		}
	}
	return exempt, missing
}

// ParseProfiles parses a comma list of profile names ("all" = every profile).
func ParseProfiles(s string) ([]Profile, error) {
	if strings.TrimSpace(s) == "all" {
		return slices.Clone(Profiles), nil
	}
	var out []Profile
	for _, p := range SplitList(s) {
		if profileIndex(Profile(p)) == len(Profiles) {
			return nil, fmt.Errorf("unknown profile %q (have %v or all)", p, Profiles)
		}
		out = append(out, Profile(p))
	}
	return out, nil
}

// ParseFeatures parses a comma list of feature names. "all" means every feature that at least
// one registered test covers: claiming a feature no test checks would put an untested feature
// into the report's supported list.
func ParseFeatures(s string) ([]Feature, error) {
	if strings.TrimSpace(s) == "all" {
		return TestedFeatures(), nil
	}
	var out []Feature
	for _, f := range SplitList(s) {
		if !knownFeature(Feature(f)) {
			return nil, fmt.Errorf("unknown feature %q (have %v or all)", f, AllFeatures)
		}
		out = append(out, Feature(f))
	}
	return out, nil
}

// SplitList splits a comma-separated list (a flag value), trimming blanks and dropping empty
// items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// TestedFeatures returns the features that at least one registered test covers, in the order of
// AllFeatures.
func TestedFeatures() []Feature {
	covered := map[Feature]bool{}
	for _, ct := range All() {
		for _, f := range ct.Features {
			covered[f] = true
		}
	}
	var out []Feature
	for _, f := range AllFeatures {
		if covered[f] {
			out = append(out, f)
		}
	}
	return out
}
