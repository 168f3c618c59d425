package vllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"sigs.k8s.io/yaml"

	"github.com/eppkit/eppkit/fakes/vllm/kvevents"
)

// Response generation modes, as llm-d-inference-sim's --mode.
const (
	// ModeRandom answers with sentences from a fixed bank, chosen by the seeded random source.
	ModeRandom = "random"
	// ModeEcho answers with the prompt (completions) or the last message (chat completions).
	ModeEcho = "echo"
)

// Failure kinds. The first six are llm-d-inference-sim's --failure-types names
// (pkg/common/config.go); the last three are eppkit's and use names the simulator does not.
const (
	FailureRateLimit      = "rate_limit"
	FailureInvalidAPIKey  = "invalid_api_key"
	FailureContextLength  = "context_length"
	FailureServerError    = "server_error"
	FailureInvalidRequest = "invalid_request"
	FailureModelNotFound  = "model_not_found"
	// FailureAbort closes the connection in the middle of a response (after the headers and, when
	// streaming, after the first token chunk), without the terminating chunk.
	FailureAbort = "abort"
	// FailureReset resets the TCP connection (RST, SO_LINGER 0) before any response byte.
	FailureReset = "reset"
	// FailureSlowFirstByte delays the response headers by Config.SlowFirstByteDelay, then serves
	// the request normally.
	FailureSlowFirstByte = "slow-first-byte"
)

// SimFailureTypes are the simulator's failure kinds, in its order.
var SimFailureTypes = []string{FailureRateLimit, FailureInvalidAPIKey, FailureContextLength,
	FailureServerError, FailureInvalidRequest, FailureModelNotFound}

// AllFailureTypes are every failure kind this server injects: the simulator's and eppkit's.
var AllFailureTypes = append(slices.Clone(SimFailureTypes), FailureAbort, FailureReset, FailureSlowFirstByte)

// Duration is a time span that decodes from a Go duration string ("100ms", "1.5s") as
// llm-d-inference-sim v0.10.x does, or from a bare integer taken as milliseconds as the
// simulator's earlier releases did (its config.go had int fields "in milliseconds").
type Duration time.Duration

// ParseDuration parses s as a Go duration or, when s is a bare integer, as milliseconds.
// Negative values are returned as parsed; Config.Validate rejects them.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Millisecond) || n < math.MinInt64/int64(time.Millisecond) {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		return Duration(time.Duration(n) * time.Millisecond), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a Go duration such as 100ms or 1.5s, or an integer in ms", s)
	}
	return Duration(d), nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d as a Go duration.
func (d Duration) String() string { return time.Duration(d).String() }

// Set implements pflag.Value.
func (d *Duration) Set(s string) error {
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Type implements pflag.Value.
func (d *Duration) Type() string { return "duration" }

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a Go duration string or a number of milliseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return d.Set(s)
	}
	var ms float64
	if err := json.Unmarshal(b, &ms); err != nil {
		return fmt.Errorf("invalid duration %s: want a Go duration string or a number of ms", b)
	}
	if math.IsNaN(ms) || math.Abs(ms) > float64(math.MaxInt64/int64(time.Millisecond)) {
		return fmt.Errorf("duration %s ms out of range", b)
	}
	*d = Duration(time.Duration(ms * float64(time.Millisecond)))
	return nil
}

// LoraModule is one --lora-modules entry, a JSON object such as '{"name": "food-review-1"}'
// (llm-d-inference-sim pkg/common/config.go LoraModule).
type LoraModule struct {
	// Name is the adapter name requests use as "model".
	Name string `json:"name"`
	// Path is accepted and unused.
	Path string `json:"path,omitempty"`
	// BaseModelName, when set, must equal the base model.
	BaseModelName string `json:"base_model_name,omitempty"`
}

// LoraMetrics is one pinned vllm:lora_requests_info series of FakeMetrics.
type LoraMetrics struct {
	// Running is a comma-separated list of running adapters.
	Running string `json:"running"`
	// Waiting is a comma-separated list of waiting adapters.
	Waiting string `json:"waiting"`
	// Timestamp is the series value, unix seconds.
	Timestamp float64 `json:"timestamp"`
}

// UnmarshalJSON accepts an object, or a string holding the object's JSON (the simulator's YAML
// form lists loras as JSON strings).
func (l *LoraMetrics) UnmarshalJSON(b []byte) error {
	type plain LoraMetrics
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(s)
	}
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("fake-metrics.loras: %w", err)
	}
	*l = LoraMetrics(p)
	return nil
}

// FakeMetrics pins metric values instead of the engine's live ones, in llm-d-inference-sim's
// --fake-metrics JSON schema (pkg/common/config.go Metrics). Only the gauges and the LoRA info
// are modelled; the simulator's histogram and counter seeds are accepted and ignored.
type FakeMetrics struct {
	// RunningRequests pins vllm:num_requests_running.
	RunningRequests int64 `json:"running-requests"`
	// WaitingRequests pins vllm:num_requests_waiting.
	WaitingRequests int64 `json:"waiting-requests"`
	// KVCacheUsage pins vllm:kv_cache_usage_perc, a fraction in [0,1].
	KVCacheUsage float64 `json:"kv-cache-usage"`
	// Loras pins the vllm:lora_requests_info series.
	Loras []LoraMetrics `json:"loras,omitempty"`
	// Engines pins engine i's gauges to Engines[i] instead of the three above, with
	// DataParallelMode internal (engine-labelled series); engines past the list keep the values
	// above. An eppkit key (the simulator has no internal data parallelism).
	Engines []EngineGauges `json:"engines,omitempty"`
	// Ignored holds the simulator's other fake-metrics keys (histogram bucket values, token
	// samples, request-success-total), accepted and not modelled.
	Ignored map[string]json.RawMessage `json:"-"`
}

var fakeMetricsIgnoredKeys = []string{"ttft-buckets-values", "tpot-buckets-values",
	"request-prompt-tokens", "request-generation-tokens", "request-params-max-tokens",
	"request-max-generation-tokens", "request-success-total", "e2erl-buckets-values",
	"queue-time-buckets-values", "inf-time-buckets-values", "prefill-time-buckets-values",
	"decode-time-buckets-values"}

// UnmarshalJSON decodes the simulator's schema; unknown keys are an error naming the key.
func (f *FakeMetrics) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("fake-metrics: %w", err)
	}
	out := FakeMetrics{}
	for k, v := range raw {
		var err error
		switch k {
		case "running-requests":
			err = json.Unmarshal(v, &out.RunningRequests)
		case "waiting-requests":
			err = json.Unmarshal(v, &out.WaitingRequests)
		case "kv-cache-usage":
			err = json.Unmarshal(v, &out.KVCacheUsage)
		case "loras":
			err = json.Unmarshal(v, &out.Loras)
		case "engines":
			err = decodeStrict(v, &out.Engines)
		default:
			if !slices.Contains(fakeMetricsIgnoredKeys, k) {
				return fmt.Errorf("fake-metrics: unknown key %q", k)
			}
			if out.Ignored == nil {
				out.Ignored = map[string]json.RawMessage{}
			}
			out.Ignored[k] = v
		}
		if err != nil {
			return fmt.Errorf("fake-metrics.%s: %w", k, err)
		}
	}
	*f = out
	return nil
}

// MarshalJSON writes the modelled keys.
func (f FakeMetrics) MarshalJSON() ([]byte, error) {
	type plain struct {
		RunningRequests int64          `json:"running-requests"`
		WaitingRequests int64          `json:"waiting-requests"`
		KVCacheUsage    float64        `json:"kv-cache-usage"`
		Loras           []LoraMetrics  `json:"loras,omitempty"`
		Engines         []EngineGauges `json:"engines,omitempty"`
	}
	return json.Marshal(plain{f.RunningRequests, f.WaitingRequests, f.KVCacheUsage, f.Loras, f.Engines})
}

// EngineGauges are one data-parallel engine's pinned gauges (FakeMetrics.Engines), with the
// keys of FakeMetrics.
type EngineGauges struct {
	// RunningRequests pins the engine's vllm:num_requests_running.
	RunningRequests int64 `json:"running-requests"`
	// WaitingRequests pins the engine's vllm:num_requests_waiting.
	WaitingRequests int64 `json:"waiting-requests"`
	// KVCacheUsage pins the engine's KV-cache use, a fraction in [0,1].
	KVCacheUsage float64 `json:"kv-cache-usage"`
}

// forEngine returns the gauges engine i reports under the pin.
func (f *FakeMetrics) forEngine(i int) EngineGauges {
	if i < len(f.Engines) {
		return f.Engines[i]
	}
	return EngineGauges{f.RunningRequests, f.WaitingRequests, f.KVCacheUsage}
}

// decodeStrict decodes b into v, refusing unknown keys.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// Validate checks ranges as the simulator does.
func (f *FakeMetrics) Validate() error {
	if f.RunningRequests < 0 || f.WaitingRequests < 0 {
		return errors.New("fake-metrics: running-requests and waiting-requests cannot be negative")
	}
	if f.KVCacheUsage < 0 || f.KVCacheUsage > 1 || math.IsNaN(f.KVCacheUsage) {
		return fmt.Errorf("fake-metrics: kv-cache-usage must be in [0,1], got %v", f.KVCacheUsage)
	}
	for i, e := range f.Engines {
		if e.RunningRequests < 0 || e.WaitingRequests < 0 {
			return fmt.Errorf("fake-metrics: engines[%d]: running-requests and waiting-requests cannot be negative", i)
		}
		if e.KVCacheUsage < 0 || e.KVCacheUsage > 1 || math.IsNaN(e.KVCacheUsage) {
			return fmt.Errorf("fake-metrics: engines[%d]: kv-cache-usage must be in [0,1], got %v", i, e.KVCacheUsage)
		}
	}
	return nil
}

// Latency is the latency profile: the simulator's latency flags. Durations; the factor is ≥ 1.
type Latency struct {
	// TimeToFirstToken, when non-zero, replaces the prefill model (simulator rule).
	TimeToFirstToken       Duration `json:"time-to-first-token"`
	TimeToFirstTokenStdDev Duration `json:"time-to-first-token-std-dev"`
	// InterTokenLatency is the time between output tokens.
	InterTokenLatency       Duration `json:"inter-token-latency"`
	InterTokenLatencyStdDev Duration `json:"inter-token-latency-std-dev"`
	// PrefillOverhead + uncached prompt tokens × PrefillTimePerToken is the prefill time.
	PrefillOverhead     Duration `json:"prefill-overhead"`
	PrefillTimePerToken Duration `json:"prefill-time-per-token"`
	// PrefillTimeStdDev is the standard deviation of the prefill time.
	PrefillTimeStdDev Duration `json:"prefill-time-std-dev"`
	// TimeFactorUnderLoad is the load factor f: times scale by 1+(f−1)(running−1)/(maxSeqs−1).
	TimeFactorUnderLoad float64 `json:"time-factor-under-load"`
}

// Config configures one fake vLLM server (all its data-parallel ranks). JSON/YAML keys are the
// simulator's flag names. Zero values are not defaults: start from DefaultConfig.
type Config struct {
	// Port of rank 0; rank i listens on Port+i.
	Port int `json:"port"`
	// Model is the base model name (required).
	Model string `json:"model"`
	// ServedModelNames are the names the API accepts and reports for the base model; default
	// [Model]. The first is used in responses and in the model_name metric label.
	ServedModelNames []string `json:"served-model-name,omitempty"`
	// MaxLoras is the number of adapters that may run at once. 0 (the default) means LoRA is
	// off, as in vLLM without --enable-lora: no adapter can be loaded and /metrics has no
	// vllm:lora_requests_info. Validate turns 0 into 1 (vLLM's default max_loras) when
	// EnableLoRA is set or LoraModules lists adapters. The simulator's default is 1 and it
	// always exports the LoRA family; vLLM does not (vllm/v1/metrics/loggers.py registers it
	// only with a LoRA config).
	MaxLoras int `json:"max-loras"`
	// MaxCPULoras is the number of adapters kept loaded (≥ MaxLoras; 0 means MaxLoras).
	MaxCPULoras int `json:"max-cpu-loras"`
	// MaxNumSeqs is the number of running slots.
	MaxNumSeqs int `json:"max-num-seqs"`
	// MaxWaitingQueueLength bounds the FIFO waiting queue; a full queue answers 429.
	MaxWaitingQueueLength int `json:"max-waiting-queue-length"`
	// MaxModelLen is the context window in tokens (prompt + output).
	MaxModelLen int `json:"max-model-len"`
	// LoraModules are the adapters loaded at start.
	LoraModules []LoraModule `json:"lora-modules,omitempty"`
	Latency
	// Mode is ModeRandom or ModeEcho.
	Mode string `json:"mode"`
	// Seed seeds every random choice (jitter, random text, failure injection).
	Seed int64 `json:"seed"`
	// EnableKVCache turns on prefix caching in the engine (cached_tokens, prefix cache metrics).
	EnableKVCache bool `json:"enable-kvcache"`
	// EnablePromptTokensDetails is vLLM's --enable-prompt-tokens-details: completions and chat
	// usage carry prompt_tokens_details {cached_tokens} only with it, and only when some prompt
	// tokens were cached (vLLM's serving_completion.py and serving_chat.py: `if
	// self.enable_prompt_tokens_details and num_cached_tokens`). Off by default, as in vLLM, so an
	// EPP or client that needs the key meets its absence here first. The Responses API's
	// input_tokens_details is always present, as in vLLM.
	EnablePromptTokensDetails bool `json:"enable-prompt-tokens-details"`
	// KVCacheSize is the KV block pool size in blocks.
	KVCacheSize int `json:"kv-cache-size"`
	// BlockSize is tokens per KV block: 8, 16, 32, 64 or 128.
	BlockSize int `json:"block-size"`
	// FakeMetrics, when set, pins the gauges.
	FakeMetrics *FakeMetrics `json:"fake-metrics,omitempty"`
	// FailureInjectionRate is the percentage (0–100) of requests that fail.
	FailureInjectionRate int `json:"failure-injection-rate"`
	// FailureTypes restricts injected failures to these kinds; empty means the simulator's six.
	FailureTypes []string `json:"failure-types,omitempty"`
	// DPSize is the number of data-parallel ranks (1–8).
	DPSize int `json:"data-parallel-size"`
	// MaxRequestBodySizeMB bounds request bodies (1–512 MB); larger bodies get 413.
	MaxRequestBodySizeMB int `json:"max-request-body-size-mb"`
	// EmbeddingDim is the length of /v1/embeddings vectors when the request sets no dimensions
	// (the simulator's --default-embedding-dimensions; eppkit's --embedding-dim), at least 1.
	EmbeddingDim int `json:"default-embedding-dimensions"`

	// eppkit additions.

	// Host is the listen address (default 127.0.0.1; "" or 0.0.0.0 for all interfaces).
	Host string `json:"host"`
	// PodName and PodNamespace are reported in x-inference-pod / x-inference-namespace; defaults
	// from env POD_NAME and POD_NAMESPACE as the simulator reads them.
	PodName      string `json:"pod-name"`
	PodNamespace string `json:"pod-namespace"`
	// GaugeOnly skips the per-request histograms (TTFT, inter-token, E2E, queue time) to save
	// CPU in large benchmarks; gauges and counters stay.
	GaugeOnly bool `json:"gauge-only"`
	// SlowFirstByteDelay is how long the slow-first-byte failure holds the headers back.
	SlowFirstByteDelay Duration `json:"slow-first-byte-delay"`
	// EnableLoRA turns LoRA on with MaxLoras 1 when MaxLoras is 0 (vLLM's --enable-lora).
	EnableLoRA bool `json:"enable-lora"`
	// MetricsNames is the vLLM metric-name generation /metrics follows: MetricsCurrent (the
	// default), MetricsLegacy or MetricsBoth.
	MetricsNames string `json:"metrics-names"`
	// DataParallelMode is how DPSize ranks are served: DataParallelPorts (the default, the
	// simulator's: rank i is its own server on Port+i) or DataParallelInternal (vLLM's internal
	// load balancing: one server on Port in front of DPSize engines, each engine's series
	// labelled engine="0".."N-1"). Internal needs a v1 generation (not MetricsLegacy).
	DataParallelMode string `json:"data-parallel-mode"`
	// StreamFinish is where an OpenAI completions or chat stream puts each choice's
	// finish_reason: StreamFinishVLLM (the default) on the choice's last token chunk, as vLLM's
	// serving_chat.py and serving_completion.py do (the output that finishes carries its last
	// text and the reason), or StreamFinishOpenAI in a chunk of its own after the last token,
	// with an empty delta (chat) or empty text (completions), as OpenAI's API does.
	StreamFinish string `json:"stream-finish"`
	// KVEvents is vLLM's --kv-events-config (kvevents.Config): with enable_kv_cache_events each
	// engine publishes its KV-cache events over ZMQ (docs/fake-vllm.md). It needs
	// EnableKVCache: only prefix-cached blocks are reported.
	KVEvents kvevents.Config `json:"kv-events-config"`
	// HashSeed is vLLM's PYTHONHASHSEED for the events' block hashes (the simulator's
	// --hash-seed); when empty, env PYTHONHASHSEED, else Seed in decimal (vLLM would use random
	// bytes, which no subscriber could reproduce).
	HashSeed string `json:"hash-seed"`
	// UseVLLMMapEventFormat encodes events as maps instead of positional arrays (the
	// simulator's --use-vllm-map-event-format; kvevents.EncodeBatch).
	UseVLLMMapEventFormat bool `json:"use-vllm-map-event-format"`
}

// EventsHashSeed is the seed of the events' block hashes: HashSeed, else env PYTHONHASHSEED,
// else Seed in decimal.
func (c *Config) EventsHashSeed() string {
	if c.HashSeed != "" {
		return c.HashSeed
	}
	if v := os.Getenv("PYTHONHASHSEED"); v != "" {
		return v
	}
	return strconv.FormatInt(c.Seed, 10)
}

// Stream finish placements (Config.StreamFinish, --stream-finish).
const (
	StreamFinishVLLM   = "vllm"
	StreamFinishOpenAI = "openai"
)

// Data-parallel modes (Config.DataParallelMode, --data-parallel-mode).
const (
	DataParallelPorts    = "ports"
	DataParallelInternal = "internal"
)

// LoRAEnabled reports whether LoRA is on (MaxLoras > 0 after Validate).
func (c *Config) LoRAEnabled() bool { return c.MaxLoras > 0 }

// DefaultConfig returns the simulator's defaults (pkg/common/config.go newConfig), with the
// listen host 127.0.0.1, a seed from the current time, and vLLM's where the simulator is kinder
// than vLLM: LoRA off (MaxLoras 0) and the current metric names.
func DefaultConfig() Config {
	return Config{
		Port:                  8000,
		MaxNumSeqs:            5,
		MaxWaitingQueueLength: 1000,
		MaxModelLen:           1024,
		Latency:               Latency{TimeFactorUnderLoad: 1.0},
		Mode:                  ModeRandom,
		Seed:                  time.Now().UnixNano(),
		KVCacheSize:           1024,
		BlockSize:             16,
		DPSize:                1,
		MaxRequestBodySizeMB:  4,
		EmbeddingDim:          DefaultEmbeddingDim,
		MetricsNames:          MetricsCurrent,
		DataParallelMode:      DataParallelPorts,
		StreamFinish:          StreamFinishVLLM,
		KVEvents:              kvevents.DefaultConfig(),
		Host:                  "127.0.0.1",
		PodName:               os.Getenv("POD_NAME"),
		PodNamespace:          os.Getenv("POD_NAMESPACE"),
		SlowFirstByteDelay:    Duration(2 * time.Second),
	}
}

// DisplayModel is the base model name used in responses and metrics.
func (c *Config) DisplayModel() string {
	if len(c.ServedModelNames) > 0 {
		return c.ServedModelNames[0]
	}
	return c.Model
}

// Validate checks the configuration with the simulator's rules and messages, filling
// MaxCPULoras and ServedModelNames defaults. It returns the first problem, naming the field.
func (c *Config) Validate() error {
	if c.Model == "" {
		return errors.New("model: must not be empty")
	}
	if len(c.ServedModelNames) == 0 {
		c.ServedModelNames = []string{c.Model}
	}
	if c.Mode != ModeEcho && c.Mode != ModeRandom {
		return fmt.Errorf("mode: invalid mode '%s', valid values are 'random' and 'echo'", c.Mode)
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("port: invalid port '%d'", c.Port)
	}
	if err := c.Latency.Validate(); err != nil {
		return err
	}
	if c.MaxLoras < 0 {
		return errors.New("max-loras: cannot be negative")
	}
	if c.MaxLoras == 0 && (c.EnableLoRA || len(c.LoraModules) > 0) {
		c.MaxLoras = 1
	}
	if c.MaxCPULoras == 0 {
		c.MaxCPULoras = c.MaxLoras
	}
	if c.MaxCPULoras < c.MaxLoras {
		return errors.New("max-cpu-loras: cannot be less than max-loras")
	}
	if c.MaxModelLen < 1 {
		return errors.New("max-model-len: cannot be less than 1")
	}
	if c.MaxNumSeqs < 1 {
		return errors.New("max-num-seqs: cannot be less than 1")
	}
	if c.MaxWaitingQueueLength < 1 {
		return errors.New("max-waiting-queue-length: cannot be less than 1")
	}
	for i, n := range c.ServedModelNames {
		if strings.TrimSpace(n) == "" {
			return fmt.Errorf("served-model-name[%d]: must not be empty", i)
		}
	}
	seen := map[string]bool{}
	for i, l := range c.LoraModules {
		if err := c.ValidateLoraName(l.Name); err != nil {
			return fmt.Errorf("lora-modules[%d]: %w", i, err)
		}
		if l.BaseModelName != "" && l.BaseModelName != c.Model {
			return fmt.Errorf("lora-modules[%d]: unknown base model '%s' for LoRA '%s'", i, l.BaseModelName, l.Name)
		}
		if seen[l.Name] {
			return fmt.Errorf("lora-modules[%d]: duplicate LoRA '%s'", i, l.Name)
		}
		seen[l.Name] = true
	}
	switch c.BlockSize {
	case 8, 16, 32, 64, 128:
	default:
		return errors.New("block-size: should be one of the following: 8, 16, 32, 64, 128")
	}
	if c.KVCacheSize < 0 {
		return errors.New("kv-cache-size: cannot be negative")
	}
	if need := (c.MaxModelLen + c.BlockSize - 1) / c.BlockSize; c.KVCacheSize < need {
		// The engine admits a request only with all its blocks, so one full-context request must fit.
		return fmt.Errorf("kv-cache-size: %d blocks of %d tokens cannot hold one request of max-model-len %d (needs %d blocks)",
			c.KVCacheSize, c.BlockSize, c.MaxModelLen, need)
	}
	if err := validateFailures(c.FailureInjectionRate, c.FailureTypes); err != nil {
		return err
	}
	if c.FakeMetrics != nil {
		if err := c.FakeMetrics.Validate(); err != nil {
			return err
		}
	}
	if c.DPSize < 1 || c.DPSize > 8 {
		return errors.New("data-parallel-size: must be between 1 and 8")
	}
	if c.Port+c.DPSize-1 > 65535 {
		return fmt.Errorf("data-parallel-size: ports %d..%d exceed 65535", c.Port, c.Port+c.DPSize-1)
	}
	if c.MaxRequestBodySizeMB < 1 || c.MaxRequestBodySizeMB > 512 {
		return errors.New("max-request-body-size-mb: must be between 1 and 512")
	}
	if c.SlowFirstByteDelay < 0 {
		return errors.New("slow-first-byte-delay: cannot be negative")
	}
	if c.EmbeddingDim < 1 {
		return errors.New("default-embedding-dimensions: must be at least 1")
	}
	if err := validateGeneration(c.MetricsNames); err != nil {
		return err
	}
	switch c.DataParallelMode {
	case DataParallelPorts, DataParallelInternal:
	default:
		return fmt.Errorf("data-parallel-mode: want %s or %s, got %q", DataParallelPorts, DataParallelInternal, c.DataParallelMode)
	}
	if err := c.KVEvents.Validate(); err != nil {
		return err
	}
	if c.KVEvents.Enabled() && !c.EnableKVCache {
		return errors.New("kv-events-config: enable_kv_cache_events needs --enable-kvcache: vLLM publishes only the blocks of its prefix cache")
	}
	switch c.StreamFinish {
	case StreamFinishVLLM, StreamFinishOpenAI:
	default:
		return fmt.Errorf("stream-finish: want %s or %s, got %q", StreamFinishVLLM, StreamFinishOpenAI, c.StreamFinish)
	}
	if c.DataParallelMode == DataParallelInternal && c.MetricsNames == MetricsLegacy {
		return errors.New("data-parallel-mode: internal needs the v1 engine's metrics (metrics-names current or both); vLLM's v0 engine had no internal data parallelism")
	}
	return nil
}

// Validate checks the latency profile with the simulator's rules (a standard deviation may be at
// most 30% of its mean; nothing negative; factor ≥ 1).
func (l *Latency) Validate() error {
	type pair struct {
		name      string
		mean, dev Duration
	}
	for _, p := range []pair{
		{"time-to-first-token", l.TimeToFirstToken, l.TimeToFirstTokenStdDev},
		{"inter-token-latency", l.InterTokenLatency, l.InterTokenLatencyStdDev},
	} {
		if p.mean < 0 {
			return fmt.Errorf("%s: cannot be negative", p.name)
		}
		if p.dev < 0 {
			return fmt.Errorf("%s-std-dev: cannot be negative", p.name)
		}
		if float64(p.dev) > 0.3*float64(p.mean) {
			return fmt.Errorf("%s-std-dev: cannot be more than 30%% of %s", p.name, p.name)
		}
	}
	if l.PrefillOverhead < 0 {
		return errors.New("prefill-overhead: cannot be negative")
	}
	if l.PrefillTimePerToken < 0 {
		return errors.New("prefill-time-per-token: cannot be negative")
	}
	if l.PrefillTimeStdDev < 0 {
		return errors.New("prefill-time-std-dev: cannot be negative")
	}
	if l.TimeFactorUnderLoad < 1.0 || math.IsNaN(l.TimeFactorUnderLoad) || math.IsInf(l.TimeFactorUnderLoad, 0) {
		return errors.New("time-factor-under-load: cannot be less than 1.0")
	}
	return nil
}

func validateFailures(rate int, types []string) error {
	if rate < 0 || rate > 100 {
		return errors.New("failure-injection-rate: should be between 0 and 100")
	}
	for _, t := range types {
		if !slices.Contains(AllFailureTypes, t) {
			return fmt.Errorf("failure-types: invalid failure type '%s', valid types are: %s", t, strings.Join(AllFailureTypes, ", "))
		}
	}
	return nil
}

// configFileKeys are the simulator's YAML keys we model; LoadConfigFile warns about others.
var configFileKeys = map[string]bool{}

func init() {
	for _, k := range []string{"port", "model", "served-model-name", "max-loras", "max-cpu-loras",
		"max-num-seqs", "max-waiting-queue-length", "max-model-len", "lora-modules",
		"time-to-first-token", "time-to-first-token-std-dev", "inter-token-latency",
		"inter-token-latency-std-dev", "prefill-overhead", "prefill-time-per-token", "prefill-time-std-dev",
		"time-factor-under-load", "mode", "seed", "enable-kvcache", "enable-prompt-tokens-details", "kv-cache-size", "block-size",
		"fake-metrics", "failure-injection-rate", "failure-types", "data-parallel-size",
		"max-request-body-size-mb", "host", "pod-name", "pod-namespace", "gauge-only",
		"slow-first-byte-delay", "default-embedding-dimensions", "enable-lora", "metrics-names",
		"data-parallel-mode", "stream-finish", "hash-seed", "use-vllm-map-event-format"} {
		configFileKeys[k] = true
	}
}

// LoadConfigFile merges the simulator-style YAML file at path into c (the simulator's --config:
// command-line values override it). lora-modules entries may be JSON strings (the simulator's
// form) or objects. It returns the keys that were accepted and ignored.
func LoadConfigFile(path string, c *Config) (ignored []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("config %s: want a mapping of flag names to values: %w", path, err)
	}
	known := map[string]json.RawMessage{}
	for k, v := range raw {
		switch {
		case k == "lora-modules":
			var items []json.RawMessage
			if err := json.Unmarshal(v, &items); err != nil {
				return nil, fmt.Errorf("config %s: lora-modules: %w", path, err)
			}
			c.LoraModules = c.LoraModules[:0]
			for i, it := range items {
				m, err := parseLoraModule(it)
				if err != nil {
					return nil, fmt.Errorf("config %s: lora-modules[%d]: %w", path, i, err)
				}
				c.LoraModules = append(c.LoraModules, m)
			}
		case k == "kv-events-config":
			raw := string(v)
			var str string
			if json.Unmarshal(v, &str) == nil {
				raw = str // the flag's JSON as a string
			}
			kc, err := kvevents.ParseConfig(raw)
			if err != nil {
				return nil, fmt.Errorf("config %s: %w", path, err)
			}
			c.KVEvents = kc
		case configFileKeys[k]:
			known[k] = v
		case slices.ContainsFunc(IgnoredSimFlags, func(f IgnoredFlag) bool { return f.Name == k }):
			ignored = append(ignored, k)
		default:
			return nil, fmt.Errorf("config %s: unknown key %q", path, k)
		}
	}
	b, _ := json.Marshal(known)
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	slices.Sort(ignored)
	return ignored, nil
}

// ParseLoraModule parses one --lora-modules value: a JSON object such as
// '{"name": "food-review-1"}' (unknown keys are an error).
func ParseLoraModule(s string) (LoraModule, error) {
	return parseLoraModule([]byte(s))
}

func parseLoraModule(b []byte) (LoraModule, error) {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return LoraModule{}, err
		}
		b = []byte(s)
	}
	var m LoraModule
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return LoraModule{}, fmt.Errorf("want a JSON object like {\"name\": \"adapter\"}: %w", err)
	}
	return m, nil
}

// ValidateLoraName checks a LoRA adapter name: not empty, no comma (vllm:lora_requests_info
// lists adapters comma-separated in its running_lora_adapters/waiting_lora_adapters labels, so
// a comma would split one adapter into two) and no control characters, and not the base model
// (Model) or a served model name (the request's "model" would be ambiguous). Call it after
// Validate has filled ServedModelNames.
func (c *Config) ValidateLoraName(name string) error {
	if name == "" {
		return errors.New("empty LoRA name")
	}
	if strings.Contains(name, ",") {
		return fmt.Errorf("LoRA name %q must not contain a comma (it separates adapters in vllm:lora_requests_info)", name)
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return fmt.Errorf("LoRA name %q must not contain control characters", name)
	}
	if name == c.Model || slices.Contains(c.ServedModelNames, name) {
		return fmt.Errorf("LoRA name %q is the base model or a served model name", name)
	}
	return nil
}
