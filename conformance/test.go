// Package conformance is eppkit's black-box conformance library for endpoint pickers (EPPs) of the
// Gateway API Inference Extension: tests as data (ConformanceTest in a registry), profiles and
// features, the selection and skip rules, the runner, the name registries of targets and endpoint
// sources, the report writers (ConformanceReport, JUnit, summary, catalogue, GIE publication
// layout, results file), and the one run every driver uses: Run(ctx, Options), Start / RunOne /
// Finish for drivers with their own test runner (the Ginkgo suite), RunTest(t, Options) for an
// implementer's go test. What a test runs against (the fleet, gateway, target and the helpers) is
// conformance/harness; the targets are conformance/target, the endpoint sources
// conformance/endpointsource. The CLI, the Ginkgo suite, the reports and the catalogue are all fed
// from the one registry returned by All.
//
// Modelled on sigs.k8s.io/gateway-api conformance/utils/suite (ConformanceTest, profiles, reports);
// the code is ours. This package never imports reference/ (docs/architecture.md, import rules).
package conformance

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"sync"

	"github.com/eppkit/eppkit/conformance/harness"
)

// Level says who must follow a rule (SPEC "Every rule carries a level").
type Level string

const (
	// LevelMUST is the EPP protocol (GIE proposal 004): every EPP must do this. Only MUST rules
	// belong to the core EPP profile.
	LevelMUST Level = "MUST"
	// LevelUpstream is what the upstream EPP, llm-d-router v0.10.0 (UpstreamEPP), does; tested only
	// under an extended feature. Before December 2026 it meant GIE v1.5.0's EPP.
	LevelUpstream Level = "upstream"
	// LevelEppkit is eppkit's own fix or extension; tested in the EPP-Production profile (under
	// a feature an implementation claims) or in the Reference profile.
	LevelEppkit Level = "eppkit"
)

// Profile is a named set of tests an implementation claims to pass; one report is written per profile.
type Profile string

const (
	// ProfileEPP is the core profile: only LevelMUST rules, no features.
	ProfileEPP Profile = "EPP"
	// ProfileEPPRouting holds the routing behaviours (SPEC §6), each gated by a Feature.
	ProfileEPPRouting Profile = "EPP-Routing"
	// ProfileEPPProduction holds rules any production EPP should meet that the protocol does not
	// state (duplicate request ids isolated, refusals that keep the stream serving, stale
	// endpoints filtered, malformed SLO headers refused, the request surface real clients send),
	// each gated by a feature an implementation claims (ProductionFeatures).
	ProfileEPPProduction Profile = "EPP-Production"
	// ProfileReference holds rules specific to eppkit's reference EPP's own design (its
	// x-eppkit-* headers, its PrepareData budget); only the reference claims it.
	ProfileReference Profile = "Reference"
)

// Profiles lists every profile in report order.
var Profiles = []Profile{ProfileEPP, ProfileEPPRouting, ProfileEPPProduction, ProfileReference}

// Feature is an extended capability an implementation may claim with --supported-features.
type Feature string

const (
	// FeatureOpenAIRequestParsing: SPEC §5.2 request handling (bodies, headers, error codes).
	FeatureOpenAIRequestParsing Feature = "OpenAIRequestParsing"
	// FeaturePrefixCacheAffinity: SPEC §6 prefix-cache affinity.
	FeaturePrefixCacheAffinity Feature = "PrefixCacheAffinity"
	// FeatureQueueAwareness: SPEC §6 queue-depth awareness.
	FeatureQueueAwareness Feature = "QueueAwareness"
	// FeatureKVCacheAwareness: SPEC §6 KV-cache utilisation awareness.
	FeatureKVCacheAwareness Feature = "KVCacheAwareness"
	// FeatureLoRAAffinity: SPEC §6 LoRA adapter affinity.
	FeatureLoRAAffinity Feature = "LoRAAffinity"
	// FeaturePredictedLatency: SPEC §6 predicted-latency (SLO) routing.
	FeaturePredictedLatency Feature = "PredictedLatency"
	// FeatureRequestShedding: SPEC §6 shedding of sheddable requests under saturation.
	FeatureRequestShedding Feature = "RequestShedding"
	// FeatureEndpointChurn: SPEC §6 endpoint removal/addition observed through discovery.
	FeatureEndpointChurn Feature = "EndpointChurn"
	// FeatureDataParallelRanks: endpoints that expose several data-parallel ranks.
	FeatureDataParallelRanks Feature = "DataParallelRanks"
	// FeatureSubsetHintIPMatching: the subset hint is matched by IP, whatever port it names
	// (llm-d-router v0.10.0 pkg/epp/requestcontrol/candidates.go Locate, as GIE v1.5.0). GIE proposal 004 lists ip:port
	// addresses, so the core EPP profile checks hints that carry the pool's own ip:port only.
	FeatureSubsetHintIPMatching Feature = "SubsetHintIPMatching"
	// FeatureHighAvailability: several replicas of the EPP for one pool with leader election
	// (failover when the leader dies), a drain on SIGTERM that finishes the requests in flight,
	// and routing through disruptions (llm-d-router v0.10.0 test/e2e e2e_test.go leader election,
	// disruption_test.go; issue 33).
	FeatureHighAvailability Feature = "HighAvailability"
	// FeaturePrecisePrefixCache: prefix routing that follows the KV-cache events each model
	// server publishes over ZMQ (llm-d-router v0.10.0 precise-prefix-cache-producer), at
	// tcp://<endpoint IP>:5557 (replay 5558).
	FeaturePrecisePrefixCache Feature = "PrecisePrefixCache"
	// FeatureRequestHeaderOverwrite: every request header the EPP sets replaces the value the
	// request carried (SPEC §9.3), an EPP-Production feature: no upstream EPP does it (llm-d-router
	// v0.10.0 and GIE v1.5.0 append). Apart from OpenAIRequestParsing because an EPP that returns
	// the pick as metadata only (valid by the protocol) may set no header at all.
	FeatureRequestHeaderOverwrite Feature = "RequestHeaderOverwrite"

	// FeatureEndpointScores: the pick's dynamic metadata carries envoy.lb /
	// x-gateway-destination-endpoint-scores, every candidate's score (llm-d-router v0.10.0
	// --emit-endpoint-scores; docs/request-surface.md §4).
	FeatureEndpointScores Feature = "EndpointScores"
	// FeatureSessionAffinity: requests that send back the session token of an earlier response
	// (x-session-token) are pinned to its endpoint while it is eligible (llm-d-router v0.10.0
	// session-affinity-filter / -scorer, encoded_endpoint_header; docs/request-surface.md §5).
	FeatureSessionAffinity Feature = "SessionAffinity"
	// FeatureFlowControl: with flow control on, requests wait in priority bands while the pool
	// is saturated (TTL, band capacity, client cancel, priority order), refusals naming
	// x-llm-d-request-dropped-reason (llm-d-router v0.10.0 pkg/epp/flowcontrol;
	// docs/request-surface.md §6).
	FeatureFlowControl Feature = "FlowControl"
	// FeatureVLLMGRPC: vLLM's gRPC engine API (vllm.grpc.engine.VllmEngine/Generate, one gRPC
	// frame holding a protobuf GenerateRequest) is routed on a pool whose appProtocol is
	// kubernetes.io/h2c, token-id prompts hashed by their ids (llm-d-router v0.10.0
	// vllmgrpc-parser; GIE #2162).
	FeatureVLLMGRPC Feature = "VLLMGRPC"

	// The EPP-Production features (ProductionFeatures).

	// FeatureRequestIDIsolation: concurrent requests with the same x-request-id keep their own
	// per-request state (SPEC §9.2, GIE #1489).
	FeatureRequestIDIsolation Feature = "RequestIDIsolation"
	// FeatureStreamSurvivesRefusal: after an ImmediateResponse the same ext_proc stream keeps
	// serving (SPEC §5.2, §5.3).
	FeatureStreamSurvivesRefusal Feature = "StreamSurvivesRefusal"
	// FeatureStaleEndpointFiltering: endpoints whose metrics scrape fails are not picked while
	// others are fresh (SPEC §3).
	FeatureStaleEndpointFiltering Feature = "StaleEndpointFiltering"
	// FeatureSLOHeaderValidation: a malformed SLO header is refused with 400 (SPEC §4.1).
	FeatureSLOHeaderValidation Feature = "SLOHeaderValidation"
	// FeatureLegacyKVCacheMetric: the KV-cache gauge is read under vLLM's name before v0.10 too
	// (SPEC §7.1).
	FeatureLegacyKVCacheMetric Feature = "LegacyKVCacheMetric"
	// FeatureEngineSeriesAggregation: a server's engine-labelled series are summed into its load
	// (SPEC §7.1, GIE #2950).
	FeatureEngineSeriesAggregation Feature = "EngineSeriesAggregation"
	// FeatureAnthropicMessages: /v1/messages is routed, its system prompt hashed (SPEC §9.1).
	FeatureAnthropicMessages Feature = "AnthropicMessages"
	// FeatureTokenIDPrompts: token-id prompts are routed and hashed by their ids (SPEC §9.1).
	FeatureTokenIDPrompts Feature = "TokenIDPrompts"
	// FeatureMultimodalPrefixIdentity: non-text content parts reach the prefix hash by identity
	// (SPEC §9.1).
	FeatureMultimodalPrefixIdentity Feature = "MultimodalPrefixIdentity"
	// FeaturePartialBlockHashing: the trailing partial block is hashed (SPEC §2.1, GIE PR #2823).
	FeaturePartialBlockHashing Feature = "PartialBlockHashing"
)

// AllFeatures lists every Feature in a stable order: the EPP-Routing features, then
// ProductionFeatures.
var AllFeatures = append([]Feature{
	FeatureOpenAIRequestParsing, FeaturePrefixCacheAffinity, FeatureQueueAwareness,
	FeatureKVCacheAwareness, FeatureLoRAAffinity, FeaturePredictedLatency,
	FeatureRequestShedding, FeatureEndpointChurn, FeatureDataParallelRanks,
	FeatureSubsetHintIPMatching, FeatureHighAvailability, FeaturePrecisePrefixCache, FeatureEndpointScores,
	FeatureSessionAffinity, FeatureFlowControl, FeatureVLLMGRPC,
}, ProductionFeatures...)

// ProductionFeatures are the features of the EPP-Production profile, in a stable order; every
// other feature belongs to EPP-Routing (FeatureProfile).
var ProductionFeatures = []Feature{
	FeatureRequestIDIsolation, FeatureStreamSurvivesRefusal, FeatureStaleEndpointFiltering,
	FeatureSLOHeaderValidation, FeatureLegacyKVCacheMetric, FeatureEngineSeriesAggregation,
	FeatureAnthropicMessages, FeatureTokenIDPrompts, FeatureMultimodalPrefixIdentity,
	FeaturePartialBlockHashing, FeatureRequestHeaderOverwrite,
}

// FeatureProfile is the profile whose report lists f as supported or unsupported:
// EPP-Production for ProductionFeatures, EPP-Routing for the others. A test of one profile may
// also need a feature of the other (a production rule observed through prefix affinity).
func FeatureProfile(f Feature) Profile {
	if slices.Contains(ProductionFeatures, f) {
		return ProfileEPPProduction
	}
	return ProfileEPPRouting
}

// ConformanceTest is one rule, as data. Register it from an init() in conformance/tests/<name>.go.
type ConformanceTest struct {
	// ShortName identifies the test; UpperCamelCase; stable once published (reports key on it).
	ShortName string
	// FormerNames are ShortNames the test was published under before a rename; --run-test,
	// --skip-tests and --expect-failures still accept them, with a warning naming ShortName
	// (ResolveName).
	FormerNames []string
	// Description is the rule in one normative sentence ("The EPP MUST ...").
	Description string
	// Level is who must follow the rule; it must fit the Profile (EPP ⇒ MUST, Reference ⇒ eppkit).
	Level Level
	// Profile is the profile whose report the result goes to.
	Profile Profile
	// Features gate the test: it runs only when every one is supported and none is exempt.
	Features []Feature
	// Preconditions say what the EPP must be configured with for the test to apply.
	Preconditions []string
	// Source is where the rule comes from: a GIE proposal/PR/file or a SPEC section.
	Source string
	// Provisional marks a test whose rule may still change; its failures are reported, not hidden.
	Provisional bool
	// EndpointSource names the endpoint source the test needs to run in full ("apiserver": it
	// changes the pool while the EPP runs); "" means any. With another source the test skips or
	// runs only its static part, as its Preconditions say.
	EndpointSource string
	// Run performs the test against the harness.
	Run func(t harness.TestingT, s *harness.Suite)
}

var shortNameRE = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// Validate reports the first problem with the test's fields, naming the field.
func (ct ConformanceTest) Validate() error {
	switch {
	case !shortNameRE.MatchString(ct.ShortName):
		return fmt.Errorf("ShortName %q: must be UpperCamelCase ([A-Z][A-Za-z0-9]*)", ct.ShortName)
	case ct.Description == "":
		return fmt.Errorf("%s: Description is empty", ct.ShortName)
	case ct.Run == nil:
		return fmt.Errorf("%s: Run is nil", ct.ShortName)
	case ct.Source == "":
		return fmt.Errorf("%s: Source is empty", ct.ShortName)
	}
	switch ct.Profile {
	case ProfileEPP:
		if ct.Level != LevelMUST {
			return fmt.Errorf("%s: Level %q: the EPP profile holds only MUST rules", ct.ShortName, ct.Level)
		}
		if len(ct.Features) != 0 {
			return fmt.Errorf("%s: Features: the EPP profile is not feature-gated", ct.ShortName)
		}
	case ProfileEPPRouting:
		if ct.Level == LevelEppkit {
			return fmt.Errorf("%s: Level eppkit: eppkit rules belong to the EPP-Production (claimable) or Reference profile", ct.ShortName)
		}
		if len(ct.Features) == 0 {
			return fmt.Errorf("%s: Features: EPP-Routing tests need at least one feature", ct.ShortName)
		}
	case ProfileEPPProduction:
		if ct.Level == LevelMUST {
			return fmt.Errorf("%s: Level MUST: protocol rules belong to the EPP profile", ct.ShortName)
		}
		if len(ct.Features) == 0 {
			return fmt.Errorf("%s: Features: EPP-Production tests need at least one feature, so implementations claim them", ct.ShortName)
		}
		if !slices.ContainsFunc(ct.Features, func(f Feature) bool { return FeatureProfile(f) == ProfileEPPProduction }) {
			return fmt.Errorf("%s: Features: an EPP-Production test needs one of the EPP-Production features %v", ct.ShortName, ProductionFeatures)
		}
	case ProfileReference:
	default:
		return fmt.Errorf("%s: Profile %q: want one of %v", ct.ShortName, ct.Profile, Profiles)
	}
	switch ct.Level {
	case LevelMUST, LevelUpstream, LevelEppkit:
	default:
		return fmt.Errorf("%s: Level %q: want MUST, upstream or eppkit", ct.ShortName, ct.Level)
	}
	for _, f := range ct.Features {
		if !knownFeature(f) {
			return fmt.Errorf("%s: Features: unknown feature %q", ct.ShortName, f)
		}
	}
	for _, n := range ct.FormerNames {
		if !shortNameRE.MatchString(n) || n == ct.ShortName {
			return fmt.Errorf("%s: FormerNames: %q must be an UpperCamelCase name other than the ShortName", ct.ShortName, n)
		}
	}
	return nil
}

// ResolveName maps name to the ShortName of the test that has it as ShortName or as one of its
// FormerNames; renamed is true for a former name. An unknown name comes back unchanged.
func ResolveName(tests []ConformanceTest, name string) (shortName string, renamed bool) {
	for _, ct := range tests {
		if ct.ShortName == name {
			return name, false
		}
	}
	for _, ct := range tests {
		if slices.Contains(ct.FormerNames, name) {
			return ct.ShortName, true
		}
	}
	return name, false
}

func knownFeature(f Feature) bool {
	for _, k := range AllFeatures {
		if k == f {
			return true
		}
	}
	return false
}

var (
	registryMu sync.Mutex
	registry   = map[string]ConformanceTest{}
)

// Register adds a test to the registry. It panics on a duplicate ShortName or invalid fields:
// it is called from init(), where a mistake must stop the binary at once.
func Register(ct ConformanceTest) {
	if err := ct.Validate(); err != nil {
		panic("conformance.Register: " + err.Error())
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[ct.ShortName]; dup {
		panic("conformance.Register: duplicate ShortName " + ct.ShortName)
	}
	for _, other := range registry {
		for _, n := range append([]string{ct.ShortName}, ct.FormerNames...) {
			if slices.Contains(other.FormerNames, n) || (n != ct.ShortName && n == other.ShortName) {
				panic("conformance.Register: " + ct.ShortName + ": name " + n + " is also a name of " + other.ShortName)
			}
		}
	}
	registry[ct.ShortName] = ct
}

// All returns every registered test, sorted by Profile (in Profiles order) then ShortName.
func All() []ConformanceTest {
	registryMu.Lock()
	out := make([]ConformanceTest, 0, len(registry))
	for _, ct := range registry {
		out = append(out, ct)
	}
	registryMu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		pi, pj := profileIndex(out[i].Profile), profileIndex(out[j].Profile)
		if pi != pj {
			return pi < pj
		}
		return out[i].ShortName < out[j].ShortName
	})
	return out
}

func profileIndex(p Profile) int {
	for i, q := range Profiles {
		if q == p {
			return i
		}
	}
	return len(Profiles)
}
