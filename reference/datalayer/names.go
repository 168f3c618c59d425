package datalayer

import (
	"fmt"
	"regexp"
	"strings"
)

// Upstream default metric names (gateway-api-inference-extension v1.5.0, pkg/epp/server/options.go
// and pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go).
const (
	DefaultWaitingMetric = "vllm:num_requests_waiting"
	DefaultRunningMetric = "vllm:num_requests_running"
	DefaultKVCacheMetric = "vllm:kv_cache_usage_perc"
	// DefaultLegacyKVCacheMetric is the KV-cache gauge's name before vLLM v0.10 (the v0 engine;
	// v1 exported both names in v0.9–v0.10 and dropped this one later). GIE PR #1905 is the
	// upstream fix for an EPP that read only one of the two.
	DefaultLegacyKVCacheMetric = "vllm:gpu_cache_usage_perc"
	DefaultLoRAInfoMetric      = "vllm:lora_requests_info"
	DefaultCacheConfigMetric   = "vllm:cache_config_info"
	// DefaultEngineLabel is the label vLLM puts on each data-parallel engine's series.
	DefaultEngineLabel = "engine"
)

// Label names read from the info families (vLLM's exposition; upstream
// pkg/epp/framework/plugins/datalayer/extractor/metrics/extractor.go).
const (
	LabelRunningAdapters = "running_lora_adapters" // comma list of adapter names
	LabelWaitingAdapters = "waiting_lora_adapters" // comma list of adapter names
	LabelMaxLoRA         = "max_lora"              // integer
	LabelBlockSize       = "block_size"            // tokens per KV block, integer
	LabelNumGPUBlocks    = "num_gpu_blocks"        // integer
)

// MetricNames says which series carry each piece of framework.Metrics. Each field is a metric
// selector in the upstream form `name` or `name{label=value,...}` (values may be quoted); the
// empty string disables that metric (its Metrics field stays zero and its absence is no error).
type MetricNames struct {
	// WaitingRequests feeds Metrics.WaitingQueueSize (requests). Required when set.
	WaitingRequests string
	// RunningRequests feeds Metrics.RunningRequests (requests). Required when set.
	RunningRequests string
	// KVCacheUsage feeds Metrics.KVCacheUsage (a fraction in [0,1]). Required when set.
	KVCacheUsage string
	// KVCacheUsageFallback is read instead of KVCacheUsage when the exposition has no
	// KVCacheUsage family at all (an older vLLM that exports only the legacy name). Empty
	// disables the fallback.
	KVCacheUsageFallback string
	// LoRAInfo is the info family whose labels list running and waiting LoRA adapters and max_lora;
	// the series with the largest value (its update time, Unix seconds) wins. Optional.
	LoRAInfo string
	// CacheConfig is the info family with block_size and num_gpu_blocks labels. Optional.
	CacheConfig string
	// EngineLabel names the label that tells data-parallel engines apart; series that carry it are
	// summed (queue, running) or averaged (KV use). Empty means DefaultEngineLabel.
	EngineLabel string
}

// DefaultMetricNames returns the upstream vLLM names with the `engine` label.
func DefaultMetricNames() MetricNames {
	return MetricNames{
		WaitingRequests: DefaultWaitingMetric,
		RunningRequests: DefaultRunningMetric,
		KVCacheUsage:    DefaultKVCacheMetric,
		// Both generations of vLLM's name: the current one, else the legacy one.
		KVCacheUsageFallback: DefaultLegacyKVCacheMetric,
		LoRAInfo:             DefaultLoRAInfoMetric,
		CacheConfig:          DefaultCacheConfigMetric,
		EngineLabel:          DefaultEngineLabel,
	}
}

// metricSpec is a parsed selector: a family name and labels every chosen series must carry.
type metricSpec struct {
	name   string
	labels map[string]string
}

// specs are the parsed MetricNames; nil entries are disabled.
type specs struct {
	waiting, running, kv, kvFallback, lora, cache *metricSpec
	engineLabel                                   string
}

var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// parseSpec parses `name` or `name{label=value,label2="value2"}`. The empty string yields nil.
func parseSpec(s string) (*metricSpec, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	name, rest, hasLabels := strings.Cut(s, "{")
	name = strings.TrimSpace(name)
	if name == "" {
		return nil, fmt.Errorf("selector %q has no metric name", s)
	}
	if strings.ContainsAny(name, "}\",= \t") {
		return nil, fmt.Errorf("selector %q: metric name %q has a character a name cannot have", s, name)
	}
	spec := &metricSpec{name: name, labels: map[string]string{}}
	if !hasLabels {
		return spec, nil
	}
	body, ok := strings.CutSuffix(strings.TrimSpace(rest), "}")
	if !ok {
		return nil, fmt.Errorf("selector %q: label block must end the selector with '}'", s)
	}
	if strings.TrimSpace(body) == "" {
		return nil, fmt.Errorf("selector %q: empty label block", s)
	}
	for pair := range strings.SplitSeq(body, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("selector %q: label pair %q is not label=value", s, strings.TrimSpace(pair))
		}
		if !labelNameRE.MatchString(k) {
			return nil, fmt.Errorf("selector %q: invalid label name %q", s, k)
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		if v == "" || strings.ContainsAny(v, "\"{}") {
			return nil, fmt.Errorf("selector %q: invalid value %q for label %q", s, v, k)
		}
		if _, dup := spec.labels[k]; dup {
			return nil, fmt.Errorf("selector %q: label %q given twice", s, k)
		}
		spec.labels[k] = v
	}
	return spec, nil
}

// compile parses every selector; the error names the MetricNames field.
func (n MetricNames) compile() (specs, error) {
	var out specs
	for _, f := range []struct {
		field string
		sel   string
		dst   **metricSpec
	}{
		{"WaitingRequests", n.WaitingRequests, &out.waiting},
		{"RunningRequests", n.RunningRequests, &out.running},
		{"KVCacheUsage", n.KVCacheUsage, &out.kv},
		{"KVCacheUsageFallback", n.KVCacheUsageFallback, &out.kvFallback},
		{"LoRAInfo", n.LoRAInfo, &out.lora},
		{"CacheConfig", n.CacheConfig, &out.cache},
	} {
		sp, err := parseSpec(f.sel)
		if err != nil {
			return specs{}, fmt.Errorf("datalayer config: Names.%s: %w", f.field, err)
		}
		*f.dst = sp
	}
	out.engineLabel = strings.TrimSpace(n.EngineLabel)
	if out.engineLabel == "" {
		out.engineLabel = DefaultEngineLabel
	}
	if !labelNameRE.MatchString(out.engineLabel) {
		return specs{}, fmt.Errorf("Names.EngineLabel: invalid label name %q", n.EngineLabel)
	}
	return out, nil
}
