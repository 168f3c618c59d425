package conformance

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/reporters"
	"github.com/onsi/ginkgo/v2/types"

	"github.com/eppkit/eppkit/conformance/harness"
)

// Labels returns a test's Ginkgo labels: its profile, its features and its level (DESIGN.md
// conventions), plus "provisional" when provisional.
func Labels(ct ConformanceTest) []string {
	out := []string{string(ct.Profile)}
	for _, f := range ct.Features {
		out = append(out, string(f))
	}
	out = append(out, string(ct.Level))
	if ct.Provisional {
		out = append(out, "provisional")
	}
	return out
}

// JUnitReport converts run results to a Ginkgo report (one spec per test, container = profile)
// so Ginkgo's own JUnit reporter writes the XML. The verdict decides each spec's state: a
// failure listed in --expect-failures is skipped with "expected failure: <message>", so a JUnit
// gate agrees with the exit code; a not-applicable test is skipped with its "not applicable:
// precondition not met: …" message; a test whose feature is not claimed is left out (counted
// nowhere, as in the ConformanceReport; JUnitVerdictProperties lists it), so junit.xml's skipped
// count is the reports' skipped count plus the expected failures. Failures carry the test's
// source location (its Run function) and time.
func JUnitReport(results []TestResult, start time.Time, description string, v Verdict) types.Report {
	rep := types.Report{
		SuitePath:        "github.com/eppkit/eppkit/conformance",
		SuiteDescription: description,
		StartTime:        start,
		EndTime:          time.Now(),
		SuiteSucceeded:   v.ExitCode == ExitPassed,
	}
	rep.RunTime = rep.EndTime.Sub(start)
	for _, r := range results {
		if v.Kind(r) == KindNotSupported {
			// Counted nowhere, as in the ConformanceReport: JUnit has no state for a test whose
			// feature is not claimed, and a skipped case would count it as skipped. The
			// eppkit.notSupported property lists them.
			continue
		}
		file, line := testLocation(r.Test)
		sr := types.SpecReport{
			ContainerHierarchyTexts: []string{string(r.Test.Profile)},
			LeafNodeText:            r.Test.ShortName,
			LeafNodeType:            types.NodeTypeIt,
			LeafNodeLabels:          Labels(r.Test),
			LeafNodeLocation:        types.CodeLocation{FileName: file, LineNumber: line},
			StartTime:               r.Start,
			EndTime:                 r.Start.Add(r.Duration),
			RunTime:                 r.Duration,
			CapturedStdOutErr:       r.Log,
			NumAttempts:             1,
		}
		failure := func(msg string) types.Failure {
			return types.Failure{Message: msg, FailureNodeType: types.NodeTypeIt, Location: sr.LeafNodeLocation,
				FailureNodeLocation: sr.LeafNodeLocation, TimelineLocation: types.TimelineLocation{Time: sr.EndTime}}
		}
		switch k := v.Kind(r); k {
		case KindPassed:
			sr.State = types.SpecStatePassed
		case KindFailed:
			sr.State = types.SpecStateFailed
			sr.Failure = failure(r.Message)
		case KindExpectedFailure:
			sr.State = types.SpecStateSkipped
			sr.Failure = failure("expected failure (--expect-failures): " + r.Message)
		case KindNotApplicable:
			sr.State, sr.NumAttempts = types.SpecStateSkipped, 0
			sr.Failure = failure(harness.NotApplicableReason(r.Message))
		default:
			sr.State, sr.NumAttempts = types.SpecStateSkipped, 0
			sr.Failure = failure(r.Message)
		}
		rep.SpecReports = append(rep.SpecReports, sr)
	}
	if v.Stopped != "" {
		// Ginkgo's own reason for a suite cut short by SIGINT/SIGTERM (its junit reporter writes
		// it as the SpecialSuiteFailureReason property).
		reason := "Interrupted by User"
		if !strings.HasPrefix(v.Stopped, "interrupted") {
			reason = "Stopped: " + v.Stopped
		}
		rep.SpecialSuiteFailureReasons = append(rep.SpecialSuiteFailureReasons, reason)
	}
	return rep
}

// JUnitVerdictProperties are the suite properties WriteReports adds to Ginkgo's junit.xml:
// "eppkit.exitCode", "eppkit.verdict", per profile "eppkit.profile.<name>" = its Line
// ("partial: 3 passed, 0 failed, 1 skipped (1 not applicable), 8 not supported"), and
// "eppkit.notSupported", the tests left out because their feature is not claimed (comma list).
func JUnitVerdictProperties(v Verdict) []reporters.JUnitProperty {
	props := []reporters.JUnitProperty{{Name: "eppkit.exitCode", Value: strconv.Itoa(v.ExitCode)}, {Name: "eppkit.verdict", Value: v.Line()}}
	for _, pv := range v.Profiles {
		props = append(props, reporters.JUnitProperty{Name: "eppkit.profile." + string(pv.Profile), Value: pv.Line()})
	}
	var unsupported []string
	for name, k := range v.Kinds {
		if k == KindNotSupported {
			unsupported = append(unsupported, name)
		}
	}
	slices.Sort(unsupported)
	props = append(props, reporters.JUnitProperty{Name: "eppkit.notSupported", Value: strings.Join(unsupported, ",")})
	return props
}

// writeJUnit writes Ginkgo's JUnit XML of the run to path, then adds JUnitVerdictProperties to its
// suite properties (Ginkgo's reporter has no hook for suite properties of our own).
func writeJUnit(path string, results []TestResult, start time.Time, v Verdict) error {
	if err := reporters.GenerateJUnitReport(JUnitReport(results, start, "eppkit conformance", v), path); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var suites reporters.JUnitTestSuites
	if err := xml.Unmarshal(b, &suites); err != nil {
		return fmt.Errorf("re-read %s: %w", path, err)
	}
	for i := range suites.TestSuites {
		suites.TestSuites[i].Properties.Properties = append(suites.TestSuites[i].Properties.Properties, JUnitVerdictProperties(v)...)
	}
	var out bytes.Buffer
	out.WriteString(xml.Header)
	enc := xml.NewEncoder(&out)
	enc.Indent("  ", "    ")
	if err := enc.Encode(suites); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// Summary renders the Markdown summary: the verdict, then per profile its result and counts,
// the failed tests with their message, the expected failures apart, the passed tests with their
// rule, the skipped tests with the reason and the tests not supported.
func Summary(meta ReportMeta, results []TestResult, v Verdict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# eppkit conformance summary\n\n")
	fmt.Fprintf(&b, "- Implementation: %s/%s %s (%s)\n", meta.Implementation.Organization, meta.Implementation.Project,
		meta.Implementation.Version, meta.Implementation.URL)
	fmt.Fprintf(&b, "- Date: %s; eppkit %s; spec %s; protocol: %s; upstream behaviour: %s\n", meta.Date.UTC().Format(time.RFC3339),
		meta.EppkitVersion, SpecVersion, EPPProtocol, UpstreamEPP)
	fmt.Fprintf(&b, "- Supported features: %s\n", featureList(meta.Selection.SupportedFeatures))
	if len(meta.Selection.ExemptFeatures) > 0 {
		fmt.Fprintf(&b, "- Exempt features: %s\n", featureList(meta.Selection.ExemptFeatures))
	}
	fmt.Fprintf(&b, "- **%s**\n", strings.TrimPrefix(v.Line(), "verdict: "))
	if v.Expected != nil {
		fmt.Fprintf(&b, "- Expected failures: %s\n", v.Expected)
	}
	if line := InterruptionLine(results); line != "" {
		fmt.Fprintf(&b, "- **%s** (listed below as skipped: %s)\n", line, InterruptedMessage)
	}
	b.WriteString("\n| Profile | Result | Passed | Failed | Expected failures | Skipped | Of them not applicable | Not supported |\n|---|---|---|---|---|---|---|---|\n")
	for _, pv := range v.Profiles {
		c := pv.Counts
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d |\n", pv.Profile, pv.Result, c.Passed, c.Failed, c.ExpectedFailures, c.Skipped, c.NotApplicable, c.NotSupported)
	}
	sections := []struct {
		title string
		kinds []TestKind
	}{
		{"Failed", []TestKind{KindFailed}},
		{"Failed as expected (--expect-failures)", []TestKind{KindExpectedFailure}},
		{"Passed", []TestKind{KindPassed}},
		{"Skipped", []TestKind{KindSkipped, KindInterrupted}},
		{"Not applicable (a precondition unmet)", []TestKind{KindNotApplicable}},
		{"Not supported (feature not claimed)", []TestKind{KindNotSupported}},
	}
	for _, pv := range v.Profiles {
		fmt.Fprintf(&b, "\n## Profile %s: %s\n", pv.Profile, pv.Line())
		for _, sec := range sections {
			var in []TestResult
			for _, r := range results {
				if r.Test.Profile == pv.Profile && slices.Contains(sec.kinds, v.Kind(r)) {
					in = append(in, r)
				}
			}
			if len(in) == 0 {
				continue
			}
			fmt.Fprintf(&b, "\n### %s\n\n", sec.title)
			for _, r := range in {
				switch sec.title {
				case "Failed", "Failed as expected (--expect-failures)":
					fmt.Fprintf(&b, "- **%s**%s — %s\n\n", r.Test.ShortName, featureSuffix(r.Test), r.Test.Description)
					fmt.Fprintf(&b, "  ```\n%s\n  ```\n", indent(strings.TrimSpace(r.Message), "  "))
				case "Passed":
					fmt.Fprintf(&b, "- %s%s — %s\n", r.Test.ShortName, featureSuffix(r.Test), r.Test.Description)
				default:
					fmt.Fprintf(&b, "- %s%s — %s (%s)\n", r.Test.ShortName, featureSuffix(r.Test), r.Test.Description, r.Message)
				}
			}
		}
	}
	return b.String()
}

// Interruption counts the tests of a run that ran (passed or failed) and those that did not run
// because the run was interrupted (TestResult.Interrupted). notRun > 0 means the run was
// interrupted.
func Interruption(results []TestResult) (ran, notRun int) {
	for _, r := range results {
		switch {
		case r.Interrupted:
			notRun++
		case r.Outcome == Passed || r.Outcome == Failed:
			ran++
		}
	}
	return ran, notRun
}

// InterruptionLine is the line the console and summary.md print for a run that stopped early,
// "" when it did not: interrupted (Ctrl-C, SIGTERM), or stopped because the target stopped
// answering (TargetStoppedMessage).
func InterruptionLine(results []TestResult) string {
	ran, notRun := Interruption(results)
	if notRun == 0 {
		return ""
	}
	why := "INTERRUPTED (Ctrl-C or SIGTERM)"
	if slices.ContainsFunc(results, func(r TestResult) bool { return r.Message == TargetStoppedMessage }) {
		why = "STOPPED (the target stopped answering)"
	}
	if slices.ContainsFunc(results, func(r TestResult) bool { return r.Message == HarnessNotStartedMessage }) {
		why = "NOT STARTED (the harness could not start)"
	}
	return fmt.Sprintf("run %s: %d tests ran, %d did not run; the results cover only the tests that ran", why, ran, notRun)
}

func featureSuffix(ct ConformanceTest) string {
	if len(ct.Features) == 0 {
		return ""
	}
	return " [" + featureList(ct.Features) + "]"
}

func featureList(fs []Feature) string {
	if len(fs) == 0 {
		return "none"
	}
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

func indent(s, pre string) string {
	return pre + strings.ReplaceAll(s, "\n", "\n"+pre)
}

// ReportFiles are the files WriteReports wrote.
type ReportFiles struct {
	Reports []string // one ConformanceReport YAML per selected profile
	JUnit   string
	Summary string
}

// WriteReports writes, under dir: <profile>-report.yaml per selected profile, junit.xml and
// summary.md, each printing the verdict v (Judge). meta.Implementation must be valid (gateway-api's Implementation.Validate).
func WriteReports(dir string, meta ReportMeta, results []TestResult, start time.Time, v Verdict) (ReportFiles, error) {
	var files ReportFiles
	if err := meta.Implementation.Validate(); err != nil {
		return files, fmt.Errorf("report metadata: %w (set --organization --project --url --version --contact)", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return files, err
	}
	for _, p := range meta.Selection.Profiles {
		b, err := MarshalReport(BuildReport(p, meta, results, v))
		if err != nil {
			return files, err
		}
		path := filepath.Join(dir, strings.ToLower(string(p))+"-report.yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return files, err
		}
		files.Reports = append(files.Reports, path)
	}
	files.JUnit = filepath.Join(dir, "junit.xml")
	if err := writeJUnit(files.JUnit, results, start, v); err != nil {
		return files, fmt.Errorf("junit: %w", err)
	}
	files.Summary = filepath.Join(dir, "summary.md")
	if err := os.WriteFile(files.Summary, []byte(Summary(meta, results, v)), 0o644); err != nil {
		return files, err
	}
	return files, nil
}

// Catalogue renders the Markdown catalogue of every test: profile, feature, ShortName, level,
// the rule, preconditions, source, and the command that runs it alone.
func Catalogue(tests []ConformanceTest) string {
	var b strings.Builder
	b.WriteString("# eppkit conformance catalogue\n\n")
	b.WriteString("Generated by `eppkit conformance catalogue` from the test registry; do not edit by hand.\n")
	fmt.Fprintf(&b, "Spec %s. Judged against: the protocol of %s, and the behaviour of %s. Levels: **MUST** (every EPP: the protocol text; core `EPP` profile), **upstream** (%s behaviour, tested only under a claimed feature; where GIE v1.5.0's EPP differed, the Source says how), **eppkit** (eppkit's rules: production rules in `EPP-Production` under a claimed feature, the reference's own design in `Reference`). A test that stops itself for an unmet precondition is reported not applicable.\n",
		SpecVersion, EPPProtocol, UpstreamEPP, UpstreamEPP)
	for _, p := range Profiles {
		var in []ConformanceTest
		for _, ct := range tests {
			if ct.Profile == p {
				in = append(in, ct)
			}
		}
		fmt.Fprintf(&b, "\n## Profile %s (%d tests)\n\n", p, len(in))
		if len(in) == 0 {
			b.WriteString("No tests yet.\n")
			continue
		}
		b.WriteString("| Feature | ShortName | Level | Rule | Preconditions | Source | Run alone |\n|---|---|---|---|---|---|---|\n")
		for _, ct := range in {
			feature := "core"
			if len(ct.Features) > 0 {
				feature = featureList(ct.Features)
			}
			name := ct.ShortName
			if ct.Provisional {
				name += " (provisional)"
			}
			if len(ct.FormerNames) > 0 {
				name += " (formerly " + strings.Join(ct.FormerNames, ", ") + ")"
			}
			pre := "—"
			if len(ct.Preconditions) > 0 {
				pre = strings.Join(ct.Preconditions, "; ")
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | `%s` |\n", MarkdownCell(feature), MarkdownCell(name), ct.Level,
				MarkdownCell(ct.Description), MarkdownCell(pre), MarkdownCell(ct.Source), RunAloneCommand(ct))
		}
	}
	return b.String()
}

// RunAloneConfig is the reference's EndpointPickerConfig that claims every feature with tests
// (make conformance uses it); RunAloneCommand passes it for feature-gated and Reference tests.
const RunAloneConfig = "manifests/epp-configs/conformance.yaml"

// RunAloneCommand is the command line that runs only ct against the reference EPP, from the
// repository root: with the endpoint source the test needs (ct.EndpointSource) and, for
// feature-gated and Reference tests, the reference config that enables every tested plugin.
func RunAloneCommand(ct ConformanceTest) string {
	cmd := "eppkit conformance --target reference --profiles " + string(ct.Profile) + " --run-test " + ct.ShortName
	if ct.EndpointSource != "" {
		cmd += " --endpoint-source " + ct.EndpointSource
	}
	if len(ct.Features) > 0 {
		cmd += " --supported-features " + strings.ReplaceAll(featureList(ct.Features), ", ", ",")
	}
	if len(ct.Features) > 0 || ct.Profile == ProfileReference {
		cmd += " --config-file " + RunAloneConfig
	}
	return cmd
}

// MarkdownCell escapes s for a Markdown table cell (pipes escaped, newlines as spaces).
func MarkdownCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
