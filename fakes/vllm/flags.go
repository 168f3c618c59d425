package vllm

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/eppkit/eppkit/fakes/vllm/kvevents"
)

// IgnoredFlag is a flag llm-d-inference-sim accepts and this fake does not model.
type IgnoredFlag struct {
	// Name is the flag name without dashes.
	Name string
	// Bool flags take no value (a following argument is not consumed).
	Bool bool
}

// IgnoredSimFlags are llm-d-inference-sim's flags (pkg/common/parser.go ParseCommandParamsAndLoadConfig,
// v0.10.x) that are accepted and ignored with a warning: P/D transfer latencies, tool-call
// generation, the simulator's own KV-event socket flags (the fake publishes with vLLM's
// --kv-events-config instead), datasets, tokenizer service, TLS, sleep mode, multimodal and
// the flags the simulator itself ignores.
var IgnoredSimFlags = []IgnoredFlag{
	{Name: "kv-cache-transfer-latency"},
	{Name: "kv-cache-transfer-latency-std-dev"}, {Name: "kv-cache-transfer-time-per-token"},
	{Name: "kv-cache-transfer-time-std-dev"},
	{Name: "max-tool-call-integer-param"}, {Name: "min-tool-call-integer-param"},
	{Name: "max-tool-call-number-param"}, {Name: "min-tool-call-number-param"},
	{Name: "max-tool-call-array-param-length"}, {Name: "min-tool-call-array-param-length"},
	{Name: "tool-call-not-required-param-probability"},
	{Name: "object-tool-call-not-required-field-probability"},
	{Name: "tool-call-extra-call-probability"}, {Name: "skip-tool-validation", Bool: true},
	{Name: "global-cache-hit-threshold"}, {Name: "zmq-endpoint"},
	{Name: "kv-events-replay-endpoint"}, {Name: "kv-events-replay-queue-size"},
	{Name: "event-batch-size"},
	{Name: "data-parallel-rank"},
	{Name: "dataset-path"}, {Name: "dataset-url"}, {Name: "dataset-in-memory", Bool: true},
	{Name: "dataset-table-name"},
	{Name: "render-url"}, {Name: "render-timeout"}, {Name: "mm-render-timeout"},
	{Name: "force-dummy-tokenizer", Bool: true}, {Name: "startup-duration"},
	{Name: "enable-sleep-mode", Bool: true}, {Name: "no-enable-sleep-mode", Bool: true},
	{Name: "enable-request-id-headers", Bool: true}, {Name: "log-http", Bool: true},
	{Name: "ssl-certfile"}, {Name: "ssl-keyfile"}, {Name: "self-signed-certs", Bool: true},
	{Name: "latency-calculator"},
	{Name: "fake-metrics-refresh-interval"},
	{Name: "mm-encoder-only", Bool: true}, {Name: "no-mm-encoder-only", Bool: true},
	{Name: "omni", Bool: true}, {Name: "no-omni", Bool: true}, {Name: "image-emission-rate"},
	{Name: "time-to-generate-image"}, {Name: "time-to-generate-image-std-dev"},
	{Name: "mm-processor-kwargs"}, {Name: "ec-transfer-config"},
	{Name: "enforce-eager", Bool: true}, {Name: "no-enforce-eager", Bool: true},
	{Name: "enable-prefix-caching", Bool: true}, {Name: "no-enable-prefix-caching", Bool: true},
	{Name: "tensor-parallel-size"}, {Name: "v"},
}

// multiValueFlags take space-separated values, as the simulator reads them from os.Args
// (pkg/common/parser.go getParamValueFromArgs): every following argument up to the next one that
// starts with "--".
var multiValueFlags = []string{"served-model-name", "lora-modules", "fake-metrics", "failure-types"}

// NormalizeArgs rewrites the simulator's space-separated multi-value flags
// ("--lora-modules a b --port 1") into repeated "--lora-modules=a --lora-modules=b" so a pflag
// FlagSet can parse them. A multi-value flag with no values becomes "--flag=" (cleared).
func NormalizeArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		name, isMulti := strings.CutPrefix(a, "--")
		if !isMulti || !slices.Contains(multiValueFlags, name) {
			out = append(out, a)
			continue
		}
		n := 0
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			i++
			if args[i] == "" {
				continue
			}
			out = append(out, "--"+name+"="+args[i])
			n++
		}
		if n == 0 {
			out = append(out, "--"+name+"=")
		}
	}
	return out
}

// FlagValues holds the raw values of flags that Finish turns into Config fields.
type FlagValues struct {
	cfg          *Config
	fs           *pflag.FlagSet
	configFile   string
	served       []string
	loras        []string
	kvEvents     string
	fakeMetrics  []string
	failureTypes []string
	ignored      map[string]*string
}

// BindFlags registers the simulator's flags (names, value formats and defaults of
// llm-d-inference-sim v0.10.x) and eppkit's additions on fs, writing into cfg, which should start
// as DefaultConfig(). Call Finish after parsing.
func BindFlags(fs *pflag.FlagSet, cfg *Config) *FlagValues {
	v := &FlagValues{cfg: cfg, fs: fs, ignored: map[string]*string{}}
	fs.StringVar(&v.configFile, "config", "", "Path to a YAML configuration file (simulator keys); command-line values override it")
	fs.IntVar(&cfg.Port, "port", cfg.Port, "Port of rank 0; rank i listens on port+i")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "Base model name (required; env SIM_MODEL when the flag is absent)")
	fs.StringArrayVar(&v.served, "served-model-name", nil, "Model names exposed by the API (space-separated list); default: --model")
	fs.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", cfg.MaxNumSeqs, "Maximum number of requests running at once")
	fs.IntVar(&cfg.MaxWaitingQueueLength, "max-waiting-queue-length", cfg.MaxWaitingQueueLength, "Maximum length of the waiting queue; a full queue answers 429")
	fs.IntVar(&cfg.MaxLoras, "max-loras", cfg.MaxLoras, "Maximum number of LoRAs in a single batch; 0 (default) is LoRA off unless --enable-lora or --lora-modules (vLLM's default; the simulator's is 1)")
	fs.IntVar(&cfg.MaxCPULoras, "max-cpu-loras", cfg.MaxCPULoras, "Maximum number of LoRAs loaded (default: --max-loras)")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", cfg.MaxModelLen, "Context window in tokens (prompt + output)")
	fs.StringArrayVar(&v.loras, "lora-modules", nil, `LoRA adapters, space-separated JSON strings like '{"name": "food-review-1"}'`)
	fs.StringVar(&cfg.Mode, "mode", cfg.Mode, "Response text: echo (the prompt, or the last chat message) or random (sentences from a bank)")
	fs.Var(&cfg.InterTokenLatency, "inter-token-latency", "Time between output tokens, e.g. 10ms (a bare integer is ms)")
	fs.Var(&cfg.InterTokenLatencyStdDev, "inter-token-latency-std-dev", "Standard deviation of the inter-token latency (≤ 30% of it)")
	fs.Var(&cfg.TimeToFirstToken, "time-to-first-token", "Time to first token, e.g. 100ms; when set, replaces the prefill model")
	fs.Var(&cfg.TimeToFirstTokenStdDev, "time-to-first-token-std-dev", "Standard deviation of the time to first token (≤ 30% of it)")
	fs.Var(&cfg.PrefillOverhead, "prefill-overhead", "Fixed prefill time, e.g. 30ms (ignored when --time-to-first-token is set)")
	fs.Var(&cfg.PrefillTimePerToken, "prefill-time-per-token", "Prefill time per uncached prompt token, e.g. 250us")
	fs.Var(&cfg.PrefillTimeStdDev, "prefill-time-std-dev", "Standard deviation of the prefill time, e.g. 5ms")
	fs.Float64Var(&cfg.TimeFactorUnderLoad, "time-factor-under-load", cfg.TimeFactorUnderLoad, "Latency factor at max-num-seqs running requests (≥ 1.0)")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "Random seed (default: current time in ns)")
	fs.BoolVar(&cfg.EnableKVCache, "enable-kvcache", cfg.EnableKVCache, "Enable the KV cache model: prefix-cache hits, cached_tokens, prefix cache metrics")
	fs.BoolVar(&cfg.EnablePromptTokensDetails, "enable-prompt-tokens-details", cfg.EnablePromptTokensDetails,
		"vLLM's flag: usage carries prompt_tokens_details.cached_tokens (only when some prompt tokens were cached)")
	fs.IntVar(&cfg.KVCacheSize, "kv-cache-size", cfg.KVCacheSize, "KV cache size in blocks")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "Tokens per KV block: 8, 16, 32, 64 or 128")
	fs.StringArrayVar(&v.fakeMetrics, "fake-metrics", nil, `Pinned metrics, JSON: {"running-requests":N,"waiting-requests":N,"kv-cache-usage":F,"loras":[{"running":"a","waiting":"","timestamp":T}]}`)
	fs.IntVar(&cfg.FailureInjectionRate, "failure-injection-rate", cfg.FailureInjectionRate, "Percentage (0-100) of requests that fail")
	fs.StringArrayVar(&v.failureTypes, "failure-types", nil, "Failure kinds to inject (space-separated): "+strings.Join(AllFailureTypes, ", ")+"; default: the simulator's six")
	fs.IntVar(&cfg.DPSize, "data-parallel-size", cfg.DPSize, "Number of data-parallel ranks (1-8); rank i listens on port+i")
	fs.IntVar(&cfg.MaxRequestBodySizeMB, "max-request-body-size-mb", cfg.MaxRequestBodySizeMB, "Maximum request body size in MB (1-512); larger bodies get 413")
	fs.IntVar(&cfg.EmbeddingDim, "default-embedding-dimensions", cfg.EmbeddingDim, "Length of /v1/embeddings vectors when the request sets no dimensions")
	// eppkit additions.
	fs.StringVar(&cfg.Host, "host", cfg.Host, "[eppkit] Listen address")
	fs.StringVar(&cfg.PodName, "pod-name", cfg.PodName, "[eppkit] Pod name for x-inference-pod (default: env POD_NAME, else hostname)")
	fs.StringVar(&cfg.PodNamespace, "pod-namespace", cfg.PodNamespace, "[eppkit] Namespace for x-inference-namespace (default: env POD_NAMESPACE)")
	fs.BoolVar(&cfg.GaugeOnly, "gauge-only", cfg.GaugeOnly, "[eppkit] Skip the latency histograms (large benchmarks)")
	fs.Var(&cfg.SlowFirstByteDelay, "slow-first-byte-delay", "[eppkit] Header delay of the slow-first-byte failure")
	fs.IntVar(&cfg.EmbeddingDim, "embedding-dim", cfg.EmbeddingDim, "[eppkit] Same as --default-embedding-dimensions")
	fs.BoolVar(&cfg.EnableLoRA, "enable-lora", cfg.EnableLoRA, "[eppkit, vLLM's flag] Turn LoRA on (max-loras 1 unless set); LoRA is also on with --max-loras N > 0 or --lora-modules")
	fs.StringVar(&cfg.MetricsNames, "metrics-names", cfg.MetricsNames, "[eppkit] vLLM metric-name generation on /metrics: current (vLLM v0.11+: kv_cache_usage_perc, engine labels), legacy (v0 engine before v0.10: gpu_cache_usage_perc, model_name only) or both (v0.9-v0.10)")
	fs.StringVar(&cfg.DataParallelMode, "data-parallel-mode", cfg.DataParallelMode, "[eppkit] How --data-parallel-size ranks are served: ports (rank i on port+i, the simulator's) or internal (one server on --port in front of N engines, series labelled engine=0..N-1, vLLM's internal load balancing)")
	fs.StringVar(&v.kvEvents, "kv-events-config", "", `[vLLM's flag] KV-cache events over ZMQ, vLLM's KVEventsConfig as JSON: {"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","buffer_steps":10000,"hwm":100000,"max_queue_size":100000,"topic":""}; "*" binds the --host address; rank i uses port+i; needs --enable-kvcache; an empty topic is kv@<host>:<port>@<model>`)
	fs.StringVar(&cfg.HashSeed, "hash-seed", cfg.HashSeed, "Seed of the KV events' block hashes (vLLM's PYTHONHASHSEED; default: env PYTHONHASHSEED, else --seed)")
	fs.BoolVar(&cfg.UseVLLMMapEventFormat, "use-vllm-map-event-format", cfg.UseVLLMMapEventFormat, "Encode KV events as msgpack maps with field names (vLLM after PR #42892) instead of positional arrays")
	fs.StringVar(&cfg.StreamFinish, "stream-finish", cfg.StreamFinish, "[eppkit] Where completions and chat streams put finish_reason: vllm (on the last token chunk, as vLLM) or openai (a separate chunk with an empty delta, as OpenAI)")
	for _, f := range IgnoredSimFlags {
		usage := "llm-d-inference-sim flag, accepted and ignored"
		short := ""
		if f.Name == "v" { // klog's verbosity, also given as -v
			short = "v"
		}
		if f.Bool {
			fs.BoolP(f.Name, short, false, usage)
		} else {
			v.ignored[f.Name] = fs.StringP(f.Name, short, "", usage)
		}
	}
	return v
}

// Finish applies the parsed values to the Config: the --config file first (flags override it),
// env SIM_MODEL, multi-value flags, and validation. It returns warnings for ignored flags.
func (v *FlagValues) Finish() (warnings []string, err error) {
	cfg := v.cfg
	if v.configFile != "" {
		fileCfg := *cfg
		ignored, err := LoadConfigFile(v.configFile, &fileCfg)
		if err != nil {
			return nil, err
		}
		for _, k := range ignored {
			warnings = append(warnings, fmt.Sprintf("config key %q is accepted and ignored by the fake", k))
		}
		// Re-apply the flags the user set on top of the file's values.
		flagCfg := *cfg
		*cfg = fileCfg
		v.fs.Visit(func(f *pflag.Flag) { copyFlagField(f.Name, &flagCfg, cfg) })
	}
	if !v.fs.Changed("model") && cfg.Model == "" {
		cfg.Model = os.Getenv("SIM_MODEL")
	}
	if v.fs.Changed("served-model-name") {
		cfg.ServedModelNames = v.served
	}
	if v.fs.Changed("lora-modules") {
		cfg.LoraModules = nil
		for i, s := range v.loras {
			m, err := ParseLoraModule(s)
			if err != nil {
				return nil, fmt.Errorf("--lora-modules[%d] %q: %w", i, s, err)
			}
			cfg.LoraModules = append(cfg.LoraModules, m)
		}
	}
	if v.fs.Changed("kv-events-config") {
		kc, err := kvevents.ParseConfig(v.kvEvents)
		if err != nil {
			return nil, fmt.Errorf("--%w", err)
		}
		cfg.KVEvents = kc
	}
	if len(v.fakeMetrics) > 1 {
		return nil, fmt.Errorf("--fake-metrics: takes one JSON object, got %d values", len(v.fakeMetrics))
	}
	if v.fs.Changed("fake-metrics") && len(v.fakeMetrics) > 0 && v.fakeMetrics[0] != "" {
		var fm FakeMetrics
		if err := json.Unmarshal([]byte(v.fakeMetrics[0]), &fm); err != nil {
			return nil, fmt.Errorf("--fake-metrics: %w", err)
		}
		for k := range fm.Ignored {
			warnings = append(warnings, fmt.Sprintf("fake-metrics key %q is accepted and ignored by the fake", k))
		}
		cfg.FakeMetrics = &fm
	}
	if v.fs.Changed("failure-types") {
		cfg.FailureTypes = nil
		for _, t := range v.failureTypes {
			for _, p := range strings.Split(t, ",") {
				if p = strings.TrimSpace(p); p != "" {
					cfg.FailureTypes = append(cfg.FailureTypes, p)
				}
			}
		}
	}
	for _, f := range IgnoredSimFlags {
		if v.fs.Changed(f.Name) {
			warnings = append(warnings, fmt.Sprintf("flag --%s is accepted and ignored by the fake", f.Name))
		}
	}
	if cfg.PodName == "" {
		cfg.PodName, _ = os.Hostname()
	}
	if err := cfg.Validate(); err != nil {
		return warnings, err
	}
	return warnings, nil
}

// copyFlagField copies the Config field bound to flag name from src to dst (used to let flags
// override a --config file).
func copyFlagField(name string, src, dst *Config) {
	switch name {
	case "port":
		dst.Port = src.Port
	case "model":
		dst.Model = src.Model
	case "max-num-seqs":
		dst.MaxNumSeqs = src.MaxNumSeqs
	case "max-waiting-queue-length":
		dst.MaxWaitingQueueLength = src.MaxWaitingQueueLength
	case "max-loras":
		dst.MaxLoras = src.MaxLoras
	case "max-cpu-loras":
		dst.MaxCPULoras = src.MaxCPULoras
	case "max-model-len":
		dst.MaxModelLen = src.MaxModelLen
	case "mode":
		dst.Mode = src.Mode
	case "inter-token-latency":
		dst.InterTokenLatency = src.InterTokenLatency
	case "inter-token-latency-std-dev":
		dst.InterTokenLatencyStdDev = src.InterTokenLatencyStdDev
	case "time-to-first-token":
		dst.TimeToFirstToken = src.TimeToFirstToken
	case "time-to-first-token-std-dev":
		dst.TimeToFirstTokenStdDev = src.TimeToFirstTokenStdDev
	case "prefill-overhead":
		dst.PrefillOverhead = src.PrefillOverhead
	case "prefill-time-per-token":
		dst.PrefillTimePerToken = src.PrefillTimePerToken
	case "prefill-time-std-dev":
		dst.PrefillTimeStdDev = src.PrefillTimeStdDev
	case "time-factor-under-load":
		dst.TimeFactorUnderLoad = src.TimeFactorUnderLoad
	case "seed":
		dst.Seed = src.Seed
	case "enable-kvcache":
		dst.EnableKVCache = src.EnableKVCache
	case "enable-prompt-tokens-details":
		dst.EnablePromptTokensDetails = src.EnablePromptTokensDetails
	case "kv-cache-size":
		dst.KVCacheSize = src.KVCacheSize
	case "block-size":
		dst.BlockSize = src.BlockSize
	case "failure-injection-rate":
		dst.FailureInjectionRate = src.FailureInjectionRate
	case "data-parallel-size":
		dst.DPSize = src.DPSize
	case "max-request-body-size-mb":
		dst.MaxRequestBodySizeMB = src.MaxRequestBodySizeMB
	case "host":
		dst.Host = src.Host
	case "pod-name":
		dst.PodName = src.PodName
	case "pod-namespace":
		dst.PodNamespace = src.PodNamespace
	case "gauge-only":
		dst.GaugeOnly = src.GaugeOnly
	case "slow-first-byte-delay":
		dst.SlowFirstByteDelay = src.SlowFirstByteDelay
	case "default-embedding-dimensions", "embedding-dim":
		dst.EmbeddingDim = src.EmbeddingDim
	case "enable-lora":
		dst.EnableLoRA = src.EnableLoRA
	case "metrics-names":
		dst.MetricsNames = src.MetricsNames
	case "data-parallel-mode":
		dst.DataParallelMode = src.DataParallelMode
	case "stream-finish":
		dst.StreamFinish = src.StreamFinish
	case "hash-seed":
		dst.HashSeed = src.HashSeed
	case "use-vllm-map-event-format":
		dst.UseVLLMMapEventFormat = src.UseVLLMMapEventFormat
	}
}

// ParseArgs parses a simulator-style argument list (what `eppkit fake-vllm` and
// llm-d-inference-sim take) into a validated Config starting from DefaultConfig. It returns the
// warnings for accepted-and-ignored flags and keys. extra, when set, registers more flags on the
// same FlagSet before parsing. Positional arguments are an error.
func ParseArgs(args []string, extra func(fs *pflag.FlagSet)) (Config, []string, error) {
	cfg := DefaultConfig()
	fs := pflag.NewFlagSet("fake-vllm", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fv := BindFlags(fs, &cfg)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(NormalizeArgs(args)); err != nil {
		return cfg, nil, err
	}
	if fs.NArg() > 0 {
		return cfg, nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	warnings, err := fv.Finish()
	return cfg, warnings, err
}
