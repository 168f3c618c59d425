package framework

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"

	"k8s.io/utils/clock"
)

// TypedName identifies a plugin instance: Type is the registered plugin type (for example
// "prefix-cache-scorer"), Name the instance name from the config (defaults to Type).
type TypedName struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// String returns "name/type", the form upstream prints in logs and errors.
func (t TypedName) String() string { return t.Name + "/" + t.Type }

// Plugin is implemented by every plugin.
type Plugin interface {
	// TypedName returns the plugin's type and instance name.
	TypedName() TypedName
}

// Handle gives a plugin factory and a running plugin access to the framework it lives in.
type Handle interface {
	// Context is cancelled when the EPP shuts down; background goroutines of plugins stop with it.
	Context() context.Context
	// PluginState is the per-request store shared by all extension points (SPEC §1).
	PluginState() *PluginState
	// Plugin returns another plugin instance of the same config by name.
	Plugin(name string) (Plugin, bool)
	// Clock is the time source; tests inject k8s.io/utils/clock/testing.FakeClock.
	Clock() clock.WithTicker
	// Seed is the base seed for every random choice a plugin makes (pickers, exploration).
	Seed() int64
	// Logger is the structured logger, already annotated with the plugin's name where relevant.
	Logger() *slog.Logger
	// Endpoints returns the metadata of every endpoint currently in the pool (any readiness).
	// Plugins with per-endpoint state use it to purge endpoints that left.
	Endpoints() []*EndpointMetadata
}

// FactoryFunc builds a plugin of one type. name is the instance name, params the raw JSON of the
// plugin's `parameters` (nil when absent). A factory must decode params strictly (unknown fields
// are errors; see DecodeParameters) and return an error naming the offending field.
type FactoryFunc func(name string, params json.RawMessage, h Handle) (Plugin, error)

// DataProducer is a plugin that produces per-endpoint attributes. Produces maps each data key it
// writes to a zero value of the attribute's type; the DAG compares these types with
// reflect.TypeOf on every key it shares with a consumer (SPEC §1.1).
type DataProducer interface {
	Plugin
	Produces() map[string]any
}

// DataConsumer is a plugin that reads per-endpoint attributes. Consumes maps each data key it
// reads to a zero value of the attribute's type. Any plugin (scorer, filter, producer) may be a
// consumer; every consumer is a node of the PrepareData DAG.
type DataConsumer interface {
	Plugin
	Consumes() map[string]any
}

// PrepareDataPlugin runs in the PrepareData phase, before admission and scheduling.
// PrepareRequestData writes attributes onto the given endpoints with Endpoint.Put. The endpoints
// it receives are staged views: what it writes reaches the request's snapshots only if it returns
// within the phase budget (SPEC §1.1). It must stop when ctx is cancelled.
//
// Returning an error wrapping ErrBadRequest ends the request with 400; any other error is logged
// and counted and the request continues (fail open).
type PrepareDataPlugin interface {
	DataProducer
	PrepareRequestData(ctx context.Context, req *LLMRequest, endpoints []*Endpoint) error
}

// Admitter decides whether a request may be scheduled. A non-nil error refuses the request; wrap
// ErrShed (429) or ErrBadRequest (400) to choose the status, anything else maps to 500.
type Admitter interface {
	Plugin
	AdmitRequest(ctx context.Context, req *LLMRequest, endpoints []*Endpoint) error
}

// Filter narrows the candidate endpoints of one scheduling profile. It returns a subset of
// endpoints, in their input order.
type Filter interface {
	Plugin
	Filter(ctx context.Context, cycle *CycleState, req *LLMRequest, endpoints []*Endpoint) []*Endpoint
}

// Scorer scores the candidate endpoints of one scheduling profile. The result maps
// Endpoint.Key() to a score; the scheduler clamps every score to [0,1] (NaN counts as 0) and
// multiplies it by the scorer's weight. An endpoint missing from the map scores 0.
type Scorer interface {
	Plugin
	Score(ctx context.Context, cycle *CycleState, req *LLMRequest, endpoints []*Endpoint) map[string]float64
}

// IndexedScorer is an optional interface of a Scorer: ScoreIndexed writes the score of
// endpoints[i] into out[i] (len(out) == len(endpoints); out is zeroed by the caller and an entry
// left untouched scores 0) instead of building a map. For every i it must write exactly the value
// Score would map endpoints[i].Key() to, or leave 0 where Score would leave the key out. The
// scheduler calls it instead of Score when the candidates' keys are distinct (then a map keyed by
// Key and a slice by position hold the same scores), which saves the map and one key lookup per
// candidate on every request. Added for the reference EPP's decision path.
type IndexedScorer interface {
	Scorer
	ScoreIndexed(ctx context.Context, cycle *CycleState, req *LLMRequest, endpoints []*Endpoint, out []float64)
}

// ScoredEndpoint is a candidate with its weighted total score.
type ScoredEndpoint struct {
	Endpoint *Endpoint
	Score    float64
}

// Picker chooses the target endpoints of one profile from the scored candidates. The result's
// TargetEndpoints are ordered: the first is the pick, the rest are fallbacks.
type Picker interface {
	Plugin
	Pick(ctx context.Context, cycle *CycleState, scored []ScoredEndpoint) *ProfileRunResult
}

// ProfileHandler chooses which scheduling profiles run, in rounds, and turns their results into
// the request's SchedulingResult.
type ProfileHandler interface {
	Plugin
	// Pick returns the profiles to run in the next round, given the profiles of the config and the
	// results so far (nil entries for profiles that ran and found no endpoint). An empty result ends
	// the loop.
	Pick(ctx context.Context, cycle *CycleState, req *LLMRequest, profiles map[string]*SchedulerProfile,
		results map[string]*ProfileRunResult) map[string]*SchedulerProfile
	// ProcessResults builds the final result. It returns an error when the results cannot make one
	// (for example no profile found an endpoint).
	ProcessResults(ctx context.Context, cycle *CycleState, req *LLMRequest,
		results map[string]*ProfileRunResult) (*SchedulingResult, error)
}

// PreRequest runs after scheduling, before the request is forwarded, with the final result.
type PreRequest interface {
	Plugin
	PreRequest(ctx context.Context, req *LLMRequest, result *SchedulingResult)
}

// Response describes the model server's response as the EPP sees it.
type Response struct {
	// RequestID is the request's LLMRequest.RequestID (EPP-internal, SPEC §9.2).
	RequestID string
	Headers   map[string]string
	// Endpoint is the endpoint that served the request (from the served-endpoint metadata when the
	// gateway sends it, otherwise the pick).
	Endpoint *EndpointMetadata
	// Usage is filled once it has been parsed from the body (SSE usage chunk or JSON body).
	Usage *Usage
	// EndOfStream is true on the last body chunk.
	EndOfStream bool
	// SetHeaders are headers ResponseHeader plugins ask to set on the response the client gets
	// (SetHeader; for example session affinity's token). Keys lower case.
	SetHeaders map[string]string
}

// SetHeader asks for the response header key (lower-cased) to be set to value on the response
// the client gets. Only a ResponseHeader plugin's call takes effect (the headers are sent then).
func (r *Response) SetHeader(key, value string) {
	if r.SetHeaders == nil {
		r.SetHeaders = map[string]string{}
	}
	r.SetHeaders[strings.ToLower(key)] = value
}

// Usage is the model server's token accounting for one response, in tokens, read in the
// response's own API shape (SPEC §9.1: OpenAI prompt_tokens/completion_tokens, Anthropic and
// Responses input_tokens/output_tokens). A nil count is one the response did not carry: absent
// usage is absent, never a zero.
type Usage struct {
	// PromptTokens is prompt_tokens (OpenAI) or input_tokens (Anthropic, Responses).
	PromptTokens *int `json:"prompt_tokens,omitempty"`
	// CompletionTokens is completion_tokens (OpenAI) or output_tokens (Anthropic, Responses).
	CompletionTokens *int `json:"completion_tokens,omitempty"`
	// TotalTokens is total_tokens, when the response carries it.
	TotalTokens *int `json:"total_tokens,omitempty"`
	// CachedTokens is prompt_tokens_details.cached_tokens (OpenAI),
	// input_tokens_details.cached_tokens (Responses) or cache_read_input_tokens (Anthropic).
	CachedTokens *int `json:"cached_tokens,omitempty"`
}

// Completion returns CompletionTokens and whether the response carried it.
func (u *Usage) Completion() (int, bool) {
	if u == nil || u.CompletionTokens == nil {
		return 0, false
	}
	return *u.CompletionTokens, true
}

// Prompt returns PromptTokens and whether the response carried it.
func (u *Usage) Prompt() (int, bool) {
	if u == nil || u.PromptTokens == nil {
		return 0, false
	}
	return *u.PromptTokens, true
}

// ResponseHeaderPlugin runs when the response headers arrive.
type ResponseHeaderPlugin interface {
	Plugin
	ResponseHeader(ctx context.Context, req *LLMRequest, resp *Response)
}

// ResponseBodyPlugin runs once per streamed response body chunk, with the raw chunk bytes.
type ResponseBodyPlugin interface {
	Plugin
	ResponseBody(ctx context.Context, req *LLMRequest, resp *Response, chunk []byte)
}

// ResponseCompletePlugin runs once when the response has ended (or the request was abandoned, or
// its response aborted — trailers with a non-zero grpc-status, a failed request — in which cases
// resp.EndOfStream is false).
type ResponseCompletePlugin interface {
	Plugin
	ResponseComplete(ctx context.Context, req *LLMRequest, resp *Response)
}

// ProducerParametersCarrier is implemented by a consumer that carries parameters meant for the
// default producer of a key it consumes. It exists for old configs: an upstream
// `prefix-cache-scorer` with `blockSize`, `maxPrefixBlocksToMatch`, ... from before the producer
// split (SPEC §2.3). When the runtime auto-creates the default producer of key, it builds it with
// these parameters and logs a deprecation warning; when a configured producer of key exists and
// its parameters disagree with these on any field, building the runtime fails naming both plugins.
type ProducerParametersCarrier interface {
	DataConsumer
	// ProducerParameters returns the JSON object of parameters for key's producer, or nil.
	ProducerParameters(key string) json.RawMessage
}
