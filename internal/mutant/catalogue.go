package mutant

import (
	"sort"
	"strings"
)

// Name names one mutant (the value of EPPKIT_MUTANT).
type Name string

// Kind says how a mutant is caught.
type Kind string

const (
	// BlackBox mutants run as the reference EPP under the conformance registry.
	BlackBox Kind = "conformance"
	// WhiteBox mutants run under a white-box Ginkgo suite (suites/<Suite>) built with the tag.
	WhiteBox Kind = "white-box"
)

// The mutants. Each breaks exactly one rule of SPEC.md in one place of reference/.
const (
	HeaderMetadataDisagree  Name = "header-metadata-disagree"
	SubsetIgnored           Name = "subset-ignored"
	NoEndpoints500          Name = "no-endpoints-500"
	StreamClosedAfterRefuse Name = "stream-closed-after-refusal"
	RefusalBreaksStream     Name = "refusal-breaks-stream"
	NotReadyPicked          Name = "not-ready-picked"
	BodyNotChunked          Name = "body-not-chunked"
	ContentLengthWrong      Name = "content-length-wrong"
	PrefixAffinityOff       Name = "prefix-affinity-off"
	QueueIgnored            Name = "queue-ignored"
	KVIgnored               Name = "kv-ignored"
	LoRAIgnored             Name = "lora-ignored"
	SLOIgnored              Name = "slo-ignored"
	CriticalShed            Name = "critical-shed"
	RemovedEndpointKept     Name = "removed-endpoint-kept"
	UsageSplitDonePanics    Name = "usage-split-done-panics"
	StaleEndpointKept       Name = "stale-endpoint-kept"
	RequestIDMissing        Name = "request-id-missing"
	ModelRewriteIgnored     Name = "model-rewrite-ignored"
	InputHeadersEchoed      Name = "input-headers-echoed"
	BadRequest500           Name = "bad-request-500"
	PluginStateScoreOnly    Name = "pluginstate-score-only"
	DAGMapOrder             Name = "dag-map-order"
	LegacyMatchOffByOne     Name = "legacy-match-off-by-one"
	ProfileHeaderMissing    Name = "profile-header-missing"
	RanksBeyondFirstDropped Name = "ranks-beyond-first-dropped"
	PrepareBudgetIgnored    Name = "prepare-budget-ignored"
)

// Mutant describes one mutant for the matrix.
type Mutant struct {
	// Name is the EPPKIT_MUTANT value.
	Name Name
	// Breaks is the rule it breaks, in words.
	Breaks string
	// Where is the hooked code (package and function).
	Where string
	// Kind is how it is run (BlackBox or WhiteBox).
	Kind Kind
	// Target is the conformance ShortName (BlackBox) or the Ginkgo spec text that targets the
	// rule (WhiteBox, matched as a substring of the full spec text).
	Target string
	// Suite is the white-box suite directory under suites/ (WhiteBox only).
	Suite string
	// NeedsAPIServer is true when the target test exercises the rule only with an endpoint source
	// that can change the pool (apiserver).
	NeedsAPIServer bool
}

var catalogue = []Mutant{
	{Name: HeaderMetadataDisagree, Breaks: "the pick header and the pick dynamic metadata are equal when both are set (SPEC §5.1)",
		Where: "reference/extproc schedule: the metadata names another endpoint", Kind: BlackBox, Target: "EPPPickHeaderAndMetadata"},
	{Name: SubsetIgnored, Breaks: "the pick stays inside the subset hint (SPEC §5.1)",
		Where: "reference/director HandleRequest: the hint's endpoints are not filtered (an empty hint still 503)", Kind: BlackBox, Target: "EPPSubsetHint"},
	{Name: NoEndpoints500, Breaks: "no eligible endpoint is answered with 503 (SPEC §5.1, §5.3)",
		Where: "reference/director StatusFor: ErrNoEndpoints maps to 500", Kind: BlackBox, Target: "EPPNoEligibleEndpoint503"},
	{Name: StreamClosedAfterRefuse, Breaks: "after a refusal the same ext_proc stream keeps serving (SPEC §5.2, eppkit)",
		Where: "reference/extproc Process: the stream ends (status OK) after an ImmediateResponse", Kind: BlackBox, Target: "ReferenceStreamSurvivesRefusal"},
	{Name: RefusalBreaksStream, Breaks: "a refused request never breaks the stream: it ends cleanly or keeps serving (SPEC §5.3)",
		Where: "reference/extproc Process: the stream fails with gRPC Internal after an ImmediateResponse", Kind: BlackBox, Target: "OpenAIRefusalKeepsServing"},
	{Name: NotReadyPicked, Breaks: "picks are ready endpoints of the pool (SPEC §5.1)",
		Where: "reference/discovery InferencePool reconcile: the Pod Ready condition is ignored", Kind: BlackBox, Target: "EPPPickIsReadyEndpoint", NeedsAPIServer: true},
	{Name: BodyNotChunked, Breaks: "the mutated body is returned in chunks of at most 62,000 bytes (SPEC §5.2)",
		Where: "reference/extproc schedule: the body goes back in one chunk", Kind: BlackBox, Target: "OpenAILargeBodyChunked"},
	{Name: ContentLengthWrong, Breaks: "Content-Length is set to the returned body's length (SPEC §5.2)",
		Where: "reference/extproc schedule: Content-Length is one byte long", Kind: BlackBox, Target: "OpenAILargeBodyChunked"},
	{Name: PrefixAffinityOff, Breaks: "requests sharing a long prefix go to the endpoint that served it (SPEC §6 PrefixCacheAffinity)",
		Where: "reference/plugins/prefix Scorer.Score: every endpoint scores 0", Kind: BlackBox, Target: "PrefixCacheAffinity"},
	{Name: QueueIgnored, Breaks: "a deep waiting queue keeps an endpoint's share ≤ 5% (SPEC §6 QueueAwareness)",
		Where: "reference/plugins/scorers queue-scorer: every endpoint scores 1", Kind: BlackBox, Target: "QueueAwareness"},
	{Name: KVIgnored, Breaks: "a nearly full KV cache keeps an endpoint's share ≤ 5% (SPEC §6 KVCacheAwareness)",
		Where: "reference/plugins/scorers kv-cache-utilization-scorer: every endpoint scores 1", Kind: BlackBox, Target: "KVCacheAwareness"},
	{Name: LoRAIgnored, Breaks: "requests for a running adapter go to its endpoint (SPEC §6 LoRAAffinity)",
		Where: "reference/plugins/scorers lora-affinity-scorer: every endpoint scores 1", Kind: BlackBox, Target: "LoRAAffinity"},
	{Name: SLOIgnored, Breaks: "requests with a TTFT SLO only fast endpoints meet go to fast endpoints (SPEC §6 PredictedLatency)",
		Where: "reference/director: the SLO headers are dropped before scheduling", Kind: BlackBox, Target: "PredictedLatency"},
	{Name: CriticalShed, Breaks: "only sheddable requests (priority < 0) are shed under saturation (SPEC §3, §6 RequestShedding)",
		Where: "reference/director HandleRequest: every request is shed when the pool is saturated", Kind: BlackBox, Target: "RequestShedding"},
	{Name: RemovedEndpointKept, Breaks: "an endpoint removed from the pool stops being picked (SPEC §6 EndpointChurn)",
		Where: "reference/discovery InferencePool onPod: a deleted or terminating Pod keeps its last Ready state", Kind: BlackBox, Target: "EndpointChurn", NeedsAPIServer: true},
	{Name: UsageSplitDonePanics, Breaks: "usage parsing never breaks a response, [DONE] split across chunks included (SPEC §5.2)",
		Where: "reference/extproc UsageParser: panics on a data: [DONE] event split across chunks", Kind: BlackBox, Target: "OpenAIResponseUsageRobust"},
	{Name: StaleEndpointKept, Breaks: "stale endpoints are filtered out unless every candidate is stale (SPEC §3, eppkit)",
		Where: "reference/director dropStale: returns every candidate", Kind: BlackBox, Target: "ReferenceStaleEndpointFiltered"},
	{Name: RequestIDMissing, Breaks: "x-request-id is generated when absent (SPEC §5.2)",
		Where: "reference/extproc schedule: the generated x-request-id is not set on the request", Kind: BlackBox, Target: "OpenAIRequestID"},
	{Name: ModelRewriteIgnored, Breaks: "x-gateway-model-name-rewrite rewrites the body's model (SPEC §5.2)",
		Where: "reference/director HandleRequest: the rewrite header is ignored", Kind: BlackBox, Target: "OpenAIModelNameRewrite"},
	{Name: InputHeadersEchoed, Breaks: "the header mutation never sets the x-gateway-* input headers back (SPEC §5.2)",
		Where: "reference/extproc schedule: x-gateway-inference-objective is set back", Kind: BlackBox, Target: "OpenAIInputHeadersNotEchoed"},
	{Name: BadRequest500, Breaks: "malformed bodies are refused with 400 (SPEC §5.2, §5.3)",
		Where: "reference/director StatusFor: ErrBadRequest maps to 500", Kind: BlackBox, Target: "OpenAIBadRequest400"},
	{Name: ProfileHeaderMissing, Breaks: "the response headers name the primary profile in x-eppkit-profile (SPEC §3, eppkit)",
		Where: "reference/extproc responseHeaders: x-eppkit-profile is not set", Kind: BlackBox, Target: "ReferenceProfileHeader"},
	{Name: RanksBeyondFirstDropped, Breaks: "every rank port (targetPort) of a Ready pod is an endpoint (GIE v1.5.0 api/v1 spec.targetPorts and pkg/epp/datastore; SPEC has no data-parallel rule)",
		Where: "reference/discovery PoolEndpoints: only the first targetPort of each pod becomes an endpoint", Kind: BlackBox, Target: "DataParallelRanks", NeedsAPIServer: true},
	{Name: PrepareBudgetIgnored, Breaks: "a PrepareData producer overrunning the phase budget does not hold the decision (SPEC §1.1, eppkit)",
		Where: "reference/framework Runtime.PrepareData: the budget timer is never selected, the phase waits for every plugin", Kind: BlackBox, Target: "ReferencePrepareDataBudget"},
	{Name: PluginStateScoreOnly, Breaks: "the prefix producer writes its plugin state in PrepareData, so the pick is indexed without a prefix scorer (GIE PR #2005, SPEC §1)",
		Where: "reference/plugins/prefix Producer.PrepareRequestData: no plugin-state write", Kind: WhiteBox, Suite: "pluginstate",
		Target: "the only profile has no prefix scorer should hold: PreRequest indexes the pick"},
	{Name: DAGMapOrder, Breaks: "independent PrepareData plugins run in name order, the same on every start (SPEC §1.1, eppkit)",
		Where: "reference/framework dag sortNodes: map iteration order", Kind: WhiteBox, Suite: "dag",
		Target: "should sort them identically, by name then type, on every start"},
	{Name: LegacyMatchOffByOne, Breaks: "the legacy and producer+scorer prefix plugins give equal match lengths (SPEC §2.3)",
		Where: "reference/plugins/legacyprefix index.match: one block short", Kind: WhiteBox, Suite: "equivalence",
		Target: "should give equal scores, equal picks and equal indexes on every request"},
}

// Catalogue returns every mutant, in matrix order (a copy).
func Catalogue() []Mutant { return append([]Mutant(nil), catalogue...) }

// Lookup returns the mutant named n.
func Lookup(n Name) (Mutant, bool) {
	for _, m := range catalogue {
		if m.Name == n {
			return m, true
		}
	}
	return Mutant{}, false
}

// Names returns every mutant name, sorted.
func Names() []string {
	out := make([]string, 0, len(catalogue))
	for _, m := range catalogue {
		out = append(out, string(m.Name))
	}
	sort.Strings(out)
	return out
}

// Parse splits a comma list of mutant names; an unknown name is an error naming it.
func Parse(list string) ([]Mutant, error) {
	var out []Mutant
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		m, ok := Lookup(Name(s))
		if !ok {
			return nil, &UnknownError{Name: s}
		}
		out = append(out, m)
	}
	return out, nil
}

// UnknownError is an unknown mutant name.
type UnknownError struct{ Name string }

func (e *UnknownError) Error() string {
	return "unknown mutant " + strings.TrimSpace(e.Name) + " (known: " + strings.Join(Names(), ", ") + ")"
}
