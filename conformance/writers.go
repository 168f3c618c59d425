package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/reporters"
	"github.com/onsi/ginkgo/v2/types"
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
// so Ginkgo's own JUnit reporter writes the XML.
func JUnitReport(results []TestResult, start time.Time, description string) types.Report {
	rep := types.Report{
		SuitePath:        "github.com/eppkit/eppkit/conformance",
		SuiteDescription: description,
		StartTime:        start,
		EndTime:          time.Now(),
		SuiteSucceeded:   true,
	}
	rep.RunTime = rep.EndTime.Sub(start)
	for _, r := range results {
		sr := types.SpecReport{
			ContainerHierarchyTexts: []string{string(r.Test.Profile)},
			LeafNodeText:            r.Test.ShortName,
			LeafNodeType:            types.NodeTypeIt,
			LeafNodeLabels:          Labels(r.Test),
			StartTime:               r.Start,
			EndTime:                 r.Start.Add(r.Duration),
			RunTime:                 r.Duration,
			CapturedStdOutErr:       r.Log,
			NumAttempts:             1,
		}
		switch r.Outcome {
		case Passed:
			sr.State = types.SpecStatePassed
		case Failed:
			sr.State = types.SpecStateFailed
			sr.Failure = types.Failure{Message: r.Message, FailureNodeType: types.NodeTypeIt}
			rep.SuiteSucceeded = false
		case Skipped:
			sr.State = types.SpecStateSkipped
			sr.Failure = types.Failure{Message: r.Message, FailureNodeType: types.NodeTypeIt}
			sr.NumAttempts = 0
		}
		rep.SpecReports = append(rep.SpecReports, sr)
	}
	if _, notRun := Interruption(results); notRun > 0 {
		// Ginkgo's own reason for a suite cut short by SIGINT/SIGTERM (its junit reporter writes
		// it as the SpecialSuiteFailureReason property).
		rep.SuiteSucceeded = false
		rep.SpecialSuiteFailureReasons = append(rep.SpecialSuiteFailureReasons, "Interrupted by User")
	}
	return rep
}

// Summary renders the Markdown summary: per profile, the passed, failed and skipped tests with
// their rule; failed tests with their message; skipped tests with the reason.
func Summary(meta ReportMeta, results []TestResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# eppkit conformance summary\n\n")
	fmt.Fprintf(&b, "- Implementation: %s/%s %s (%s)\n", meta.Implementation.Organization, meta.Implementation.Project,
		meta.Implementation.Version, meta.Implementation.URL)
	fmt.Fprintf(&b, "- Date: %s; eppkit %s; spec %s; GIE %s\n", meta.Date.UTC().Format(time.RFC3339), meta.EppkitVersion,
		SpecVersion, GatewayAPIInferenceExtensionVersion)
	fmt.Fprintf(&b, "- Supported features: %s\n", featureList(meta.Selection.SupportedFeatures))
	if len(meta.Selection.ExemptFeatures) > 0 {
		fmt.Fprintf(&b, "- Exempt features: %s\n", featureList(meta.Selection.ExemptFeatures))
	}
	if line := InterruptionLine(results); line != "" {
		fmt.Fprintf(&b, "- **%s** (listed below as skipped: %s)\n", line, InterruptedMessage)
	}
	b.WriteString("\n| Profile | Verdict | Passed | Failed | Skipped |\n|---|---|---|---|---|\n")
	for _, p := range meta.Selection.Profiles {
		np, nf, ns := CountOutcomes(p, results)
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d |\n", p, ProfileVerdict(p, results), np, nf, ns)
	}
	for _, p := range meta.Selection.Profiles {
		var passed, failed, skipped []TestResult
		for _, r := range results {
			if r.Test.Profile != p {
				continue
			}
			switch r.Outcome {
			case Passed:
				passed = append(passed, r)
			case Failed:
				failed = append(failed, r)
			case Skipped:
				skipped = append(skipped, r)
			}
		}
		fmt.Fprintf(&b, "\n## Profile %s: %s — %s\n", p, ProfileVerdict(p, results), ProfileLine(p, results))
		if len(failed) > 0 {
			fmt.Fprintf(&b, "\n### Failed\n\n")
			for _, r := range failed {
				fmt.Fprintf(&b, "- **%s**%s — %s\n\n", r.Test.ShortName, featureSuffix(r.Test), r.Test.Description)
				fmt.Fprintf(&b, "  ```\n%s\n  ```\n", indent(strings.TrimSpace(r.Message), "  "))
			}
		}
		if len(passed) > 0 {
			fmt.Fprintf(&b, "\n### Passed\n\n")
			for _, r := range passed {
				fmt.Fprintf(&b, "- %s%s — %s\n", r.Test.ShortName, featureSuffix(r.Test), r.Test.Description)
			}
		}
		if len(skipped) > 0 {
			fmt.Fprintf(&b, "\n### Skipped\n\n")
			for _, r := range skipped {
				fmt.Fprintf(&b, "- %s%s — %s (%s)\n", r.Test.ShortName, featureSuffix(r.Test), r.Test.Description, r.Message)
			}
		}
	}
	return b.String()
}

// CountOutcomes counts profile p's passed, failed and skipped tests.
func CountOutcomes(p Profile, results []TestResult) (passed, failed, skipped int) {
	for _, r := range results {
		if r.Test.Profile != p {
			continue
		}
		switch r.Outcome {
		case Passed:
			passed++
		case Failed:
			failed++
		case Skipped:
			skipped++
		}
	}
	return passed, failed, skipped
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

// InterruptionLine is the line the console and summary.md print for an interrupted run, "" when
// the run was not interrupted.
func InterruptionLine(results []TestResult) string {
	ran, notRun := Interruption(results)
	if notRun == 0 {
		return ""
	}
	return fmt.Sprintf("run INTERRUPTED (Ctrl-C or SIGTERM): %d tests ran, %d did not run; the verdicts cover only the tests that ran", ran, notRun)
}

// interruptedIn counts profile p's tests that did not run because the run was interrupted.
func interruptedIn(p Profile, results []TestResult) int {
	n := 0
	for _, r := range results {
		if r.Test.Profile == p && r.Interrupted {
			n++
		}
	}
	return n
}

// ProfileVerdict is profile p's one-word outcome in a run: FAIL if any of its tests failed,
// INTERRUPTED if some of its tests did not run because the run was interrupted, else Verdict.
func ProfileVerdict(p Profile, results []TestResult) string {
	np, nf, _ := CountOutcomes(p, results)
	if nf == 0 && interruptedIn(p, results) > 0 {
		return "INTERRUPTED"
	}
	return Verdict(np, nf)
}

// ProfileLine is profile p's counts for the console and the summary: "N passed, N failed, N
// skipped", followed by how many of the skipped did not run because the run was interrupted.
func ProfileLine(p Profile, results []TestResult) string {
	np, nf, ns := CountOutcomes(p, results)
	line := fmt.Sprintf("%d passed, %d failed, %d skipped", np, nf, ns)
	if ni := interruptedIn(p, results); ni > 0 {
		line += fmt.Sprintf(" (%d of them not run: interrupted)", ni)
	}
	return line
}

// Verdict is a profile's one-word outcome: FAIL if any test failed, NOTHING RAN if none passed,
// else PASS.
func Verdict(passed, failed int) string {
	switch {
	case failed > 0:
		return "FAIL"
	case passed == 0:
		return "NOTHING RAN"
	}
	return "PASS"
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
// summary.md. meta.Implementation must be valid (gateway-api's Implementation.Validate).
func WriteReports(dir string, meta ReportMeta, results []TestResult, start time.Time) (ReportFiles, error) {
	var files ReportFiles
	if err := meta.Implementation.Validate(); err != nil {
		return files, fmt.Errorf("report metadata: %w (set --organization --project --url --version --contact)", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return files, err
	}
	for _, p := range meta.Selection.Profiles {
		b, err := MarshalReport(BuildReport(p, meta, results))
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
	if err := reporters.GenerateJUnitReport(JUnitReport(results, start, "eppkit conformance"), files.JUnit); err != nil {
		return files, fmt.Errorf("junit: %w", err)
	}
	files.Summary = filepath.Join(dir, "summary.md")
	if err := os.WriteFile(files.Summary, []byte(Summary(meta, results)), 0o644); err != nil {
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
	fmt.Fprintf(&b, "Spec %s; GIE %s. Levels: **MUST** (every EPP; core `EPP` profile), **upstream** (GIE v1.5.0 behaviour, tested only under a claimed feature), **eppkit** (eppkit-only, `Reference` profile).\n", SpecVersion, GatewayAPIInferenceExtensionVersion)
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
			pre := "—"
			if len(ct.Preconditions) > 0 {
				pre = strings.Join(ct.Preconditions, "; ")
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | `%s` |\n", cell(feature), cell(name), ct.Level,
				cell(ct.Description), cell(pre), cell(ct.Source), RunAloneCommand(ct))
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

func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
