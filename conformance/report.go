package conformance

import (
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	gatewayapiconsts "sigs.k8s.io/gateway-api/pkg/consts"
	"sigs.k8s.io/yaml"
)

// Versions written into every report.
const (
	// GatewayAPIInferenceExtensionVersion is the GIE release whose EPP protocol text (proposal
	// 004, docs/proposals/004-endpoint-picker-protocol/README.md) the MUST tests quote. v1.6.0
	// added the streaming MUST and the Health Checking section (GIE PR #2514) and the backend
	// scope of endpoint lists (GIE PR #3003); v1.6.2 states the same text (docs/must-tests.md).
	GatewayAPIInferenceExtensionVersion = "v1.6.2"
	// EPPProtocol names the protocol text the MUST level judges against.
	EPPProtocol = "GIE " + GatewayAPIInferenceExtensionVersion + " proposal 004 (endpoint picker protocol)"
	// UpstreamEPP names the EPP release whose behaviour the [upstream] level restates: since GIE
	// v1.6.0 the full EPP lives in llm-d-router (SPEC "Every rule carries a level").
	UpstreamEPP = "llm-d-router v0.10.0"
	// SpecVersion is the version of eppkit's SPEC the tests implement; bumped when a rule changes.
	SpecVersion = "v0.2.0"
	// gatewayAPIModule is the module whose report types we embed.
	gatewayAPIModule = "sigs.k8s.io/gateway-api/conformance"
	// gatewayAPIVersionFallback is used when the binary carries no module information (go run
	// of a test binary built without it): the Gateway API release go.mod pins. This import of
	// sigs.k8s.io/gateway-api is also what keeps that pin: gateway-api/conformance v1.6.3 requires
	// sigs.k8s.io/gateway-api v0.0.0-00010101000000-000000000000 (replaced in its own repository),
	// a version the module proxy refuses, so without a package of sigs.k8s.io/gateway-api in the
	// build `go mod tidy` drops the v1.6.3 requirement and `go list -m all` fails, here and in
	// every module that requires eppkit.
	gatewayAPIVersionFallback = gatewayapiconsts.BundleVersion
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
	// EPPProtocol is the protocol text the MUST tests judged against (EPPProtocol).
	EPPProtocol string `json:"eppProtocol"`
	// UpstreamEPP is the upstream EPP release the upstream-level tests restate (UpstreamEPP).
	UpstreamEPP string `json:"upstreamEPP"`
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

// BuildReport makes the report of profile p from the results of a run and its verdict (Judge;
// results of other profiles are ignored). Core = tests without features; Extended =
// feature-gated tests; their statistics and results are the verdict's (Counts): tests skipped
// only because their feature is not claimed are not counted, other skips (--skip-tests,
// --run-test, exempt features, unmet preconditions, an interruption) make the result partial. The
// summary starts with the profile's result, "interrupted" included, which the core and extended
// `result` fields (gateway-api's schema) carry as partial.
func BuildReport(p Profile, meta ReportMeta, results []TestResult, v Verdict) ConformanceReport {
	pv := v.Profile(p)
	core := confv1.Status{Statistics: statistics(pv.Core), Result: schemaResult(pv.Core.Result())}
	var ext confv1.Status
	var provisional []string
	used := map[Feature]bool{}
	for _, r := range results {
		if r.Test.Profile != p {
			continue
		}
		for _, f := range r.Test.Features {
			used[f] = true
		}
		st := &core
		if len(r.Test.Features) > 0 {
			st = &ext
		}
		switch v.Kind(r) {
		case KindPassed:
			if r.Test.Provisional {
				provisional = append(provisional, r.Test.ShortName)
			}
		case KindFailed, KindExpectedFailure:
			st.FailedTests = append(st.FailedTests, r.Test.ShortName)
		case KindSkipped, KindNotApplicable, KindInterrupted:
			st.SkippedTests = append(st.SkippedTests, r.Test.ShortName)
		}
	}
	pr := confv1.ProfileReport{Name: string(p), Core: core}
	summary := fmt.Sprintf("Result: %s (%s). Core tests %s.", pv.Result, pv.Counts.Line(), resultWord(pv.Core))
	if pv.Core == (Counts{}) {
		summary = fmt.Sprintf("Result: %s (%s). No core tests in this profile.", pv.Result, pv.Counts.Line())
	}
	if pv.HasExtended {
		ext.Statistics, ext.Result = statistics(pv.Extended), schemaResult(pv.Extended.Result())
		es := &confv1.ExtendedStatus{Status: ext}
		// Every feature belongs to EPP-Routing or EPP-Production (FeatureProfile), tested yet or
		// not; a profile also lists the other profile's features its tests need.
		for _, f := range AllFeatures {
			if !used[f] && FeatureProfile(f) != p {
				continue
			}
			if slices.Contains(meta.Selection.SupportedFeatures, f) && !slices.Contains(meta.Selection.ExemptFeatures, f) {
				es.SupportedFeatures = append(es.SupportedFeatures, string(f))
			} else {
				es.UnsupportedFeatures = append(es.UnsupportedFeatures, string(f))
			}
		}
		pr.Extended = es
		summary += fmt.Sprintf(" Extended tests %s.", resultWord(pv.Extended))
	}
	if v.Stopped != "" && pv.Counts.Interrupted > 0 {
		summary += fmt.Sprintf(" Run stopped early (%s): %d tests did not run (listed as skipped).", v.Stopped, pv.Counts.Interrupted)
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
		EPPProtocol:                         EPPProtocol,
		UpstreamEPP:                         UpstreamEPP,
		GatewayAPIInferenceExtensionChannel: PublishChannel,
		EppkitVersion:                       meta.EppkitVersion,
		SpecVersion:                         SpecVersion,
	}
	rep.APIVersion = confv1.GroupVersion.String()
	rep.Kind = "ConformanceReport"
	return rep
}

func statistics(c Counts) confv1.Statistics {
	return confv1.Statistics{Passed: uint32(c.Passed), Failed: uint32(c.Failed), Skipped: uint32(c.Skipped)}
}

// schemaResult maps a result onto gateway-api's schema, which has no "interrupted".
func schemaResult(r confv1.Result) confv1.Result {
	if r == ResultInterrupted {
		return confv1.Partial
	}
	return r
}

func resultWord(c Counts) string {
	switch c.Result() {
	case confv1.Success:
		return "succeeded"
	case confv1.Failure:
		return fmt.Sprintf("failed with %d test failures", c.Failed)
	case ResultInterrupted:
		return fmt.Sprintf("were interrupted with %d tests not run", c.Interrupted)
	default:
		return fmt.Sprintf("partially succeeded with %d test skips", c.Skipped)
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
