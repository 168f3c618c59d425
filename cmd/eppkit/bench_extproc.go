package main

import (
	"bytes"
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

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchExtprocCommand) }

// extprocBenchOptions configure one decision-latency run.
type extprocBenchOptions struct {
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
}

// extprocBenchReport is the result; JSON field names are stable.
type extprocBenchReport struct {
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
	LatencyMs  latencySummaryMs `json:"latency_ms"`
	// ServiceMs counts from when the decision actually started (open loop: the scheduled arrival
	// may be earlier when the driver itself was late); equal to LatencyMs in closed loop.
	ServiceMs latencySummaryMs `json:"service_ms"`
	Picks     map[string]int   `json:"picks,omitempty"`
	// EPPCPUSeconds is the EPP process's CPU time (user + system, /proc/<pid>/stat) over the
	// measured window, and EPPCPUPerDecisionMs that divided by Decisions; present with --epp-pid.
	EPPCPUSeconds       float64 `json:"epp_cpu_seconds,omitempty"`
	EPPCPUPerDecisionMs float64 `json:"epp_cpu_per_decision_ms,omitempty"`
	// ClientCPUPerDecisionMs is this driver's own CPU time per decision over the same window.
	ClientCPUPerDecisionMs float64 `json:"client_cpu_per_decision_ms,omitempty"`
	// LoadAverage is the machine's 1-minute load average at the end of the run (/proc/loadavg).
	LoadAverage float64 `json:"load_average_1m,omitempty"`
}

// latencySummaryMs holds decision latencies in milliseconds (exact, from every sample).
type latencySummaryMs struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func newBenchExtprocCommand() *cobra.Command {
	o := extprocBenchOptions{}
	var asJSON bool
	mf := &matrixFlags{}
	cmd := &cobra.Command{
		Use:   "extproc (--epp ADDR | --targets null,reference,upstream) (--rate R | --concurrency N) [--duration 10s]",
		Short: "Measure an EPP's decision latency over ext_proc (request headers + body → pick)",
		Long: `Drive an EPP's ext_proc service directly (no gateway, no model servers needed beyond what the
EPP scrapes): each decision sends request headers and a completions body in chunks and waits for
the pick (the request_headers response and the streamed body ending with end_of_stream).

Open loop: --rate decisions/s with Poisson (default) or fixed arrivals; latency is measured from
the scheduled arrival, so a stalled EPP is not hidden (no coordinated omission). Closed loop:
--concurrency N workers back to back (--rate 0). --streams N reuses N long-lived streams (several
requests per stream, which upstream EPPs do not support); 0 opens one stream per decision as Envoy
does. Latency percentiles are exact (every sample sorted). Decisions in --warmup are not counted.
--epp-pid PID adds the EPP process's CPU time per decision (from /proc/PID/stat).

Picker-overhead matrix: --targets reference,upstream (instead of --epp) starts each EPP itself
for every --endpoint-counts value (default 10,100,1000) and measures every --prompt-sizes value
(default 2048,32768 bytes) against it, with the load flags above per cell, and prints one table
with decisions/s, latency percentiles and the EPP's CPU per decision, plus reference ÷ upstream
ratios. The endpoints are metrics-only servers on loopback addresses 127.1.x.y sharing one port,
each serving a fake vLLM's gauge-only /metrics page (pinned: queue i%5, running i%7, KV (i%10)/10),
scraped every --refresh-metrics-interval. The reference EPP gets the list with --endpoints; the
upstream EPP v1.5.0 (--upstream-epp, default: eppkit tools path gie epp) discovers it from an
InferencePool with one Ready Pod per endpoint on a local kube-apiserver (eppkit tools build k8s).
The null target (eppkit bench null-epp) answers the protocol correctly and decides nothing
(round-robin, no scraping, body unparsed): its row is the floor that gRPC, the loopback, this
driver and the machine's scheduler set, and the table then shows every other target minus it.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			if mf.targets != "" {
				if o.EPP != "" {
					return errMatrixAndEPP
				}
				m, err := mf.options(o)
				if err != nil {
					return err
				}
				// Validate the per-cell load once up front (a placeholder address stands in for
				// the EPPs the matrix starts).
				probe := o
				probe.EPP = "matrix"
				if err := validateExtprocBench(&probe); err != nil {
					return err
				}
				m.Bench.Seed = probe.Seed
				_, err = runMatrix(ctx, cmd.OutOrStdout(), m)
				return err
			}
			rep, err := runExtprocBench(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
				return errNoDecision(rep)
			}
			printExtprocReport(cmd.OutOrStdout(), rep)
			return errNoDecision(rep)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.EPP, "epp", "", "EPP ext_proc address host:port (required)")
	fl.StringVar(&o.TLS, "epp-tls", "plaintext", "TLS to the EPP: plaintext, insecure or ca:<file>")
	fl.Float64Var(&o.Rate, "rate", 0, "Open loop: decisions per second (0 = closed loop)")
	fl.StringVar(&o.Arrival, "arrival", "poisson", "Open-loop arrivals: poisson or fixed")
	fl.IntVar(&o.Concurrency, "concurrency", 8, "Closed loop: concurrent workers")
	fl.DurationVar(&o.Duration, "duration", 10*time.Second, "Measured duration")
	fl.DurationVar(&o.Warmup, "warmup", time.Second, "Unmeasured warm-up before --duration")
	fl.IntVar(&o.PromptBytes, "prompt-bytes", 2048, "Prompt length in bytes (unique per decision)")
	fl.IntVar(&o.Streams, "streams", 0, "Long-lived streams to reuse (0 = one stream per decision)")
	fl.StringVar(&o.Model, "model", "meta-llama/Llama-3.1-8B-Instruct", "Model name in the request body")
	fl.StringVar(&o.Path, "path", "/v1/completions", "Request :path")
	fl.IntVar(&o.ChunkSize, "body-chunk-size", extprocclient.DefaultChunkSize, "Bytes per request_body chunk")
	fl.DurationVar(&o.Timeout, "message-timeout", 5*time.Second, "Bound on each wait for an EPP response")
	fl.IntVar(&o.MaxInflight, "max-inflight", 4096, "Open loop: arrivals beyond this many in flight are dropped and counted")
	fl.BoolVar(&o.Response, "response-phase", false, "After each pick, also send a small JSON response through the response phases (not timed)")
	fl.Uint64Var(&o.Seed, "seed", 0, "Seed for prompts and arrivals (0 = from the clock; printed)")
	fl.IntVar(&o.PID, "epp-pid", 0, "Process id of the EPP on this machine: report its CPU time per decision (from /proc/<pid>/stat)")
	fl.BoolVar(&asJSON, "json", false, "Print the report as JSON")
	fl.StringVar(&mf.targets, "targets", "", "Matrix mode: EPPs to start and measure, comma-separated: reference, upstream, null (the do-nothing floor) (excludes --epp)")
	fl.StringVar(&mf.counts, "endpoint-counts", "10,100,1000", "Matrix mode: pool sizes, comma-separated")
	fl.StringVar(&mf.sizes, "prompt-sizes", "2048,32768", "Matrix mode: prompt lengths in bytes, comma-separated (overrides --prompt-bytes)")
	fl.DurationVar(&mf.m.RefreshInterval, "refresh-metrics-interval", time.Second, "Matrix mode: the EPPs' metrics scrape interval (both EPPs default to 50ms; 1,000 endpoints at 50ms is 20,000 scrapes/s)")
	fl.StringVar(&mf.m.UpstreamEPP, "upstream-epp", "", "Matrix mode: upstream EPP binary (default: the tools cache's gie epp)")
	fl.StringVar(&mf.m.LogDir, "log-dir", "", "Matrix mode: directory for the EPP and control-plane logs (default: a new temporary directory)")
	fl.StringVar(&mf.m.Output, "output", "", "Matrix mode: also write the report as JSON to this file")
	fl.DurationVar(&mf.m.Settle, "settle", 2*time.Second, "Matrix mode: wait after an EPP reports every endpoint ready (plus two refresh intervals)")
	return cmd
}

func validateExtprocBench(o *extprocBenchOptions) error {
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
type benchRun struct {
	o       extprocBenchOptions
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
	samples  []time.Duration
	service  []time.Duration
	errs     map[string]int
	firstErr string
	picks    map[string]int
	dropped  int
}

func runExtprocBench(ctx context.Context, o extprocBenchOptions) (*extprocBenchReport, error) {
	if err := validateExtprocBench(&o); err != nil {
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
	r := &benchRun{o: o, client: c, ctx: ctx, errs: map[string]int{}, picks: map[string]int{}}
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
		r.openLoop(end)
	} else {
		r.closedLoop(end)
	}
	// CPU at the end of the window, before the streams are torn down.
	var eppCPU1, selfCPU1 float64
	var cpuErr error
	if o.PID > 0 {
		eppCPU1, cpuErr = processCPU(o.PID)
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
	if rep.Decisions > 0 {
		rep.ClientCPUPerDecisionMs = (selfCPU1 - r.selfCPU0) * 1000 / float64(rep.Decisions)
	}
	r.cpuMu.Unlock()
	rep.LoadAverage = loadAverage()
	return rep, nil
}

// processCPU returns a process's CPU time (user + system) in seconds from /proc/<pid>/stat.
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields 14 and 15 (utime,
	// stime, in clock ticks) are the 12th and 13th after the closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command, want ≥ 13", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	// USER_HZ is 100 on every Linux architecture Go supports (sysconf(_SC_CLK_TCK)).
	return float64(ut+st) / 100, nil
}

// loadAverage returns the 1-minute load average, 0 when /proc/loadavg cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func (r *benchRun) openLoop(end time.Time) {
	rng := rand.New(rand.NewPCG(r.o.Seed, 0x6170706c65))
	var inflight atomic.Int64
	var wg sync.WaitGroup
	next := time.Now()
	for {
		if r.o.Arrival == "fixed" {
			next = next.Add(time.Duration(float64(time.Second) / r.o.Rate))
		} else {
			next = next.Add(time.Duration(rng.ExpFloat64() / r.o.Rate * float64(time.Second)))
		}
		if next.After(end) {
			break
		}
		if d := time.Until(next); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.ctx.Done():
				t.Stop()
			}
		}
		if r.ctx.Err() != nil {
			break
		}
		if inflight.Load() >= int64(r.o.MaxInflight) {
			if r.measure.Load() {
				r.mu.Lock()
				r.dropped++
				r.mu.Unlock()
			}
			continue
		}
		inflight.Add(1)
		wg.Add(1)
		go func(scheduled time.Time) {
			defer wg.Done()
			defer inflight.Add(-1)
			r.decide(scheduled)
		}(next)
	}
	wg.Wait()
}

func (r *benchRun) closedLoop(end time.Time) {
	var wg sync.WaitGroup
	for range r.o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && r.ctx.Err() == nil {
				r.decide(time.Now())
			}
		}()
	}
	wg.Wait()
}

// body builds a completions body with a unique prompt of PromptBytes bytes.
func (r *benchRun) body(n uint64) []byte {
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
func (r *benchRun) decide(scheduled time.Time) {
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
	switch {
	case err != nil:
		r.errs[errorKind(err)]++
		if r.firstErr == "" {
			r.firstErr = err.Error()
		}
	case d.Immediate != nil:
		r.errs["immediate-"+strconv.Itoa(d.Immediate.Status)]++
		if r.firstErr == "" {
			r.firstErr = fmt.Sprintf("ImmediateResponse %d: %.200s", d.Immediate.Status, d.Immediate.Body)
		}
	case d.Pick() == "":
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

func (r *benchRun) report(elapsed time.Duration) *extprocBenchReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	mode := "closed"
	if r.o.Rate > 0 {
		mode = "open-" + r.o.Arrival
	}
	rep := &extprocBenchReport{EPP: r.o.EPP, Mode: mode, Streams: r.o.Streams, PromptBytes: r.o.PromptBytes, Seed: r.o.Seed,
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
	return rep
}

// summarize returns exact nearest-rank percentiles of samples, in milliseconds.
func summarize(samples []time.Duration) latencySummaryMs {
	if len(samples) == 0 {
		return latencySummaryMs{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return ms(s[max(0, min(i, len(s)-1))])
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return latencySummaryMs{P50: q(0.50), P90: q(0.90), P99: q(0.99), P999: q(0.999), Max: ms(s[len(s)-1]), Mean: ms(sum / time.Duration(len(s)))}
}

func printExtprocReport(w io.Writer, rep *extprocBenchReport) {
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
	fmt.Fprintf(w, "latency ms  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  mean %.3f\n", l.P50, l.P90, l.P99, l.P999, l.Max, l.Mean)
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
func errNoDecision(rep *extprocBenchReport) error {
	if rep.Decisions > 0 || rep.Errors == 0 {
		return nil
	}
	return fmt.Errorf("no decision succeeded at %s: %d errors, the first: %s", rep.EPP, rep.Errors, rep.FirstError)
}
