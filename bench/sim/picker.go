package sim

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// Endpoint is one simulated model-server endpoint.
type Endpoint struct {
	// Index is its position in Env.Endpoints, from 0.
	Index int
	// Name is its pod name, as the bench fleet names it ("conformance-<i>").
	Name string
	// Address and Port are where the picker routes it ("10.233.<i/250>.<i%250+1>", port 8000).
	Address string
	Port    int
	// Profile is its latency profile (bench.ProfileDefault or bench.ProfileSlow).
	Profile string
}

// Key is "address:port", the endpoint's identity in the reference EPP.
func (e Endpoint) Key() string { return e.Address + ":" + strconv.Itoa(e.Port) }

// Request is one simulated request as it reaches the picker.
type Request struct {
	bench.Request
	// Body is the /v1/completions body the load generator sends for it (bench.CompletionBody).
	Body []byte
	// Arrival is the request's index in the run's arrivals, from 0.
	Arrival int
}

// Usage is the usage block of a finished response (tokens).
type Usage struct {
	PromptTokens, CompletionTokens, CachedTokens int
}

// Flight receives the response events of one routed request, on the simulation's goroutine at
// their virtual times.
type Flight interface {
	// FirstToken: the response headers (200, text/event-stream) and the first token arrived.
	FirstToken()
	// Done: the stream ended with the final token, the usage chunk and [DONE].
	Done(u Usage)
	// Failed: the endpoint refused the request with an HTTP status (429 queue full, 400 too long).
	Failed(status int, message string)
}

// Picker routes the simulated requests. Every method is called on the simulation's goroutine
// with the clock at the virtual time of the event.
type Picker interface {
	// Name labels the policy in results.
	Name() string
	// Start is called once, before any other method, with the simulated environment.
	Start(env *Env) error
	// Scraped is called when endpoint i's metrics were scraped: s is what its /metrics reads at
	// this instant. Every endpoint is scraped once per Config.RefreshInterval, at its own phase.
	Scraped(i int, s engine.Stats)
	// Pick chooses the endpoint (an index into Env.Endpoints) that serves r and returns the
	// Flight that receives its response events. An error refuses the request: a *RefusedError
	// carries the HTTP status the EPP answers, anything else counts as 500.
	Pick(r *Request) (int, Flight, error)
	// Close releases the picker's resources.
	Close()
}

// RefusedError is a picker's refusal of a request with the HTTP status it answers
// (director.StatusFor for the reference: 400, 429, 503, 500).
type RefusedError struct {
	Status int
	Err    error
}

func (e *RefusedError) Error() string { return fmt.Sprintf("HTTP %d: %v", e.Status, e.Err) }
func (e *RefusedError) Unwrap() error { return e.Err }

// statusOf is the HTTP status of a picker error.
func statusOf(err error) int {
	if r := (*RefusedError)(nil); errors.As(err, &r) && r.Status != 0 {
		return r.Status
	}
	return http.StatusInternalServerError
}

// Env is what a picker sees of the simulation.
type Env struct {
	// Clock is the virtual clock; pass it to anything that reads time.
	Clock *Clock
	// Endpoints are the fleet, in index order.
	Endpoints []Endpoint
	// BaseModel is the model every endpoint serves (a Request's Model "" means it).
	BaseModel string
	// RefreshInterval is how often each endpoint is scraped; StaleThreshold the age after which a
	// picker should treat an endpoint's metrics as stale (the reference's --stale-threshold).
	RefreshInterval, StaleThreshold time.Duration
	// Seed is the base seed of every random choice the picker makes.
	Seed int64

	engines   []*engine.Engine
	configs   []engine.Config
	blockSize int
}

// Exact returns endpoint i's state now, with no scrape delay: only for the oracle baseline, which
// stands for perfect information (a real EPP sees Scraped metrics).
func (e *Env) Exact(i int) engine.Stats { return e.engines[i].Stats() }

// Hash returns r's prompt as the endpoints' prefix caches see it (engine.HashPrompt).
func (e *Env) Hash(r *Request) engine.PromptHashes {
	return engine.HashPrompt(engine.Request{Model: e.BaseModel, LoRA: r.Model, Prompt: r.Prompt}, e.blockSize)
}

// CachedTokens returns how many of p's prompt tokens endpoint i has cached now: only for the
// oracle baseline.
func (e *Env) CachedTokens(i int, p engine.PromptHashes) int {
	return e.engines[i].CachedPrefixTokens(p)
}

// Policy names of the baselines in this package.
const (
	PolicyRoundRobin = bench.TargetRoundRobin
	PolicyOracle     = "oracle"
)

// RoundRobin routes request n to endpoint n mod N, as the gateway stand-in's round-robin mode
// (fakes/gateway) does without an EPP. It reads no metrics.
type RoundRobin struct {
	n, size int
}

// NewRoundRobin returns the round-robin baseline.
func NewRoundRobin() *RoundRobin { return &RoundRobin{} }

func (p *RoundRobin) Name() string              { return PolicyRoundRobin }
func (p *RoundRobin) Start(env *Env) error      { p.size = len(env.Endpoints); return nil }
func (p *RoundRobin) Scraped(int, engine.Stats) {}
func (p *RoundRobin) Close()                    {}
func (p *RoundRobin) Pick(*Request) (int, Flight, error) {
	i := p.n % p.size
	p.n++
	return i, noFlight{}, nil
}

type noFlight struct{}

func (noFlight) FirstToken()        {}
func (noFlight) Done(Usage)         {}
func (noFlight) Failed(int, string) {}

// Oracle is the perfect-information baseline: at each request it reads every endpoint's exact
// state at that instant (no scrape delay) and exactly how much of the prompt each one has cached,
// and picks the endpoint where the fake's latency model predicts the shortest end-to-end latency
// for this request from that state: queue wait (none while a running slot is free and nothing
// waits; else the requests ahead, waiting + 1, times the time a slot takes to free, the prefill
// and output of a request like this one at full load, ÷ the slots), plus the prefill of the
// uncached tokens and the decode of its output tokens at the load factor with this request
// running. Ties go to the fewest running requests, then the lowest index. It is greedy (no
// look-ahead, no care for the requests it slows down) and knows nothing of future requests, so
// it is a strong baseline, not an optimum, and a real policy can beat it; bench.OracleBound is
// the lower bound.
type Oracle struct {
	env    *Env
	models []latency
}

// latency is the part of an endpoint's engine configuration the oracle's estimate uses.
type latency struct {
	overhead, perToken, itl time.Duration
	factor                  float64
	slots                   int
}

// NewOracle returns the oracle baseline.
func NewOracle() *Oracle { return &Oracle{} }

func (p *Oracle) Name() string              { return PolicyOracle }
func (p *Oracle) Scraped(int, engine.Stats) {}
func (p *Oracle) Close()                    {}

// Start reads each endpoint's latency profile.
func (p *Oracle) Start(env *Env) error {
	p.env = env
	p.models = make([]latency, len(env.Endpoints))
	for i := range env.Endpoints {
		c := &env.configs[i]
		p.models[i] = latency{overhead: c.PrefillOverhead, perToken: c.PrefillTimePerToken, itl: c.InterTokenLatency,
			factor: c.TimeFactorUnderLoad, slots: c.MaxNumSeqs}
	}
	return nil
}

// Pick returns the endpoint with the lowest estimated TTFT.
func (p *Oracle) Pick(r *Request) (int, Flight, error) {
	h := p.env.Hash(r)
	best, bestEst, bestRunning := -1, 0.0, 0
	for i := range p.env.Endpoints {
		st := p.env.Exact(i)
		m := &p.models[i]
		uncached := h.Tokens - p.env.CachedTokens(i, h)
		running := min(st.Running+1, m.slots)
		prefill := (float64(m.overhead) + float64(uncached)*float64(m.perToken)) * loadFactor(m.factor, running, m.slots)
		var wait float64
		if st.Running >= m.slots || st.Waiting > 0 {
			full := loadFactor(m.factor, m.slots, m.slots)
			service := (float64(m.overhead)+float64(h.Tokens)*float64(m.perToken))*full + float64(r.OutputTokens)*float64(m.itl)*full
			wait = float64(st.Waiting+1) * service / float64(m.slots)
		}
		decode := float64(r.OutputTokens) * float64(m.itl) * loadFactor(m.factor, running, m.slots)
		est := wait + prefill + decode
		if best < 0 || est < bestEst || (est == bestEst && st.Running < bestRunning) {
			best, bestEst, bestRunning = i, est, st.Running
		}
	}
	return best, noFlight{}, nil
}

// loadFactor is the engine's latency multiplier with running requests in flight (SPEC §7).
func loadFactor(f float64, running, slots int) float64 {
	if slots <= 1 {
		return 1
	}
	return 1 + (f-1)*float64(running-1)/float64(slots-1)
}
