package extproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// Defaults of the end-to-end mode (`bench extproc --e2e`): issue 34's case of GIE #2928, 220 KB
// prompts at 150 concurrent streams, on a pool of 10 (upstream's nightly perf runs 10 simulator
// replicas).
const (
	DefaultE2EStreams   = 150
	DefaultE2EBodyBytes = 225280
	DefaultE2EEndpoints = 10
	// MinE2EBodyBytes is the smallest body the mode builds: the JSON around the prompt and the
	// prompt's unique "req <n> " head must fit.
	MinE2EBodyBytes = 256
	// e2eMaxTokens is every request's max_tokens.
	e2eMaxTokens = 16
)

// E2EOptions configure the end-to-end mode.
type E2EOptions struct {
	// Streams is the number of concurrent streams: closed loop (Bench.Rate 0) that many clients
	// back to back; open loop (Bench.Rate > 0) the most requests in flight, arrivals beyond it
	// dropped and counted.
	Streams int
	// BodyBytes is every request body's exact size in bytes (a completions body whose prompt is
	// unique per request).
	BodyBytes int
	// Endpoints is the number of fake vLLM servers in the pool.
	Endpoints int
}

// E2EResult is one target's end-to-end run: requests sent through the gateway with that target
// as its EPP, latency from the request's send (open loop: its scheduled arrival) to the last
// byte of its response, in milliseconds.
type E2EResult struct {
	Target         string           `json:"target"`
	Requests       int              `json:"requests"`
	RequestsPerSec float64          `json:"requests_per_second"`
	Errors         int              `json:"errors"`
	ErrorKinds     map[string]int   `json:"error_kinds,omitempty"`
	FirstError     string           `json:"first_error,omitempty"`
	Dropped        int              `json:"dropped,omitempty"`
	LatencyMs      LatencySummaryMs `json:"latency_ms"`
	// EndpointsUsed is how many distinct endpoints served the measured requests.
	EndpointsUsed int     `json:"endpoints_used"`
	LoadAverage   float64 `json:"load_average_1m,omitempty"`
	// Error is why the target did not run (it failed to start); the other fields are then zero.
	Error string `json:"error,omitempty"`
}

// E2ERatio is one target's end-to-end latency ÷ the null EPP's, at each percentile (0 when
// either is unknown). Issue 34's goal: the reference's P99 ratio ≤ 1.5.
type E2ERatio struct {
	Target string  `json:"target"`
	P50    float64 `json:"p50"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
}

// E2EReport is the JSON result of the end-to-end mode.
type E2EReport struct {
	Started         time.Time   `json:"started"`
	Mode            string      `json:"mode"` // closed, open-poisson, open-fixed
	TargetRate      float64     `json:"target_rate,omitempty"`
	Streams         int         `json:"streams"`
	BodyBytes       int         `json:"body_bytes"`
	Endpoints       int         `json:"endpoints"`
	Seed            uint64      `json:"seed"`
	DurationSeconds float64     `json:"duration_seconds"`
	Results         []E2EResult `json:"results"`
	RatiosOverNull  []E2ERatio  `json:"ratios_over_null,omitempty"`
}

// ValidateE2E checks the end-to-end options (errors name --e2e-streams, --e2e-body-bytes,
// --e2e-endpoints, --rates, --body-chunk-size, --command-target, --targets), appends the
// command targets missing from Targets, puts the null target first (adding
// it when missing: every ratio is against it), then checks the matrix's options (Validate).
func (m *MatrixOptions) ValidateE2E() error {
	e := m.E2E
	switch {
	case e.Streams < 1:
		return fmt.Errorf("--e2e-streams must be ≥ 1, got %d", e.Streams)
	case e.BodyBytes < MinE2EBodyBytes:
		return fmt.Errorf("--e2e-body-bytes must be ≥ %d, got %d", MinE2EBodyBytes, e.BodyBytes)
	case e.BodyBytes > 64<<20:
		return fmt.Errorf("--e2e-body-bytes must be ≤ %d (the gateway's limit), got %d", 64<<20, e.BodyBytes)
	case e.Endpoints < 1 || e.Endpoints > 250:
		return fmt.Errorf("--e2e-endpoints must be in 1–250 (fake vLLM servers in this process), got %d", e.Endpoints)
	}
	if len(m.Rates) > 0 {
		return errors.New("--rates does not apply with --e2e (use --rate for open loop)")
	}
	if m.Bench.ChunkSize > gateway.MaxBodyChunkSize {
		return fmt.Errorf("--body-chunk-size must be ≤ %d with --e2e (the gateway stand-in's limit), got %d", gateway.MaxBodyChunkSize, m.Bench.ChunkSize)
	}
	if err := m.parseCommandTargets(); err != nil {
		return err
	}
	if len(m.Targets) == 0 || (len(m.Targets) == 1 && m.Targets[0] == TargetNull) {
		return errors.New("--targets: --e2e needs a target besides null (its runs are read against null's)")
	}
	if i := slices.Index(m.Targets, TargetNull); i != 0 {
		if i > 0 {
			m.Targets = slices.Delete(m.Targets, i, i+1)
		}
		m.Targets = append([]string{TargetNull}, m.Targets...)
	}
	return m.Validate()
}

// E2ERatios is every non-null result's latency ÷ the null result's at P50, P95 and P99, in
// order; nil without a null result that completed requests.
func E2ERatios(results []E2EResult) []E2ERatio {
	var null *E2EResult
	for i := range results {
		if results[i].Target == TargetNull && results[i].Error == "" && results[i].Requests > 0 {
			null = &results[i]
		}
	}
	if null == nil {
		return nil
	}
	var out []E2ERatio
	for _, r := range results {
		if r.Target == TargetNull || r.Error != "" || r.Requests == 0 {
			continue
		}
		out = append(out, E2ERatio{Target: r.Target, P50: ratioOf(r.LatencyMs.P50, null.LatencyMs.P50),
			P95: ratioOf(r.LatencyMs.P95, null.LatencyMs.P95), P99: ratioOf(r.LatencyMs.P99, null.LatencyMs.P99)})
	}
	return out
}

// RunE2E runs the end-to-end mode: for each target in turn (null first), a fresh pool of
// m.E2E.Endpoints fake vLLM servers that answer at once (no prefill or decode time, a running
// slot for every stream, so what the null run measures is the client, gateway stand-in,
// ext_proc and the fakes' HTTP, and a target's excess over it is what its EPP adds), the target's
// EPP started on it as in the matrix, and the gateway stand-in (fakes/gateway, strict mode) in
// front, served over HTTP on loopback; then the same load — m.Bench's rate (open loop, at most
// Streams in flight) or Streams closed-loop clients, m.Bench.Duration after m.Bench.Warmup — of
// completions requests of exactly BodyBytes, equal across targets. It prints the table and the
// ratios to w and writes m.Output. A target that fails to start is a result with Error; only ctx
// ending stops the run.
func RunE2E(ctx context.Context, w io.Writer, m MatrixOptions) (*E2EReport, error) {
	if err := m.ValidateE2E(); err != nil {
		return nil, err
	}
	self, err := m.prepareRun("eppkit-bench-e2e-")
	if err != nil {
		return nil, err
	}
	o := m.Bench
	rep := &E2EReport{Started: time.Now().UTC(), Streams: m.E2E.Streams, BodyBytes: m.E2E.BodyBytes, Endpoints: m.E2E.Endpoints,
		Seed: o.Seed, DurationSeconds: o.Duration.Seconds(), Mode: "closed"}
	load := fmt.Sprintf("closed loop, %d streams", m.E2E.Streams)
	if o.Rate > 0 {
		rep.Mode, rep.TargetRate = "open-"+o.Arrival, o.Rate
		load = fmt.Sprintf("open loop %.0f/s (%s), at most %d in flight", o.Rate, o.Arrival, m.E2E.Streams)
	}
	fmt.Fprintf(w, "end-to-end added latency: targets %v, %d fake vLLM endpoints (no model time), %d-byte bodies, %s, %v per target (+%v warm-up); logs in %s\n",
		m.Targets, m.E2E.Endpoints, m.E2E.BodyBytes, load, o.Duration, o.Warmup, m.LogDir)
	var cp *apiserver.ControlPlane
	defer func() {
		if cp != nil {
			_ = cp.Stop()
		}
	}()
	for _, target := range m.Targets {
		if m.needsControlPlane(target) && cp == nil {
			fmt.Fprintf(w, "starting kube-apiserver + etcd for the upstream EPPs' InferencePool discovery…\n")
			var err error
			cp, err = apiserver.StartControlPlane(ctx, apiserver.ControlPlaneOptions{Dir: filepath.Join(m.LogDir, "apiserver"), KeepDir: true})
			if err != nil {
				rep.Results = append(rep.Results, E2EResult{Target: target, Error: err.Error()})
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				continue
			}
		}
		res, err := runE2ETarget(ctx, w, m, self, cp, target)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			res = &E2EResult{Target: target, Error: err.Error()}
			fmt.Fprintf(w, "  %s: %v\n", target, err)
		}
		rep.Results = append(rep.Results, *res)
	}
	rep.RatiosOverNull = E2ERatios(rep.Results)
	PrintE2E(w, rep)
	if err := writeOutput(w, m.Output, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// e2eFakeConfig is the fake vLLM of the end-to-end pool: model time zero (no prefill overhead,
// per-token prefill or inter-token latency, no load factor), a running slot for every stream,
// prefix caching off, gauges only, and a context and body limit that hold bodyBytes.
func e2eFakeConfig(model string, streams, bodyBytes int, seed int64) vllm.Config {
	c := vllm.DefaultConfig()
	c.Model = model
	c.Seed = seed
	c.Latency = vllm.Latency{TimeFactorUnderLoad: 1}
	c.MaxNumSeqs = streams
	c.MaxWaitingQueueLength = max(1000, 4*streams)
	// The dummy tokenizer makes a token of every word with its space: a body of B bytes has
	// fewer than B/2 prompt tokens.
	c.MaxModelLen = bodyBytes/2 + 1024
	c.BlockSize = 16
	c.KVCacheSize = (c.MaxModelLen/c.BlockSize + 1) * streams
	c.EnableKVCache = false
	c.GaugeOnly = true
	c.MaxRequestBodySizeMB = bodyBytes>>20 + 2
	return c
}

// runE2ETarget runs the load through a fresh pool and gateway in front of target's EPP.
func runE2ETarget(ctx context.Context, w io.Writer, m MatrixOptions, self string, cp *apiserver.ControlPlane, target string) (*E2EResult, error) {
	o := m.Bench
	f, err := fleet.Start(fleet.Options{Count: m.E2E.Endpoints, Base: e2eFakeConfig(o.Model, m.E2E.Streams, m.E2E.BodyBytes, int64(o.Seed)),
		NamePrefix: "e2e-" + target + "-"})
	if err != nil {
		return nil, fmt.Errorf("fake vLLM pool: %w", err)
	}
	defer f.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = f.WaitHealthy(wctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("fake vLLM pool: %w", err)
	}
	var addrs []string
	for _, mem := range f.Members() {
		addrs = append(addrs, mem.Addr())
	}
	logPath := filepath.Join(m.LogDir, fmt.Sprintf("e2e-%s-%d.log", target, len(addrs)))
	p, err := startTarget(ctx, w, m, self, cp, target, "e2e", addrs, logPath)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := sleepCtx(ctx, m.Settle+2*m.RefreshInterval); err != nil {
		return nil, err
	}
	g, err := gateway.New(gateway.Config{EPPAddress: p.grpcAddr, Mode: gateway.ModeStrict, Endpoints: addrs,
		BodyChunkSize: o.ChunkSize, MessageTimeout: o.Timeout})
	if err != nil {
		return nil, err
	}
	defer func() { _ = g.Close() }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gateway listener: %w", err)
	}
	srv := gateway.NewServer(g)
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}()
	res, err := driveE2E(ctx, "http://"+ln.Addr().String()+o.Path, o, m.E2E)
	if err != nil {
		return nil, err
	}
	res.Target = target
	fmt.Fprintf(w, "  %-11s %8d requests %7.1f/s  p50 %9.3f  p95 %9.3f  p99 %9.3f ms  errors %d  dropped %d  endpoints used %d  load %.1f\n",
		target, res.Requests, res.RequestsPerSec, res.LatencyMs.P50, res.LatencyMs.P95, res.LatencyMs.P99, res.Errors, res.Dropped, res.EndpointsUsed, res.LoadAverage)
	return res, nil
}

// e2eBodies builds the mode's request bodies: a completions body of exactly BodyBytes whose
// prompt is "req <n> " followed by seeded words, so every request's prompt differs from its
// first block while every target gets the same n-th body.
type e2eBodies struct {
	head, tail []byte // the JSON before and after the prompt
	text       string // seeded words, longer than any prompt
	promptLen  int
}

func newE2EBodies(model string, bodyBytes int, seed uint64) (*e2eBodies, error) {
	mb, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	b := &e2eBodies{head: []byte(`{"model":` + string(mb) + `,"prompt":"`), tail: []byte(`","max_tokens":` + strconv.Itoa(e2eMaxTokens) + `}`)}
	b.promptLen = bodyBytes - len(b.head) - len(b.tail)
	if b.promptLen < 64 {
		return nil, fmt.Errorf("--e2e-body-bytes %d leaves %d bytes for the prompt beside the model name; need ≥ 64", bodyBytes, b.promptLen)
	}
	rng := rand.New(rand.NewPCG(seed, 0x65326562))
	var sb strings.Builder
	sb.Grow(b.promptLen + 16)
	for sb.Len() < b.promptLen {
		for range 3 + rng.IntN(6) {
			sb.WriteByte(byte('a' + rng.IntN(26)))
		}
		sb.WriteByte(' ')
	}
	b.text = sb.String()
	return b, nil
}

// body is the n-th request body.
func (b *e2eBodies) body(n uint64) []byte {
	out := make([]byte, 0, len(b.head)+b.promptLen+len(b.tail))
	out = append(out, b.head...)
	p := "req " + strconv.FormatUint(n, 10) + " "
	out = append(out, p...)
	out = append(out, b.text[:b.promptLen-len(p)]...)
	return append(out, b.tail...)
}

// driveE2E sends the load to url and summarises the measured requests.
func driveE2E(ctx context.Context, url string, o Options, e E2EOptions) (*E2EResult, error) {
	bodies, err := newE2EBodies(o.Model, e.BodyBytes, o.Seed)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{MaxIdleConns: e.Streams, MaxIdleConnsPerHost: e.Streams, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	var (
		seq      atomic.Uint64
		measure  atomic.Bool
		mu       sync.Mutex
		samples  []time.Duration
		errs     = map[string]int{}
		firstErr string
		dropped  int
		pods     = map[string]bool{}
	)
	one := func(scheduled time.Time) {
		n := seq.Add(1)
		body := bodies.body(n)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		var kind, msg, pod string
		if err == nil {
			req.Header.Set("content-type", "application/json")
			req.Header.Set("x-request-id", fmt.Sprintf("e2e-%d-%d", o.Seed, n))
			var resp *http.Response
			resp, err = client.Do(req)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				pod = resp.Header.Get(gateway.PodHeader)
				if err == nil && resp.StatusCode != http.StatusOK {
					kind, msg = "status-"+strconv.Itoa(resp.StatusCode), fmt.Sprintf("HTTP %d (%s)", resp.StatusCode, resp.Header.Get(gateway.GatewayErrorHeader))
				}
			}
		}
		lat := time.Since(scheduled)
		if err != nil {
			kind, msg = "transport", err.Error()
		}
		if ctx.Err() != nil || !measure.Load() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if kind != "" {
			errs[kind]++
			if firstErr == "" {
				firstErr = msg
			}
			return
		}
		samples = append(samples, lat)
		pods[pod] = true
	}
	start := time.Now()
	measureAt := start.Add(o.Warmup)
	end := measureAt.Add(o.Duration)
	if o.Warmup == 0 {
		measure.Store(true)
	} else {
		t := time.AfterFunc(o.Warmup, func() { measure.Store(true) })
		defer t.Stop()
	}
	if o.Rate > 0 {
		openLoop(ctx, o.Seed, o.Rate, o.Arrival, end, e.Streams, func() {
			if measure.Load() {
				mu.Lock()
				dropped++
				mu.Unlock()
			}
		}, one)
	} else {
		closedLoop(ctx, e.Streams, end, one)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	elapsed := min(time.Since(measureAt), o.Duration)
	mu.Lock()
	defer mu.Unlock()
	res := &E2EResult{Requests: len(samples), ErrorKinds: errs, FirstError: firstErr, Dropped: dropped,
		LatencyMs: summarize(samples), EndpointsUsed: len(pods), LoadAverage: loadAverage()}
	for _, v := range errs {
		res.Errors += v
	}
	if elapsed > 0 {
		res.RequestsPerSec = float64(len(samples)) / elapsed.Seconds()
	}
	return res, nil
}

// PrintE2E writes the end-to-end table: per target the requests, their rate, errors, drops and
// end-to-end latency percentiles (ms), then each target ÷ the null EPP at P50, P95 and P99.
func PrintE2E(w io.Writer, rep *E2EReport) {
	load := fmt.Sprintf("closed loop, %d streams", rep.Streams)
	if rep.TargetRate > 0 {
		load = fmt.Sprintf("%s %.0f/s, ≤ %d in flight", rep.Mode, rep.TargetRate, rep.Streams)
	}
	fmt.Fprintf(w, "\nend to end (send → last response byte) through the gateway stand-in, %d endpoints, %d-byte bodies, %s, seed %d\n",
		rep.Endpoints, rep.BodyBytes, load, rep.Seed)
	fmt.Fprintf(w, "%-11s %9s %9s %7s %8s %10s %10s %10s %10s %10s %6s\n", "target", "requests", "req/s", "errors", "dropped",
		"p50 ms", "p95 ms", "p99 ms", "max ms", "mean ms", "load")
	for _, r := range rep.Results {
		if r.Error != "" {
			fmt.Fprintf(w, "%-11s  error: %s\n", r.Target, r.Error)
			continue
		}
		l := r.LatencyMs
		fmt.Fprintf(w, "%-11s %9d %9.1f %7d %8d %10.3f %10.3f %10.3f %10.3f %10.3f %6.1f\n", r.Target, r.Requests, r.RequestsPerSec,
			r.Errors, r.Dropped, l.P50, l.P95, l.P99, l.Max, l.Mean, r.LoadAverage)
		if r.FirstError != "" {
			fmt.Fprintf(w, "%-11s  first error: %s\n", "", r.FirstError)
		}
	}
	if len(rep.RatiosOverNull) > 0 {
		fmt.Fprintf(w, "\n%-11s %9s %9s %9s   (target ÷ null; issue 34's goal: reference P99 ≤ 1.5)\n", "÷ null", "p50", "p95", "p99")
		for _, r := range rep.RatiosOverNull {
			fmt.Fprintf(w, "%-11s %9.2f %9.2f %9.2f\n", r.Target, r.P50, r.P95, r.P99)
		}
	}
}

// ErrE2E is the error of an end-to-end run in which the null EPP or every other target
// completed no request (so no ratio exists); nil otherwise.
func ErrE2E(rep *E2EReport) error {
	if len(rep.RatiosOverNull) > 0 {
		return nil
	}
	var why []string
	for _, r := range rep.Results {
		switch {
		case r.Error != "":
			why = append(why, r.Target+": "+r.Error)
		case r.Requests == 0:
			why = append(why, fmt.Sprintf("%s: no request completed (%d errors; %s)", r.Target, r.Errors, r.FirstError))
		}
	}
	return fmt.Errorf("no ratio against the null EPP: %s", strings.Join(why, "; "))
}
