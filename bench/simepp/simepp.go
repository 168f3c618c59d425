// Package simepp drives the reference EPP in process as a picker of the fleet simulation
// (bench/sim): the real director (reference/director), framework runtime and
// plugins (reference/plugins, the predicted-latency predictor in process), a static endpoint
// source (reference/discovery, as `reference-epp --endpoints`), and the extproc usage parser,
// all on the simulation's virtual clock. It lives in bench/, which may import reference/; conformance
// never imports reference/ (docs/architecture.md); cmd/eppkit wires it in.
//
// Per request it does what reference/extproc does for one ext_proc stream, minus the gRPC:
// HandleRequest with the headers the gateway stand-in sends (":authority", ":path",
// ":method", ":scheme", "content-type", "content-length") and the load generator's body;
// at the first token ResponseHeader (":status" 200, "content-type: text/event-stream", the
// fake's x-inference-* headers) and ResponseBody with the first token's SSE event; at the end
// ResponseBody with the last token, the finish_reason event, the usage event and
// "data: [DONE]" (EndOfStream, usage from extproc.UsageParser), then ResponseComplete and
// EndRequest. The tokens in between are not sent as chunks: no reference plugin reads them
// (the predicted-latency producer counts tokens from the usage block when it has one).
//
// Metrics come from the simulation's scrapes (Picker.Scraped), converted as the data layer's
// extraction converts the fake's /metrics (reference/datalayer), and judged stale as the data
// layer does: a failed or never-finished scrape, or one older than the stale threshold.
//
// Determinism: the picker's seed is the simulation's; request IDs are "sim-<n>"; after every
// ResponseComplete it waits for the in-process predictors' background retrain (predictor.Model
// retrains on a goroutine), so every later request sees the same model in every run. In virtual
// time a retrain takes no time.
package simepp

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/bench/sim"
	"github.com/eppkit/eppkit/fakes/vllm/engine"
	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/discovery"
	"github.com/eppkit/eppkit/reference/extproc"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
	"github.com/eppkit/eppkit/reference/plugins/latency"
)

// Options configure a Picker.
type Options struct {
	// Name labels the policy in results ("reference", "predicted-latency", …).
	Name string
	// Config is the EndpointPickerConfig; nil means the reference's default profile.
	Config *framework.EndpointPickerConfig
	// Registry holds the plugin types; nil means plugins.RegisterAll (in-process predictor).
	Registry *framework.Registry
	// Logger receives the runtime's and plugins' logs; nil discards them.
	Logger *slog.Logger
}

// Picker is the reference EPP as a sim.Picker.
type Picker struct {
	opts    Options
	env     *sim.Env
	ctx     context.Context
	cancel  context.CancelFunc
	rt      *framework.Runtime
	d       *director.Director
	metrics *metricsSource
	index   map[string]int
	waiters []interface{ Wait() }
	nextID  int
}

var _ sim.Picker = (*Picker)(nil)

// New returns a picker; the runtime is built by Start.
func New(opts Options) *Picker { return &Picker{opts: opts} }

// LoadConfigFile loads an EndpointPickerConfig file as `reference-epp --config-file` does; ""
// gives nil (the default profile).
func LoadConfigFile(path string) (*framework.EndpointPickerConfig, error) {
	if path == "" {
		return nil, nil
	}
	cfg, err := framework.LoadConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

// NewPicker is a sim.ReferencePicker: the reference EPP labelled name with the EndpointPickerConfig
// file configFile ("" = the default profile), the plugins of plugins.RegisterAll and no logs.
// A file that does not load is an error naming it.
func NewPicker(name, configFile string) (sim.Picker, error) {
	cfg, err := LoadConfigFile(configFile)
	if err != nil {
		return nil, err
	}
	return New(Options{Name: name, Config: cfg}), nil
}

var _ sim.ReferencePicker = NewPicker

// Name returns the policy's label.
func (p *Picker) Name() string { return p.opts.Name }

// Start builds the runtime and the director over the simulated fleet. A config the runtime
// rejects is returned naming the plugin and the field, as reference-epp reports it.
func (p *Picker) Start(env *sim.Env) error {
	p.env = env
	logger := p.opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	reg := p.opts.Registry
	if reg == nil {
		reg = framework.NewRegistry()
		plugins.RegisterAll(reg)
	}
	addrs := make([]string, len(env.Endpoints))
	p.index = make(map[string]int, len(env.Endpoints))
	for i, ep := range env.Endpoints {
		addrs[i] = ep.Key()
		p.index[ep.Key()] = i
	}
	src, err := discovery.NewStatic(addrs, nil)
	if err != nil {
		return err
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	rt, err := framework.NewRuntime(p.opts.Config, reg, framework.RuntimeOptions{Context: p.ctx, Clock: env.Clock, Seed: env.Seed,
		Logger: logger, Endpoints: src.Endpoints})
	if err != nil {
		p.cancel()
		return err
	}
	p.rt = rt
	p.metrics = newMetricsSource(env)
	p.d, err = director.New(director.Options{Runtime: rt, Endpoints: src, Metrics: p.metrics, Clock: env.Clock, Logger: logger,
		NewRequestID: func() string { p.nextID++; return "sim-" + strconv.Itoa(p.nextID) }})
	if err != nil {
		p.cancel()
		return err
	}
	for _, pl := range rt.Plugins() {
		if lp, ok := pl.(*latency.Producer); ok {
			if w, ok := lp.Predictor().(interface{ Wait() }); ok {
				p.waiters = append(p.waiters, w)
			}
		}
	}
	return nil
}

// Runtime returns the runtime (nil before Start).
func (p *Picker) Runtime() *framework.Runtime { return p.rt }

// Close stops the plugins' background work.
func (p *Picker) Close() {
	if p.cancel != nil {
		p.cancel()
	}
}

// Scraped stores endpoint i's scrape.
func (p *Picker) Scraped(i int, s engine.Stats) { p.metrics.store(i, s) }

// requestHeaders are the headers the gateway stand-in sends over ext_proc for load-generator
// request r (fakes/gateway eppRequestHeaders): pseudo-headers, the client's Content-Type,
// content-length, and the request's own headers (its SLO headers, bench.Request.Headers).
func requestHeaders(r *sim.Request) map[string]string {
	h := map[string]string{":authority": "127.0.0.1", ":path": "/v1/completions", ":method": "POST", ":scheme": "http",
		"content-type": "application/json", "content-length": strconv.Itoa(len(r.Body))}
	for k, v := range r.Headers() {
		h[k] = v
	}
	return h
}

// Pick runs the request through the director (PrepareData, admission, scheduling, PreRequest)
// and returns the primary target. A refusal is a *sim.RefusedError with director.StatusFor's
// status.
func (p *Picker) Pick(r *sim.Request) (int, sim.Flight, error) {
	res, err := p.d.HandleRequest(p.ctx, &director.Input{Headers: requestHeaders(r), Body: r.Body})
	if err != nil {
		return 0, nil, &sim.RefusedError{Status: director.StatusFor(err), Err: err}
	}
	i, ok := p.index[res.Targets[0]]
	if !ok {
		p.d.EndRequest(res.Request)
		return 0, nil, fmt.Errorf("the reference picked %q, not an endpoint of the pool", res.Targets[0])
	}
	// The flight keeps what reference/extproc keeps for the response phase, the request and the
	// pick, and lets the scheduling result (every candidate's snapshot) go.
	f := &flight{p: p, req: res.Request, target: res.Targets[0], ep: p.env.Endpoints[i], id: r.Arrival, predictedTTFT: math.NaN()}
	if prim := res.Scheduling.Primary(); prim != nil && len(prim.TargetEndpoints) > 0 {
		if info, ok := framework.AttributeAs[*latency.LatencyPredictionInfo](prim.TargetEndpoints[0], latency.LatencyPredictionInfoKey); ok && info != nil {
			f.predictedTTFT = info.TTFT
		}
	}
	return i, f, nil
}

// flight is one dispatched request's response phase.
type flight struct {
	p      *Picker
	req    *framework.LLMRequest
	target string
	ep     sim.Endpoint
	id     int
	resp   *framework.Response
	usage  *extproc.UsageParser
	// predictedTTFT is the producer's TTFT prediction (ms) for the picked endpoint, NaN when the
	// primary profile's pick carries none.
	predictedTTFT float64
}

var _ sim.PredictingFlight = (*flight)(nil)

// PredictedTTFTMs implements sim.PredictingFlight: the predicted-latency-producer's TTFT for
// the picked endpoint (its LatencyPredictionInfo on the primary profile's first target).
func (f *flight) PredictedTTFTMs() (float64, bool) {
	return f.predictedTTFT, !math.IsNaN(f.predictedTTFT)
}

// header opens the response as reference/extproc does on response headers.
func (f *flight) header(headers map[string]string) {
	f.resp = &framework.Response{RequestID: f.req.RequestID, Headers: headers, Endpoint: f.p.d.Lookup(f.target)}
	var api framework.API // "": the OpenAI shape
	if f.req.Body != nil {
		api = f.req.Body.API
	}
	f.usage = extproc.NewUsageParser(api, strings.Contains(strings.ToLower(headers["content-type"]), "text/event-stream"))
	f.p.d.ResponseHeader(f.p.ctx, f.req, f.resp)
}

// body feeds one response body chunk as reference/extproc does.
func (f *flight) body(chunk []byte, eos bool) {
	f.usage.Write(chunk)
	if eos {
		f.usage.Finish()
	}
	f.resp.Usage = f.usage.Usage()
	f.resp.EndOfStream = eos
	f.p.d.ResponseBody(f.p.ctx, f.req, f.resp, chunk)
}

// complete ends the request: ResponseComplete, EndRequest, then waits for any retrain the
// training data started.
func (f *flight) complete() {
	f.resp.Usage = f.usage.Finish()
	f.resp.EndOfStream = true
	f.p.d.ResponseComplete(f.p.ctx, f.req, f.resp)
	f.p.d.EndRequest(f.req)
	for _, w := range f.p.waiters {
		w.Wait()
	}
}

func (f *flight) FirstToken() {
	f.header(map[string]string{":status": "200", "content-type": "text/event-stream", "cache-control": "no-cache",
		"x-inference-pod": f.ep.Name, "x-inference-namespace": "default", "x-inference-port": strconv.Itoa(f.ep.Port)})
	f.body(sseToken(f.id, "tok "), false)
}

func (f *flight) Done(u sim.Usage) {
	chunk := sseToken(f.id, "end ")
	chunk = append(chunk, sseFinish(f.id, u)...)
	f.body(chunk, true)
	f.complete()
}

func (f *flight) Failed(status int, message string) {
	f.header(map[string]string{":status": strconv.Itoa(status), "content-type": "application/json"})
	b := fmt.Appendf(nil, `{"error":{"message":%q,"type":"%s","code":%d}}`, message, errorType(status), status)
	f.body(b, true)
	f.complete()
}

func errorType(status int) string {
	if status == 429 {
		return "TooManyRequests"
	}
	return "BadRequestError"
}

// sseToken is one completions token event as the fake writes it (fakes/vllm sseWriter).
func sseToken(id int, text string) []byte {
	return fmt.Appendf(nil, `data: {"id":"cmpl-%d","object":"text_completion","created":1767225600,"model":"x","choices":[{"index":0,"text":%q,"logprobs":null,"finish_reason":null}]}`+"\n\n", id, text)
}

// sseFinish is the fake's end of a stream: the finish_reason event, the usage event and [DONE].
func sseFinish(id int, u sim.Usage) []byte {
	return fmt.Appendf(nil, `data: {"id":"cmpl-%d","object":"text_completion","created":1767225600,"model":"x","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}]}`+"\n\n"+
		`data: {"id":"cmpl-%d","object":"text_completion","created":1767225600,"model":"x","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\n"+
		"data: [DONE]\n\n", id, id, u.PromptTokens, u.CompletionTokens, u.PromptTokens+u.CompletionTokens, u.CachedTokens)
}

// metricsSource is the director's MetricsSource over the simulation's scrapes.
type metricsSource struct {
	env  *sim.Env
	keys map[string]int
	last []*framework.Metrics // nil until the first scrape
}

func newMetricsSource(env *sim.Env) *metricsSource {
	m := &metricsSource{env: env, keys: make(map[string]int, len(env.Endpoints)), last: make([]*framework.Metrics, len(env.Endpoints))}
	for i, ep := range env.Endpoints {
		m.keys[ep.Key()] = i
	}
	return m
}

// store converts a scrape as the data layer's extraction converts the fake's /metrics:
// waiting, running, KV use (at most 1), the LoRA info (running adapters; waiting adapters not
// also running; max_lora) and the cache config, stamped with the scrape time.
func (m *metricsSource) store(i int, s engine.Stats) {
	fm := &framework.Metrics{WaitingQueueSize: s.Waiting, RunningRequests: s.Running, KVCacheUsage: min(s.KVUsage, 1),
		ActiveModels: map[string]struct{}{}, WaitingModels: map[string]struct{}{}, MaxActiveModels: s.MaxLoras,
		CacheBlockSize: s.BlockSize, CacheNumGPUBlocks: s.NumGPUBlocks, UpdateTime: m.env.Clock.Now()}
	for _, a := range s.RunningLoRAs {
		fm.ActiveModels[a] = struct{}{}
	}
	for _, a := range s.WaitingLoRAs {
		if _, running := fm.ActiveModels[a]; !running {
			fm.WaitingModels[a] = struct{}{}
		}
	}
	m.last[i] = fm
}

// Read returns the endpoint's last scrape (shared, read-only) and whether it is stale.
func (m *metricsSource) Read(key string) (*framework.Metrics, bool) {
	i, ok := m.keys[key]
	if !ok {
		return nil, true
	}
	fm := m.last[i]
	return fm, m.stale(fm)
}

// Metrics returns a copy of the endpoint's last scrape, nil before the first.
func (m *metricsSource) Metrics(key string) *framework.Metrics {
	fm, _ := m.Read(key)
	return fm.Clone()
}

// Stale reports whether the endpoint's metrics must not be trusted (reference/datalayer's rule).
func (m *metricsSource) Stale(key string) bool {
	_, stale := m.Read(key)
	return stale
}

func (m *metricsSource) stale(fm *framework.Metrics) bool {
	if fm == nil || fm.ScrapeError != nil || fm.UpdateTime.IsZero() {
		return true
	}
	return m.env.Clock.Since(fm.UpdateTime) > m.env.StaleThreshold
}
