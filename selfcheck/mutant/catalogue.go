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

// Via says where a mutant lives: how it breaks its rule without touching the code that keeps it.
type Via string

const (
	// Interceptor mutants rewrite the ext_proc messages between the gateway and the EPP
	// (selfcheck/mutant/interceptor), so they run in front of any EPP, the upstream EPP v1.5.0 included.
	Interceptor Via = "ext_proc interceptor"
	// Plugin mutants are wrapper plugins, decorated over the real plugin type in the registry of
	// a mutant build (selfcheck/mutant/wrap.Registry).
	Plugin Via = "wrapper plugin"
	// EndpointSource mutants decorate the InferencePool endpoint source's informer events
	// (selfcheck/mutant/wrap.PoolSource).
	EndpointSource Via = "endpoint source decorator"
	// MetricsSource mutants decorate the metrics source (selfcheck/mutant/wrap.Collector).
	MetricsSource Via = "metrics source decorator"
	// ModelRewriteSource mutants decorate the pool's model rewrite rules
	// (selfcheck/mutant/wrap.ModelRewrites).
	ModelRewriteSource Via = "model rewrite decorator"
	// LeaderElection mutants decorate the reference's leader election (selfcheck/mutant/wrap.Reference).
	LeaderElection Via = "leader election decorator"
	// ServerOptions mutants change one of the reference server's options (selfcheck/mutant/wrap.Reference).
	ServerOptions Via = "server options"
	// Hook mutants are one of the at most three `if mutant.On` hooks left in reference/, where no
	// wrapper reaches (each hook's comment says why).
	Hook Via = "hook in reference/"
)

// The mutants. Each breaks exactly one rule of SPEC.md.
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
	// The fakes' view of vLLM (issue 17, SPEC §7.1).
	KVLegacyNameOnly    Name = "kv-legacy-name-only"
	KVCurrentNameOnly   Name = "kv-current-name-only"
	LoRAFamilyRequired  Name = "lora-family-required"
	EngineSeriesIgnored Name = "engine-series-ignored"
	// The production request surface (issue 16, SPEC §2.1, §9).
	PromptListRefused       Name = "prompt-list-refused"
	EmbeddingsAsCompletions Name = "embeddings-as-completions"
	ResponsesRefused        Name = "responses-refused"
	MessagesSystemUnhashed  Name = "messages-system-unhashed"
	TokenIDsUnhashed        Name = "token-ids-unhashed"
	PartsHashedAsText       Name = "parts-hashed-as-text"
	PartialBlockDropped     Name = "partial-block-dropped"
	StateKeyedByXRequestID  Name = "state-keyed-by-x-request-id"
	HeadersAppended         Name = "headers-appended"
	DroppedReasonEverywhere Name = "dropped-reason-everywhere"
	ModelRewriteNotSplit    Name = "model-rewrite-not-split"
	// The protocol as GIE v1.6.2 states it (issue 30).
	StreamedBodyDropped      Name = "streamed-body-dropped"
	ResponseHeldToEnd        Name = "response-held-to-end"
	HintFirstEntryOnly       Name = "hint-first-entry-only"
	HintTrustedOverReadiness Name = "hint-trusted-over-readiness"
	ReadyBeforeSync          Name = "ready-before-sync"
	HintBeyondPool           Name = "hint-beyond-pool"
	// Failures in production (issue 33).
	FollowerServing     Name = "follower-serving"
	DrainDropsInFlight  Name = "drain-drops-in-flight"
	PoolSelectorIgnored Name = "pool-selector-ignored"
	// KV-cache events (issue 35).
	PreciseEventsIgnored   Name = "precise-events-ignored"
	PreciseRemovalsIgnored Name = "precise-removals-ignored"
	// The protocol bugs real EPPs ship that used to stop the harness instead of failing a test
	// (issue 32).
	MetadataWithoutPort Name = "metadata-without-port"
	BodyNotStreamedBack Name = "body-not-streamed-back"
	RefusalAsGRPCError  Name = "refusal-as-grpc-error"
	LatePick            Name = "late-pick"
	ServingBeforeReady  Name = "serving-before-endpoints"
	// Today's request surface (issue 31, SPEC §10: llm-d-router v0.10.0).
	LLMDRewriteHeaderIgnored     Name = "llmd-rewrite-header-ignored"
	LLMDObjectiveHeaderIgnored   Name = "llmd-objective-header-ignored"
	LegacyControlHeaderWins      Name = "legacy-control-header-wins"
	LLMDInputHeadersEchoed       Name = "llmd-input-headers-echoed"
	MalformedObjectiveIgnored    Name = "malformed-objective-ignored"
	ModelNameNotRestored         Name = "model-name-not-restored"
	ModelNameRestoredPerChunk    Name = "model-name-restored-per-chunk"
	EndpointScoresPickedOnly     Name = "endpoint-scores-picked-only"
	SessionTokenIgnored          Name = "session-token-ignored"
	SessionTokenNotReturned      Name = "session-token-not-returned"
	MalformedSessionTokenIgnored Name = "malformed-session-token-ignored"
	FCPriorityIgnored            Name = "fc-priority-ignored"
	FCTTLNeverExpires            Name = "fc-ttl-never-expires"
	FCFullBandWaits              Name = "fc-full-band-waits"
	FCCancelNotPropagated        Name = "fc-cancel-not-propagated"
	FCDroppedReasonMissing       Name = "fc-dropped-reason-missing"
	LLMDGroupIgnored             Name = "llmd-group-ignored"
	ConversationsRefused         Name = "conversations-refused"
	RenderRefused                Name = "render-refused"
	ImagesRefused                Name = "images-refused"
	CountTokensModelRequired     Name = "count-tokens-model-required"
	GenerateRefused              Name = "generate-refused"
	// vLLM's gRPC engine API (issue 35 item 4).
	GRPCRefused        Name = "grpc-refused"
	GRPCPromptUnhashed Name = "grpc-prompt-unhashed"
)

// Mutant describes one mutant for the matrix.
type Mutant struct {
	// Name is the EPPKIT_MUTANT value.
	Name Name
	// Breaks is the rule it breaks, in words.
	Breaks string
	// Via is where the mutant lives (Interceptor, Plugin, EndpointSource, MetricsSource,
	// ModelRewriteSource, Hook).
	Via Via
	// Where says what the mutant changes, and where.
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
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the pick metadata is replaced by an earlier pick of the EPP, so header and metadata disagree", Kind: BlackBox, Target: "EPPPickHeaderAndMetadata"},
	{Name: SubsetIgnored, Breaks: "the pick stays inside the subset hint (SPEC §5.1)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: a non-empty subset hint is removed from the metadata the EPP receives (an empty hint still reaches it)", Kind: BlackBox, Target: "EPPSubsetHint"},
	{Name: NoEndpoints500, Breaks: "no eligible endpoint is answered with 503 (SPEC §5.1, §5.3)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: an ImmediateResponse 503 reaches the gateway as 500", Kind: BlackBox, Target: "EPPNoEligibleEndpoint503"},
	{Name: StreamClosedAfterRefuse, Breaks: "after a refusal the same ext_proc stream keeps serving (SPEC §5.2, eppkit)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the stream ends (status OK) after an ImmediateResponse", Kind: BlackBox, Target: "StreamSurvivesRefusal"},
	{Name: RefusalBreaksStream, Breaks: "a refused request never breaks the stream: it ends cleanly or keeps serving (SPEC §5.3)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the stream fails with gRPC Internal after an ImmediateResponse", Kind: BlackBox, Target: "OpenAIRefusalKeepsServing"},
	{Name: NotReadyPicked, Breaks: "picks are ready endpoints of the pool (SPEC §5.1)",
		Via: EndpointSource, Where: "selfcheck/mutant/wrap PoolSource: every Pod event reads as Ready", Kind: BlackBox, Target: "EPPPickIsReadyEndpoint", NeedsAPIServer: true},
	{Name: BodyNotChunked, Breaks: "the mutated body is returned in chunks of at most 62,000 bytes (SPEC §5.2)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the streamed body responses are merged into one chunk", Kind: BlackBox, Target: "OpenAILargeBodyChunked"},
	{Name: ContentLengthWrong, Breaks: "Content-Length is set to the returned body's length (SPEC §5.2)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the Content-Length the EPP sets is one byte too long", Kind: BlackBox, Target: "OpenAILargeBodyChunked"},
	{Name: PrefixAffinityOff, Breaks: "requests sharing a long prefix go to the endpoint that served it (SPEC §6 PrefixCacheAffinity)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: prefix-cache-scorer wrapped, every endpoint scores 0", Kind: BlackBox, Target: "PrefixCacheAffinity"},
	{Name: QueueIgnored, Breaks: "a deep waiting queue keeps an endpoint's share ≤ 5% (SPEC §6 QueueAwareness)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: queue-scorer wrapped, every endpoint scores 1", Kind: BlackBox, Target: "QueueAwareness"},
	{Name: KVIgnored, Breaks: "a nearly full KV cache keeps an endpoint's share ≤ 5% (SPEC §6 KVCacheAwareness)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: kv-cache-utilization-scorer wrapped, every endpoint scores 1", Kind: BlackBox, Target: "KVCacheAwareness"},
	{Name: LoRAIgnored, Breaks: "requests for a running adapter go to its endpoint (SPEC §6 LoRAAffinity)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: lora-affinity-scorer wrapped, every endpoint scores 1", Kind: BlackBox, Target: "LoRAAffinity"},
	{Name: SLOIgnored, Breaks: "requests with a TTFT SLO only fast endpoints meet go to fast endpoints (SPEC §6 PredictedLatency)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the SLO headers x-slo-ttft-ms and x-slo-tpot-ms never reach the EPP", Kind: BlackBox, Target: "PredictedLatency"},
	{Name: CriticalShed, Breaks: "only sheddable requests (priority < 0) are shed under saturation (SPEC §3, §6 RequestShedding)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: every request reaches the EPP as the sheddable InferenceObjective", Kind: BlackBox, Target: "RequestShedding"},
	{Name: RemovedEndpointKept, Breaks: "an endpoint removed from the pool stops being picked (SPEC §6 EndpointChurn)",
		Via: EndpointSource, Where: "selfcheck/mutant/wrap PoolSource: Pod deletions (graceful or not) never reach the source", Kind: BlackBox, Target: "EndpointChurn", NeedsAPIServer: true},
	{Name: UsageSplitDonePanics, Breaks: "usage parsing never breaks a response, [DONE] split across chunks included (SPEC §5.2)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the stream fails (gRPC Internal) when an SSE response chunk ends inside data: [DONE], as an EPP whose usage parser crashes", Kind: BlackBox, Target: "OpenAIResponseUsageRobust"},
	{Name: StaleEndpointKept, Breaks: "stale endpoints are filtered out unless every candidate is stale (SPEC §3, eppkit)",
		Via: MetricsSource, Where: "selfcheck/mutant/wrap Collector: no endpoint is ever stale", Kind: BlackBox, Target: "StaleEndpointFiltered"},
	{Name: RequestIDMissing, Breaks: "x-request-id is generated when absent (SPEC §5.2)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the x-request-id the EPP generates is removed from its header mutation", Kind: BlackBox, Target: "OpenAIRequestID"},
	{Name: ModelRewriteIgnored, Breaks: "x-gateway-model-name-rewrite rewrites the body's model (SPEC §5.2)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: x-gateway-model-name-rewrite never reaches the EPP", Kind: BlackBox, Target: "OpenAIModelNameRewrite"},
	{Name: InputHeadersEchoed, Breaks: "the header mutation never sets the x-gateway-* input headers back (SPEC §5.2)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: x-gateway-inference-objective is set back in the request-headers response", Kind: BlackBox, Target: "OpenAIInputHeadersNotEchoed"},
	{Name: BadRequest500, Breaks: "malformed bodies are refused with 400 (SPEC §5.2, §5.3)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: an ImmediateResponse 400 reaches the gateway as 500", Kind: BlackBox, Target: "OpenAIBadRequest400"},
	{Name: ProfileHeaderMissing, Breaks: "the response headers name the primary profile in x-eppkit-profile (SPEC §3, eppkit)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: x-eppkit-profile is removed from the response-headers response", Kind: BlackBox, Target: "ReferenceProfileHeader"},
	{Name: RanksBeyondFirstDropped, Breaks: "every rank port (targetPort) of a Ready pod is an endpoint (GIE v1.5.0 api/v1 spec.targetPorts and pkg/epp/datastore; SPEC has no data-parallel rule)",
		Via: EndpointSource, Where: "selfcheck/mutant/wrap PoolSource: the InferencePool reads as having only its first targetPort", Kind: BlackBox, Target: "DataParallelRanks", NeedsAPIServer: true},
	{Name: KVLegacyNameOnly, Breaks: "the KV-cache gauge is read under the name the model server exports, vllm:kv_cache_usage_perc on current vLLM (SPEC §6 KVCacheAwareness, §7.1)",
		Via: MetricsSource, Where: "selfcheck/mutant/wrap Collector: KV use read only from vllm:gpu_cache_usage_perc (vLLM before v0.10), no fallback", Kind: BlackBox, Target: "KVCacheAwareness"},
	{Name: KVCurrentNameOnly, Breaks: "the KV-cache gauge is read under vLLM's name before v0.10, vllm:gpu_cache_usage_perc, when the current one is missing (SPEC §7.1, eppkit)",
		Via: MetricsSource, Where: "selfcheck/mutant/wrap Collector: KV use read only from vllm:kv_cache_usage_perc, no fallback (upstream v1.5.0's default)", Kind: BlackBox, Target: "KVCacheLegacyMetricName"},
	{Name: LoRAFamilyRequired, Breaks: "model servers without LoRA (no vllm:lora_requests_info) are still routed by their load (SPEC §6 LoRAAffinity, §7.1; llm-d-router #926)",
		Via: MetricsSource, Where: "selfcheck/mutant/wrap Collector: a scrape without the vllm:lora_requests_info family fails as a whole", Kind: BlackBox, Target: "LoRAAffinity"},
	{Name: EngineSeriesIgnored, Breaks: "a server's data-parallel engine series are summed into its load (SPEC §7.1, eppkit; GIE #2950)",
		Via: MetricsSource, Where: "selfcheck/mutant/wrap Collector: the engine label is never looked for, so each family's first series (engine 0) is read, as upstream v1.5.0", Kind: BlackBox, Target: "EngineSeriesSummed"},
	{Name: PrepareBudgetIgnored, Breaks: "a PrepareData producer overrunning the phase budget does not hold the decision (SPEC §1.1, eppkit)",
		Via: Hook, Where: "reference/framework Runtime.PrepareData: the budget timer is never selected, the phase waits for every plugin", Kind: BlackBox, Target: "ReferencePrepareDataBudget"},
	{Name: PromptListRefused, Breaks: "a completions prompt given as an array of strings is routed (SPEC §9.1, upstream)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: a /v1/completions body whose prompt is not a string is answered with 400 \"prompt must be a string\" (the EPP never answers it)", Kind: BlackBox, Target: "OpenAICompletionsPromptList"},
	{Name: EmbeddingsAsCompletions, Breaks: "/v1/embeddings is recognised by its path and routed (SPEC §9.1, upstream)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: a /v1/embeddings request is answered with 400 \"field prompt is required for completions\", as an EPP whose parser falls through to completions", Kind: BlackBox, Target: "OpenAIEmbeddingsRouted"},
	{Name: ResponsesRefused, Breaks: "/v1/responses (OpenAI Responses) is recognised by its path and routed (SPEC §9.1, upstream)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: a /v1/responses request is answered with 400, as an EPP that parses it as completions", Kind: BlackBox, Target: "OpenAIResponsesRouted"},
	{Name: MessagesSystemUnhashed, Breaks: "an Anthropic Messages request's system prompt takes part in the prefix hash (SPEC §9.1, eppkit)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: approx-prefix-cache-producer wrapped, it hashes a /v1/messages request without its system prompt (as an EPP that parses it as chat)", Kind: BlackBox, Target: "AnthropicMessagesRouted"},
	{Name: TokenIDsUnhashed, Breaks: "token-id prompts are hashed by their ids, so they get prefix affinity (SPEC §9.1, §2.1, eppkit)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: approx-prefix-cache-producer wrapped, token-id prompts and inputs reach it without their ids (no blocks)", Kind: BlackBox, Target: "TokenIDPrompts"},
	{Name: PartsHashedAsText, Breaks: "every chat content part reaches the prefix hash by its identity, inline data by digest (SPEC §9.1, eppkit)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: approx-prefix-cache-producer built with v1.5.0's chat encoding (prefix.HashCompat.V150Chat: inline data as text, cut at 256 blocks; file parts dropped)", Kind: BlackBox, Target: "MultimodalPrefixIdentity"},
	{Name: PartialBlockDropped, Breaks: "the trailing partial block is hashed (SPEC §2.1; GIE PR #2823)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: approx-prefix-cache-producer built without the trailing partial block (prefix.HashCompat.NoPartialBlock, v1.5.0)", Kind: BlackBox, Target: "PartialBlockHashed"},
	{Name: StateKeyedByXRequestID, Breaks: "plugin state is keyed by the EPP's own request id, never by x-request-id (SPEC §9.2, GIE #1489)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: approx-prefix-cache-producer wrapped, its plugin state written and read under the request's x-request-id, so requests sharing one overwrite and delete each other's hashes", Kind: BlackBox, Target: "DuplicateRequestIDIsolated"},
	{Name: HeadersAppended, Breaks: "every header the EPP sets overwrites the request's value (append_action OVERWRITE_IF_EXISTS_OR_ADD, SPEC §9.3)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: every request header the EPP sets is marked APPEND_IF_EXISTS_OR_ADD (the proto's zero value)", Kind: BlackBox, Target: "OpenAIHeaderOverwrite"},
	{Name: DroppedReasonEverywhere, Breaks: "x-llm-d-request-dropped-reason marks only flow control's refusals, as llm-d-router v0.10.0 (docs/request-surface.md §2, eppkit)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: every ImmediateResponse without a dropped reason gets one (429 rejected-saturated, 503 rejected-no-endpoints, others rejected-shutting-down), as an EPP that marks every refusal", Kind: BlackBox, Target: "ReferenceRefusalReasonHeader"},
	{Name: ModelRewriteNotSplit, Breaks: "an InferenceModelRewrite's targets share requests by weight (SPEC §9.4, upstream)",
		Via: ModelRewriteSource, Where: "selfcheck/mutant/wrap ModelRewrites: the first target chosen for a model is kept for every later request for it", Kind: BlackBox, Target: "OpenAIModelRewriteWeighted"},
	{Name: StreamedBodyDropped, Breaks: "in streaming mode the request and response bodies are streamed through whole (GIE proposal 004 as of v1.6.2, streaming MUST)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: every streamed body response (request and response side) reaches the gateway with its data removed, end_of_stream kept", Kind: BlackBox, Target: "EPPStreamedBodiesIntact"},
	{Name: ResponseHeldToEnd, Breaks: "a streamed response is passed on chunk by chunk, not held until it ends (GIE proposal 004 as of v1.6.2, streaming MUST)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the EPP's response_body answers are held back until the one with end_of_stream, then sent together", Kind: BlackBox, Target: "EPPResponseStreamedPerChunk"},
	{Name: HintFirstEntryOnly, Breaks: "every entry of the subset hint counts, not only the first (GIE proposal 004, Endpoint Subset)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the subset hint reaches the EPP cut to its first entry", Kind: BlackBox, Target: "EPPSubsetHintPartial"},
	{Name: HintTrustedOverReadiness, Breaks: "a subset hint naming only endpoints that are not ready gets 503 (GIE proposal 004, Endpoint Subset: none eligible)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: an ImmediateResponse 503 to a request with a non-empty subset hint is replaced by a pick of the hint's first entry (header and metadata) and the request body, as an EPP that turns hint entries into destinations unchecked", Kind: BlackBox, Target: "EPPSubsetHintIneligible503", NeedsAPIServer: true},
	{Name: ReadyBeforeSync, Breaks: "readiness and the ext_proc health service are not SERVING before the datastore has synced (GIE proposal 004 as of v1.6.2, Health Checking)",
		Via: EndpointSource, Where: "selfcheck/mutant/wrap: the InferencePool source reports itself synced from the start, before its pool exists", Kind: BlackBox, Target: "EPPReadinessFollowsSync", NeedsAPIServer: true},
	{Name: HintBeyondPool, Breaks: "the endpoint list is scoped to the EPP's own InferencePool, whatever the hint names (GIE proposal 004 as of v1.6.2, GIE PR #3003)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: with a subset hint, the pick (header and metadata) is replaced by the hint's first entry", Kind: BlackBox, Target: "EPPEndpointListScopedToPool"},
	{Name: FollowerServing, Breaks: "a follower reports readiness and the ext_proc health service NOT_SERVING (GIE proposal 004 as of v1.6.2, Health Checking)",
		Via: LeaderElection, Where: "selfcheck/mutant/wrap: the leader election reports every replica the leader, while the Lease still has one holder", Kind: BlackBox, Target: "EPPReadinessOnlyOnLeader", NeedsAPIServer: true},
	{Name: DrainDropsInFlight, Breaks: "SIGTERM lets the streams in flight finish (llm-d-router v0.10.0 runWithGracefulShutdown; issue 33)",
		Via: ServerOptions, Where: "selfcheck/mutant/wrap: the drain timeout is 1 ms, so the drain cuts every request in flight at once", Kind: BlackBox, Target: "DrainFinishesInFlight"},
	{Name: PoolSelectorIgnored, Breaks: "the endpoint list is scoped to the EPP's own InferencePool (GIE proposal 004 as of v1.6.2, GIE PR #3003)",
		Via: EndpointSource, Where: "selfcheck/mutant/wrap PoolSource: the InferencePool reads with an empty selector, so every Ready pod of its namespace (another pool's too) is an endpoint", Kind: BlackBox, Target: "EPPEndpointListScopedToPool", NeedsAPIServer: true},
	{Name: MetadataWithoutPort, Breaks: "each pick value, header and dynamic metadata alike, is a comma list of ip:port (GIE proposal 004 Destination Endpoint; SPEC §5.1)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the dynamic metadata envoy.lb/x-gateway-destination-endpoint loses every port (the header keeps them)", Kind: BlackBox, Target: "EPPPickHeaderAndMetadata"},
	{Name: BodyNotStreamedBack, Breaks: "every request body chunk is answered with a streamed body mutation in FULL_DUPLEX_STREAMED mode, changed or not (GIE proposal 004 streaming; SPEC §5.1)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the EPP's streamed request_body responses are dropped when they return the body unchanged (an EPP that answers only a changed body, as in BUFFERED mode)", Kind: BlackBox, Target: "EPPStreamedBodiesIntact"},
	{Name: RefusalAsGRPCError, Breaks: "a request no endpoint is eligible for is refused with ImmediateResponse 503, never by ending the stream with a gRPC error (GIE proposal 004; SPEC §5.1, §5.3)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: an ImmediateResponse 503 becomes the end of the stream with gRPC status Unavailable (which Envoy answers with status_on_error, 500)", Kind: BlackBox, Target: "EPPNoEligibleEndpoint503"},
	{Name: LatePick, Breaks: "the pick is in place when Envoy's router chooses the host: on the request_headers response, or as metadata on the first streamed body response (GIE proposal 004; SPEC §5.1)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the pick header and metadata leave the request_headers response; the metadata rides on the last streamed body response instead", Kind: BlackBox, Target: "EPPPickBeforeRouting"},
	{Name: ServingBeforeReady, Breaks: "readiness SERVING means the EPP routes requests for its pool (GIE proposal 004 Health Checking; SPEC §5.1)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: for its first 6 s every request is refused with ImmediateResponse 503 \"no endpoints\" while the proxied health answers SERVING, as an EPP that says ready before its datastore has synced", Kind: BlackBox, Target: "EPPReadyRoutes"},
	{Name: LLMDRewriteHeaderIgnored, Breaks: "x-llm-d-model-name-rewrite rewrites the body's model as its alias does (SPEC §10, upstream: llm-d-router v0.10.0 pkg/epp/metadata/consts.go)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: x-llm-d-model-name-rewrite never reaches the EPP (an EPP that knows only GIE v1.5.0's names)", Kind: BlackBox, Target: "OpenAILLMDModelNameRewrite"},
	{Name: LLMDObjectiveHeaderIgnored, Breaks: "x-llm-d-inference-objective names the request's InferenceObjective as its alias does (SPEC §10, upstream)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: x-llm-d-inference-objective never reaches the EPP", Kind: BlackBox, Target: "RequestSheddingLLMDObjective"},
	{Name: LegacyControlHeaderWins, Breaks: "with a control header under both names the x-llm-d-* one wins (SPEC §10, upstream: GetLowerCaseHeaderValue)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the x-llm-d-* header is dropped when its GIE v1.5.0 alias is also sent", Kind: BlackBox, Target: "OpenAILLMDModelNameRewrite"},
	{Name: LLMDInputHeadersEchoed, Breaks: "the header mutation never sets the x-llm-d-* control headers back (SPEC §10, upstream: IsSystemOwnedHeader)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: x-llm-d-inference-objective is set back in the request-headers response", Kind: BlackBox, Target: "OpenAIInputHeadersNotEchoed"},
	{Name: MalformedObjectiveIgnored, Breaks: "an objective header that cannot name an object is refused with 400 naming it (docs/request-surface.md, eppkit)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: objective headers whose value is not a DNS-1123 subdomain are removed, so the EPP routes with the default objective as llm-d-router v0.10.0 does", Kind: BlackBox, Target: "ReferenceMalformedControlHeaders400"},
	{Name: ModelNameNotRestored, Breaks: "the response names the model the client sent after a rewrite, JSON and every SSE event (SPEC §10, upstream: GIE #2769, llm-d-router v0.10.0 rewriteModelName)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the response body reaches the gateway chunk for chunk as the model server sent it", Kind: BlackBox, Target: "OpenAIModelNameRestored"},
	{Name: ModelNameRestoredPerChunk, Breaks: "the model name is restored however the body is split into chunks (docs/request-surface.md §3, eppkit)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the response body is restored chunk by chunk with llm-d-router v0.10.0's byte replacement of \"model\":\"<target>\"", Kind: BlackBox, Target: "ReferenceModelNameRestoredAcrossChunks"},
	{Name: EndpointScoresPickedOnly, Breaks: "envoy.lb/x-gateway-destination-endpoint-scores names every candidate of the primary profile, picked or not (SPEC §10, upstream: llm-d-router v0.10.0 --emit-endpoint-scores)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the scores struct keeps only the picked endpoints", Kind: BlackBox, Target: "EndpointScores"},
	{Name: SessionTokenIgnored, Breaks: "a request that sends back its session token is served by the session's endpoint while it is a candidate (SPEC §10, upstream: session-affinity-filter)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: x-session-token never reaches the EPP", Kind: BlackBox, Target: "SessionAffinity"},
	{Name: SessionTokenNotReturned, Breaks: "every response carries the session token of the endpoint that served it (SPEC §10, upstream: WriteResponseHeader)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: x-session-token is removed from the response-headers response", Kind: BlackBox, Target: "SessionAffinity"},
	{Name: MalformedSessionTokenIgnored, Breaks: "an empty or undecodable x-session-token is refused with 400 naming it (docs/request-surface.md, eppkit)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: an empty or non-base64 x-session-token is removed, so the EPP starts a new session as llm-d-router v0.10.0 does", Kind: BlackBox, Target: "ReferenceMalformedControlHeaders400"},
	{Name: FCPriorityIgnored, Breaks: "when capacity returns, a higher priority band is dispatched first (SPEC §10, upstream: flow control dispatchCycle)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: objective headers never reach the EPP, so every request is in band 0 (first come, first served)", Kind: BlackBox, Target: "FlowControl"},
	{Name: FCTTLNeverExpires, Breaks: "a request that waits past its TTL is refused 429 rejected-ttl-expired (SPEC §10, upstream)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: refusals naming rejected-ttl-expired never reach the gateway, so the request waits on", Kind: BlackBox, Target: "FlowControl"},
	{Name: FCFullBandWaits, Breaks: "a request whose band is full is refused at once, 429 rejected-saturated (SPEC §10, upstream: hasCapacity)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: refusals naming rejected-saturated reach the gateway 4 s late, as from an EPP that queues past capacity", Kind: BlackBox, Target: "FlowControl"},
	{Name: FCCancelNotPropagated, Breaks: "a queued request whose client goes away leaves its band (SPEC §10, upstream: EvictedContextCancelled)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: the EPP's stream is not cancelled when the gateway's ends, so the request stays queued", Kind: BlackBox, Target: "FlowControl"},
	{Name: FCDroppedReasonMissing, Breaks: "flow control's refusals carry x-llm-d-request-dropped-reason (SPEC §10, upstream: translateFlowControlOutcome)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: x-llm-d-request-dropped-reason is removed from every ImmediateResponse", Kind: BlackBox, Target: "FlowControl"},
	{Name: LLMDGroupIgnored, Breaks: "InferenceObjectives and InferenceModelRewrites are read from llm-d.ai when it is served, the legacy group ignored (SPEC §10, upstream: populateWithDiscovery)",
		Via: EndpointSource, Where: "selfcheck/mutant/wrap PoolSource: the llm-d.ai API group reads as not served, so the source reads the legacy group", Kind: BlackBox, Target: "LLMDAPIGroup", NeedsAPIServer: true},
	{Name: ConversationsRefused, Breaks: "/v1/conversations is routed (SPEC §10, upstream: openai-parser)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: a /conversations request is answered with 400, as by an EPP that parses it as completions", Kind: BlackBox, Target: "OpenAIConversationsRouted"},
	{Name: RenderRefused, Breaks: "/v1/chat/completions/render and /v1/completions/render are routed (SPEC §10, upstream: openai-parser)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: a request to a path ending in /completions/render is answered with 400", Kind: BlackBox, Target: "OpenAIRenderRouted"},
	{Name: ImagesRefused, Breaks: "/v1/images/generations is routed (SPEC §10, upstream: openai-parser)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: an /images/generations request is answered with 400", Kind: BlackBox, Target: "OpenAIImagesGenerationsRouted"},
	{Name: CountTokensModelRequired, Breaks: "/v1/messages/count_tokens is routed with or without a model (SPEC §10, upstream: anthropic-parser raw payload)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: a count_tokens body without a model is answered with 400", Kind: BlackBox, Target: "AnthropicCountTokensRouted"},
	{Name: GenerateRefused, Breaks: "/inference/v1/generate is routed (SPEC §10, upstream: vllmhttp-parser)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: an /inference/v1/generate request is answered with 400", Kind: BlackBox, Target: "VLLMGenerateRouted"},
	{Name: GRPCRefused, Breaks: "vLLM gRPC Generate calls on an h2c pool are routed (llm-d-router v0.10.0 vllmgrpc-parser)",
		Via: Interceptor, Where: "selfcheck/mutant/interceptor: a /vllm.grpc.engine.VllmEngine/Generate request is answered with 400, as by an EPP that reads every body as JSON", Kind: BlackBox, Target: "VLLMGRPCRouted"},
	{Name: GRPCPromptUnhashed, Breaks: "a vLLM gRPC Generate call's token ids take part in the prefix hash (llm-d-router v0.10.0 vllmgrpc-parser: tokenized.input_ids become the prompt's token ids)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: approx-prefix-cache-producer wrapped, a gRPC Generate call reaches it without its prompt (routed as an opaque payload, no blocks)", Kind: BlackBox, Target: "VLLMGRPCRouted"},
	{Name: PluginStateScoreOnly, Breaks: "the prefix producer writes its plugin state in PrepareData, so the pick is indexed without a prefix scorer (GIE PR #2005, SPEC §1)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: approx-prefix-cache-producer wrapped, its plugin-state entry deleted when PrepareData ends", Kind: WhiteBox, Suite: "pluginstate",
		Target: "the only profile has no prefix scorer should hold: PreRequest indexes the pick"},
	{Name: DAGMapOrder, Breaks: "independent PrepareData plugins run in name order, the same on every start (SPEC §1.1, eppkit)",
		Via: Hook, Where: "reference/framework buildDataGraph: each layer of the sorted DAG is reordered by map iteration", Kind: WhiteBox, Suite: "dag",
		Target: "should sort them identically, by name then type, on every start"},
	{Name: LegacyMatchOffByOne, Breaks: "the legacy and producer+scorer prefix plugins give equal match lengths (SPEC §2.3)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: legacy-prefix-cache-scorer wrapped, every match one block short", Kind: WhiteBox, Suite: "equivalence",
		Target: "should give equal scores, equal picks and equal indexes on every request"},
	{Name: PreciseEventsIgnored, Breaks: "prefix routing follows the model servers' KV events: a prefix stored by traffic that bypassed the EPP attracts requests (llm-d-router v0.10.0 precise-prefix-cache-producer)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: precise-prefix-cache-producer wrapped, every endpoint matches 0 blocks", Kind: BlackBox, Target: "PrecisePrefixCache"},
	{Name: PreciseRemovalsIgnored, Breaks: "blocks a model server's events say it evicted stop attracting requests to it (llm-d-router v0.10.0 precise-prefix-cache-producer)",
		Via: Plugin, Where: "selfcheck/mutant/wrap: precise-prefix-cache-producer wrapped, each endpoint credited again with the best match it once had for a prompt (as if BlockRemoved and AllBlocksCleared were never applied)", Kind: BlackBox, Target: "PrecisePrefixCache"},
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
