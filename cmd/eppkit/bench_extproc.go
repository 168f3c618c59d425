package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
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
}

// extprocBenchReport is the result; JSON field names are stable.
type extprocBenchReport struct {
	EPP             string           `json:"epp"`
	Mode            string           `json:"mode"` // open-poisson, open-fixed, closed
	TargetRate      float64          `json:"target_rate,omitempty"`
	Concurrency     int              `json:"concurrency,omitempty"`
	Streams         int              `json:"streams"`
	PromptBytes     int              `json:"prompt_bytes"`
	Seed            uint64           `json:"seed"`
	DurationSeconds float64          `json:"duration_seconds"`
	Decisions       int              `json:"decisions"`
	DecisionsPerSec float64          `json:"decisions_per_second"`
	Errors          int              `json:"errors"`
	ErrorKinds      map[string]int   `json:"error_kinds,omitempty"`
	Dropped         int              `json:"dropped,omitempty"`
	LatencyMs       latencySummaryMs `json:"latency_ms"`
	// ServiceMs counts from when the decision actually started (open loop: the scheduled arrival
	// may be earlier when the driver itself was late); equal to LatencyMs in closed loop.
	ServiceMs latencySummaryMs `json:"service_ms"`
	Picks     map[string]int   `json:"picks,omitempty"`
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
	cmd := &cobra.Command{
		Use:   "extproc --epp ADDR (--rate R | --concurrency N) [--duration 10s]",
		Short: "Measure an EPP's decision latency over ext_proc (request headers + body → pick)",
		Long: `Drive an EPP's ext_proc service directly (no gateway, no model servers needed beyond what the
EPP scrapes): each decision sends request headers and a completions body in chunks and waits for
the pick (the request_headers response and the streamed body ending with end_of_stream).

Open loop: --rate decisions/s with Poisson (default) or fixed arrivals; latency is measured from
the scheduled arrival, so a stalled EPP is not hidden (no coordinated omission). Closed loop:
--concurrency N workers back to back (--rate 0). --streams N reuses N long-lived streams (several
requests per stream, which upstream EPPs do not support); 0 opens one stream per decision as Envoy
does. Latency percentiles are exact (every sample sorted). Decisions in --warmup are not counted.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			rep, err := runExtprocBench(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printExtprocReport(cmd.OutOrStdout(), rep)
			return nil
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
	fl.BoolVar(&asJSON, "json", false, "Print the report as JSON")
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

	mu      sync.Mutex
	samples []time.Duration
	service []time.Duration
	errs    map[string]int
	picks   map[string]int
	dropped int
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
	start := time.Now()
	measureAt := start.Add(o.Warmup)
	end := measureAt.Add(o.Duration)
	if o.Warmup == 0 {
		r.measure.Store(true)
	}
	go func() {
		select {
		case <-time.After(time.Until(measureAt)):
			r.measure.Store(true)
		case <-ctx.Done():
		}
	}()
	if o.Rate > 0 {
		r.openLoop(end)
	} else {
		r.closedLoop(end)
	}
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
	return r.report(elapsed), nil
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
	case d.Immediate != nil:
		r.errs["immediate-"+strconv.Itoa(d.Immediate.Status)]++
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
		DurationSeconds: elapsed.Seconds(), Decisions: len(r.samples), ErrorKinds: r.errs, Dropped: r.dropped, Picks: r.picks}
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
}
