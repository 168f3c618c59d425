package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The publication layout is the one GIE reserves for EPP reports (SPEC §8), modelled on
// kubernetes-sigs/gateway-api-inference-extension conformance/reports/README.md:
//
//	<root>/<GIE version>/epp/<implementation>/
//	    README.md                                            (results table + Reproduce)
//	    <channel>-<impl version>-<mode>-<profile>-report.yaml (one per profile)
//
// <root> stands for GIE's conformance/reports, so the folder under it can be copied there as is.
const (
	// PublishChannel is the extension channel of every report (gatewayAPIInferenceExtensionChannel).
	PublishChannel = "standard"
	// PublishMode is the implementation's operating mode (the report's mode).
	PublishMode = "default"
	// PublishProfileDir is the conformance category folder of EPP reports.
	PublishProfileDir = "epp"
)

// PublishFiles are the files WritePublication wrote.
type PublishFiles struct {
	// Dir is <root>/<GIE version>/epp/<implementation>.
	Dir string
	// Reports are the report YAMLs, one per selected profile, in Selection.Profiles order.
	Reports []string
	// README is Dir/README.md.
	README string
}

var unsafeNameChars = regexp.MustCompile(`[^a-z0-9._-]+`)

// publishName lowercases s and replaces every run of characters outside [a-z0-9._-] with one "-",
// so an organization, project or version is safe as a path element.
func publishName(s string) string {
	return strings.Trim(unsafeNameChars.ReplaceAllString(strings.ToLower(s), "-"), "-.")
}

// PublishImplementationDir is the implementation folder name: "<organization>-<project>" made
// path-safe (gateway-api's own reports use the same organization-project naming), or the project
// alone when it already starts with the organization.
func PublishImplementationDir(meta ReportMeta) string {
	org, proj := publishName(meta.Implementation.Organization), publishName(meta.Implementation.Project)
	if org == "" || strings.HasPrefix(proj, org) {
		return proj
	}
	return org + "-" + proj
}

// PublishReportName is GIE's report file name for profile p:
// <channel>-<implementation version>-<mode>-<profile>-report.yaml, lower case.
func PublishReportName(meta ReportMeta, p Profile) string {
	return fmt.Sprintf("%s-%s-%s-%s-report.yaml", PublishChannel, publishName(meta.Implementation.Version),
		PublishMode, publishName(string(p)))
}

// WritePublication writes the GIE publication layout under root for the selected profiles: one
// ConformanceReport YAML per profile (the same content as WriteReports' <profile>-report.yaml)
// and a README.md with the results table and a Reproduce section holding reproduce, the command
// lines that produce the reports. meta.Implementation must be valid; a version that is empty
// after making it path-safe is an error.
func WritePublication(root string, meta ReportMeta, results []TestResult, reproduce []string, v Verdict) (PublishFiles, error) {
	var files PublishFiles
	if err := meta.Implementation.Validate(); err != nil {
		return files, fmt.Errorf("publication metadata: %w (set --organization --project --url --version --contact)", err)
	}
	impl := PublishImplementationDir(meta)
	if impl == "" || publishName(meta.Implementation.Version) == "" {
		return files, fmt.Errorf("publication: --organization/--project %q/%q and --version %q must contain letters or digits",
			meta.Implementation.Organization, meta.Implementation.Project, meta.Implementation.Version)
	}
	files.Dir = filepath.Join(root, GatewayAPIInferenceExtensionVersion, PublishProfileDir, impl)
	if err := os.MkdirAll(files.Dir, 0o755); err != nil {
		return files, err
	}
	for _, p := range meta.Selection.Profiles {
		b, err := MarshalReport(BuildReport(p, meta, results, v))
		if err != nil {
			return files, err
		}
		path := filepath.Join(files.Dir, PublishReportName(meta, p))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return files, err
		}
		files.Reports = append(files.Reports, path)
	}
	files.README = filepath.Join(files.Dir, "README.md")
	if err := os.WriteFile(files.README, []byte(PublicationREADME(meta, results, reproduce, v)), 0o644); err != nil {
		return files, err
	}
	return files, nil
}

// PublicationREADME renders the implementation README of the publication layout: a title, the
// table of contents GIE asks for (channel, extension version, profile, implementation version,
// mode, report) with a status column as GIE's v1.5.0 reports carry (the verdict's result and
// counts), the claimed features, and the
// Reproduce section.
func PublicationREADME(meta ReportMeta, results []TestResult, reproduce []string, v Verdict) string {
	im := meta.Implementation
	var b strings.Builder
	fmt.Fprintf(&b, "# %s (EPP Profile Conformance) - %s\n\n", im.Project, GatewayAPIInferenceExtensionVersion)
	fmt.Fprintf(&b, "%s/%s %s ([%s](%s)), tested with eppkit %s (spec %s) on %s. Contact: %s.\n\n",
		im.Organization, im.Project, im.Version, im.URL, im.URL, meta.EppkitVersion, SpecVersion,
		meta.Date.UTC().Format("2006-01-02"), strings.Join(im.Contact, ", "))
	b.WriteString("## Table of Contents\n\n")
	b.WriteString("| Extension Channel | Extension Version Tested | Profile Tested | Implementation Version | Mode | Report | Status |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, pv := range v.Profiles {
		name := PublishReportName(meta, pv.Profile)
		fmt.Fprintf(&b, "| %s | %s | %s | [%s](%s) | %s | [%s](./%s) | %s (%s) |\n",
			PublishChannel, GatewayAPIInferenceExtensionVersion, pv.Profile, im.Version, im.URL, PublishMode, name, name,
			pv.Result, pv.Counts.Line())
	}
	fmt.Fprintf(&b, "\nSupported features: %s.", featureList(meta.Selection.SupportedFeatures))
	if len(meta.Selection.ExemptFeatures) > 0 {
		fmt.Fprintf(&b, " Exempt features: %s.", featureList(meta.Selection.ExemptFeatures))
	}
	b.WriteString(" GIE accepts a report only when its profile's result is `success`.\n")
	var failed []string
	for _, r := range results {
		if r.Outcome == Failed && profileSelected(meta.Selection, r.Test.Profile) {
			failed = append(failed, fmt.Sprintf("%s (%s)", r.Test.ShortName, r.Test.Profile))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(&b, "\nFailed tests: %s.\n", strings.Join(failed, ", "))
	}
	if line := InterruptionLine(results); line != "" {
		fmt.Fprintf(&b, "\n**The %s.** Rerun it to completion before publishing.\n", line)
	}
	b.WriteString("\n## Reproduce\n\n")
	b.WriteString("With Go (the version in eppkit's go.mod) on Linux, from a clone of https://github.com/eppkit/eppkit at the\n")
	fmt.Fprintf(&b, "eppkit version above (%s):\n\n```sh\n", meta.EppkitVersion)
	for _, l := range reproduce {
		b.WriteString(l + "\n")
	}
	b.WriteString("```\n\nThe reports are written as generated by `eppkit conformance --publish-dir`; the rules each test checks are\n")
	b.WriteString("in eppkit's reports/CATALOGUE.md.\n")
	return b.String()
}

func profileSelected(sel Selection, p Profile) bool {
	for _, q := range sel.Profiles {
		if q == p {
			return true
		}
	}
	return false
}

// ShellQuote quotes s for a POSIX shell when it holds anything beyond [A-Za-z0-9_@%+=:,./-]
// (README command lines).
func ShellQuote(s string) string {
	if s != "" && !regexp.MustCompile(`[^A-Za-z0-9_@%+=:,./-]`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
