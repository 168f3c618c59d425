package conformance

import (
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/yaml"
)

// Versions written into every report.
const (
	// GatewayAPIInferenceExtensionVersion is the GIE release whose EPP protocol and behaviour the
	// suite checks (v1.5.0 is the last release shipping the full EPP; SPEC preamble).
	GatewayAPIInferenceExtensionVersion = "v1.5.0"
	// SpecVersion is the version of eppkit's SPEC the tests implement; bumped when a rule changes.
	SpecVersion = "v0.1.0"
	// gatewayAPIModule is the module whose report types we embed.
	gatewayAPIModule = "sigs.k8s.io/gateway-api/conformance"
	// gatewayAPIVersionFallback is used when the binary carries no module information (go run
	// of a test binary built without it); keep it equal to go.mod.
	gatewayAPIVersionFallback = "v1.6.3"
)

// GatewayAPIVersion returns the version of the Gateway API conformance module the report types
// come from, read from the binary's build information.
func GatewayAPIVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == gatewayAPIModule {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return gatewayAPIVersionFallback
}

// ConformanceReport is one profile's report: the Gateway API ConformanceReport
// (sigs.k8s.io/gateway-api/conformance/apis/v1) plus eppkit's fields. The Gateway API fields are
// inlined so a Gateway API report reader can parse the file.
type ConformanceReport struct {
	confv1.ConformanceReport `json:",inline"`
	// GatewayAPIInferenceExtensionVersion is the GIE version tested (lower camel case on purpose,
	// unlike GIE's own capitalised key).
	GatewayAPIInferenceExtensionVersion string `json:"gatewayAPIInferenceExtensionVersion"`
	// GatewayAPIInferenceExtensionChannel is the extension channel, always PublishChannel
	// ("standard"); GIE's conformance/reports/README.md asks every report for it.
	GatewayAPIInferenceExtensionChannel string `json:"gatewayAPIInferenceExtensionChannel,omitempty"`
	// EppkitVersion is the eppkit build that ran the suite.
	EppkitVersion string `json:"eppkitVersion"`
	// SpecVersion is SpecVersion.
	SpecVersion string `json:"specVersion"`
}

// ReportMeta is what a run knows besides its results.
type ReportMeta struct {
	// Implementation is the EPP under test (all fields required: see Validate).
	Implementation confv1.Implementation
	// EppkitVersion is the version of the eppkit binary.
	EppkitVersion string
	// Date is the run's start; formatted RFC 3339.
	Date time.Time
	// Selection is what was asked for (supported features go into the extended status).
	Selection Selection
}

// BuildReport makes the report of profile p from the results of a run (results of other
// profiles are ignored). Core = tests without features; Extended = feature-gated tests. Tests
// skipped only because their feature is not claimed are not counted (Selection.NotSupported);
// other skips (--skip-tests, --run-test, exempt features, unmet preconditions) make the result
// partial.
func BuildReport(p Profile, meta ReportMeta, results []TestResult) ConformanceReport {
	var core, ext confv1.Status
	var provisional []string
	used := map[Feature]bool{}
	hasExt := false
	for _, r := range results {
		if r.Test.Profile != p {
			continue
		}
		st := &core
		if len(r.Test.Features) > 0 {
			st, hasExt = &ext, true
			for _, f := range r.Test.Features {
				used[f] = true
			}
		}
		switch r.Outcome {
		case Passed:
			st.Statistics.Passed++
			if r.Test.Provisional {
				provisional = append(provisional, r.Test.ShortName)
			}
		case Failed:
			st.Statistics.Failed++
			st.FailedTests = append(st.FailedTests, r.Test.ShortName)
		case Skipped:
			if meta.Selection.NotSupported(r.Test) {
				continue // NOT_SUPPORTED in gateway-api: counted nowhere (Selection.NotSupported)
			}
			st.Statistics.Skipped++
			st.SkippedTests = append(st.SkippedTests, r.Test.ShortName)
		}
	}
	core.Result = statusResult(core.Statistics)
	pr := confv1.ProfileReport{Name: string(p), Core: core}
	summary := fmt.Sprintf("Core tests %s.", resultWord(core))
	if core.Statistics == (confv1.Statistics{}) {
		summary = "No core tests in this profile."
	}
	if hasExt {
		ext.Result = statusResult(ext.Statistics)
		es := &confv1.ExtendedStatus{Status: ext}
		// EPP-Routing is the feature profile: every feature belongs to it, tested yet or not.
		for _, f := range AllFeatures {
			if !used[f] && p != ProfileEPPRouting {
				continue
			}
			if slices.Contains(meta.Selection.SupportedFeatures, f) && !slices.Contains(meta.Selection.ExemptFeatures, f) {
				es.SupportedFeatures = append(es.SupportedFeatures, string(f))
			} else {
				es.UnsupportedFeatures = append(es.UnsupportedFeatures, string(f))
			}
		}
		pr.Extended = es
		summary += fmt.Sprintf(" Extended tests %s.", resultWord(ext))
	}
	if n := interruptedIn(p, results); n > 0 {
		summary += fmt.Sprintf(" Run interrupted (Ctrl-C or SIGTERM): %d tests did not run (listed as skipped).", n)
	}
	pr.Summary = summary
	rep := ConformanceReport{
		ConformanceReport: confv1.ConformanceReport{
			Implementation:            meta.Implementation,
			Date:                      meta.Date.UTC().Format(time.RFC3339),
			GatewayAPIVersion:         GatewayAPIVersion(),
			Mode:                      "default",
			GatewayAPIChannel:         "standard",
			ProfileReports:            []confv1.ProfileReport{pr},
			SucceededProvisionalTests: provisional,
		},
		GatewayAPIInferenceExtensionVersion: GatewayAPIInferenceExtensionVersion,
		GatewayAPIInferenceExtensionChannel: PublishChannel,
		EppkitVersion:                       meta.EppkitVersion,
		SpecVersion:                         SpecVersion,
	}
	rep.APIVersion = confv1.GroupVersion.String()
	rep.Kind = "ConformanceReport"
	return rep
}

// statusResult follows gateway-api: failure if any test failed, partial if any was skipped,
// success otherwise (also when the profile has no tests of that kind: nothing was left unmet).
func statusResult(s confv1.Statistics) confv1.Result {
	switch {
	case s.Failed > 0:
		return confv1.Failure
	case s.Skipped > 0:
		return confv1.Partial
	default:
		return confv1.Success
	}
}

func resultWord(s confv1.Status) string {
	switch s.Result {
	case confv1.Success:
		return "succeeded"
	case confv1.Failure:
		return fmt.Sprintf("failed with %d test failures", s.Statistics.Failed)
	default:
		return fmt.Sprintf("partially succeeded with %d test skips", s.Statistics.Skipped)
	}
}

// MarshalReport renders a report as YAML.
func MarshalReport(r ConformanceReport) ([]byte, error) { return yaml.Marshal(r) }

// UnmarshalReport parses a report written by MarshalReport; unknown keys are errors.
func UnmarshalReport(b []byte) (ConformanceReport, error) {
	var r ConformanceReport
	err := yaml.UnmarshalStrict(b, &r)
	return r, err
}
