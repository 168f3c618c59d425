// Package extproc measures an EPP's decision latency over ext_proc (`eppkit bench extproc`):
// each decision sends request headers and a completions body in chunks and waits for the pick, in
// open loop (a rate, Poisson or fixed arrivals, latency from the scheduled arrival: no coordinated
// omission) or closed loop (workers back to back); and the picker-overhead matrix (RunMatrix):
// every target EPP × pool size × prompt size, each EPP started by the matrix against a fleet of
// metrics-only endpoints (fakes/metricspage), with the null EPP (fakes/nullepp) as the floor.
// Percentiles are internal/percentile's (linear interpolation, as vLLM's benchmark).
package extproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/internal/percentile"
	"github.com/eppkit/eppkit/internal/procstat"
)

// Options configure one decision-latency run.
type Options struct {
	EPP         string
	TLS         string
	Rate        float64 // decisions/s, open loop; 0 = closed loop
	Arrival     string  // poisson | fixed
	Concurrency int     // closed loop workers
	Duration    time.Duration
	Warmup      time.Duration
	PromptBytes int
	Streams     int // long-lived streams reused by decisions; 0 = one stream per decision (as Envoy)
	Model       string
	Path        string
	ChunkSize   int
	Timeout     time.Duration // per ext_proc message
	MaxInflight int           // open loop: arrivals beyond this many in flight are dropped
	Response    bool          // also run a small response phase after each pick (not timed)
	Seed        uint64
	PID         int // the EPP's process id (same machine): its CPU time over the measured window is reported
	// Record keeps every measured decision (Report.Records), for the inference-perf report.
	Record bool
}

// Report is the result; JSON field names are stable.
type Report struct {
	EPP             string         `json:"epp"`
	Mode            string         `json:"mode"` // open-poisson, open-fixed, closed
	TargetRate      float64        `json:"target_rate,omitempty"`
	Concurrency     int            `json:"concurrency,omitempty"`
	Streams         int            `json:"streams"`
	PromptBytes     int            `json:"prompt_bytes"`
	Seed            uint64         `json:"seed"`
	DurationSeconds float64        `json:"duration_seconds"`
	Decisions       int            `json:"decisions"`
	DecisionsPerSec float64        `json:"decisions_per_second"`
	Errors          int            `json:"errors"`
	ErrorKinds      map[string]int `json:"error_kinds,omitempty"`
	// FirstError is the message of the first failed decision in the measured window.
	FirstError string           `json:"first_error,omitempty"`
	Dropped    int              `json:"dropped,omitempty"`
	LatencyMs  LatencySummaryMs `json:"latency_ms"`
	// ServiceMs counts from when the decision actually started (open loop: the scheduled arrival
	// may be earlier when the driver itself was late); equal to LatencyMs in closed loop.
	ServiceMs LatencySummaryMs `json:"service_ms"`
	Picks     map[string]int   `json:"picks,omitempty"`
	// EPPCPUSeconds is the EPP process's CPU time (user + system, /proc/<pid>/stat) over the
	// measured window, and EPPCPUPerDecisionMs that divided by Decisions; present with --epp-pid.
	EPPCPUSeconds       float64 `json:"epp_cpu_seconds,omitempty"`
	EPPCPUPerDecisionMs float64 `json:"epp_cpu_per_decision_ms,omitempty"`
	// ClientCPUPerDecisionMs is this driver's own CPU time per decision over the same window.
	ClientCPUPerDecisionMs float64 `json:"client_cpu_per_decision_ms,omitempty"`
	// LoadAverage is the machine's 1-minute load average at the end of the run (/proc/loadavg).
	LoadAverage float64 `json:"load_average_1m,omitempty"`
	// EPPRSSBytes and EPPPeakRSSBytes are the EPP process's resident set size at the end of the
	// window and its peak so far (VmRSS, VmHWM of /proc/<pid>/status); present with --epp-pid.
	EPPRSSBytes     uint64 `json:"epp_rss_bytes,omitempty"`
	EPPPeakRSSBytes uint64 `json:"epp_peak_rss_bytes,omitempty"`
	// Records are the measured decisions, in completion order (Options.Record; not in the JSON).
	Records []Record `json:"-"`
}

// Record is one measured decision: when it was scheduled (open loop: its arrival; closed loop:
// when it started), started and ended (the pick, or the failure), its body's size, and what
// failed ("" = a pick): Kind is the error kind of Report.ErrorKinds, Message its text.
type Record struct {
	Scheduled, Started, Ended time.Time
	BodyBytes                 int
	Kind, Message             string
}

// LatencySummaryMs holds decision latencies in milliseconds, from every sample: percentiles by
// linear interpolation (internal/percentile), the maximum and the mean.
type LatencySummaryMs struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func (o *Options) Validate() error {
	switch {
	case o.EPP == "":
		return errors.New("--epp is required")
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("--rate must be a finite number ≥ 0, got %v", o.Rate)
	case o.Rate == 0 && o.Concurrency < 1:
		return fmt.Errorf("--concurrency must be ≥ 1 in closed loop, got %d", o.Concurrency)
	case o.Arrival != "poisson" && o.Arrival != "fixed":
		return fmt.Errorf("--arrival must be poisson or fixed, got %q", o.Arrival)
	case o.Duration <= 0:
		return fmt.Errorf("--duration must be positive, got %v", o.Duration)
	case o.Warmup < 0:
		return fmt.Errorf("--warmup must not be negative, got %v", o.Warmup)
	case o.PromptBytes < 1:
		return fmt.Errorf("--prompt-bytes must be ≥ 1, got %d", o.PromptBytes)
	case o.Streams < 0:
		return fmt.Errorf("--streams must be ≥ 0, got %d", o.Streams)
	case o.ChunkSize < 1:
		return fmt.Errorf("--body-chunk-size must be ≥ 1, got %d", o.ChunkSize)
	case o.Timeout <= 0:
		return fmt.Errorf("--message-timeout must be positive, got %v", o.Timeout)
	case o.MaxInflight < 1:
		return fmt.Errorf("--max-inflight must be ≥ 1, got %d", o.MaxInflight)
	case o.PID < 0:
		return fmt.Errorf("--epp-pid must be a process id, got %d", o.PID)
	}
	if o.PID > 0 {
		if _, err := processCPU(o.PID); err != nil {
			return fmt.Errorf("--epp-pid %d: %w", o.PID, err)
		}
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	return nil
}

// benchRun holds the shared state of one run.
type run struct {
	o       Options
	client  *extprocclient.Client
	pool    chan *extprocclient.Stream // nil when Streams == 0
	ctx     context.Context
	measure atomic.Bool // set after warm-up
	seq     atomic.Uint64

	// CPU readings (seconds) of the EPP (PID) and of this process at the start of the measured
	// window; set by the warm-up timer.
	cpuMu             sync.Mutex
	eppCPU0, selfCPU0 float64
	eppCPUErr         error

	mu       sync.Mutex
	records  []Record
	samples  []time.Duration
	service  []time.Duration
	errs     map[string]int
	firstErr string
	picks    map[string]int
	dropped  int
}

func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	tlsCfg, err := extprocclient.ParseTLSSpec("--epp-tls", o.TLS)
	if err != nil {
		return nil, err
	}
	c, err := extprocclient.Dial(o.EPP, tlsCfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	c.MessageTimeout = o.Timeout
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &run{o: o, client: c, ctx: ctx, errs: map[string]int{}, picks: map[string]int{}}
	if o.Streams > 0 {
		r.pool = make(chan *extprocclient.Stream, o.Streams)
		for range o.Streams {
			st, err := c.Open(ctx)
			if err != nil {
				return nil, err
			}
			r.pool <- st
		}
	}
	// Warm-up, then measure for Duration.
	startMeasuring := func() {
		r.cpuMu.Lock()
		defer r.cpuMu.Unlock()
		if o.PID > 0 {
			r.eppCPU0, r.eppCPUErr = processCPU(o.PID)
		}
		r.selfCPU0, _ = processCPU(os.Getpid())
		r.measure.Store(true)
	}
	if o.Warmup == 0 {
		// Before the window is computed, so reading /proc does not shorten it.
		startMeasuring()
	}
	start := time.Now()
	measureAt := start.Add(o.Warmup)
	end := measureAt.Add(o.Duration)
	if o.Warmup > 0 {
		go func() {
			select {
			case <-time.After(time.Until(measureAt)):
				startMeasuring()
			case <-ctx.Done():
			}
		}()
	}
	if o.Rate > 0 {
		openLoop(r.ctx, r.o.Seed, r.o.Rate, r.o.Arrival, end, r.o.MaxInflight, func() {
			if r.measure.Load() {
				r.mu.Lock()
				r.dropped++
				r.mu.Unlock()
			}
		}, r.decide)
	} else {
		closedLoop(r.ctx, r.o.Concurrency, end, r.decide)
	}
	// CPU at the end of the window, before the streams are torn down.
	var eppCPU1, selfCPU1 float64
	var cpuErr error
	var rss, peakRSS uint64
	if o.PID > 0 {
		eppCPU1, cpuErr = processCPU(o.PID)
		rss, peakRSS = processRSS(o.PID)
	}
	selfCPU1, _ = processCPU(os.Getpid())
	if r.pool != nil {
		close(r.pool)
		for st := range r.pool {
			st.Close()
		}
	}
	elapsed := time.Since(measureAt)
	if elapsed > o.Duration {
		elapsed = o.Duration
	}
	if ctx.Err() != nil && elapsed < o.Duration {
		return nil, ctx.Err()
	}
	rep := r.report(elapsed)
	r.cpuMu.Lock()
	if cpuErr == nil {
		cpuErr = r.eppCPUErr
	}
	if o.PID > 0 && cpuErr != nil {
		r.cpuMu.Unlock()
		return nil, fmt.Errorf("reading the CPU time of --epp-pid %d: %w", o.PID, cpuErr)
	}
	if o.PID > 0 {
		rep.EPPCPUSeconds = eppCPU1 - r.eppCPU0
		if rep.Decisions > 0 {
			rep.EPPCPUPerDecisionMs = rep.EPPCPUSeconds * 1000 / float64(rep.Decisions)
		}
	}
	rep.EPPRSSBytes, rep.EPPPeakRSSBytes = rss, peakRSS
	if rep.Decisions > 0 {
		rep.ClientCPUPerDecisionMs = (selfCPU1 - r.selfCPU0) * 1000 / float64(rep.Decisions)
	}
	r.cpuMu.Unlock()
	rep.LoadAverage = loadAverage()
	return rep, nil
}

// processCPU is internal/procstat.CPUSeconds.
var processCPU = procstat.CPUSeconds

// processRSS is process pid's resident set size and its peak (bytes), 0, 0 when unreadable.
func processRSS(pid int) (rss, peak uint64) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0
	}
	return st.VmRSS, st.VmHWM
}

// loadAverage returns the 1-minute load average, 0 when /proc/loadavg cannot be read.
func loadAverage() float64 {
	one, _, _, _ := procstat.LoadAverage()
	return one
}

// openLoop drives open-loop load: arrivals at rate req/s from now until end, exponential gaps
// drawn from a PCG seeded with seed (Poisson arrivals), or equal gaps when arrival is "fixed". Each
// arrival runs do(scheduled) in a goroutine of its own, unless maxInflight are running, when it
// calls drop instead. It returns once ctx ends or end passes and every started do has returned.
// Run's decisions and RunE2E's requests share it.
func openLoop(ctx context.Context, seed uint64, rate float64, arrival string, end time.Time, maxInflight int, drop func(), do func(scheduled time.Time)) {
	rng := rand.New(rand.NewPCG(seed, 0x6170706c65))
	var inflight atomic.Int64
	var wg sync.WaitGroup
	next := time.Now()
	for {
		if arrival == "fixed" {
			next = next.Add(time.Duration(float64(time.Second) / rate))
		} else {
			next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		}
		if next.After(end) || sleepCtx(ctx, time.Until(next)) != nil {
			break
		}
		if inflight.Load() >= int64(maxInflight) {
			drop()
			continue
		}
		inflight.Add(1)
		wg.Add(1)
		go func(scheduled time.Time) {
			defer wg.Done()
			defer inflight.Add(-1)
			do(scheduled)
		}(next)
	}
	wg.Wait()
}

// closedLoop drives closed-loop load: n goroutines each call do(time.Now()) back to back until
// end passes or ctx ends; it returns when all have returned.
func closedLoop(ctx context.Context, n int, end time.Time, do func(scheduled time.Time)) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				do(time.Now())
			}
		}()
	}
	wg.Wait()
}

// body builds a completions body with a unique prompt of PromptBytes bytes.
func (r *run) body(n uint64) []byte {
	rng := rand.New(rand.NewPCG(r.o.Seed, n))
	var sb strings.Builder
	sb.Grow(r.o.PromptBytes)
	sb.WriteString("req ")
	sb.WriteString(strconv.FormatUint(n, 10))
	for sb.Len() < r.o.PromptBytes {
		sb.WriteByte(' ')
		for range 3 + rng.IntN(6) {
			sb.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	prompt := sb.String()[:r.o.PromptBytes]
	b, _ := json.Marshal(map[string]any{"model": r.o.Model, "prompt": prompt, "max_tokens": 16})
	return b
}

// decide runs one decision and records it when measuring.
func (r *run) decide(scheduled time.Time) {
	started := time.Now()
	n := r.seq.Add(1)
	body := r.body(n)
	req := extprocclient.Request{
		Headers:   extprocclient.RequestHeaders("POST", r.o.Path, "eppkit-bench", body, map[string]string{"x-request-id": fmt.Sprintf("bench-%d-%d", r.o.Seed, n)}),
		Body:      body,
		ChunkSize: r.o.ChunkSize,
	}
	var st *extprocclient.Stream
	var err error
	if r.pool != nil {
		select {
		case st = <-r.pool:
		case <-r.ctx.Done():
			return
		}
	} else {
		st, err = r.client.Open(r.ctx)
	}
	var d *extprocclient.Decision
	if err == nil {
		d, err = st.Exchange(r.ctx, req)
	}
	lat := time.Since(scheduled)
	svc := time.Since(started)
	if err == nil && d.Immediate == nil && r.o.Response {
		_, err = st.Respond(r.ctx, extprocclient.Response{
			Headers: []extprocclient.Header{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "application/json"}},
			Chunks:  [][]byte{[]byte(`{"choices":[{"text":"ok"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)},
			Served:  strings.Split(d.Pick(), ",")[0],
		})
	}
	if st != nil {
		if r.pool != nil {
			if err != nil { // a broken stream is replaced
				st.Close()
				if ns, oerr := r.client.Open(r.ctx); oerr == nil {
					st = ns
				}
			}
			r.pool <- st
		} else {
			_ = st.CloseSend()
			st.Close()
		}
	}
	if r.ctx.Err() != nil || !r.measure.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := Record{Scheduled: scheduled, Started: started, Ended: started.Add(svc), BodyBytes: len(body)}
	if r.o.Record {
		defer func() { r.records = append(r.records, rec) }()
	}
	switch {
	case err != nil:
		rec.Kind, rec.Message = errorKind(err), err.Error()
		r.errs[errorKind(err)]++
		if r.firstErr == "" {
			r.firstErr = err.Error()
		}
	case d.Immediate != nil:
		rec.Kind, rec.Message = "immediate-"+strconv.Itoa(d.Immediate.Status), string(d.Immediate.Body)
		r.errs["immediate-"+strconv.Itoa(d.Immediate.Status)]++
		if r.firstErr == "" {
			r.firstErr = fmt.Sprintf("ImmediateResponse %d: %.200s", d.Immediate.Status, d.Immediate.Body)
		}
	case d.Pick() == "":
		rec.Kind, rec.Message = "no-pick", "the EPP answered without a destination"
		r.errs["no-pick"]++
	default:
		r.samples = append(r.samples, lat)
		r.service = append(r.service, svc)
		r.picks[strings.Split(d.Pick(), ",")[0]]++
	}
}

func errorKind(err error) string {
	switch {
	case errors.Is(err, extprocclient.ErrMessageTimeout):
		return "timeout"
	case errors.Is(err, extprocclient.ErrProtocol):
		return "protocol"
	case errors.Is(err, io.EOF):
		return "stream-closed"
	}
	return "stream-error"
}

func (r *run) report(elapsed time.Duration) *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	mode := "closed"
	if r.o.Rate > 0 {
		mode = "open-" + r.o.Arrival
	}
	rep := &Report{EPP: r.o.EPP, Mode: mode, Streams: r.o.Streams, PromptBytes: r.o.PromptBytes, Seed: r.o.Seed,
		DurationSeconds: elapsed.Seconds(), Decisions: len(r.samples), ErrorKinds: r.errs, FirstError: r.firstErr, Dropped: r.dropped, Picks: r.picks}
	if r.o.Rate > 0 {
		rep.TargetRate = r.o.Rate
	} else {
		rep.Concurrency = r.o.Concurrency
	}
	for _, v := range r.errs {
		rep.Errors += v
	}
	if elapsed > 0 {
		rep.DecisionsPerSec = float64(len(r.samples)) / elapsed.Seconds()
	}
	rep.LatencyMs = summarize(r.samples)
	rep.ServiceMs = summarize(r.service)
	rep.Records = r.records
	return rep
}

// summarize returns the percentiles (internal/percentile: linear interpolation, as vLLM's
// benchmark), the maximum and the mean of samples, in milliseconds; zeros for no samples.
func summarize(samples []time.Duration) LatencySummaryMs {
	if len(samples) == 0 {
		return LatencySummaryMs{}
	}
	s := make([]float64, len(samples))
	var sum float64
	for i, d := range samples {
		s[i] = float64(d) / float64(time.Millisecond)
		sum += s[i]
	}
	slices.Sort(s)
	q := func(p float64) float64 { return percentile.Sorted(s, p) }
	return LatencySummaryMs{P50: q(50), P90: q(90), P95: q(95), P99: q(99), P999: q(99.9), Max: s[len(s)-1], Mean: sum / float64(len(s))}
}

func Print(w io.Writer, rep *Report) {
	load := fmt.Sprintf("concurrency %d", rep.Concurrency)
	if rep.TargetRate > 0 {
		load = fmt.Sprintf("target %.0f/s", rep.TargetRate)
	}
	fmt.Fprintf(w, "epp %s  mode %s  %s  streams %d  prompt %d B  seed %d\n", rep.EPP, rep.Mode, load, rep.Streams, rep.PromptBytes, rep.Seed)
	fmt.Fprintf(w, "decisions %d in %.1fs = %.1f/s  errors %d", rep.Decisions, rep.DurationSeconds, rep.DecisionsPerSec, rep.Errors)
	if rep.Dropped > 0 {
		fmt.Fprintf(w, "  dropped %d", rep.Dropped)
	}
	fmt.Fprintln(w)
	if rep.FirstError != "" {
		fmt.Fprintf(w, "  first error: %s\n", rep.FirstError)
	}
	for _, k := range slices.Sorted(maps.Keys(rep.ErrorKinds)) {
		fmt.Fprintf(w, "  error %s: %d\n", k, rep.ErrorKinds[k])
	}
	l := rep.LatencyMs
	fmt.Fprintf(w, "latency ms  p50 %.3f  p90 %.3f  p95 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  mean %.3f\n", l.P50, l.P90, l.P95, l.P99, l.P999, l.Max, l.Mean)
	if rep.TargetRate > 0 {
		l = rep.ServiceMs
		fmt.Fprintf(w, "service ms  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  mean %.3f  (from the actual start)\n", l.P50, l.P90, l.P99, l.P999, l.Max, l.Mean)
	}
	fmt.Fprintf(w, "distinct endpoints picked: %d\n", len(rep.Picks))
	if rep.EPPCPUSeconds > 0 {
		fmt.Fprintf(w, "EPP CPU %.2fs = %.3f ms/decision  (driver %.3f ms/decision)  load avg %.1f\n",
			rep.EPPCPUSeconds, rep.EPPCPUPerDecisionMs, rep.ClientCPUPerDecisionMs, rep.LoadAverage)
	} else {
		fmt.Fprintf(w, "driver CPU %.3f ms/decision  load avg %.1f\n", rep.ClientCPUPerDecisionMs, rep.LoadAverage)
	}
}

// errNoDecision is the error of a run in which decisions failed and none succeeded (an address
// with nothing listening, an EPP refusing everything), so such a run does not exit 0; nil
// otherwise.
func ErrNoDecision(rep *Report) error {
	if rep.Decisions > 0 || rep.Errors == 0 {
		return nil
	}
	return fmt.Errorf("no decision succeeded at %s: %d errors, the first: %s", rep.EPP, rep.Errors, rep.FirstError)
}
