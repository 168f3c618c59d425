package vllm

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric family names on the wire (the exposition adds no suffix to these: counters carry their
// _total here). vLLM v1 defines them in vllm/v1/metrics/loggers.py (PrometheusStatLogger), vLLM
// v0 in vllm/engine/metrics.py (Metrics); llm-d-inference-sim restates the v1 ones in
// pkg/llm-d-inference-sim/metrics.go. Which families a server exports depends on its
// MetricsNames generation; see metricFamilies.
const (
	MetricRunning       = "vllm:num_requests_running"
	MetricWaiting       = "vllm:num_requests_waiting"
	MetricKVCacheUsage  = "vllm:kv_cache_usage_perc"
	MetricGPUCacheUsage = "vllm:gpu_cache_usage_perc" // before v0.10 (v0 engine); both names in v0.9–v0.10
	MetricLoraInfo      = "vllm:lora_requests_info"
	MetricCacheConfig   = "vllm:cache_config_info"
	MetricPrefixQueries = "vllm:prefix_cache_queries_total"
	MetricPrefixHits    = "vllm:prefix_cache_hits_total"
	// MetricGPUPrefixQueries and MetricGPUPrefixHits are the deprecated v1 names of the two
	// counters above (v0.8–v0.10; generation "both").
	MetricGPUPrefixQueries = "vllm:gpu_prefix_cache_queries_total"
	MetricGPUPrefixHits    = "vllm:gpu_prefix_cache_hits_total"
	MetricPromptTokens     = "vllm:prompt_tokens_total"
	MetricGenerationTokens = "vllm:generation_tokens_total"
	MetricRequestSuccess   = "vllm:request_success_total"
	MetricTTFT             = "vllm:time_to_first_token_seconds"
	MetricInterToken       = "vllm:inter_token_latency_seconds"
	// MetricRequestTPOT is vLLM v1's per-request mean time per output token.
	MetricRequestTPOT = "vllm:request_time_per_output_token_seconds"
	// MetricTPOT is the per-token latency histogram of vLLM v0 and of v1 before v0.11 (deprecated
	// for MetricInterToken; generations "legacy" and "both").
	MetricTPOT      = "vllm:time_per_output_token_seconds"
	MetricE2E       = "vllm:e2e_request_latency_seconds"
	MetricQueueTime = "vllm:request_queue_time_seconds"
	// v0-only gauges (generation "legacy"): swapped requests, CPU KV use and block hit rates.
	MetricSwapped          = "vllm:num_requests_swapped"
	MetricCPUCacheUsage    = "vllm:cpu_cache_usage_perc"
	MetricGPUPrefixHitRate = "vllm:gpu_prefix_cache_hit_rate"
	MetricCPUPrefixHitRate = "vllm:cpu_prefix_cache_hit_rate"
	// MetricTokenLateness is eppkit's own: how late each output token was written after its
	// scheduled time (engine clock), in seconds. It tells whether the fake keeps up under load.
	MetricTokenLateness = "eppkit_fake_token_lateness_seconds"
)

// Metric-name generations (Config.MetricsNames, --metrics-names).
const (
	// MetricsCurrent is what vLLM exports today (v1 engine, v0.11 and later): only
	// vllm:kv_cache_usage_perc, every per-engine series labelled model_name and engine.
	MetricsCurrent = "current"
	// MetricsLegacy is vLLM before v0.10 on its v0 engine (vllm/engine/metrics.py): only
	// vllm:gpu_cache_usage_perc, series labelled model_name only, v0's histogram buckets.
	MetricsLegacy = "legacy"
	// MetricsBoth is vLLM v0.9–v0.10 (v1 engine with the deprecated names still shown): the
	// current families plus vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_{queries,hits} and
	// vllm:time_per_output_token_seconds.
	MetricsBoth = "both"
)

// MetricsGenerations lists the MetricsNames values.
var MetricsGenerations = []string{MetricsCurrent, MetricsLegacy, MetricsBoth}

// Histogram buckets in seconds. The v1 buckets are vllm/v1/metrics/loggers.py's (restated in
// llm-d-inference-sim pkg/common/config.go), the v0 ones vllm/engine/metrics.py's.
var (
	TTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	InterTokenBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	RequestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

	legacyTTFTBuckets    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	legacyTPOTBuckets    = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	legacyLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}
)

// EngineStats is the engine's state as the metrics read it.
type EngineStats struct {
	Running, Waiting                    int
	KVUsage                             float64 // [0,1]
	RunningLoRAs, WaitingLoRAs          []string
	NumGPUBlocks                        int
	PrefixCacheQueries, PrefixCacheHits int64 // tokens
	PromptTokens, GenerationTokens      int64
}

// metricsConfig is what the metrics need from the server configuration.
type metricsConfig struct {
	model      string
	generation string
	// lora: export vllm:lora_requests_info (vLLM registers it only with a LoRA config).
	lora      bool
	maxLoras  int
	blockSize int
	prefix    bool // enable_prefix_caching label of cache_config_info
	gaugeOnly bool
}

// metrics is one server's Prometheus registry. Live gauges and counters are read from each
// engine at scrape time (so they cost nothing per request); histograms and the success counter
// are updated per request through each engine's engineMetrics.
type metrics struct {
	reg     *prometheus.Registry
	cfg     metricsConfig
	engines []engineSource
	pinned  func() *FakeMetrics
	now     func() time.Time
	descs   map[string]*prometheus.Desc
	cacheKV []string // cache_config_info label names, in order

	mu         sync.Mutex
	loraKey    []string
	loraUpdate []time.Time
}

// engineSource is one engine as the collector reads it: its engine label and its stats.
type engineSource struct {
	label string // the engine label value ("" in the legacy generation)
	stats func() EngineStats
}

// engineMetrics are the per-request observers of one engine.
type engineMetrics struct {
	success                              *prometheus.CounterVec // curried with the engine's labels
	ttft, itl, reqTPOT, tpot, e2e, queue prometheus.Observer
	lateness                             prometheus.Observer
}

// familyLabels returns the label names of a per-engine family in the generation.
func (m *metrics) familyLabels(extra ...string) []string {
	base := []string{"model_name", "engine"}
	if m.cfg.generation == MetricsLegacy {
		base = []string{"model_name"}
	}
	return append(base, extra...)
}

// engineLabels returns the label values of engine e for a per-engine family.
func (m *metrics) engineLabels(e engineSource) []string {
	if m.cfg.generation == MetricsLegacy {
		return []string{m.cfg.model}
	}
	return []string{m.cfg.model, e.label}
}

// newMetrics registers the generation's families for engines (one engineSource per engine of the
// server) and returns the metrics and one engineMetrics per engine.
func newMetrics(cfg metricsConfig, engines []engineSource, pinned func() *FakeMetrics, now func() time.Time) (*metrics, []*engineMetrics) {
	m := &metrics{reg: prometheus.NewRegistry(), cfg: cfg, engines: engines, pinned: pinned, now: now,
		descs: map[string]*prometheus.Desc{}, loraKey: make([]string, len(engines)), loraUpdate: make([]time.Time, len(engines))}
	for i := range m.loraUpdate {
		m.loraUpdate[i] = now()
	}
	legacy, both := cfg.generation == MetricsLegacy, cfg.generation == MetricsBoth
	// Gauges and counters read at scrape time share one Desc shape: the generation's labels.
	desc := func(name, help string) { m.descs[name] = prometheus.NewDesc(name, help, m.familyLabels(), nil) }
	if legacy {
		desc(MetricRunning, "Number of requests currently running on GPU.")
	} else {
		desc(MetricRunning, "Number of requests in model execution batches.")
	}
	desc(MetricWaiting, "Number of requests waiting to be processed.")
	if legacy {
		desc(MetricSwapped, "Number of requests swapped to CPU.")
		desc(MetricGPUCacheUsage, "GPU KV-cache usage. 1 means 100 percent usage.")
		desc(MetricCPUCacheUsage, "CPU KV-cache usage. 1 means 100 percent usage.")
		desc(MetricCPUPrefixHitRate, "CPU prefix cache block hit rate.")
		desc(MetricGPUPrefixHitRate, "GPU prefix cache block hit rate.")
	} else {
		desc(MetricKVCacheUsage, "KV-cache usage. 1 means 100 percent usage.")
		desc(MetricPrefixQueries, "Prefix cache queries, in terms of number of queried tokens.")
		desc(MetricPrefixHits, "Prefix cache hits, in terms of number of cached tokens.")
	}
	if both {
		desc(MetricGPUCacheUsage, "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.")
		desc(MetricGPUPrefixQueries, "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use vllm:prefix_cache_queries instead.")
		desc(MetricGPUPrefixHits, "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.")
	}
	desc(MetricPromptTokens, "Number of prefill tokens processed.")
	desc(MetricGenerationTokens, "Number of generation tokens processed.")
	m.descs[MetricLoraInfo] = prometheus.NewDesc(MetricLoraInfo, "Running stats on lora requests.",
		[]string{"max_lora", "waiting_lora_adapters", "running_lora_adapters"}, nil)
	m.cacheKV = cacheConfigLabels(cfg.generation)
	m.descs[MetricCacheConfig] = prometheus.NewDesc(MetricCacheConfig, "Information of the LLMEngine CacheConfig", m.cacheKV, nil)
	m.reg.MustRegister(m)

	success := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRequestSuccess,
		Help: "Count of successfully processed requests."}, m.familyLabels("finished_reason"))
	m.reg.MustRegister(success)
	type hist struct {
		name, help string
		buckets    []float64
		dst        func(*engineMetrics) *prometheus.Observer
	}
	var hists []hist
	if !cfg.gaugeOnly {
		if legacy {
			hists = []hist{
				{MetricTTFT, "Histogram of time to first token in seconds.", legacyTTFTBuckets, func(e *engineMetrics) *prometheus.Observer { return &e.ttft }},
				{MetricTPOT, "Histogram of time per output token in seconds.", legacyTPOTBuckets, func(e *engineMetrics) *prometheus.Observer { return &e.tpot }},
				{MetricE2E, "Histogram of end to end request latency in seconds.", legacyLatencyBuckets, func(e *engineMetrics) *prometheus.Observer { return &e.e2e }},
				{MetricQueueTime, "Histogram of time spent in WAITING phase for request.", legacyLatencyBuckets, func(e *engineMetrics) *prometheus.Observer { return &e.queue }},
			}
		} else {
			hists = []hist{
				{MetricTTFT, "Histogram of time to first token in seconds.", TTFTBuckets, func(e *engineMetrics) *prometheus.Observer { return &e.ttft }},
				{MetricInterToken, "Histogram of inter-token latency in seconds.", InterTokenBuckets, func(e *engineMetrics) *prometheus.Observer { return &e.itl }},
				{MetricRequestTPOT, "Histogram of time_per_output_token_seconds per request.", InterTokenBuckets, func(e *engineMetrics) *prometheus.Observer { return &e.reqTPOT }},
				{MetricE2E, "Histogram of e2e request latency in seconds.", RequestLatencyBuckets, func(e *engineMetrics) *prometheus.Observer { return &e.e2e }},
				{MetricQueueTime, "Histogram of time spent in WAITING phase for request.", RequestLatencyBuckets, func(e *engineMetrics) *prometheus.Observer { return &e.queue }},
			}
			if both {
				hists = append(hists, hist{MetricTPOT, "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
					InterTokenBuckets, func(e *engineMetrics) *prometheus.Observer { return &e.tpot }})
			}
		}
		hists = append(hists, hist{MetricTokenLateness, "Delay between an output token's scheduled time and its write, in seconds (eppkit).",
			[]float64{0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5}, func(e *engineMetrics) *prometheus.Observer { return &e.lateness }})
	}
	ems := make([]*engineMetrics, len(engines))
	vecs := make([]*prometheus.HistogramVec, len(hists))
	for i, h := range hists {
		labels := m.familyLabels()
		if h.name == MetricTokenLateness {
			labels = []string{"model_name"}
		}
		vecs[i] = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: h.name, Help: h.help, Buckets: h.buckets}, labels)
		m.reg.MustRegister(vecs[i])
	}
	for j, e := range engines {
		em := &engineMetrics{}
		lv := m.engineLabels(e)
		em.success = success.MustCurryWith(curry(m.familyLabels(), lv))
		for _, r := range []string{"stop", "length", "abort"} {
			em.success.WithLabelValues(r)
		}
		for i, h := range hists {
			if h.name == MetricTokenLateness {
				*h.dst(em) = vecs[i].WithLabelValues(cfg.model)
				continue
			}
			*h.dst(em) = vecs[i].WithLabelValues(lv...)
		}
		ems[j] = em
	}
	return m, ems
}

func curry(names, values []string) prometheus.Labels {
	l := prometheus.Labels{}
	for i, n := range names {
		l[n] = values[i]
	}
	return l
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, k := range slices.Sorted(maps.Keys(m.descs)) {
		ch <- m.descs[k]
	}
}

// Collect implements prometheus.Collector: it reads every engine (or the pinned fake metrics:
// every engine alike, or engine by engine with FakeMetrics.Engines).
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	pinned := m.pinned()
	pinnedLoras := pinned != nil && len(pinned.Loras) > 0
	lora := map[[3]string]float64{}
	for i, e := range m.engines {
		st := e.stats()
		lv := m.engineLabels(e)
		emit := func(name string, t prometheus.ValueType, v float64) {
			if d := m.descs[name]; d != nil {
				ch <- prometheus.MustNewConstMetric(d, t, v, lv...)
			}
		}
		running, waiting, kv := float64(st.Running), float64(st.Waiting), st.KVUsage
		if pinned != nil {
			g := pinned.forEngine(i)
			running, waiting, kv = float64(g.RunningRequests), float64(g.WaitingRequests), g.KVCacheUsage
		}
		emit(MetricRunning, prometheus.GaugeValue, running)
		emit(MetricWaiting, prometheus.GaugeValue, waiting)
		emit(MetricKVCacheUsage, prometheus.GaugeValue, kv)
		emit(MetricGPUCacheUsage, prometheus.GaugeValue, kv)
		emit(MetricSwapped, prometheus.GaugeValue, 0)
		emit(MetricCPUCacheUsage, prometheus.GaugeValue, 0)
		hitRate := 0.0
		if st.PrefixCacheQueries > 0 {
			hitRate = float64(st.PrefixCacheHits) / float64(st.PrefixCacheQueries)
		}
		emit(MetricGPUPrefixHitRate, prometheus.GaugeValue, hitRate)
		emit(MetricCPUPrefixHitRate, prometheus.GaugeValue, 0)
		emit(MetricPrefixQueries, prometheus.CounterValue, float64(st.PrefixCacheQueries))
		emit(MetricPrefixHits, prometheus.CounterValue, float64(st.PrefixCacheHits))
		emit(MetricGPUPrefixQueries, prometheus.CounterValue, float64(st.PrefixCacheQueries))
		emit(MetricGPUPrefixHits, prometheus.CounterValue, float64(st.PrefixCacheHits))
		emit(MetricPromptTokens, prometheus.CounterValue, float64(st.PromptTokens))
		emit(MetricGenerationTokens, prometheus.CounterValue, float64(st.GenerationTokens))
		ch <- prometheus.MustNewConstMetric(m.descs[MetricCacheConfig], prometheus.GaugeValue, 1, m.cacheConfigValues(e, st)...)
		if !m.cfg.lora || pinnedLoras {
			continue
		}
		run := strings.Join(sortedCopy(st.RunningLoRAs), ",")
		wait := strings.Join(sortedCopy(st.WaitingLoRAs), ",")
		key := run + "|" + wait
		m.mu.Lock()
		if key != m.loraKey[i] {
			m.loraKey[i], m.loraUpdate[i] = key, m.now()
		}
		ts := float64(m.loraUpdate[i].UnixNano()) / 1e9
		m.mu.Unlock()
		// The family has no engine label: engines with equal adapter lists share one series
		// (vLLM sets it to the current time from each engine's record()).
		k := [3]string{strconv.Itoa(m.cfg.maxLoras), wait, run}
		lora[k] = max(lora[k], ts)
	}
	if pinnedLoras {
		// Pinned LoRA series are exported even without a LoRA config: the pin asks for them.
		for _, l := range pinned.Loras {
			ch <- prometheus.MustNewConstMetric(m.descs[MetricLoraInfo], prometheus.GaugeValue, l.Timestamp, strconv.Itoa(m.cfg.maxLoras), l.Waiting, l.Running)
		}
		return
	}
	for k, ts := range lora {
		ch <- prometheus.MustNewConstMetric(m.descs[MetricLoraInfo], prometheus.GaugeValue, ts, k[0], k[1], k[2])
	}
}

// cacheConfigLabels returns the label names of vllm:cache_config_info: every field of vLLM's
// CacheConfig (metrics_info() is {field: str(value)} of its __dict__), plus engine in v1.
// Current: vllm/config/cache.py at vllm-project/vllm commit 002f10e0; legacy: the v0.6
// CacheConfig of vllm/config.py.
func cacheConfigLabels(generation string) []string {
	names := make([]string, 0, len(cacheConfigCurrent)+1)
	fields := cacheConfigCurrent
	if generation == MetricsLegacy {
		fields = cacheConfigLegacy
	}
	for _, f := range fields {
		names = append(names, f.name)
	}
	if generation != MetricsLegacy {
		names = append(names, "engine")
	}
	return names
}

// cacheConfigField is one CacheConfig field and its value on the fake (the vLLM default, or the
// fake's own setting for block_size, num_gpu_blocks and enable_prefix_caching).
type cacheConfigField struct{ name, value string }

var cacheConfigCurrent = []cacheConfigField{
	{"block_size", ""}, {"user_specified_block_size", "True"}, {"user_specified_mamba_block_size", "False"},
	{"kv_cache_layout", "None"}, {"prefix_match_unit", "None"}, {"gpu_memory_utilization", "0.92"},
	{"cache_dtype", "auto"}, {"is_attention_free", "False"}, {"num_gpu_blocks_override", "None"},
	{"sliding_window", "None"}, {"enable_prefix_caching", ""}, {"prefix_caching_hash_algo", "sha256"},
	{"attn_group_size", "None"}, {"prefix_cache_retention_interval", "0"}, {"kv_cache_dtype_skip_layers", "[]"},
	{"mamba_page_size_padded", "None"}, {"skip_page_size_padded", "None"}, {"mamba_block_size", "None"},
	{"mamba_cache_dtype", "auto"}, {"mamba_ssm_cache_dtype", "auto"}, {"mamba_cache_mode", "none"},
	{"enable_mamba_fine_grained_prefix_cache", "False"}, {"replayssm_buffer_len", "16"}, {"use_replayssm", "False"},
	{"use_kda_recoverssm", "False"}, {"num_gpu_blocks", ""}, {"num_cpu_blocks", "0"},
	{"effective_attention_block_size", ""}, {"kv_cache_size_tokens", ""}, {"kv_cache_max_concurrency", ""},
	{"kv_sharing_fast_prefill", "False"}, {"kv_cache_memory_bytes", "None"}, {"kv_offloading_size", "None"},
	{"kv_offloading_backend", "native"}, {"_block_size_resolved", "True"},
}

var cacheConfigLegacy = []cacheConfigField{
	{"block_size", ""}, {"gpu_memory_utilization", "0.9"}, {"swap_space_bytes", "4294967296"},
	{"num_gpu_blocks_override", "None"}, {"cache_dtype", "auto"}, {"is_attention_free", "False"},
	{"sliding_window", "None"}, {"enable_prefix_caching", ""}, {"cpu_offload_gb", "0"},
	{"num_gpu_blocks", ""}, {"num_cpu_blocks", "2048"},
}

// cacheConfigValues returns engine e's cache_config_info label values, in cacheKV order.
func (m *metrics) cacheConfigValues(e engineSource, st EngineStats) []string {
	fields := cacheConfigCurrent
	if m.cfg.generation == MetricsLegacy {
		fields = cacheConfigLegacy
	}
	out := make([]string, 0, len(m.cacheKV))
	for _, f := range fields {
		v := f.value
		switch f.name {
		case "block_size", "effective_attention_block_size":
			v = strconv.Itoa(m.cfg.blockSize)
		case "num_gpu_blocks":
			v = strconv.Itoa(st.NumGPUBlocks)
		case "kv_cache_size_tokens":
			v = strconv.Itoa(st.NumGPUBlocks * m.cfg.blockSize)
		case "kv_cache_max_concurrency":
			v = "None"
		case "enable_prefix_caching":
			v = pyBool(m.cfg.prefix)
		}
		out = append(out, v)
	}
	if m.cfg.generation != MetricsLegacy {
		out = append(out, e.label)
	}
	return out
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// requestDone records one finished request: queue wait, TTFT, end-to-end time and, for a
// request with more than one token, its mean time per output token. A pooling (embeddings)
// request has no token: only its queue and end-to-end times are observed.
func (e *engineMetrics) requestDone(finish string, queue, ttft, e2e time.Duration, tokens int, pooling bool) {
	e.success.WithLabelValues(finish).Inc()
	if e.e2e == nil {
		return
	}
	e.queue.Observe(queue.Seconds())
	e.e2e.Observe(e2e.Seconds())
	if pooling {
		return
	}
	e.ttft.Observe(ttft.Seconds())
	if tokens > 1 && e.reqTPOT != nil {
		e.reqTPOT.Observe((e2e - ttft).Seconds() / float64(tokens-1))
	}
}

// tokenLate records how late one token was written.
func (e *engineMetrics) tokenLate(d time.Duration) {
	if e.lateness != nil {
		e.lateness.Observe(max(d, 0).Seconds())
	}
}

// tokenGap records one inter-token latency (and, in the generations that have it, the per-token
// vllm:time_per_output_token_seconds).
func (e *engineMetrics) tokenGap(d time.Duration) {
	if e.itl != nil {
		e.itl.Observe(d.Seconds())
	}
	if e.tpot != nil {
		e.tpot.Observe(d.Seconds())
	}
}

// validateGeneration checks a MetricsNames value.
func validateGeneration(g string) error {
	if !slices.Contains(MetricsGenerations, g) {
		return fmt.Errorf("metrics-names: want one of %s, got %q", strings.Join(MetricsGenerations, ", "), g)
	}
	return nil
}
