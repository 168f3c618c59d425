package vllm

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, as vLLM v1 (vllm/v1/metrics/loggers.py) and llm-d-inference-sim
// (pkg/llm-d-inference-sim/metrics.go) export them.
const (
	MetricRunning          = "vllm:num_requests_running"
	MetricWaiting          = "vllm:num_requests_waiting"
	MetricKVCacheUsage     = "vllm:kv_cache_usage_perc"
	MetricGPUCacheUsage    = "vllm:gpu_cache_usage_perc" // the older name, still read by some EPPs
	MetricLoraInfo         = "vllm:lora_requests_info"
	MetricCacheConfig      = "vllm:cache_config_info"
	MetricPrefixQueries    = "vllm:prefix_cache_queries_total"
	MetricPrefixHits       = "vllm:prefix_cache_hits_total"
	MetricPromptTokens     = "vllm:prompt_tokens_total"
	MetricGenerationTokens = "vllm:generation_tokens_total"
	MetricRequestSuccess   = "vllm:request_success_total"
	MetricTTFT             = "vllm:time_to_first_token_seconds"
	MetricInterToken       = "vllm:inter_token_latency_seconds"
	MetricTPOT             = "vllm:time_per_output_token_seconds"
	MetricE2E              = "vllm:e2e_request_latency_seconds"
	MetricQueueTime        = "vllm:request_queue_time_seconds"
	// MetricTokenLateness is eppkit's own: how late each output token was written after its
	// scheduled time (engine clock), in seconds. It tells whether the fake keeps up under load.
	MetricTokenLateness = "eppkit_fake_token_lateness_seconds"
)

// Histogram buckets in seconds, vLLM's (vllm/v1/metrics/loggers.py; restated in
// llm-d-inference-sim pkg/common/config.go).
var (
	TTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	InterTokenBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	RequestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
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

// metrics is one rank's Prometheus registry: live gauges and counters are read from the engine
// at scrape time (so they cost nothing per request), histograms and the success counter are
// updated per request.
type metrics struct {
	reg       *prometheus.Registry
	model     string
	maxLoras  int
	blockSize int
	stats     func() EngineStats
	pinned    func() *FakeMetrics
	now       func() time.Time

	success                   *prometheus.CounterVec
	ttft, itl, tpot, e2e, que prometheus.Observer
	lateness                  prometheus.Observer

	mu         sync.Mutex
	loraKey    string
	loraUpdate time.Time
}

var (
	descRunning     = prometheus.NewDesc(MetricRunning, "Number of requests in model execution batches.", []string{"model_name"}, nil)
	descWaiting     = prometheus.NewDesc(MetricWaiting, "Number of requests waiting to be processed.", []string{"model_name"}, nil)
	descKV          = prometheus.NewDesc(MetricKVCacheUsage, "KV-cache usage. 1 means 100 percent usage.", []string{"model_name"}, nil)
	descGPU         = prometheus.NewDesc(MetricGPUCacheUsage, "GPU KV-cache usage. 1 means 100 percent usage.", []string{"model_name"}, nil)
	descLora        = prometheus.NewDesc(MetricLoraInfo, "Running stats on lora requests.", []string{"max_lora", "running_lora_adapters", "waiting_lora_adapters"}, nil)
	descCacheConfig = prometheus.NewDesc(MetricCacheConfig, "Information of the LLMEngine CacheConfig.", []string{"block_size", "num_gpu_blocks"}, nil)
	descQueries     = prometheus.NewDesc(MetricPrefixQueries, "Prefix cache queries, in terms of number of queried tokens.", []string{"model_name"}, nil)
	descHits        = prometheus.NewDesc(MetricPrefixHits, "Prefix cache hits, in terms of number of cached tokens.", []string{"model_name"}, nil)
	descPrompt      = prometheus.NewDesc(MetricPromptTokens, "Number of prefill tokens processed.", []string{"model_name"}, nil)
	descGen         = prometheus.NewDesc(MetricGenerationTokens, "Number of generation tokens processed.", []string{"model_name"}, nil)
)

func newMetrics(model string, maxLoras, blockSize int, gaugeOnly bool, stats func() EngineStats, pinned func() *FakeMetrics, now func() time.Time) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), model: model, maxLoras: maxLoras, blockSize: blockSize,
		stats: stats, pinned: pinned, now: now, loraUpdate: now()}
	m.reg.MustRegister(m)
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRequestSuccess,
		Help: "Count of successfully processed requests."}, []string{"model_name", "finished_reason"})
	m.reg.MustRegister(m.success)
	for _, r := range []string{"stop", "length", "abort"} {
		m.success.WithLabelValues(model, r)
	}
	if gaugeOnly {
		return m
	}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{"model_name"})
		m.reg.MustRegister(h)
		return h.WithLabelValues(model)
	}
	m.ttft = hist(MetricTTFT, "Histogram of time to first token in seconds.", TTFTBuckets)
	m.itl = hist(MetricInterToken, "Histogram of inter-token latency in seconds.", InterTokenBuckets)
	m.tpot = hist(MetricTPOT, "Histogram of time per output token in seconds.", InterTokenBuckets)
	m.e2e = hist(MetricE2E, "Histogram of e2e request latency in seconds.", RequestLatencyBuckets)
	m.que = hist(MetricQueueTime, "Histogram of time spent in WAITING phase for request.", RequestLatencyBuckets)
	m.lateness = hist(MetricTokenLateness, "Delay between an output token's scheduled time and its write, in seconds (eppkit).",
		[]float64{0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5})
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descKV, descGPU, descLora, descCacheConfig, descQueries, descHits, descPrompt, descGen} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads the engine (or the pinned fake metrics).
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	st := m.stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), m.model)
	}
	running, waiting, kv := float64(st.Running), float64(st.Waiting), st.KVUsage
	pinned := m.pinned()
	if pinned != nil {
		running, waiting, kv = float64(pinned.RunningRequests), float64(pinned.WaitingRequests), pinned.KVCacheUsage
	}
	gauge(descRunning, running, m.model)
	gauge(descWaiting, waiting, m.model)
	gauge(descKV, kv, m.model)
	gauge(descGPU, kv, m.model)
	maxLora := strconv.Itoa(m.maxLoras)
	if pinned != nil && len(pinned.Loras) > 0 {
		for _, l := range pinned.Loras {
			gauge(descLora, l.Timestamp, maxLora, l.Running, l.Waiting)
		}
	} else {
		run := strings.Join(sortedCopy(st.RunningLoRAs), ",")
		wait := strings.Join(sortedCopy(st.WaitingLoRAs), ",")
		key := run + "|" + wait
		m.mu.Lock()
		if key != m.loraKey {
			m.loraKey, m.loraUpdate = key, m.now()
		}
		ts := float64(m.loraUpdate.UnixNano()) / 1e9
		m.mu.Unlock()
		gauge(descLora, ts, maxLora, run, wait)
	}
	gauge(descCacheConfig, 1, strconv.Itoa(m.blockSize), strconv.Itoa(st.NumGPUBlocks))
	counter(descQueries, st.PrefixCacheQueries)
	counter(descHits, st.PrefixCacheHits)
	counter(descPrompt, st.PromptTokens)
	counter(descGen, st.GenerationTokens)
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// requestDone records one finished request. itl are the gaps between output tokens.
func (m *metrics) requestDone(finish string, queue, ttft, e2e time.Duration, tokens int) {
	m.success.WithLabelValues(m.model, finish).Inc()
	if m.ttft == nil {
		return
	}
	m.que.Observe(queue.Seconds())
	m.ttft.Observe(ttft.Seconds())
	m.e2e.Observe(e2e.Seconds())
	if tokens > 1 {
		m.tpot.Observe((e2e - ttft).Seconds() / float64(tokens-1))
	}
}

// tokenLate records how late one token was written.
func (m *metrics) tokenLate(d time.Duration) {
	if m.lateness != nil {
		m.lateness.Observe(max(d, 0).Seconds())
	}
}

// tokenGap records one inter-token latency.
func (m *metrics) tokenGap(d time.Duration) {
	if m.itl != nil {
		m.itl.Observe(d.Seconds())
	}
}
