package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eppkit/eppkit/internal/percentile"
)

// Thresholds of a step's validity and of "sustained".
const (
	// MaxValidCPUPercent: a step is valid only if the machine's total CPU stayed under it.
	MaxValidCPUPercent = 80.0
	// MaxSustainedMedianQueue: a step is sustained with 0 failed requests and a median
	// per-endpoint waiting queue of at most this many requests.
	MaxSustainedMedianQueue = 2.0
)

// Metrics are `vllm bench serve`'s metrics (vllm/benchmarks/serve.py calculate_metrics) over a set
// of outcomes. Latencies in ms, throughputs per second.
type Metrics struct {
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// DurationS is from the first send to the last end of a response (s).
	DurationS         float64 `json:"duration"`
	TotalInputTokens  int     `json:"total_input_tokens"`
	TotalOutputTokens int     `json:"total_output_tokens"`
	// RequestThroughput is completed requests per second; OutputThroughput and
	// TotalTokenThroughput are tokens per second.
	RequestThroughput    float64 `json:"request_throughput"`
	OutputThroughput     float64 `json:"output_throughput"`
	TotalTokenThroughput float64 `json:"total_token_throughput"`
	// MaxOutputTokensPerS is the most output tokens seen in one wall-clock second;
	// MaxConcurrentRequests the most requests in flight at once.
	MaxOutputTokensPerS   float64 `json:"max_output_tokens_per_s"`
	MaxConcurrentRequests int     `json:"max_concurrent_requests"`
	// TTFT, TPOT (per request: (E2E − TTFT)/(output tokens − 1)), ITL (every inter-token gap) and
	// E2EL (end-to-end latency), in ms.
	TTFT Dist `json:"ttft_ms"`
	TPOT Dist `json:"tpot_ms"`
	ITL  Dist `json:"itl_ms"`
	E2EL Dist `json:"e2el_ms"`
	// CachedTokenFraction is cached prompt tokens ÷ prompt tokens of the completed requests, from
	// their usage (prompt_tokens_details.cached_tokens), in [0,1].
	CachedTokenFraction float64 `json:"cached_token_fraction"`
}

// DefaultPercentiles are the percentiles every Dist carries.
var DefaultPercentiles = []float64{50, 90, 95, 99}

// ComputeMetrics summarises outs. percentiles are added to DefaultPercentiles.
func ComputeMetrics(outs []Outcome, percentiles []float64) Metrics {
	ps := slices.Clone(DefaultPercentiles)
	for _, p := range percentiles {
		if !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	var m Metrics
	var ttft, tpot, itl, e2el []float64
	var first, last = math.Inf(1), math.Inf(-1)
	type ev struct {
		t float64
		d int
	}
	var evs []ev
	buckets := map[int]int{}
	var cached, prompt int
	for i := range outs {
		o := &outs[i]
		first = math.Min(first, o.SentMs)
		last = math.Max(last, o.SentMs+o.E2EMs)
		if !o.OK() {
			m.Failed++
			continue
		}
		m.Completed++
		m.TotalInputTokens += o.PromptTokens
		m.TotalOutputTokens += o.OutputTokens
		cached += o.CachedTokens
		prompt += o.PromptTokens
		ttft = append(ttft, o.TTFTMs)
		e2el = append(e2el, o.E2EMs)
		itl = append(itl, o.ITLMs...)
		if o.OutputTokens > 1 {
			tpot = append(tpot, (o.E2EMs-o.TTFTMs)/float64(o.OutputTokens-1))
		}
		evs = append(evs, ev{o.SentMs, 1}, ev{o.SentMs + o.E2EMs, -1})
		// Token times: first at TTFT, then each gap; a chunk carries one token.
		t := o.SentMs + o.TTFTMs
		buckets[int(t/1000)]++
		for _, g := range o.ITLMs {
			t += g
			buckets[int(t/1000)]++
		}
	}
	if m.Completed+m.Failed > 0 && last > first {
		m.DurationS = (last - first) / 1000
	}
	if m.DurationS > 0 {
		m.RequestThroughput = float64(m.Completed) / m.DurationS
		m.OutputThroughput = float64(m.TotalOutputTokens) / m.DurationS
		m.TotalTokenThroughput = float64(m.TotalInputTokens+m.TotalOutputTokens) / m.DurationS
	}
	for _, n := range buckets {
		m.MaxOutputTokensPerS = math.Max(m.MaxOutputTokensPerS, float64(n))
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t != evs[j].t {
			return evs[i].t < evs[j].t
		}
		return evs[i].d < evs[j].d
	})
	cur := 0
	for _, e := range evs {
		cur += e.d
		m.MaxConcurrentRequests = max(m.MaxConcurrentRequests, cur)
	}
	m.TTFT, m.TPOT, m.ITL, m.E2EL = Summarise(ttft, ps), Summarise(tpot, ps), Summarise(itl, ps), Summarise(e2el, ps)
	if prompt > 0 {
		m.CachedTokenFraction = float64(cached) / float64(prompt)
	}
	return m
}

// StepResult is one rung of the ladder.
type StepResult struct {
	Index int     `json:"index"`
	Rate  float64 `json:"rate"`
	// DurationS is the step's arrival window (s).
	DurationS float64 `json:"duration_s"`
	Metrics   Metrics `json:"metrics"`
	// Goodput and Classes are the step's goodput and per-class SLO attainment (SetGoodput).
	Goodput *GoodputResult `json:"goodput,omitempty"`
	Classes []ClassResult  `json:"slo_classes,omitempty"`
	// CPUPercent is the machine's total CPU use during the arrival window (% of all cores), -1
	// when unknown; Valid is CPUPercent < MaxValidCPUPercent.
	CPUPercent float64 `json:"cpu_percent"`
	Valid      bool    `json:"valid"`
	// SelfCPUPercent is the share of the machine's CPU this process (load generator, gateway and
	// fleet; not the EPP) used in the window, -1 when unknown.
	SelfCPUPercent float64 `json:"self_cpu_percent"`
	// MedianQueue is the median of every endpoint's vllm:num_requests_waiting over the window's
	// samples; Sustained is 0 failed requests and MedianQueue ≤ MaxSustainedMedianQueue.
	MedianQueue float64 `json:"median_queue"`
	Sustained   bool    `json:"sustained"`
	// WorstEndpointMedianQueue is the largest of the endpoints' own median waiting queues over
	// the window's samples. Reported only: Sustained pools every endpoint's samples, so a fleet
	// with idle endpoints beside saturated ones can read median 0; this shows the hot spot.
	WorstEndpointMedianQueue float64 `json:"worst_endpoint_median_queue"`
	// OracleMeanTTFTMs is the oracle bound's mean over the step's requests (ms); OracleRatio is
	// the step's mean TTFT ÷ it.
	OracleMeanTTFTMs float64 `json:"oracle_mean_ttft_ms"`
	OracleRatio      float64 `json:"oracle_ratio"`
	// EngineTTFTMs and EngineQueueMs are the endpoints' own mean TTFT (engine queue wait +
	// prefill) and queue wait over the requests they finished between the window's first and
	// last samples (ms, -1 when unknown); the client's mean TTFT minus EngineTTFTMs is time spent
	// outside the fakes' engines: client, gateway, EPP and the machine's scheduling.
	EngineTTFTMs  float64 `json:"engine_ttft_ms"`
	EngineQueueMs float64 `json:"engine_queue_ms"`
}

// EndpointRow is one line of the per-endpoint table.
type EndpointRow struct {
	Name string `json:"name"`
	// Profile is the endpoint's latency profile (ProfileNames; "" when not known).
	Profile  string `json:"profile,omitempty"`
	Requests int    `json:"requests"`
	// Share is Requests ÷ all routed requests, in [0,1].
	Share float64 `json:"share"`
	// CachedTokenFraction is cached ÷ prompt tokens of the requests it served (usage), in [0,1];
	// EngineHitRate the same from its own prefix-cache counters over the run.
	CachedTokenFraction float64 `json:"cached_token_fraction"`
	EngineHitRate       float64 `json:"engine_hit_rate"`
	MeanTTFTMs          float64 `json:"mean_ttft_ms"`
	// MedianWaiting and MaxWaiting are its vllm:num_requests_waiting over the run's samples.
	MedianWaiting float64 `json:"median_waiting"`
	MaxWaiting    float64 `json:"max_waiting"`
}

// Result is one target's benchmark run.
type Result struct {
	Target   string `json:"target"`
	Workload Spec   `json:"workload"`
	// Burstiness and MaxConcurrency are the load generator's settings (0 = no cap).
	Burstiness     float64      `json:"burstiness"`
	MaxConcurrency int          `json:"max_concurrency"`
	Steps          []StepResult `json:"steps"`
	// Overall is over the whole run.
	Overall   Metrics       `json:"overall"`
	Endpoints []EndpointRow `json:"endpoints"`
	// Goodput is the run's goodput under the --goodput SLOs (nil without them); Classes the SLO
	// attainment of each request class of an SLO mix (nil without one). SetGoodput fills both.
	Goodput *GoodputResult `json:"goodput,omitempty"`
	Classes []ClassResult  `json:"slo_classes,omitempty"`
	// Oracle is the TTFT lower bound for this run's requests; OracleRatio is mean TTFT ÷ its mean.
	Oracle      *Oracle `json:"oracle,omitempty"`
	OracleRatio float64 `json:"oracle_ratio,omitempty"`
	// EngineTTFTMs and EngineQueueMs are the endpoints' own mean TTFT and queue wait over the run
	// (ms, -1 when unknown); see StepResult.
	EngineTTFTMs  float64 `json:"engine_ttft_ms"`
	EngineQueueMs float64 `json:"engine_queue_ms"`
	// LoadAvgStart and LoadAvgEnd are /proc/loadavg (1, 5, 15 min) before and after.
	LoadAvgStart string    `json:"load_avg_start"`
	LoadAvgEnd   string    `json:"load_avg_end"`
	StartedAt    time.Time `json:"started_at"`
	// Outcomes and Samples are the raw data.
	Outcomes []Outcome `json:"outcomes"`
	Samples  []Sample  `json:"samples"`
}

// SetGoodput computes r's goodput under the SLOs s (vLLM's --goodput) and the per-class SLO
// attainment (SLOClasses), over the run and per step; each goodput is good requests ÷ that
// window's Metrics.DurationS, as vLLM's request_goodput.
func SetGoodput(r *Result, s SLOs) {
	r.Goodput = ComputeGoodput(r.Outcomes, s, r.Overall.DurationS)
	r.Classes = SLOClasses(r.Outcomes, s)
	for i := range r.Steps {
		var outs []Outcome
		for _, o := range r.Outcomes {
			if o.Step == r.Steps[i].Index {
				outs = append(outs, o)
			}
		}
		r.Steps[i].Goodput = ComputeGoodput(outs, s, r.Steps[i].Metrics.DurationS)
		r.Steps[i].Classes = SLOClasses(outs, s)
	}
}

// BuildResult computes the per-step and per-endpoint results of a load run.
func BuildResult(target string, spec Spec, steps []Step, load *Load, percentiles []float64) *Result {
	r := &Result{Target: target, Workload: spec, Outcomes: load.Outcomes, Samples: load.Samples}
	r.Overall = ComputeMetrics(load.Outcomes, percentiles)
	var start time.Duration
	for i, st := range steps {
		var outs []Outcome
		for _, o := range load.Outcomes {
			if o.Step == i {
				outs = append(outs, o)
			}
		}
		sr := StepResult{Index: i, Rate: st.Rate, DurationS: st.Duration.Seconds(), Metrics: ComputeMetrics(outs, percentiles)}
		lo, hi := ms(start), ms(start+st.Duration)
		sr.CPUPercent, sr.SelfCPUPercent = cpuPercent(load.Samples, lo, hi)
		sr.Valid = sr.CPUPercent >= 0 && sr.CPUPercent < MaxValidCPUPercent
		var q []float64
		perEndpoint := map[string][]float64{}
		for _, s := range load.Samples {
			if s.AtMs < lo || s.AtMs > hi {
				continue
			}
			for name, e := range s.Endpoints {
				if e.OK {
					q = append(q, e.Waiting)
					perEndpoint[name] = append(perEndpoint[name], e.Waiting)
				}
			}
		}
		sr.MedianQueue = percentile.Of(q, 50)
		for _, w := range perEndpoint {
			sr.WorstEndpointMedianQueue = max(sr.WorstEndpointMedianQueue, percentile.Of(w, 50))
		}
		sr.EngineTTFTMs, sr.EngineQueueMs = engineMeans(load.Samples, lo, hi)
		sr.Sustained = sr.Metrics.Failed == 0 && sr.MedianQueue <= MaxSustainedMedianQueue
		r.Steps = append(r.Steps, sr)
		start += st.Duration
	}
	r.Endpoints = endpointRows(load)
	r.EngineTTFTMs, r.EngineQueueMs = engineMeans(load.Samples, math.Inf(-1), math.Inf(1))
	return r
}

// engineMeans is the endpoints' mean TTFT and queue wait (ms) from their histograms' growth between
// the first and last samples inside [lo, hi] ms, or -1, -1 when nothing was observed.
func engineMeans(samples []Sample, lo, hi float64) (ttft, queue float64) {
	var a, b *Sample
	for i := range samples {
		if samples[i].AtMs < lo || samples[i].AtMs > hi {
			continue
		}
		if a == nil {
			a = &samples[i]
		}
		b = &samples[i]
	}
	if a == nil || a == b {
		return -1, -1
	}
	var sum, qsum, count float64
	for n, eb := range b.Endpoints {
		ea, ok := a.Endpoints[n]
		if !ok || !ea.OK || !eb.OK {
			continue
		}
		sum += eb.TTFTSum - ea.TTFTSum
		qsum += eb.QueueSum - ea.QueueSum
		count += eb.TTFTCount - ea.TTFTCount
	}
	if count <= 0 {
		return -1, -1
	}
	return 1000 * sum / count, 1000 * qsum / count
}

// cpuPercent is the machine's busy share, and this process's share, between the first and last
// sample inside [lo, hi] ms, or -1 with fewer than two samples there.
func cpuPercent(samples []Sample, lo, hi float64) (machine, self float64) {
	var a, b *Sample
	for i := range samples {
		s := &samples[i]
		if s.AtMs < lo || s.AtMs > hi || s.CPUTotal == 0 {
			continue
		}
		if a == nil {
			a = s
		}
		b = s
	}
	if a == nil || b == a || b.CPUTotal <= a.CPUTotal {
		return -1, -1
	}
	d := float64(b.CPUTotal - a.CPUTotal)
	return 100 * float64(b.CPUBusy-a.CPUBusy) / d, 100 * float64(b.SelfCPU-a.SelfCPU) / d
}

func endpointRows(load *Load) []EndpointRow {
	rows := map[string]*EndpointRow{}
	row := func(n string) *EndpointRow {
		if rows[n] == nil {
			rows[n] = &EndpointRow{Name: n}
		}
		return rows[n]
	}
	type acc struct{ cached, prompt int }
	accs := map[string]*acc{}
	total := 0
	for _, o := range load.Outcomes {
		if o.Endpoint == "" {
			continue
		}
		total++
		r := row(o.Endpoint)
		r.Requests++
		if accs[o.Endpoint] == nil {
			accs[o.Endpoint] = &acc{}
		}
		if o.OK() {
			accs[o.Endpoint].cached += o.CachedTokens
			accs[o.Endpoint].prompt += o.PromptTokens
			r.MeanTTFTMs += o.TTFTMs
		}
	}
	waits := map[string][]float64{}
	var firstS, lastS map[string]EndpointSample
	for _, s := range load.Samples {
		for n, e := range s.Endpoints {
			if !e.OK {
				continue
			}
			row(n)
			waits[n] = append(waits[n], e.Waiting)
			if firstS == nil {
				firstS, lastS = map[string]EndpointSample{}, map[string]EndpointSample{}
			}
			if _, ok := firstS[n]; !ok {
				firstS[n] = e
			}
			lastS[n] = e
		}
	}
	var out []EndpointRow
	for n, r := range rows {
		if total > 0 {
			r.Share = float64(r.Requests) / float64(total)
		}
		if a := accs[n]; a != nil && a.prompt > 0 {
			r.CachedTokenFraction = float64(a.cached) / float64(a.prompt)
		}
		ok := 0
		for _, o := range load.Outcomes {
			if o.Endpoint == n && o.OK() {
				ok++
			}
		}
		if ok > 0 {
			r.MeanTTFTMs /= float64(ok)
		}
		if w := waits[n]; len(w) > 0 {
			r.MedianWaiting = percentile.Of(w, 50)
			r.MaxWaiting = slices.Max(w)
		}
		if firstS != nil {
			if q := lastS[n].PrefixQueries - firstS[n].PrefixQueries; q > 0 {
				r.EngineHitRate = (lastS[n].PrefixHits - firstS[n].PrefixHits) / q
			}
		}
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// BlockOptions select what PrintServingBlock prints, as vLLM's flags do.
type BlockOptions struct {
	// MaxConcurrency is printed when > 0 ("Maximum request concurrency:").
	MaxConcurrency int
	// RequestRate is printed when > 0 ("Request rate configured (RPS):").
	RequestRate float64
	// PercentileMetrics are among "ttft", "tpot", "itl", "e2el" (vLLM's --percentile-metrics;
	// default ttft,tpot,itl).
	PercentileMetrics []string
	// Percentiles are vLLM's --metric-percentiles (default 99).
	Percentiles []float64
	// Goodput, when set, is printed as "Request goodput (req/s):" after the request throughput,
	// as vLLM does with --goodput (see Goodput).
	Goodput *float64
}

// PrintServingBlock writes m as `vllm bench serve` prints its result
// (vllm/benchmarks/serve.py: "{:<40} {:<10}" lines, section headers centred in 50 characters).
func PrintServingBlock(w io.Writer, m Metrics, o BlockOptions) {
	if len(o.PercentileMetrics) == 0 {
		o.PercentileMetrics = []string{"ttft", "tpot", "itl"}
	}
	if len(o.Percentiles) == 0 {
		o.Percentiles = []float64{99}
	}
	line := func(label string, v any) { fmt.Fprintf(w, "%-40s %-10v\n", label, v) }
	f2 := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	fmt.Fprintln(w, center(" Serving Benchmark Result ", '='))
	line("Successful requests:", m.Completed)
	line("Failed requests:", m.Failed)
	if o.MaxConcurrency > 0 {
		line("Maximum request concurrency:", o.MaxConcurrency)
	}
	if o.RequestRate > 0 {
		line("Request rate configured (RPS):", f2(o.RequestRate))
	}
	line("Benchmark duration (s):", f2(m.DurationS))
	line("Total input tokens:", m.TotalInputTokens)
	line("Total generated tokens:", m.TotalOutputTokens)
	line("Request throughput (req/s):", f2(m.RequestThroughput))
	if o.Goodput != nil {
		line("Request goodput (req/s):", f2(*o.Goodput))
	}
	line("Output token throughput (tok/s):", f2(m.OutputThroughput))
	line("Peak output token throughput (tok/s):", f2(m.MaxOutputTokensPerS))
	line("Peak concurrent requests:", f2(float64(m.MaxConcurrentRequests)))
	line("Total Token throughput (tok/s):", f2(m.TotalTokenThroughput))
	sections := []struct {
		key, name, header string
		d                 Dist
	}{
		{"ttft", "TTFT", "Time to First Token", m.TTFT},
		{"tpot", "TPOT", "Time per Output Token (excl. 1st token)", m.TPOT},
		{"itl", "ITL", "Inter-token Latency", m.ITL},
		{"e2el", "E2EL", "End-to-end Latency", m.E2EL},
	}
	for _, s := range sections {
		if !slices.Contains(o.PercentileMetrics, s.key) {
			continue
		}
		fmt.Fprintln(w, center(s.header, '-'))
		line("Mean "+s.name+" (ms):", f2(s.d.Mean))
		line("Median "+s.name+" (ms):", f2(s.d.Median))
		for _, p := range o.Percentiles {
			line("P"+trimFloat(p)+" "+s.name+" (ms):", f2(s.d.Percentiles[PercentileKey(p)]))
		}
	}
	fmt.Fprintln(w, strings.Repeat("=", 50))
}

// center centres s in 50 characters padded with c (Python's "{s:c^50}": extra padding right).
func center(s string, c rune) string {
	pad := 50 - len(s)
	if pad <= 0 {
		return s
	}
	left := pad / 2
	return strings.Repeat(string(c), left) + s + strings.Repeat(string(c), pad-left)
}

// PrintSteps writes the ladder table: rate, completed/failed, throughput, TTFT, CPU, queue.
func PrintSteps(w io.Writer, r *Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\trate (req/s)\tok\tfailed\treq/s\toutput tok/s\tmean TTFT (ms)\tp90 TTFT (ms)\tfake TTFT (ms)\tcached\tCPU %\town CPU %\tmedian queue\tworst endpoint's\tvalid\tsustained\t")
	for _, s := range r.Steps {
		m := s.Metrics
		fmt.Fprintf(tw, "%d\t%.2f\t%d\t%d\t%.2f\t%.1f\t%.1f\t%.1f\t%s\t%.0f%%\t%s\t%s\t%.1f\t%.1f\t%v\t%v\t\n", s.Index, s.Rate, m.Completed, m.Failed,
			m.RequestThroughput, m.OutputThroughput, m.TTFT.Mean, m.TTFT.Percentiles["p90"], msString(s.EngineTTFTMs), 100*m.CachedTokenFraction,
			cpuString(s.CPUPercent), cpuString(s.SelfCPUPercent), s.MedianQueue, s.WorstEndpointMedianQueue, yesNo(s.Valid), yesNo(s.Sustained))
	}
	_ = tw.Flush()
}

// SetEndpointProfiles sets each per-endpoint row's Profile from byName (pod name → profile).
func SetEndpointProfiles(r *Result, byName map[string]string) {
	for i := range r.Endpoints {
		r.Endpoints[i].Profile = byName[r.Endpoints[i].Name]
	}
}

// PrintEndpoints writes the per-endpoint load and prefix-hit table, with each endpoint's latency
// profile when the rows know it.
func PrintEndpoints(w io.Writer, r *Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	withProfile := false
	for _, e := range r.Endpoints {
		withProfile = withProfile || e.Profile != ""
	}
	profile := func(e EndpointRow) string {
		if !withProfile {
			return ""
		}
		return e.Profile + "\t"
	}
	header := "endpoint\t"
	if withProfile {
		header += "profile\t"
	}
	fmt.Fprintln(tw, header+"requests\tshare\tcached tokens (usage)\tengine prefix hit rate\tmean TTFT (ms)\tmedian waiting\tmax waiting\t")
	for _, e := range r.Endpoints {
		fmt.Fprintf(tw, "%s\t%s%d\t%.1f%%\t%.1f%%\t%.1f%%\t%.1f\t%.1f\t%.0f\t\n", e.Name, profile(e), e.Requests, 100*e.Share,
			100*e.CachedTokenFraction, 100*e.EngineHitRate, e.MeanTTFTMs, e.MedianWaiting, e.MaxWaiting)
	}
	_ = tw.Flush()
}

func msString(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", v)
}

func cpuString(c float64) string {
	if c < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", c)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// VLLMJSON returns r in the flat layout of `vllm bench serve --save-result`
// (vllm/benchmarks/serve.py: "duration", "completed", "total_input_tokens", …, and for each
// metric "mean_<m>_ms", "median_<m>_ms", "std_<m>_ms", "p<p>_<m>_ms"; per-request "input_lens",
// "output_lens", "ttfts" and "itls" in seconds, "errors"), so tools that read vLLM results read
// eppkit's. requestRate is 0 for a ladder ("inf" is not used).
func VLLMJSON(r *Result, requestRate float64, percentiles []float64) map[string]any {
	m := r.Overall
	out := map[string]any{
		"date": r.StartedAt.Format("20060102-150405"), "backend": "openai", "model_id": "eppkit/conformance-base",
		"endpoint_type": "eppkit-" + r.Target, "num_prompts": len(r.Outcomes), "request_rate": requestRate,
		"burstiness": r.Burstiness, "max_concurrency": nil, "duration": m.DurationS, "completed": m.Completed,
		"failed": m.Failed, "total_input_tokens": m.TotalInputTokens, "total_output_tokens": m.TotalOutputTokens,
		"request_throughput": m.RequestThroughput, "request_goodput": nil, "output_throughput": m.OutputThroughput,
		"total_token_throughput": m.TotalTokenThroughput, "max_output_tokens_per_s": m.MaxOutputTokensPerS,
		"max_concurrent_requests": m.MaxConcurrentRequests,
	}
	if r.MaxConcurrency > 0 {
		out["max_concurrency"] = r.MaxConcurrency
	}
	var in, outl []int
	var ttfts []float64
	var itls [][]float64
	var errs []string
	for _, o := range r.Outcomes {
		in = append(in, o.PromptTokens)
		outl = append(outl, o.OutputTokens)
		ttfts = append(ttfts, o.TTFTMs/1000)
		g := make([]float64, len(o.ITLMs))
		for i, x := range o.ITLMs {
			g[i] = x / 1000
		}
		itls = append(itls, g)
		errs = append(errs, o.Error)
	}
	out["input_lens"], out["output_lens"], out["ttfts"], out["itls"], out["errors"] = in, outl, ttfts, itls, errs
	for _, s := range []struct {
		key string
		d   Dist
	}{{"ttft", m.TTFT}, {"tpot", m.TPOT}, {"itl", m.ITL}, {"e2el", m.E2EL}} {
		out["mean_"+s.key+"_ms"] = s.d.Mean
		out["median_"+s.key+"_ms"] = s.d.Median
		out["std_"+s.key+"_ms"] = s.d.Std
		for _, p := range percentiles {
			out["p"+trimFloat(p)+"_"+s.key+"_ms"] = s.d.Percentiles[PercentileKey(p)]
		}
	}
	return out
}
