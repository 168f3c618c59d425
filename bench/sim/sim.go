package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/fakes/vllm/engine"
	"github.com/eppkit/eppkit/internal/percentile"
)

// Defaults of Config.
const (
	// DefaultRefreshInterval is the reference EPP's --refresh-metrics-interval default.
	DefaultRefreshInterval = 50 * time.Millisecond
	// DefaultStaleThreshold is the reference EPP's --stale-threshold default.
	DefaultStaleThreshold = time.Second
	// DefaultSampleInterval is the bench monitor's sampling interval.
	DefaultSampleInterval = 500 * time.Millisecond
	// EndpointPort is every simulated endpoint's port.
	EndpointPort = 8000
	// MaxFleetSize bounds Config.FleetSize (addresses 10.233.0.1 … 10.233.255.250).
	MaxFleetSize = 64000
)

// Config configures Run. Zero fields take the defaults of `eppkit bench`.
type Config struct {
	// Spec is the workload, generated one request at a time (bench.NewGenerator); Requests, when
	// set, replaces it and is cycled when shorter than the arrivals (a JSONL import).
	Spec     bench.Spec
	Requests []bench.Request
	// Steps is the rate ladder (fleet-wide requests per second) and Burstiness the gamma shape
	// of the arrivals (0 means 1, Poisson); the arrivals are bench.Arrivals with Spec.Seed, the
	// load generator's.
	Steps      []bench.Step
	Burstiness float64
	// Percentiles are extra percentiles for the metrics.
	Percentiles []float64
	// FleetSize is the number of endpoints (default bench.DefaultFleetSize, at most
	// MaxFleetSize); KVCacheSize (blocks) and MaxModelLen default to the bench's.
	FleetSize, KVCacheSize, MaxModelLen int
	// Profiles are the endpoints' latency profiles (bench.ProfileNames), cycled over the fleet
	// (bench.ProfileOf; nil: all bench.ProfileDefault); ["default", "slow"] alternates them.
	Profiles []string
	// Seed seeds the engines (endpoint i: Seed + i, as the bench harness seeds its fakes), the
	// scrape phases and the picker (Env.Seed).
	Seed int64
	// RefreshInterval is how often each endpoint's metrics are scraped for the picker (default
	// DefaultRefreshInterval); StaleThreshold what the picker is told counts as stale (default
	// DefaultStaleThreshold).
	RefreshInterval, StaleThreshold time.Duration
	// SampleInterval is the monitor's sampling interval for the ladder and per-endpoint tables
	// (default DefaultSampleInterval).
	SampleInterval time.Duration
	// Goodput are the SLOs of goodput (bench.Goodput); none set means no goodput.
	Goodput bench.SLOs
	// Progress receives a progress bar; nil shows none.
	Progress io.Writer
}

func (c *Config) setDefaults() error {
	if c.FleetSize == 0 {
		c.FleetSize = bench.DefaultFleetSize
	}
	if c.FleetSize < 1 || c.FleetSize > MaxFleetSize {
		return fmt.Errorf("sim: fleet size must be in [1,%d], got %d", MaxFleetSize, c.FleetSize)
	}
	if c.KVCacheSize == 0 {
		c.KVCacheSize = bench.DefaultKVCacheSize
	}
	if c.MaxModelLen == 0 {
		c.MaxModelLen = bench.DefaultMaxModelLen
	}
	if c.Burstiness == 0 {
		c.Burstiness = 1
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.StaleThreshold == 0 {
		c.StaleThreshold = DefaultStaleThreshold
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = DefaultSampleInterval
	}
	switch {
	case c.RefreshInterval < 0:
		return fmt.Errorf("--refresh-metrics-interval must be positive, got %v", c.RefreshInterval)
	case c.StaleThreshold < c.RefreshInterval:
		return fmt.Errorf("--stale-threshold must be ≥ --refresh-metrics-interval (got %v < %v)", c.StaleThreshold, c.RefreshInterval)
	case c.SampleInterval < 0:
		return fmt.Errorf("sim: SampleInterval must be positive, got %v", c.SampleInterval)
	}
	for _, p := range c.Profiles {
		if p != bench.ProfileDefault && p != bench.ProfileSlow {
			return fmt.Errorf("--fleet-profiles: unknown profile %q (have %s)", p, strings.Join(bench.ProfileNames, ", "))
		}
	}
	if len(c.Steps) == 0 {
		return errors.New("sim: a rate ladder (Steps) is required")
	}
	return nil
}

// DecisionCost is the real (not virtual) cost of the picker's scheduling decisions, measured
// around every Pick call on this machine: context only, like every absolute time here.
type DecisionCost struct {
	// N is the number of decisions.
	N int `json:"n"`
	// CPUMeanUs is the mean process CPU time (user + system, every thread, from
	// CLOCK_PROCESS_CPUTIME_ID) spent during one decision, µs. It includes work other goroutines
	// did meanwhile (the garbage collector), which is small next to a decision.
	CPUMeanUs float64 `json:"cpu_mean_us"`
	// CPUP50Us and CPUP99Us are percentiles of the same per-decision CPU time, µs.
	CPUP50Us float64 `json:"cpu_p50_us"`
	CPUP99Us float64 `json:"cpu_p99_us"`
	// WallMeanUs is the mean wall-clock time of one decision, µs.
	WallMeanUs float64 `json:"wall_mean_us"`
}

// Result is one simulated run.
type Result struct {
	// Result is the bench result (metrics per step, per endpoint, outcomes, monitor samples).
	// Its Target is the policy's name; CPU columns are n/a and every step is valid (no machine
	// limits a simulated fleet).
	*bench.Result
	// Simulated is always true: these numbers come from virtual time.
	Simulated bool `json:"simulated"`
	// FleetSize and Profiles describe the fleet (profile name → endpoints).
	FleetSize int            `json:"fleet_size"`
	Profiles  map[string]int `json:"profiles"`
	// RefreshIntervalMs and StaleThresholdMs are the scrape settings.
	RefreshIntervalMs float64 `json:"refresh_interval_ms"`
	StaleThresholdMs  float64 `json:"stale_threshold_ms"`
	// Seed seeded the engines, scrape phases and picker.
	Seed int64 `json:"seed"`
	// Decisions is the picker's real CPU time per decision; DecisionCPUUs every decision's, µs,
	// in arrival order.
	Decisions     DecisionCost `json:"decisions"`
	DecisionCPUUs []float64    `json:"-"`
	// VirtualSeconds is the simulated time from the first arrival to the last token; WallSeconds
	// the real time the simulation took; Events the events it processed (arrivals, token due
	// times, scrapes, samples).
	VirtualSeconds float64 `json:"virtual_seconds"`
	WallSeconds    float64 `json:"wall_seconds"`
	Events         int64   `json:"events"`
	// Predictions compares the picker's TTFT predictions with the outcomes per endpoint; nil when
	// the picker made none (PredictingFlight).
	Predictions []PredictionRow `json:"predictions,omitempty"`
}

// Fleet returns the simulated endpoints of a fleet of size n with profiles cycled (nil: frozen).
func Fleet(n int, profiles []string) []Endpoint {
	eps := make([]Endpoint, n)
	for i := range eps {
		p := bench.ProfileOf(profiles, i)
		eps[i] = Endpoint{Index: i, Name: "conformance-" + strconv.Itoa(i),
			Address: fmt.Sprintf("10.233.%d.%d", i/250, i%250+1), Port: EndpointPort, Profile: p}
	}
	return eps
}

// EngineConfig is endpoint ep's engine configuration in a fleet of size n seeded with seed: the
// configuration `eppkit bench` gives its fake (bench.FakeConfig of member ep.Index with every
// adapter of the fleet and its latency profile, bench.ApplyProfile), through vllm.Config.EngineConfig, on
// clk.
func EngineConfig(ep Endpoint, n int, seed int64, kvCacheSize, maxModelLen int, clk *Clock) engine.Config {
	c := bench.FakeConfig(ep.Index, seed, kvCacheSize, maxModelLen, bench.AdapterNames(n))
	c.PodName = ep.Name
	bench.ApplyProfile(&c, ep.Profile)
	return vllmEngineConfig(c, clk)
}

func vllmEngineConfig(c vllm.Config, clk *Clock) engine.Config {
	ec := c.EngineConfig(0, clk)
	ec.Stepped = true
	return ec
}

// tokenEvent is a token the engine delivered, waiting to be processed.
type tokenEvent struct {
	s  *engine.Sequence
	ev engine.Event
}

// inflight is a request on an engine.
type inflight struct {
	outcome  int
	endpoint int
	flight   Flight
	arrival  time.Time
	last     time.Time
}

// run is the state of one simulation.
type run struct {
	cfg     Config
	clock   *Clock
	env     *Env
	picker  Picker
	engines []*engine.Engine
	pending [][]tokenEvent
	heap    engineHeap
	flights map[*engine.Sequence]*inflight

	outcomes []bench.Outcome
	// predicted is each outcome's predicted TTFT at the picked endpoint (ms; NaN: none).
	predicted []float64
	samples   []bench.Sample
	// The fakes' own TTFT and queue-time histograms (sums in seconds, counts).
	ttftSum, queueSum []float64
	ttftCount         []float64

	cpu, wall []float64
	events    int64
	bar       *progressbar.ProgressBar
}

// Run simulates cfg with picker and returns the result. It returns an error for a bad config,
// a picker that fails to start, or ctx ending (Ctrl-C) before the run finished.
func Run(ctx context.Context, cfg Config, picker Picker) (*Result, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	arrivals, err := bench.Arrivals(cfg.Steps, cfg.Burstiness, cfg.Spec.Seed)
	if err != nil {
		return nil, err
	}
	next, spec, err := requestSource(cfg)
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, clock: NewClock(), picker: picker, flights: map[*engine.Sequence]*inflight{}}
	eps := Fleet(cfg.FleetSize, cfg.Profiles)
	r.env = &Env{Clock: r.clock, Endpoints: eps, BaseModel: harness.DefaultModelName,
		RefreshInterval: cfg.RefreshInterval, StaleThreshold: cfg.StaleThreshold, Seed: cfg.Seed, blockSize: bench.FrozenBlockSize}
	r.engines = make([]*engine.Engine, len(eps))
	r.pending = make([][]tokenEvent, len(eps))
	r.env.configs = make([]engine.Config, len(eps))
	for i, ep := range eps {
		ec := EngineConfig(ep, len(eps), cfg.Seed, cfg.KVCacheSize, cfg.MaxModelLen, r.clock)
		ec.OnToken = func(s *engine.Sequence, ev engine.Event) { r.pending[i] = append(r.pending[i], tokenEvent{s, ev}) }
		e, err := engine.New(ec)
		if err != nil {
			return nil, fmt.Errorf("sim: endpoint %d: %w", i, err)
		}
		defer e.Close()
		r.engines[i], r.env.configs[i] = e, ec
	}
	r.env.engines = r.engines
	r.heap = newEngineHeap(len(eps))
	r.ttftSum, r.queueSum, r.ttftCount = make([]float64, len(eps)), make([]float64, len(eps)), make([]float64, len(eps))
	if err := picker.Start(r.env); err != nil {
		return nil, fmt.Errorf("sim: starting %s: %w", picker.Name(), err)
	}
	defer picker.Close()
	r.outcomes = make([]bench.Outcome, len(arrivals))
	r.predicted = make([]float64, len(arrivals))
	for i := range r.predicted {
		r.predicted[i] = math.NaN()
	}
	r.cpu = make([]float64, 0, len(arrivals))
	r.wall = make([]float64, 0, len(arrivals))
	if cfg.Progress != nil {
		r.bar = progressbar.NewOptions(len(arrivals), progressbar.OptionSetWriter(cfg.Progress),
			progressbar.OptionSetDescription(fmt.Sprintf("%-18s", picker.Name()+" ×"+strconv.Itoa(len(eps)))), progressbar.OptionShowCount(),
			progressbar.OptionThrottle(250*time.Millisecond), progressbar.OptionSetWidth(30),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionOnCompletion(func() { fmt.Fprintln(cfg.Progress) }))
	}

	// One P while the loop runs: the simulation is one goroutine anyway, and with a single P the
	// process CPU clock read around a decision counts that decision's work (the reference's
	// PrepareData goroutines included) and not another thread's that happened to be accounted
	// meanwhile; with two, a 0.1 µs round-robin decision read 8 µs on average.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	started := time.Now()
	if err := r.loop(ctx, arrivals, next); err != nil {
		return nil, err
	}
	if r.bar != nil {
		_ = r.bar.Finish()
	}
	return r.result(spec, arrivals, time.Since(started)), nil
}

// requestSource returns the function giving arrival i's request and the workload spec as
// reported (multi-lora gets the fleet's adapters, as bench.MakePlan does).
func requestSource(cfg Config) (func(i int) bench.Request, bench.Spec, error) {
	spec := cfg.Spec
	if len(cfg.Requests) > 0 {
		return func(i int) bench.Request {
			r := cfg.Requests[i%len(cfg.Requests)]
			r.ID = i
			return r
		}, spec, nil
	}
	if spec.Name == bench.WorkloadMultiLoRA && len(spec.Adapters) == 0 {
		spec.Adapters = bench.AdapterNames(cfg.FleetSize)
	}
	g, err := bench.NewGenerator(spec)
	if err != nil {
		return nil, spec, err
	}
	return func(int) bench.Request { return g.Next() }, spec, nil
}

// Event kinds in the order they are processed when due at the same instant: tokens first (a
// finish frees a slot before anything else looks), then scrapes, samples, arrivals.
const (
	kindEngine = iota
	kindScrape
	kindSample
	kindArrival
)

func (r *run) loop(ctx context.Context, arrivals []bench.Arrival, next func(int) bench.Request) error {
	n := len(r.engines)
	// Scrape phases: each endpoint's scraper started at its own offset in the interval.
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), 0x736372617065)) // "scrape"
	phase := make([]time.Duration, n)
	order := make([]int, n)
	for i := range phase {
		phase[i] = time.Duration(rng.Int64N(int64(r.cfg.RefreshInterval)))
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(phase[a] - phase[b]) })
	scrapeRound, scrapePos := 0, 0
	nextScrape := func() time.Duration {
		return time.Duration(scrapeRound)*r.cfg.RefreshInterval + phase[order[scrapePos]]
	}
	sampleAt := time.Duration(0)
	ai := 0
	for iter := 0; ; iter++ {
		if iter&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("simulation interrupted at %.1f s of virtual time: %w", r.clock.Elapsed().Seconds(), err)
			}
		}
		if ai == len(arrivals) && len(r.flights) == 0 {
			r.sample() // the final sample, as the bench monitor takes one when it stops
			return nil
		}
		if ai == len(arrivals) && len(r.heap.items) == 0 {
			// Unreachable with a valid engine: an idle engine admits every waiting request.
			return fmt.Errorf("sim: %d requests wait on idle engines at %.1f s of virtual time", len(r.flights), r.clock.Elapsed().Seconds())
		}
		kind, at := kindArrival, time.Duration(math.MaxInt64)
		if ai < len(arrivals) {
			at = arrivals[ai].At
		}
		if sampleAt <= at {
			kind, at = kindSample, sampleAt
		}
		if s := nextScrape(); s <= at {
			kind, at = kindScrape, s
		}
		if len(r.heap.items) > 0 && r.heap.items[0].due <= at {
			kind, at = kindEngine, r.heap.items[0].due
		}
		r.clock.Set(Epoch.Add(at))
		r.events++
		switch kind {
		case kindEngine:
			r.advance(r.heap.items[0].engine)
		case kindScrape:
			i := order[scrapePos]
			st := r.engines[i].Stats()
			r.drain(i)
			r.picker.Scraped(i, st)
			if scrapePos++; scrapePos == n {
				scrapePos, scrapeRound = 0, scrapeRound+1
			}
		case kindSample:
			r.sample()
			sampleAt += r.cfg.SampleInterval
		case kindArrival:
			r.arrive(ai, arrivals[ai], next(ai))
			ai++
		}
	}
}

// advance processes engine i's events due now and reschedules it.
func (r *run) advance(i int) {
	due, ok := r.engines[i].NextDue()
	r.drain(i)
	r.heap.set(i, due, ok)
}

// drain processes engine i's delivered tokens, in order.
func (r *run) drain(i int) {
	evs := r.pending[i]
	for k := range evs {
		r.token(evs[k].s, evs[k].ev)
		evs[k] = tokenEvent{}
	}
	r.pending[i] = evs[:0]
}

// token records one output token and tells the picker about the first and the last.
func (r *run) token(s *engine.Sequence, ev engine.Event) {
	f := r.flights[s]
	if f == nil {
		return
	}
	o := &r.outcomes[f.outcome]
	if ev.Index == 0 {
		o.TTFTMs = ms(ev.At.Sub(f.arrival))
		f.flight.FirstToken()
	} else {
		o.ITLMs = append(o.ITLMs, ms(ev.At.Sub(f.last)))
	}
	f.last = ev.At
	if !ev.Final {
		return
	}
	o.E2EMs = ms(ev.At.Sub(f.arrival))
	o.Status = http.StatusOK
	o.OutputTokens = ev.Index + 1
	o.PromptTokens = s.PromptTokens()
	o.CachedTokens = s.CachedTokens()
	r.ttftSum[f.endpoint] += s.TTFT().Seconds()
	r.queueSum[f.endpoint] += s.QueueWait().Seconds()
	r.ttftCount[f.endpoint]++
	delete(r.flights, s)
	f.flight.Done(Usage{PromptTokens: o.PromptTokens, CompletionTokens: o.OutputTokens, CachedTokens: o.CachedTokens})
	if r.bar != nil {
		_ = r.bar.Add(1)
	}
}

// arrive routes and submits request req (arrival ai).
func (r *run) arrive(ai int, a bench.Arrival, req bench.Request) {
	o := &r.outcomes[ai]
	o.ID, o.Step, o.ScheduledMs, o.SentMs, o.PromptTokens, o.SLO = req.ID, a.Step, ms(a.At), ms(r.clock.Elapsed()), req.PromptTokens, req.SLO
	o.ITLMs = make([]float64, 0, max(req.OutputTokens-1, 0))
	sr := &Request{Request: req, Body: bench.CompletionBody(&req, r.env.BaseModel), Arrival: ai}

	c0, w0 := cpuNow(), time.Now()
	i, fl, err := r.picker.Pick(sr)
	r.wall = append(r.wall, float64(time.Since(w0))/float64(time.Microsecond))
	r.cpu = append(r.cpu, float64(cpuNow()-c0)/float64(time.Microsecond))
	if err == nil && (i < 0 || i >= len(r.engines)) {
		err = fmt.Errorf("picker %s chose endpoint %d of %d", r.picker.Name(), i, len(r.engines))
	}
	if err != nil {
		o.Status, o.Error = statusOf(err), err.Error()
		r.done()
		return
	}
	o.Endpoint = r.env.Endpoints[i].Name
	if pf, ok := fl.(PredictingFlight); ok {
		if v, ok := pf.PredictedTTFTMs(); ok {
			r.predicted[ai] = v
		}
	}
	s, err := r.engines[i].Submit(context.Background(), engine.Request{ID: strconv.Itoa(ai), Model: r.env.BaseModel, LoRA: req.Model,
		Prompt: req.Prompt, MaxTokens: req.OutputTokens})
	r.drain(i)
	if err != nil {
		status := http.StatusInternalServerError
		switch {
		case errors.Is(err, engine.ErrQueueFull):
			status = http.StatusTooManyRequests
		case errors.Is(err, engine.ErrPromptTooLong):
			status = http.StatusBadRequest
		}
		o.Status, o.Error = status, fmt.Sprintf("HTTP %d: %v", status, err)
		fl.Failed(status, err.Error())
		r.done()
		return
	}
	r.flights[s] = &inflight{outcome: ai, endpoint: i, flight: fl, arrival: r.clock.Now()}
	due, ok := r.engines[i].NextDue()
	r.drain(i)
	r.heap.set(i, due, ok)
}

func (r *run) done() {
	if r.bar != nil {
		_ = r.bar.Add(1)
	}
}

// sample records the monitor's view of every endpoint now.
func (r *run) sample() {
	s := bench.Sample{AtMs: ms(r.clock.Elapsed()), Endpoints: make(map[string]bench.EndpointSample, len(r.engines))}
	for i, e := range r.engines {
		st := e.Stats()
		r.drain(i)
		s.Endpoints[r.env.Endpoints[i].Name] = bench.EndpointSample{Waiting: float64(st.Waiting), Running: float64(st.Running),
			KV: st.KVUsage, PrefixQueries: float64(st.PrefixCacheQueries), PrefixHits: float64(st.PrefixCacheHits),
			TTFTSum: r.ttftSum[i], TTFTCount: r.ttftCount[i], QueueSum: r.queueSum[i], OK: true}
	}
	r.samples = append(r.samples, s)
}

func (r *run) result(spec bench.Spec, arrivals []bench.Arrival, wall time.Duration) *Result {
	load := &bench.Load{Outcomes: r.outcomes, Samples: r.samples}
	br := bench.BuildResult(r.picker.Name(), spec, r.cfg.Steps, load, r.cfg.Percentiles)
	br.Burstiness = r.cfg.Burstiness
	br.StartedAt = Epoch
	for i := range br.Steps {
		// No machine limits a simulated fleet: every step is valid.
		br.Steps[i].Valid = true
		br.Steps[i].CPUPercent, br.Steps[i].SelfCPUPercent = -1, -1
	}
	res := &Result{Result: br, Simulated: true, FleetSize: len(r.engines), Profiles: map[string]int{},
		RefreshIntervalMs: ms(r.cfg.RefreshInterval), StaleThresholdMs: ms(r.cfg.StaleThreshold), Seed: r.cfg.Seed,
		VirtualSeconds: r.clock.Elapsed().Seconds(), WallSeconds: wall.Seconds(), Events: r.events}
	if len(arrivals) > 0 {
		res.VirtualSeconds -= arrivals[0].At.Seconds()
	}
	byName := map[string]string{}
	for _, ep := range r.env.Endpoints {
		res.Profiles[ep.Profile]++
		byName[ep.Name] = ep.Profile
	}
	bench.SetEndpointProfiles(br, byName)
	res.Decisions = decisionCost(r.cpu, r.wall)
	res.Predictions = predictionRows(r.env.Endpoints, r.outcomes, r.predicted)
	res.DecisionCPUUs = r.cpu
	bench.SetGoodput(br, r.cfg.Goodput)
	return res
}

// decisionCost summarises per-decision CPU and wall times (µs).
func decisionCost(cpu, wall []float64) DecisionCost {
	return DecisionCost{N: len(cpu), CPUMeanUs: mean(cpu), WallMeanUs: mean(wall),
		CPUP50Us: percentile.Of(cpu, 50), CPUP99Us: percentile.Of(cpu, 99)}
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuNow is this process's CPU time so far (every thread, user + system).
func cpuNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// engineHeap orders the running engines by their next due time, then index, so that engines due
// at the same instant are processed in a fixed order.
type engineHeap struct {
	items []heapItem
	pos   []int // engine → index in items, -1 when absent
}

type heapItem struct {
	due    time.Duration
	engine int
}

func newEngineHeap(n int) engineHeap {
	h := engineHeap{pos: make([]int, n)}
	for i := range h.pos {
		h.pos[i] = -1
	}
	return h
}

// set schedules engine i at due (virtual time), or removes it when ok is false.
func (h *engineHeap) set(i int, due time.Time, ok bool) {
	p := h.pos[i]
	switch {
	case !ok && p >= 0:
		heap.Remove(h, p)
	case !ok:
	case p >= 0:
		h.items[p].due = due.Sub(Epoch)
		heap.Fix(h, p)
	default:
		heap.Push(h, heapItem{due: due.Sub(Epoch), engine: i})
	}
}

func (h *engineHeap) Len() int { return len(h.items) }
func (h *engineHeap) Less(a, b int) bool {
	if h.items[a].due != h.items[b].due {
		return h.items[a].due < h.items[b].due
	}
	return h.items[a].engine < h.items[b].engine
}
func (h *engineHeap) Swap(a, b int) {
	h.items[a], h.items[b] = h.items[b], h.items[a]
	h.pos[h.items[a].engine], h.pos[h.items[b].engine] = a, b
}
func (h *engineHeap) Push(x any) {
	it := x.(heapItem)
	h.pos[it.engine] = len(h.items)
	h.items = append(h.items, it)
}
func (h *engineHeap) Pop() any {
	it := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	h.pos[it.engine] = -1
	return it
}
