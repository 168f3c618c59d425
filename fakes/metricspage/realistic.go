package metricspage

// Realistic pages: what a vLLM v1 server's /metrics looks like, rendered once, served rotating.
//
// Source of the facts (family names, types, HELP texts, label names, bucket boundaries):
// vllm-project/vllm, vllm/v1/metrics/loggers.py at commit 005a810bc40faa25b8870fbc8559c3462581eee3
// (the v0.10 line: PrometheusStatLogger takes a list of data-parallel engine indexes, exports
// vllm:kv_cache_usage_perc and vllm:prefix_cache_* next to the deprecated vllm:gpu_* names, and
// vllm:time_per_output_token_seconds, not yet vllm:inter_token_latency_seconds; it also has
// vllm:time_per_prefill_token_request_seconds, which released v0.10 pages may lack), and for the
// speculative-decoding counters vllm/v1/spec_decode/metrics.py (SpecDecodingProm) at commit
// 016a8587edb04ae53c913a1da9355a07dc0ca4ae. The page layout is prometheus_client's text format
// 0.0.4 (prometheus_client.exposition.generate_latest); the process_*, python_gc_* and
// python_info families are those of prometheus_client's default registry.

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// DefaultRealisticVariants is the number of page variants StartRealisticFleet serves per endpoint
// when RealisticOptions.Variants is not set.
const DefaultRealisticVariants = 4

// RealisticOptions shapes realistic pages (RenderRealisticPages, StartRealisticFleet,
// RealisticLoad). The zero value is the default: one served model with max_model_len 131072 on
// two data-parallel engines, four LoRA adapters, speculative decoding with three tokens, and
// prometheus_client's _created series.
type RealisticOptions struct {
	// Model is the served model name, the model_name label of every engine series; "" is
	// "meta-llama/Llama-3.1-8B-Instruct", the model of the minimal pages.
	Model string
	// MaxModelLen (tokens) caps the 1-2-5 bucket series of the token-count histograms
	// (vLLM's build_1_2_5_buckets(max_model_len)); 0 is 131072.
	MaxModelLen int
	// Engines is the number of data-parallel engines, each labelled engine="<index>" in every
	// engine family (vLLM's make_per_engine); 0 is 2.
	Engines int
	// LoRAs is the number of LoRA adapters, named "adapter-0", "adapter-1", …: each gets its own
	// model_name series set in the per-request families (see RenderRealisticPages) and they fill
	// vllm:lora_requests_info; 0 is 4, negative is none (no LoRA family at all, as vLLM without
	// a LoRA config).
	LoRAs int
	// SpecTokens is num_speculative_tokens: the vllm:spec_decode_* counters are exported, with
	// that many position series, as with a speculative config; 0 is 3, negative is none.
	SpecTokens int
	// BlockSize is the KV-cache block size in tokens (the block_size label of
	// vllm:cache_config_info); 0 is 16.
	BlockSize int
	// Variants is the number of pages StartRealisticFleet renders and rotates per endpoint
	// (RenderRealisticPages takes its own count); values below 2 are DefaultRealisticVariants.
	Variants int
	// NoCreated drops the _created gauges, as prometheus_client writes with
	// PROMETHEUS_DISABLE_CREATED_SERIES or in multiprocess mode. vLLM v1 does not disable them:
	// a single-API-server vLLM page carries one <family>_created gauge per counter and histogram.
	NoCreated bool
}

// realisticConfig is RealisticOptions with the defaults applied.
type realisticConfig struct {
	model       string
	maxModelLen int
	engines     int
	adapters    []string
	specTokens  int
	blockSize   int
	variants    int
	created     bool
	tokenLEs    []float64 // build_1_2_5_buckets(maxModelLen)
	tokenLEStrs []string  // tokenLEs as Python writes them
}

func (o RealisticOptions) resolve() (*realisticConfig, error) {
	c := &realisticConfig{model: o.Model, maxModelLen: o.MaxModelLen, engines: o.Engines,
		specTokens: o.SpecTokens, blockSize: o.BlockSize, variants: o.Variants, created: !o.NoCreated}
	if c.model == "" {
		c.model = "meta-llama/Llama-3.1-8B-Instruct"
	}
	if c.maxModelLen == 0 {
		c.maxModelLen = 131072
	}
	if c.engines == 0 {
		c.engines = 2
	}
	loras := o.LoRAs
	if loras == 0 {
		loras = 4
	}
	for a := range max(loras, 0) {
		c.adapters = append(c.adapters, fmt.Sprintf("adapter-%d", a))
	}
	if c.specTokens == 0 {
		c.specTokens = 3
	}
	c.specTokens = max(c.specTokens, 0)
	if c.blockSize == 0 {
		c.blockSize = 16
	}
	if c.variants < 2 {
		c.variants = DefaultRealisticVariants
	}
	switch {
	case c.maxModelLen < 1 || c.maxModelLen > 1<<24:
		return nil, fmt.Errorf("metricspage: MaxModelLen %d, want 1..%d", c.maxModelLen, 1<<24)
	case c.engines < 1 || c.engines > 64:
		return nil, fmt.Errorf("metricspage: %d engines, want 1..64", c.engines)
	case len(c.adapters) > 64:
		return nil, fmt.Errorf("metricspage: %d LoRA adapters, want at most 64", len(c.adapters))
	case c.specTokens > 32:
		return nil, fmt.Errorf("metricspage: %d speculative tokens, want at most 32", c.specTokens)
	case c.blockSize < 1:
		return nil, fmt.Errorf("metricspage: block size %d, want at least 1", c.blockSize)
	}
	for e := 0; ; e++ {
		for _, m := range []int{1, 2, 5} {
			b := m * int(math.Pow10(e))
			if b > c.maxModelLen {
				c.tokenLEStrs = pyLEs(c.tokenLEs)
				return c, nil
			}
			c.tokenLEs = append(c.tokenLEs, float64(b))
		}
	}
}

// Bucket boundaries of vLLM's histograms (vllm/v1/metrics/loggers.py at 005a810bc40f): the
// per-step token counts, the n parameter, time to first token, time per output token, time per
// prefill token and the request phase latencies (e2e, queue, inference, prefill, decode). The
// token-count histograms (request_prompt_tokens, request_generation_tokens,
// request_max_num_generation_tokens, request_params_max_tokens) use build_1_2_5_buckets: 1, 2, 5,
// 10, 20, 50, … up to max_model_len.
var (
	iterationTokenLEs = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	paramsNLEs        = []float64{1, 2, 5, 10, 20}
	ttftLEs           = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	tpotLEs = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
		7.5, 10.0, 20.0, 40.0, 80.0}
	prefillTokenLEs = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0}
	requestPhaseLEs = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
		50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// finishReasons are vLLM v1's FinishReason values as str() writes them, in enum order.
var finishReasons = [3]string{"stop", "length", "abort"}

// PageLoad is what one realistic page says about load, as the reference EPP reads it: the
// engine-labelled series of vllm:num_requests_waiting and vllm:num_requests_running summed, those
// of vllm:kv_cache_usage_perc averaged, the newest vllm:lora_requests_info series (the largest
// value, a Unix time) and vllm:cache_config_info.
type PageLoad struct {
	// Waiting and Running are requests (sums over the engines).
	Waiting, Running int
	// KVCacheUsage is the mean over the engines of the KV-cache fraction in use, in [0, 1],
	// computed as the sum of the page's per-engine values in engine order divided by the number
	// of engines.
	KVCacheUsage float64
	// RunningLoRAs and WaitingLoRAs are the adapter lists of the newest lora_requests_info series
	// (nil without adapters or when the list is empty); MaxLoRA is its max_lora label.
	RunningLoRAs, WaitingLoRAs []string
	MaxLoRA                    int
	// BlockSize (tokens) and NumGPUBlocks are the block_size and num_gpu_blocks labels of
	// vllm:cache_config_info (the same on every engine).
	BlockSize, NumGPUBlocks int
}

// RealisticLoad returns what page variant v of endpoint i says about load (see PageLoad), without
// rendering it. The load gauges vary around the values the minimal pages pin for endpoint i
// (waiting i%5, running i%7, KV usage (i%10)/10): variant 0 has them exactly, odd variants one
// request more on each count and 0.03 more KV usage, even variants from 2 on one request (0.03)
// less, or two (0.06) more where the pinned value is 0; so consecutive variants, the last and the
// first included, always differ on all three.
func RealisticLoad(i, v int, opts RealisticOptions) (PageLoad, error) {
	c, err := opts.resolve()
	if err != nil {
		return PageLoad{}, err
	}
	if i < 0 || v < 0 {
		return PageLoad{}, fmt.Errorf("metricspage: endpoint %d variant %d, want both >= 0", i, v)
	}
	return c.load(i, v), nil
}

// loadOffset is the offset of variant v from a pinned count (see RealisticLoad).
func loadOffset(pinned, v int) int {
	switch {
	case v == 0:
		return 0
	case v%2 == 1:
		return 1
	case pinned >= 1:
		return -1
	default:
		return 2
	}
}

// engineLoads splits endpoint i's variant v load over the engines: waiting and running as evenly
// as possible (the first engines take the remainder), KV usage spread symmetrically around the
// mean (by up to half the distance to 0 or 1) so that the mean is the page's KV usage.
func (c *realisticConfig) engineLoads(i, v int) (waiting, running []int, kv []float64) {
	w := i%5 + loadOffset(i%5, v)
	r := i%7 + loadOffset(i%7, v)
	u := float64(i%10)/10 + 0.03*float64(loadOffset(i%10, v))
	u = min(max(u, 0), 1)
	spread := min(u, 1-u) / 2
	n := c.engines
	for e := range n {
		waiting = append(waiting, w/n+b2i(e < w%n))
		running = append(running, r/n+b2i(e < r%n))
		x := u
		if n > 1 {
			x += spread * float64(2*e-(n-1)) / float64(n-1)
		}
		kv = append(kv, min(max(x, 0), 1))
	}
	return waiting, running, kv
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (c *realisticConfig) load(i, v int) PageLoad {
	waiting, running, kv := c.engineLoads(i, v)
	l := PageLoad{BlockSize: c.blockSize, NumGPUBlocks: numGPUBlocks(i)}
	sum := 0.0
	for e := range c.engines {
		l.Waiting += waiting[e]
		l.Running += running[e]
		sum += kv[e]
	}
	l.KVCacheUsage = sum / float64(c.engines)
	if len(c.adapters) > 0 {
		combos := c.loraCombos(i)
		cur := combos[v%len(combos)]
		l.RunningLoRAs, l.WaitingLoRAs, l.MaxLoRA = splitList(cur.running), splitList(cur.waiting), len(c.adapters)
	}
	return l
}

func splitList(csv string) []string {
	if csv == "" {
		return nil
	}
	return strings.Split(csv, ",")
}

func numGPUBlocks(i int) int { return 24000 + (i*7919)%8000 }

// loraCombo is one (running, waiting) adapter-list pair of vllm:lora_requests_info.
type loraCombo struct{ running, waiting string }

// loraCombos are the lora_requests_info label sets endpoint i has seen: vLLM adds a series for
// every new pair of lists and only updates the value (set_to_current_time) of the current one, so
// a page carries its whole history. Variant v makes combo v%len current.
func (c *realisticConfig) loraCombos(i int) []loraCombo {
	r := rand.New(rand.NewPCG(uint64(i), 0x10a_c0b0))
	n := 3 + i%4
	out := []loraCombo{{}}
	seen := map[loraCombo]bool{{}: true}
	for tries := 0; len(out) < n && tries < 100; tries++ {
		var run, wait []string
		for _, a := range c.adapters {
			switch r.IntN(4) {
			case 0, 1:
				run = append(run, a)
			case 2:
				wait = append(wait, a)
			}
		}
		k := loraCombo{strings.Join(run, ","), strings.Join(wait, ",")}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// RenderRealisticPages renders, for each endpoint i of n (1..MaxEndpoints), variants (at least 2)
// different /metrics pages of a vLLM v1 server: pages[i][v] is variant v of endpoint i, a pure
// function of (i, v, opts). Each page is prometheus_client's text format 0.0.4 (see the file
// comment for the vLLM version), in registry order:
//
//   - python_gc_objects_collected_total, python_gc_objects_uncollectable_total,
//     python_gc_collections_total (label generation), python_info, process_virtual_memory_bytes,
//     process_resident_memory_bytes, process_start_time_seconds, process_cpu_seconds_total,
//     process_open_fds, process_max_fds: prometheus_client's default collectors.
//   - with SpecTokens: the counters vllm:spec_decode_num_drafts, _num_draft_tokens,
//     _num_accepted_tokens and _num_accepted_tokens_per_pos (label position 0..SpecTokens-1).
//   - gauges vllm:num_requests_running, vllm:num_requests_waiting (requests),
//     vllm:gpu_cache_usage_perc (deprecated, still exported; the same values as) and
//     vllm:kv_cache_usage_perc (fraction of KV-cache blocks in use), counters
//     vllm:gpu_prefix_cache_queries, vllm:gpu_prefix_cache_hits (deprecated; the same values as)
//     vllm:prefix_cache_queries, vllm:prefix_cache_hits (tokens), vllm:num_preemptions,
//     vllm:prompt_tokens, vllm:generation_tokens (tokens), vllm:request_success (label
//     finished_reason stop|length|abort; requests).
//   - histograms vllm:request_prompt_tokens, vllm:request_generation_tokens (tokens),
//     vllm:iteration_tokens_total (tokens per engine step), vllm:request_max_num_generation_tokens,
//     vllm:request_params_n, vllm:request_params_max_tokens, vllm:time_to_first_token_seconds,
//     vllm:time_per_output_token_seconds, vllm:time_per_prefill_token_request_seconds,
//     vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds,
//     vllm:request_inference_time_seconds, vllm:request_prefill_time_seconds,
//     vllm:request_decode_time_seconds (seconds), with vLLM's bucket boundaries.
//   - with LoRAs: gauge vllm:lora_requests_info (labels max_lora, running_lora_adapters,
//     waiting_lora_adapters, no engine; value the Unix time the lists were last current), one
//     series per pair of lists seen, the newest one current.
//   - gauge vllm:cache_config_info, one series per engine (value 1; CacheConfig.metrics_info():
//     every CacheConfig field as a label, block_size and num_gpu_blocks among them, and engine).
//
// Counters are written as prometheus_client writes them: HELP and TYPE name <family>_total, the
// samples <family>_total, then (without NoCreated) a <family>_created gauge family with the
// creation time of each series; histograms as every _bucket (le as Python writes the float,
// "+Inf" last), _count and _sum of each series, then <family>_created. Values are Python floats
// as prometheus_client's floatToGoString writes them ("1.0", "1e-05", "2.5e+07").
//
// Engine families carry model_name and engine="0".."Engines-1" on every series, one series set per
// engine. The per-request families (prompt_tokens, generation_tokens, request_success and every
// histogram but iteration_tokens_total) have, besides the served model's sets, one set per engine
// for each adapter as model_name, as if each adapter were a served model: these "per-LoRA label
// sets" are what makes real pages large. With the defaults a page is about 300 KB.
//
// Values are plausible and self-consistent: cumulative bucket counts never decrease with le, the
// +Inf bucket is _count, _sum lies between the bucket bounds, token counters are at least the
// matching histogram sums, prefix-cache hits at most queries, accepted draft tokens the sum of
// the positions. Variant v+1 is variant v after a few more requests finished on every series
// set: every vllm counter and histogram series grows, and the load gauges change as RealisticLoad
// says; the last variant goes back to the first (as a restarted counter would). They are drawn
// from math/rand/v2 PCG sources seeded from i and the variant, never from global randomness.
func RenderRealisticPages(n, variants int, opts RealisticOptions) ([][][]byte, error) {
	if n < 1 || n > MaxEndpoints {
		return nil, fmt.Errorf("metricspage: %d endpoints, want 1..%d", n, MaxEndpoints)
	}
	if variants < 2 {
		return nil, fmt.Errorf("metricspage: %d variants, want at least 2", variants)
	}
	c, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	pages := make([][][]byte, n)
	for i := range pages {
		pages[i] = c.renderEndpoint(i, variants)
	}
	return pages, nil
}

// StartRealisticFleet is StartFleet with realistic pages: n servers (1..MaxEndpoints) on
// Addr(0..n-1), one free port shared by all, each rotating through opts.Variants pages
// (RenderRealisticPages with opts; endpoint i serves variant k%Variants on its k-th page request,
// counted from 0 across connections). Every answer is precomputed, so a fleet holds about
// n × Variants × 300 KB with the defaults. It retries a few times when another process took the
// port on one of the addresses first.
func StartRealisticFleet(n int, opts RealisticOptions) (*Fleet, error) {
	if n < 1 || n > MaxEndpoints {
		return nil, fmt.Errorf("metricspage: %d servers, want 1..%d", n, MaxEndpoints)
	}
	c, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	const ctype = "text/plain; version=0.0.4; charset=utf-8"
	answers := make([][][]byte, n)
	for i := range answers {
		for _, page := range c.renderEndpoint(i, c.variants) {
			answers[i] = append(answers[i], httpAnswer("200 OK", ctype, page))
		}
	}
	return serveFleet(answers)
}

// listenLoopback listens on Addr(0..n-1), on one port chosen by the first listener.
func listenLoopback(n int) ([]net.Listener, error) {
	first, err := net.Listen("tcp", net.JoinHostPort(Addr(0), "0"))
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(first.Addr().(*net.TCPAddr).Port)
	lns := []net.Listener{first}
	for i := 1; i < n; i++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(Addr(i), port))
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// Server returns the page server of endpoint i (nil when out of range).
func (f *Fleet) Server(i int) *PageServer {
	if i < 0 || i >= len(f.srvs) {
		return nil
	}
	return f.srvs[i]
}

// rotation is the answer list of a rotating PageServer: answer k%len on its k-th page request.
type rotation struct {
	answers [][]byte
	served  atomic.Uint64
}

func (r *rotation) next() []byte {
	k := r.served.Add(1) - 1
	return r.answers[k%uint64(len(r.answers))]
}

// NewRotatingPageServer returns a PageServer of pages (at least one) at path on ln: its k-th GET
// of path (counted from 0 over all its connections, with an atomic counter) is answered with
// pages[k%len(pages)]; other requests get 404 and are not counted. Every answer is precomputed
// as NewPageServer's is. Serve runs it.
func NewRotatingPageServer(ln net.Listener, path, contentType string, pages [][]byte) (*PageServer, error) {
	if len(pages) == 0 {
		return nil, errors.New("metricspage: a rotating page server needs at least one page")
	}
	answers := make([][]byte, len(pages))
	for k, p := range pages {
		answers[k] = httpAnswer("200 OK", contentType, p)
	}
	return newRotatingServer(ln, path, answers), nil
}

func newRotatingServer(ln net.Listener, path string, answers [][]byte) *PageServer {
	p := NewPageServer(ln, path, "", nil)
	p.page = answers[0]
	p.rot = &rotation{answers: answers}
	return p
}

// Served is the number of page requests a rotating PageServer has answered (0 for a fixed one):
// the last one got page (Served()-1) % len(pages).
func (p *PageServer) Served() uint64 {
	if p.rot == nil {
		return 0
	}
	return p.rot.served.Load()
}

// httpAnswer is a whole HTTP/1.1 response (as NewPageServer precomputes it) in one allocation.
func httpAnswer(status, ctype string, body []byte) []byte {
	head := fmt.Sprintf("HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", status, ctype, len(body))
	out := make([]byte, 0, len(head)+len(body))
	return append(append(out, head...), body...)
}

// ---- values ----

// dist is a distribution of observations.
type dist interface {
	cdf(x float64) float64
	sample(r *rand.Rand) float64
}

// logNormal is exp(N(mu, sigma²)) clamped to [lo, hi], rounded when integer.
type logNormal struct {
	mu, sigma, lo, hi float64
	integer           bool
}

func lnDist(median, sigma, lo, hi float64, integer bool) logNormal {
	return logNormal{mu: math.Log(median), sigma: sigma, lo: lo, hi: hi, integer: integer}
}

func (d logNormal) cdf(x float64) float64 {
	switch {
	case x < d.lo:
		return 0
	case x >= d.hi:
		return 1
	}
	return 0.5 * math.Erfc(-(math.Log(x)-d.mu)/(d.sigma*math.Sqrt2))
}

func (d logNormal) sample(r *rand.Rand) float64 {
	x := math.Exp(d.mu + d.sigma*r.NormFloat64())
	if d.integer {
		x = math.Round(x)
	}
	return min(max(x, d.lo), d.hi)
}

// discrete takes value vals[k] with probability probs[k].
type discrete struct{ vals, probs []float64 }

func (d discrete) cdf(x float64) float64 {
	p := 0.0
	for k, v := range d.vals {
		if v <= x {
			p += d.probs[k]
		}
	}
	return min(p, 1)
}

func (d discrete) sample(r *rand.Rand) float64 {
	u := r.Float64()
	for k, p := range d.probs {
		if u < p {
			return d.vals[k]
		}
		u -= p
	}
	return d.vals[len(d.vals)-1]
}

// hist is one histogram series: per-bucket (not cumulative) counts, the last one the +Inf bucket.
type hist struct {
	les    []float64
	counts []float64
	sum    float64
}

// newHist is a histogram of n observations of d: bucket counts from d's CDF, the sum from the
// buckets' midpoints (1.5 × the last bound for the +Inf bucket), so it lies within the buckets'
// bounds; integer observations give an integer sum.
func newHist(les []float64, n float64, d dist, integer bool) *hist {
	h := &hist{les: les, counts: make([]float64, len(les)+1)}
	prev, lo := 0.0, 0.0
	for k, le := range les {
		cum := math.Round(n * d.cdf(le))
		cum = max(cum, prev)
		h.counts[k] = cum - prev
		part := h.counts[k] * (lo + le) / 2
		if integer {
			part = math.Round(part)
		}
		h.sum += part
		prev, lo = cum, le
	}
	h.counts[len(les)] = max(n-prev, 0)
	part := h.counts[len(les)] * lo * 1.5
	if integer {
		part = math.Round(part)
	}
	h.sum += part
	return h
}

func (h *hist) observe(x float64) {
	k, _ := slices.BinarySearch(h.les, x) // the first bound >= x: le is inclusive
	h.counts[k]++
	h.sum += x
}

func (h *hist) count() float64 {
	n := 0.0
	for _, c := range h.counts {
		n += c
	}
	return n
}

func (h *hist) clone() *hist {
	return &hist{les: h.les, counts: slices.Clone(h.counts), sum: h.sum}
}

// Per-request histogram families, in page order (iteration_tokens_total, per engine, sits between
// request_generation_tokens and request_max_num_generation_tokens).
const (
	hPrompt = iota
	hGeneration
	hMaxNumGeneration
	hParamsN
	hParamsMaxTokens
	hTTFT
	hTPOT
	hPrefillPerToken
	hE2E
	hQueue
	hInference
	hPrefill
	hDecode
	numRequestHists
)

// group is the per-request state of one (model_name, engine) series set.
type group struct {
	model   string
	engine  int
	labels  string // engine="0",model_name="…"
	success [3]float64
	prompt  float64 // vllm:prompt_tokens_total
	gen     float64 // vllm:generation_tokens_total
	hists   [numRequestHists]*hist
	d       requestDists
}

// requestDists are the distributions of one series set's requests.
type requestDists struct {
	prompt, gen, maxTokens, paramsN, queue, prefillPerToken, tpot dist
}

// engineState is the per-engine (served model only) state.
type engineState struct {
	labels                       string
	preemptions                  float64
	prefixQueries, prefixHits    float64
	hitRate                      float64
	iter                         *hist
	iterDist                     dist
	drafts, draftTokens, accepts float64
	acceptedPerPos               []float64
	acceptRate                   float64
}

// endpointState is everything endpoint i's pages say, at one variant.
type endpointState struct {
	groups  []*group // model-major: the served model's engines, then each adapter's
	engines []*engineState
	// process and gc state
	cpu, rss       float64
	gcCollected    [3]float64
	gcCollections  [3]float64
	openFDs        float64
	start, created float64 // process start and metrics creation (Unix seconds)
	uptime         float64 // seconds since start
	now0           float64 // Unix time of variant 0; variant v is 50 ms × v later
}

func (c *realisticConfig) models() []string {
	return append([]string{c.model}, c.adapters...)
}

// newEndpoint is endpoint i's state at variant 0.
func (c *realisticConfig) newEndpoint(i int) *endpointState {
	r := rand.New(rand.NewPCG(uint64(i), 0x9e3779b97f4a7c15))
	maxLen := float64(c.maxModelLen)
	st := &endpointState{
		start:  1753795000 + float64(i)*37.13 + math.Round(r.Float64()*100)/100,
		uptime: 3600*float64(1+i%23) + r.Float64()*3600,
	}
	st.created = st.start + 41.5 + r.Float64()*30
	st.now0 = st.start + st.uptime
	for m, model := range c.models() {
		scale := 1.0
		if m > 0 {
			scale = 0.05 + 0.25*r.Float64()
		}
		for e := range c.engines {
			j := 0.85 + 0.3*r.Float64()
			g := &group{model: model, engine: e, labels: fmt.Sprintf(`engine="%d",model_name="%s"`, e, escapeLabel(model))}
			g.d = requestDists{
				prompt:          lnDist(700*j, 1.0, 1, maxLen, true),
				gen:             lnDist(220*j, 0.9, 1, maxLen, true),
				maxTokens:       lnDist(1024, 0.7, 1, maxLen, true),
				paramsN:         discrete{vals: []float64{1, 2, 4, 8}, probs: []float64{0.96, 0.025, 0.01, 0.005}},
				queue:           lnDist(0.015, 1.6, 0, 1e5, false),
				prefillPerToken: lnDist(0.00012*j, 0.6, 0, 10, false),
				tpot:            lnDist(0.017*j, 0.35, 0, 100, false),
			}
			n := math.Round(scale * st.uptime * (0.4 + 1.6*r.Float64()))
			g.success = [3]float64{math.Round(n * 0.88), math.Round(n * 0.1), 0}
			g.success[2] = n - g.success[0] - g.success[1]
			h := &g.hists
			h[hPrompt] = newHist(c.tokenLEs, n, g.d.prompt, true)
			h[hGeneration] = newHist(c.tokenLEs, n, g.d.gen, true)
			h[hMaxNumGeneration] = newHist(c.tokenLEs, n, g.d.maxTokens, true)
			h[hParamsN] = newHist(paramsNLEs, n, g.d.paramsN, true)
			h[hParamsMaxTokens] = h[hMaxNumGeneration].clone()
			h[hTTFT] = newHist(ttftLEs, n, lnDist(0.09*j, 1.0, 0, 1e5, false), false)
			h[hTPOT] = newHist(tpotLEs, math.Max(h[hGeneration].sum-n, 0), g.d.tpot, false)
			h[hPrefillPerToken] = newHist(prefillTokenLEs, n, g.d.prefillPerToken, false)
			h[hE2E] = newHist(requestPhaseLEs, n, lnDist(4.5*j, 0.9, 0, 1e5, false), false)
			h[hQueue] = newHist(requestPhaseLEs, n, g.d.queue, false)
			h[hInference] = newHist(requestPhaseLEs, n, lnDist(4.3*j, 0.9, 0, 1e5, false), false)
			h[hPrefill] = newHist(requestPhaseLEs, n, lnDist(0.07*j, 0.9, 0, 1e5, false), false)
			h[hDecode] = newHist(requestPhaseLEs, n, lnDist(4.1*j, 0.9, 0, 1e5, false), false)
			g.prompt = h[hPrompt].sum + float64(r.IntN(20000))
			g.gen = h[hGeneration].sum + float64(r.IntN(5000))
			st.groups = append(st.groups, g)
		}
	}
	for e := range c.engines {
		es := &engineState{labels: fmt.Sprintf(`engine="%d",model_name="%s"`, e, escapeLabel(c.model)),
			preemptions: float64(r.IntN(400)), hitRate: 0.15 + 0.4*r.Float64(),
			iterDist: lnDist(28, 1.3, 1, 16384, true), acceptRate: 0.55 + 0.25*r.Float64()}
		var finished, gen float64
		for _, g := range st.groups {
			if g.engine == e {
				es.prefixQueries += g.prompt
				finished += g.hists[hE2E].count()
				gen += g.gen
			}
		}
		es.prefixHits = math.Round(es.prefixQueries * es.hitRate)
		es.iter = newHist(iterationTokenLEs, math.Round(gen/(10+10*r.Float64())+finished), es.iterDist, true)
		if c.specTokens > 0 {
			es.drafts = math.Round(st.groups[e].gen * 0.3)
			es.draftTokens = es.drafts * float64(c.specTokens)
			for p := range c.specTokens {
				a := math.Round(es.drafts * math.Pow(es.acceptRate, float64(p+1)))
				es.acceptedPerPos = append(es.acceptedPerPos, a)
				es.accepts += a
			}
		}
		st.engines = append(st.engines, es)
	}
	st.cpu = math.Round(st.uptime*0.35*100) / 100
	st.rss = float64(2_100_000_000 + r.IntN(400_000_000))
	st.gcCollected = [3]float64{float64(9000 + r.IntN(5000)), float64(1000 + r.IntN(800)), float64(900 + r.IntN(800))}
	st.gcCollections = [3]float64{float64(1100 + r.IntN(500)), float64(90 + r.IntN(50)), float64(6 + r.IntN(6))}
	st.openFDs = float64(60 + r.IntN(40))
	return st
}

// step advances endpoint i's state to variant s (from s-1): on every series set a few more
// requests finish (at least one per finish reason), every engine takes a few more steps,
// preemptions and drafts, and the process ages by one 50 ms scrape interval.
func (c *realisticConfig) step(i, s int, st *endpointState) {
	r := rand.New(rand.NewPCG(uint64(i), uint64(s)<<32|0x5851f42d))
	newPrompt := make([]float64, c.engines)
	for _, g := range st.groups {
		reasons := []int{0, 1, 2}
		for range r.IntN(4) {
			reasons = append(reasons, 0)
		}
		if r.IntN(2) == 0 {
			reasons = append(reasons, 1)
		}
		tpots := 0
		for _, reason := range reasons {
			p := g.d.prompt.sample(r)
			gen := g.d.gen.sample(r)
			mt := math.Max(g.d.maxTokens.sample(r), gen)
			switch reason {
			case 1: // length: the request hit max_tokens
				mt = gen
			case 2: // abort: cut short
				gen = math.Max(1, math.Round(gen/4))
			}
			q := g.d.queue.sample(r)
			perTok := g.d.prefillPerToken.sample(r)
			prefill := perTok * p
			decode := 0.0
			for range int(gen) - 1 {
				t := g.d.tpot.sample(r)
				g.hists[hTPOT].observe(t)
				decode += t
				tpots++
			}
			h := &g.hists
			h[hPrompt].observe(p)
			h[hGeneration].observe(gen)
			h[hMaxNumGeneration].observe(mt)
			h[hParamsN].observe(g.d.paramsN.sample(r))
			h[hParamsMaxTokens].observe(mt)
			h[hTTFT].observe(q + prefill + 0.0008)
			h[hPrefillPerToken].observe(perTok)
			h[hE2E].observe(q + prefill + decode + 0.0015)
			h[hQueue].observe(q)
			h[hInference].observe(prefill + decode)
			h[hPrefill].observe(prefill)
			h[hDecode].observe(decode)
			g.success[reason]++
			g.prompt += p
			g.gen += gen
			newPrompt[g.engine] += p
		}
		if tpots == 0 { // a token of a request still running
			g.hists[hTPOT].observe(g.d.tpot.sample(r))
		}
		extra := float64(1 + r.IntN(256))
		g.prompt += extra
		newPrompt[g.engine] += extra
		g.gen += float64(1 + r.IntN(64))
	}
	for e, es := range st.engines {
		es.preemptions += float64(1 + r.IntN(2))
		for range 2 + r.IntN(4) {
			es.iter.observe(es.iterDist.sample(r))
		}
		es.prefixQueries += newPrompt[e]
		es.prefixHits += math.Max(1, math.Round(newPrompt[e]*es.hitRate))
		if c.specTokens > 0 {
			drafts := 2 + r.IntN(4)
			for d := range drafts {
				accepted := c.specTokens // the first draft is accepted whole: every position grows
				if d > 0 {
					accepted = 0
					for accepted < c.specTokens && r.Float64() < es.acceptRate {
						accepted++
					}
				}
				for p := range accepted {
					es.acceptedPerPos[p]++
				}
				es.accepts += float64(accepted)
			}
			es.drafts += float64(drafts)
			es.draftTokens += float64(drafts * c.specTokens)
		}
	}
	st.uptime += 0.05
	st.cpu += 0.0637
	st.rss += float64(4096 * (1 + r.IntN(16)))
	st.gcCollected[0] += float64(50 + r.IntN(400))
	st.gcCollections[0] += float64(1 + r.IntN(3))
	st.openFDs = float64(60+i%40) + float64(s%3)
}

// renderEndpoint renders variants 0..variants-1 of endpoint i.
func (c *realisticConfig) renderEndpoint(i, variants int) [][]byte {
	st := c.newEndpoint(i)
	pages := make([][]byte, variants)
	size := 0
	for v := range variants {
		if v > 0 {
			c.step(i, v, st)
		}
		w := &pageWriter{b: make([]byte, 0, size+size/16), created: c.created, t0: st.created}
		c.render(w, i, v, st)
		pages[v] = w.b
		size = len(w.b)
	}
	return pages
}

// ---- rendering ----

// pageWriter appends a page in prometheus_client's text format 0.0.4.
type pageWriter struct {
	b       []byte
	created bool    // write <family>_created gauges
	t0      float64 // creation time of the first series
	fam     int     // families written so far, for creation times
}

type series struct {
	labels string
	v      float64
}

type histSeries struct {
	engine, model string // engine index and escaped model name
	h             *hist
}

func (w *pageWriter) header(name, typ, help string) {
	w.b = append(w.b, "# HELP "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, helpEscaper.Replace(help)...)
	w.b = append(w.b, "\n# TYPE "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, typ...)
	w.b = append(w.b, '\n')
}

func (w *pageWriter) sample(name, suffix, labels string, v float64) {
	w.b = append(w.b, name...)
	w.b = append(w.b, suffix...)
	if labels != "" {
		w.b = append(w.b, '{')
		w.b = append(w.b, labels...)
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, ' ')
	w.b = appendPyFloat(w.b, v)
	w.b = append(w.b, '\n')
}

// createdAt is the (constant) creation time of series k of the current family.
func (w *pageWriter) createdAt(k int) float64 {
	return w.t0 + float64(w.fam)*0.0137 + float64(k)*0.0000213
}

func (w *pageWriter) gauge(name, help string, ss []series) {
	w.header(name, "gauge", help)
	for _, s := range ss {
		w.sample(name, "", s.labels, s.v)
	}
	w.fam++
}

// counter writes counter family name (without _total) and its _created gauges.
func (w *pageWriter) counter(name, help string, ss []series) {
	w.header(name+"_total", "counter", help)
	for _, s := range ss {
		w.sample(name, "_total", s.labels, s.v)
	}
	if w.created {
		w.header(name+"_created", "gauge", help)
		for k, s := range ss {
			w.sample(name, "_created", s.labels, w.createdAt(k))
		}
	}
	w.fam++
}

// histogram writes histogram family name, les being its bounds as Python writes them, and its
// _created gauges. Every series is labelled engine and model_name (le sorts between them).
func (w *pageWriter) histogram(name, help string, les []string, ss []histSeries) {
	w.header(name, "histogram", help)
	for _, s := range ss {
		cum := 0.0
		for k, c := range s.h.counts {
			cum += c
			w.b = append(w.b, name...)
			w.b = append(w.b, `_bucket{engine="`...)
			w.b = append(w.b, s.engine...)
			w.b = append(w.b, `",le="`...)
			if k < len(les) {
				w.b = append(w.b, les[k]...)
			} else {
				w.b = append(w.b, "+Inf"...)
			}
			w.b = append(w.b, `",model_name="`...)
			w.b = append(w.b, s.model...)
			w.b = append(w.b, `"} `...)
			w.b = appendPyFloat(w.b, cum)
			w.b = append(w.b, '\n')
		}
		labels := `engine="` + s.engine + `",model_name="` + s.model + `"`
		w.sample(name, "_count", labels, cum)
		w.sample(name, "_sum", labels, s.h.sum)
	}
	if w.created {
		w.header(name+"_created", "gauge", help)
		for k, s := range ss {
			w.sample(name, "_created", `engine="`+s.engine+`",model_name="`+s.model+`"`, w.createdAt(k))
		}
	}
	w.fam++
}

func pyLEs(les []float64) []string {
	out := make([]string, len(les))
	for k, le := range les {
		out[k] = string(appendPyFloat(nil, le))
	}
	return out
}

var (
	iterationTokenLEStrs = pyLEs(iterationTokenLEs)
	paramsNLEStrs        = pyLEs(paramsNLEs)
	ttftLEStrs           = pyLEs(ttftLEs)
	tpotLEStrs           = pyLEs(tpotLEs)
	prefillTokenLEStrs   = pyLEs(prefillTokenLEs)
	requestPhaseLEStrs   = pyLEs(requestPhaseLEs)
)

// requestHistFamilies are the per-request histograms: name, HELP (as vLLM writes it), bucket
// bounds (nil: the 1-2-5 token series).
var requestHistFamilies = [numRequestHists]struct {
	name, help string
	les        []string
}{
	hPrompt:           {"vllm:request_prompt_tokens", "Number of prefill tokens processed.", nil},
	hGeneration:       {"vllm:request_generation_tokens", "Number of generation tokens processed.", nil},
	hMaxNumGeneration: {"vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", nil},
	hParamsN:          {"vllm:request_params_n", "Histogram of the n request parameter.", paramsNLEStrs},
	hParamsMaxTokens:  {"vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", nil},
	hTTFT:             {"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftLEStrs},
	hTPOT:             {"vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", tpotLEStrs},
	hPrefillPerToken:  {"vllm:time_per_prefill_token_request_seconds", "Time spent per token during prefill  phase in seconds", prefillTokenLEStrs},
	hE2E:              {"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestPhaseLEStrs},
	hQueue:            {"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestPhaseLEStrs},
	hInference:        {"vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", requestPhaseLEStrs},
	hPrefill:          {"vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestPhaseLEStrs},
	hDecode:           {"vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestPhaseLEStrs},
}

// render writes variant v of endpoint i from its state.
func (c *realisticConfig) render(w *pageWriter, i, v int, st *endpointState) {
	// prometheus_client's default registry: GC, platform and process collectors.
	gens := func(vals [3]float64) []series {
		return []series{{`generation="0"`, vals[0]}, {`generation="1"`, vals[1]}, {`generation="2"`, vals[2]}}
	}
	w.header("python_gc_objects_collected_total", "counter", "Objects collected during gc")
	for _, s := range gens(st.gcCollected) {
		w.sample("python_gc_objects_collected_total", "", s.labels, s.v)
	}
	w.header("python_gc_objects_uncollectable_total", "counter", "Uncollectable objects found during GC")
	for _, s := range gens([3]float64{}) {
		w.sample("python_gc_objects_uncollectable_total", "", s.labels, s.v)
	}
	w.header("python_gc_collections_total", "counter", "Number of times this generation was collected")
	for _, s := range gens(st.gcCollections) {
		w.sample("python_gc_collections_total", "", s.labels, s.v)
	}
	w.header("python_info", "gauge", "Python platform information")
	w.sample("python_info", "", `implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"`, 1)
	for _, p := range []struct {
		name, typ, help string
		v               float64
	}{
		{"process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", 118_395_211_776},
		{"process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", st.rss},
		{"process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", st.start},
		{"process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", st.cpu},
		{"process_open_fds", "gauge", "Number of open file descriptors.", st.openFDs},
		{"process_max_fds", "gauge", "Maximum number of open file descriptors.", 1_048_576},
	} {
		w.header(p.name, p.typ, p.help)
		w.sample(p.name, "", "", p.v)
	}

	perEngine := func(f func(e int, es *engineState) float64) []series {
		out := make([]series, len(st.engines))
		for e, es := range st.engines {
			out[e] = series{es.labels, f(e, es)}
		}
		return out
	}
	perGroup := func(f func(g *group) float64) []series {
		out := make([]series, len(st.groups))
		for k, g := range st.groups {
			out[k] = series{g.labels, f(g)}
		}
		return out
	}

	// vllm/v1/spec_decode/metrics.py SpecDecodingProm, created first by PrometheusStatLogger.
	if c.specTokens > 0 {
		w.counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
			perEngine(func(_ int, es *engineState) float64 { return es.drafts }))
		w.counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
			perEngine(func(_ int, es *engineState) float64 { return es.draftTokens }))
		w.counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
			perEngine(func(_ int, es *engineState) float64 { return es.accepts }))
		var pos []series
		for _, es := range st.engines {
			for p, a := range es.acceptedPerPos {
				pos = append(pos, series{es.labels + `,position="` + strconv.Itoa(p) + `"`, a})
			}
		}
		w.counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", pos)
	}

	// Scheduler state.
	waiting, running, kv := c.engineLoads(i, v)
	w.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
		perEngine(func(e int, _ *engineState) float64 { return float64(running[e]) }))
	w.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
		perEngine(func(e int, _ *engineState) float64 { return float64(waiting[e]) }))
	kvSeries := perEngine(func(e int, _ *engineState) float64 { return kv[e] })
	w.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.", kvSeries)
	w.counter("vllm:gpu_prefix_cache_queries", "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use vllm:prefix_cache_queries instead.",
		perEngine(func(_ int, es *engineState) float64 { return es.prefixQueries }))
	w.counter("vllm:gpu_prefix_cache_hits", "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.",
		perEngine(func(_ int, es *engineState) float64 { return es.prefixHits }))
	w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kvSeries)
	w.counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
		perEngine(func(_ int, es *engineState) float64 { return es.prefixQueries }))
	w.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
		perEngine(func(_ int, es *engineState) float64 { return es.prefixHits }))

	// Counters.
	w.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
		perEngine(func(_ int, es *engineState) float64 { return es.preemptions }))
	w.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", perGroup(func(g *group) float64 { return g.prompt }))
	w.counter("vllm:generation_tokens", "Number of generation tokens processed.", perGroup(func(g *group) float64 { return g.gen }))
	var success []series
	for m := 0; m < len(st.groups); m += c.engines { // per model: per reason: per engine
		for reason, name := range finishReasons {
			for _, g := range st.groups[m : m+c.engines] {
				success = append(success, series{`engine="` + strconv.Itoa(g.engine) + `",finished_reason="` + name +
					`",model_name="` + escapeLabel(g.model) + `"`, g.success[reason]})
			}
		}
	}
	w.counter("vllm:request_success", "Count of successfully processed requests.", success)

	// Histograms.
	groupHists := func(k int) []histSeries {
		out := make([]histSeries, len(st.groups))
		for n, g := range st.groups {
			out[n] = histSeries{strconv.Itoa(g.engine), escapeLabel(g.model), g.hists[k]}
		}
		return out
	}
	writeRequestHist := func(k int) {
		f := requestHistFamilies[k]
		les := f.les
		if les == nil {
			les = c.tokenLEStrs
		}
		w.histogram(f.name, f.help, les, groupHists(k))
	}
	writeRequestHist(hPrompt)
	writeRequestHist(hGeneration)
	iter := make([]histSeries, len(st.engines))
	for e, es := range st.engines {
		iter[e] = histSeries{strconv.Itoa(e), escapeLabel(c.model), es.iter}
	}
	w.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iterationTokenLEStrs, iter)
	for k := hMaxNumGeneration; k < numRequestHists; k++ {
		writeRequestHist(k)
	}

	// LoRA: every pair of adapter lists seen, the current one stamped now.
	if len(c.adapters) > 0 {
		combos := c.loraCombos(i)
		stamps := make([]float64, len(combos))
		for k := range combos {
			stamps[k] = st.now0 - 50 - 17.3*float64(len(combos)-k) // before variant 0
		}
		for u := 0; u <= v; u++ { // the combo current at variant u was stamped then
			stamps[u%len(combos)] = st.now0 + 0.05*float64(u) + 0.0001*float64(u%7)
		}
		var lora []series
		for k, cb := range combos {
			lora = append(lora, series{`max_lora="` + strconv.Itoa(len(c.adapters)) + `",running_lora_adapters="` + cb.running +
				`",waiting_lora_adapters="` + cb.waiting + `"`, stamps[k]})
		}
		w.gauge("vllm:lora_requests_info", "Running stats on lora requests.", lora)
	}

	// Cache config info (log_engine_initialized): CacheConfig.metrics_info() plus engine.
	var info []series
	for e := range c.engines {
		info = append(info, series{`block_size="` + strconv.Itoa(c.blockSize) + `",cache_dtype="auto",calculate_kv_scales="False",` +
			`cpu_offload_gb="0",enable_prefix_caching="True",engine="` + strconv.Itoa(e) + `",gpu_memory_utilization="0.9",` +
			`is_attention_free="False",kv_sharing_fast_prefill="False",mamba_cache_dtype="auto",mamba_ssm_cache_dtype="auto",` +
			`num_cpu_blocks="0",num_gpu_blocks="` + strconv.Itoa(numGPUBlocks(i)) + `",num_gpu_blocks_override="None",` +
			`prefix_caching_hash_algo="builtin",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"`, 1})
	}
	w.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", info)
}

// Escapers of HELP texts and label values, as the text format wants them.
var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// appendPyFloat appends f as prometheus_client writes a sample value or an le bound
// (prometheus_client.utils.floatToGoString): Python's repr(f) ("1.0", "0.25", "1e-05",
// "439.71999999999997"), but positive values with seven or more integer digits in Go's style
// ("1.048576e+06", "1.7537953269352946e+09", "1.1701968896e+010": the exponent is "0" and the
// digit count less one), and "+Inf", "-Inf", "NaN".
func appendPyFloat(b []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(f):
		return append(b, "NaN"...)
	}
	start := len(b)
	b = appendPyRepr(b, f)
	s := b[start:]
	dot := bytes.IndexByte(s, '.')
	if f > 0 && dot > 6 {
		var tmp [40]byte
		m := append(tmp[:0], s[0], '.')
		m = append(m, s[1:dot]...)
		m = append(m, s[dot+1:]...)
		m = bytes.TrimRight(m, "0.")
		b = append(b[:start], m...)
		b = append(b, "e+0"...)
		b = strconv.AppendInt(b, int64(dot-1), 10)
	}
	return b
}

// appendPyRepr appends Python's repr of f (finite): the shortest digits that round-trip, in
// positional notation with at least one fractional digit when the decimal exponent is in
// [-4, 16), else as d.ddde±XX with at least two exponent digits.
func appendPyRepr(b []byte, f float64) []byte {
	if f == 0 {
		if math.Signbit(f) {
			return append(b, "-0.0"...)
		}
		return append(b, "0.0"...)
	}
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64) // [-]d[.ddd]e±XX
	if e[0] == '-' {
		b = append(b, '-')
		e = e[1:]
	}
	ei := bytes.IndexByte(e, 'e')
	mant, expo := e[:ei], e[ei+1:]
	exp := 0
	for _, ch := range expo[1:] {
		exp = exp*10 + int(ch-'0')
	}
	if expo[0] == '-' {
		exp = -exp
	}
	var dbuf [24]byte
	digits := append(dbuf[:0], mant[0])
	if len(mant) > 2 {
		digits = append(digits, mant[2:]...)
	}
	if exp < -4 || exp >= 16 {
		b = append(b, digits[0])
		if len(digits) > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if exp < 0 {
			b = append(b, '-')
			exp = -exp
		} else {
			b = append(b, '+')
		}
		if exp < 10 {
			b = append(b, '0')
		}
		return strconv.AppendInt(b, int64(exp), 10)
	}
	if exp < 0 {
		b = append(b, "0."...)
		for range -exp - 1 {
			b = append(b, '0')
		}
		return append(b, digits...)
	}
	if len(digits) <= exp+1 {
		b = append(b, digits...)
		for range exp + 1 - len(digits) {
			b = append(b, '0')
		}
		return append(b, ".0"...)
	}
	b = append(b, digits[:exp+1]...)
	b = append(b, '.')
	return append(b, digits[exp+1:]...)
}
