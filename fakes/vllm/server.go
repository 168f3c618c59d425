package vllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
	"github.com/eppkit/eppkit/fakes/vllm/kvevents"
)

// Response headers naming the serving endpoint (llm-d-inference-sim sets these from POD_NAME,
// POD_NAMESPACE and its port).
const (
	HeaderPod       = "x-inference-pod"
	HeaderNamespace = "x-inference-namespace"
	HeaderPort      = "x-inference-port"
	HeaderRequestID = "x-request-id"
)

// Options are the injectable parts of a server.
type Options struct {
	// Clock drives the engine and the latency measurements; default the real clock.
	Clock clock.WithTicker
	// Logger receives warnings and errors; default slog.Default().
	Logger *slog.Logger
}

// dynamic is the part of the configuration /admin/config may change at run time.
type dynamic struct {
	latency      Latency
	fakeMetrics  *FakeMetrics
	failureRate  int
	failureTypes []string
	// ignored are simulator keys accepted by /admin/config and not modelled.
	ignored map[string]json.RawMessage
	// healthStatus is the status GET /health answers (0 = 200); eppkit's admin key
	// "health-status", so a test can fail a readiness probe (suites/e2e).
	healthStatus int
}

// Server is one API server of a fake vLLM deployment: one data-parallel rank in the
// rank-ports mode (DataParallelPorts), or the one server in front of every engine in the
// internal mode (DataParallelInternal).
type Server struct {
	cfg     Config
	rank    int
	opts    Options
	log     *slog.Logger
	pod     string
	portS   string
	engines []*rankEngine
	met     *metrics
	dyn     atomic.Pointer[dynamic]
	// adminMu serialises UpdateAdminConfig's read-modify-store of dyn.
	adminMu sync.Mutex
	start   time.Time
	reqSeq  atomic.Uint64
	lbNext  atomic.Uint64
	// scrapes counts the GET /metrics responses written (GET /admin/metrics-scrapes).
	scrapes atomic.Uint64

	lorasMu sync.RWMutex
	loras   []LoraModule
	loraIDs map[string]int // adapter name → vLLM's lora_int_id (assignLoRAID)

	rngMu sync.Mutex
	rng   *rand.Rand

	httpSrv  *http.Server
	grpcSrv  *grpc.Server // vLLM's gRPC engine API, served through Handler (grpcengine.go)
	ln       net.Listener
	done     chan struct{}
	serveErr error
}

// rankEngine is one engine core of a server and its per-request metrics: the engine label is
// the data-parallel rank (rank-ports mode: one engine per server) or the engine's index behind
// the one server (internal mode), as vLLM labels each EngineCore's series.
type rankEngine struct {
	index  int
	engine *engine.Engine
	met    *engineMetrics
	// events publishes the engine's KV-cache events (nil unless Config.KVEvents is enabled).
	events *kvevents.Publisher
}

// NewServer builds rank `rank` of cfg (cfg must be valid) on listener ln, without serving.
func NewServer(cfg Config, rank int, ln net.Listener, opts Options) (*Server, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, rank: rank, opts: opts, ln: ln, done: make(chan struct{}),
		log: opts.Logger.With("pod", cfg.PodName, "rank", rank),
		pod: cfg.PodName, start: opts.Clock.Now(),
		loras: slices.Clone(cfg.LoraModules),
		rng:   rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(rank)+0x9e3779b97f4a7c15))}
	if ln != nil {
		s.portS = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	s.dyn.Store(&dynamic{latency: cfg.Latency, fakeMetrics: cfg.FakeMetrics,
		failureRate: cfg.FailureInjectionRate, failureTypes: cfg.FailureTypes})
	indexes := []int{rank}
	if cfg.DataParallelMode == DataParallelInternal {
		indexes = make([]int, cfg.DPSize)
		for i := range indexes {
			indexes[i] = i
		}
	}
	sources := make([]engineSource, len(indexes))
	s.loraIDs = map[string]int{}
	for _, l := range cfg.LoraModules {
		s.assignLoRAID(l.Name)
	}
	for i, idx := range indexes {
		re := &rankEngine{index: idx}
		if cfg.KVEvents.Enabled() {
			topic := cfg.KVEvents.Topic
			if topic == "" {
				port, _ := strconv.Atoi(s.portS)
				topic = kvevents.Topic(cfg.Host, port, cfg.DisplayModel())
			}
			pub, err := kvevents.Start(cfg.KVEvents, kvevents.Options{Rank: idx, Host: cfg.Host, Topic: topic,
				MapFormat: cfg.UseVLLMMapEventFormat, Logger: s.log})
			if err != nil {
				s.closeEngine()
				return nil, err
			}
			re.events = pub
		}
		eng, err := s.newEngine(cfg.Latency, idx, re.events)
		if err != nil {
			if re.events != nil {
				_ = re.events.Close()
			}
			s.closeEngine()
			return nil, err
		}
		re.engine = eng
		s.engines = append(s.engines, re)
		sources[i] = engineSource{label: strconv.Itoa(idx), stats: func() EngineStats { return convertStats(re.engine.Stats()) }}
	}
	var ems []*engineMetrics
	s.met, ems = newMetrics(metricsConfig{model: cfg.DisplayModel(), generation: cfg.MetricsNames,
		lora: cfg.LoRAEnabled(), maxLoras: cfg.MaxLoras, blockSize: cfg.BlockSize, prefix: cfg.EnableKVCache,
		gaugeOnly: cfg.GaugeOnly}, sources, func() *FakeMetrics { return s.dyn.Load().fakeMetrics }, opts.Clock.Now)
	for i, em := range ems {
		s.engines[i].met = em
	}
	s.grpcSrv = newGRPCServer(s)
	// HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on the one port, as llm-d-inference-sim
	// v0.10.2 serves HTTP and gRPC on its --port: gRPC clients and h2c gateways connect here.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	s.httpSrv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, Protocols: protocols,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	return s, nil
}

func (s *Server) newEngine(l Latency, index int, events *kvevents.Publisher) (*engine.Engine, error) {
	c := s.cfg
	c.Latency = l
	ec := c.EngineConfig(index, s.opts.Clock)
	if events != nil {
		ec.KVEvents = events.Enqueue
		ec.KVEventsHashSeed = c.EventsHashSeed()
	}
	return engine.New(ec)
}

// assignLoRAID gives adapter name the next id, as vLLM numbers adapters in load order
// (lora_int_id, from 1); a name keeps its id when unloaded and loaded again. Call with lorasMu
// held, or before serving.
func (s *Server) assignLoRAID(name string) {
	if _, ok := s.loraIDs[name]; !ok {
		s.loraIDs[name] = len(s.loraIDs) + 1
	}
}

// KVEventsEndpoints are the PUB addresses of the engines' KV-event publishers, in engine order
// (bound addresses with their ports resolved); nil without KV events.
func (s *Server) KVEventsEndpoints() []string {
	var out []string
	for _, e := range s.engines {
		if e.events != nil {
			out = append(out, e.events.Endpoint())
		}
	}
	return out
}

// KVEventsReplayEndpoints are the replay (ROUTER) addresses, in engine order; nil without replay.
func (s *Server) KVEventsReplayEndpoints() []string {
	var out []string
	for _, e := range s.engines {
		if e.events != nil && e.events.ReplayEndpoint() != "" {
			out = append(out, e.events.ReplayEndpoint())
		}
	}
	return out
}

// EngineConfig is the engine configuration of engine `index` (the data-parallel rank, or the
// engine of an internal data-parallel server) of a server with this configuration on clock clk
// (nil: the real clock): its scheduler, KV-cache and latency settings, seeded with Seed + index.
// The fleet simulation (bench/sim) builds its engines with it, so a simulated
// endpoint is the engine a fake server would run.
func (c Config) EngineConfig(index int, clk clock.WithTicker) engine.Config {
	l := c.Latency
	return engine.Config{
		MaxNumSeqs:              c.MaxNumSeqs,
		MaxWaitingQueueLength:   c.MaxWaitingQueueLength,
		BlockSize:               c.BlockSize,
		KVCacheSize:             c.KVCacheSize,
		EnablePrefixCaching:     c.EnableKVCache,
		MaxModelLen:             c.MaxModelLen,
		MaxLoras:                max(c.MaxLoras, 1),
		PrefillOverhead:         l.PrefillOverhead.D(),
		PrefillTimePerToken:     l.PrefillTimePerToken.D(),
		PrefillTimeStdDev:       l.PrefillTimeStdDev.D(),
		TimeToFirstToken:        l.TimeToFirstToken.D(),
		TimeToFirstTokenStdDev:  l.TimeToFirstTokenStdDev.D(),
		InterTokenLatency:       l.InterTokenLatency.D(),
		InterTokenLatencyStdDev: l.InterTokenLatencyStdDev.D(),
		TimeFactorUnderLoad:     l.TimeFactorUnderLoad,
		Seed:                    c.Seed + int64(index),
		Clock:                   clk,
	}
}

// pickEngine chooses the engine for a new request. With one engine it is that one; behind an
// internal data-parallel server it is the least loaded by vLLM's score, waiting × 4 + running
// (vllm/v1/engine/core_client.py DPLBAsyncMPClient.get_core_engine_for_request), ties broken
// round-robin.
func (s *Server) pickEngine() *rankEngine {
	if len(s.engines) == 1 {
		return s.engines[0]
	}
	start := int(s.lbNext.Add(1) % uint64(len(s.engines)))
	best, bestScore := s.engines[start], -1
	for k := range s.engines {
		e := s.engines[(start+k)%len(s.engines)]
		st := e.engine.Stats()
		if score := st.Waiting*4 + st.Running; bestScore < 0 || score < bestScore {
			best, bestScore = e, score
		}
	}
	return best
}

// engineStats sums the engines' stats (one engine unless DataParallelInternal).
func (s *Server) engineStats() EngineStats {
	var sum EngineStats
	for _, e := range s.engines {
		st := convertStats(e.engine.Stats())
		sum.Running += st.Running
		sum.Waiting += st.Waiting
		sum.KVUsage += st.KVUsage / float64(len(s.engines))
		sum.RunningLoRAs = append(sum.RunningLoRAs, st.RunningLoRAs...)
		sum.WaitingLoRAs = append(sum.WaitingLoRAs, st.WaitingLoRAs...)
		sum.NumGPUBlocks += st.NumGPUBlocks
		sum.PrefixCacheQueries += st.PrefixCacheQueries
		sum.PrefixCacheHits += st.PrefixCacheHits
		sum.PromptTokens += st.PromptTokens
		sum.GenerationTokens += st.GenerationTokens
	}
	return sum
}

func convertStats(st engine.Stats) EngineStats {
	return EngineStats{Running: st.Running, Waiting: st.Waiting, KVUsage: st.KVUsage,
		RunningLoRAs: st.RunningLoRAs, WaitingLoRAs: st.WaitingLoRAs, NumGPUBlocks: st.NumGPUBlocks,
		PrefixCacheQueries: int64(st.PrefixCacheQueries), PrefixCacheHits: int64(st.PrefixCacheHits),
		PromptTokens: int64(st.PromptTokens), GenerationTokens: int64(st.GenerationTokens)}
}

// setLatency applies a new latency profile to every engine (engine.SetLatencies): tokens already
// scheduled keep their times; later ones use the new profile.
func (s *Server) setLatency(l Latency) error {
	for _, e := range s.engines {
		if err := e.engine.SetLatencies(engine.Latencies{
			PrefillOverhead: l.PrefillOverhead.D(), PrefillTimePerToken: l.PrefillTimePerToken.D(),
			PrefillTimeStdDev: l.PrefillTimeStdDev.D(), TimeToFirstToken: l.TimeToFirstToken.D(),
			TimeToFirstTokenStdDev: l.TimeToFirstTokenStdDev.D(), InterTokenLatency: l.InterTokenLatency.D(),
			InterTokenLatencyStdDev: l.InterTokenLatencyStdDev.D(), TimeFactorUnderLoad: l.TimeFactorUnderLoad,
		}); err != nil {
			return err
		}
	}
	return nil
}

// Rank is this server's data-parallel rank.
func (s *Server) Rank() int { return s.rank }

// Addr is the listen address host:port ("" when built without a listener).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// URL is http://Addr.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Config returns the static configuration.
func (s *Server) Config() Config { return s.cfg }

// Serve serves HTTP on the listener until Shutdown; it returns nil after a clean shutdown.
func (s *Server) Serve() error {
	defer close(s.done)
	err := s.httpSrv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	s.serveErr = err
	return err
}

// Shutdown stops accepting, waits for open requests until ctx ends, then closes them.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.httpSrv.Shutdown(ctx)
	if err != nil {
		_ = s.httpSrv.Close()
	}
	s.closeEngine()
	return err
}

// Close closes the listener and every connection at once (a crash, for tests).
func (s *Server) Close() error {
	err := s.httpSrv.Close()
	s.grpcSrv.Stop() // the handler transports of open gRPC calls
	if s.ln != nil {
		_ = s.ln.Close()
	}
	s.closeEngine()
	return err
}

func (s *Server) closeEngine() {
	for _, e := range s.engines {
		if e.engine != nil {
			_ = e.engine.Close()
		}
		if e.events != nil {
			_ = e.events.Close() // after the engine: its last events go out first
		}
	}
}

// Handler returns the server's HTTP handler (all endpoints, with the identity headers); a gRPC
// call (HTTP/2, content type application/grpc) goes to vLLM's gRPC engine API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, api := range []apiKind{apiCompletions, apiChat, apiMessages, apiResponses, apiEmbeddings} {
		mux.HandleFunc("POST "+api.String(), func(w http.ResponseWriter, r *http.Request) { s.handleAPI(w, r, api) })
	}
	for _, api := range []apiKind{apiCompletions, apiChat} {
		mux.HandleFunc("POST "+api.String()+"/render", func(w http.ResponseWriter, r *http.Request) { s.handleRender(w, r, api) })
	}
	mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("POST /v1/load_lora_adapter", s.handleLoadLora)
	mux.HandleFunc("POST /v1/unload_lora_adapter", s.handleUnloadLora)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		code := s.dyn.Load().healthStatus
		if code == 0 {
			code = http.StatusOK
		}
		w.WriteHeader(code)
	})
	metricsPage := promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		metricsPage.ServeHTTP(w, r)
		s.scrapes.Add(1) // after the page is written: a count read later saw this page's values
	})
	mux.HandleFunc("GET /admin/metrics-scrapes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, MetricsScrapes{Scrapes: s.scrapes.Load()})
	})
	mux.HandleFunc("POST /reset_prefix_cache", s.handleResetPrefixCache)
	mux.HandleFunc("GET /admin/config", s.handleAdminGet)
	mux.HandleFunc("POST /admin/config", s.handleAdminPost)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, NewAPIError(http.StatusNotFound, "", "no route for %s %s", r.Method, r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set(HeaderPod, s.pod)
		h.Set(HeaderNamespace, s.cfg.PodNamespace)
		h.Set(HeaderPort, s.portS)
		if id := r.Header.Get(HeaderRequestID); id != "" {
			h.Set(HeaderRequestID, id)
		}
		if isGRPC(r) {
			s.grpcSrv.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// handleResetPrefixCache is vLLM's POST /reset_prefix_cache: every engine forgets its cached
// blocks and publishes AllBlocksCleared. As vLLM's API server it answers 200 even when an engine
// refuses because running requests hold blocks (vLLM logs that; so does the fake).
func (s *Server) handleResetPrefixCache(w http.ResponseWriter, r *http.Request) {
	for _, e := range s.engines {
		if err := e.engine.ResetPrefixCache(); err != nil {
			s.log.Warn("reset_prefix_cache: failed to reset the prefix cache", "engine", e.index, "err", err)
		}
	}
	w.WriteHeader(http.StatusOK)
}

// loraID is vLLM's id of adapter lora (0 for the base model).
func (s *Server) loraID(lora string) int {
	if lora == "" {
		return 0
	}
	s.lorasMu.RLock()
	defer s.lorasMu.RUnlock()
	return s.loraIDs[lora]
}

// resolveModel maps a request's model to (base, adapter); ok is false for an unknown model.
func (s *Server) resolveModel(name string) (lora string, ok bool) {
	// As vLLM and the simulator: the served names (default [--model]) and loaded adapters.
	if slices.Contains(s.cfg.ServedModelNames, name) {
		return "", true
	}
	s.lorasMu.RLock()
	defer s.lorasMu.RUnlock()
	for _, l := range s.loras {
		if l.Name == name {
			return name, true
		}
	}
	return "", false
}

// pickFailure rolls the failure injection; it returns "" for no failure.
func (s *Server) pickFailure() string {
	d := s.dyn.Load()
	if d.failureRate <= 0 {
		return ""
	}
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	// The simulator's rule: RandomInt(1, 100) <= rate.
	if 1+s.rng.IntN(100) > d.failureRate {
		return ""
	}
	types := d.failureTypes
	if len(types) == 0 {
		types = SimFailureTypes
	}
	return types[s.rng.IntN(len(types))]
}

// simFailure returns the simulator's predefined error for kind (pkg/llm-d-inference-sim/failures.go).
func (s *Server) simFailure(kind string) *APIError {
	model := s.cfg.Model
	switch kind {
	case FailureRateLimit:
		return NewAPIError(http.StatusTooManyRequests, "", "Rate limit reached for %s in organization org-xxx on requests per min (RPM): Limit 3, Used 3, Requested 1.", model)
	case FailureInvalidAPIKey:
		return NewAPIError(http.StatusUnauthorized, "", "Incorrect API key provided.")
	case FailureContextLength:
		return NewAPIError(http.StatusBadRequest, "messages", "This model's maximum context length is 4096 tokens. However, your messages resulted in 4500 tokens.")
	case FailureInvalidRequest:
		return NewAPIError(http.StatusBadRequest, "model", "Invalid request: missing required parameter 'model'.")
	case FailureModelNotFound:
		return NewAPIError(http.StatusNotFound, "model", "The model '%s-nonexistent' does not exist", model)
	default: // FailureServerError
		return NewAPIError(http.StatusServiceUnavailable, "", "The server is overloaded or not ready yet.")
	}
}

// resetConnection hijacks the connection and closes it with SO_LINGER 0, so the peer sees a TCP
// RST.
func resetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *APIError) {
	limit := int64(s.cfg.MaxRequestBodySizeMB) << 20
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, NewAPIError(http.StatusRequestEntityTooLarge, "", "request body exceeds %d bytes (--max-request-body-size-mb %d)", limit, s.cfg.MaxRequestBodySizeMB)
		}
		return nil, NewAPIError(http.StatusBadRequest, "", "reading the request body: %v", err)
	}
	return body, nil
}

type modelCard struct {
	ID      string  `json:"id"`
	Object  string  `json:"object"`
	Created int64   `json:"created"`
	OwnedBy string  `json:"owned_by"`
	Root    string  `json:"root"`
	Parent  *string `json:"parent"`
	MaxLen  int     `json:"max_model_len,omitempty"`
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	created := s.start.Unix()
	var data []modelCard
	for _, n := range s.cfg.ServedModelNames {
		data = append(data, modelCard{ID: n, Object: "model", Created: created, OwnedBy: "vllm", Root: s.cfg.Model, MaxLen: s.cfg.MaxModelLen})
	}
	base := s.cfg.DisplayModel()
	s.lorasMu.RLock()
	for _, l := range s.loras {
		root := l.Path
		if root == "" {
			root = l.Name
		}
		data = append(data, modelCard{ID: l.Name, Object: "model", Created: created, OwnedBy: "vllm", Root: root, Parent: &base})
	}
	s.lorasMu.RUnlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeAPIError(w, NewAPIError(http.StatusInternalServerError, "", "encoding response: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

type loraRequest struct {
	LoraName string `json:"lora_name"`
	LoraPath string `json:"lora_path"`
}

func (s *Server) decodeLora(w http.ResponseWriter, r *http.Request) (*loraRequest, bool) {
	body, apiErr := s.readBody(w, r)
	if apiErr != nil {
		writeAPIError(w, apiErr)
		return nil, false
	}
	var req loraRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeAPIError(w, NewAPIError(http.StatusBadRequest, "", "invalid JSON body: %v", err))
		return nil, false
	}
	if req.LoraName == "" {
		writeAPIError(w, NewAPIError(http.StatusBadRequest, "lora_name", "the field 'lora_name' is required"))
		return nil, false
	}
	return &req, true
}

// handleLoadLora follows vLLM's /v1/load_lora_adapter: 200 with a text message, 400 when the
// adapter is already loaded or max-cpu-loras adapters are loaded.
func (s *Server) handleLoadLora(w http.ResponseWriter, r *http.Request) {
	req, ok := s.decodeLora(w, r)
	if !ok {
		return
	}
	if !s.cfg.LoRAEnabled() {
		// vLLM without a LoRA config has no adapter slots to load into.
		writeAPIError(w, NewAPIError(http.StatusBadRequest, "lora_name", "LoRA is not enabled on this server (start it with --enable-lora, --max-loras N or --lora-modules)"))
		return
	}
	if err := s.cfg.ValidateLoraName(req.LoraName); err != nil {
		writeAPIError(w, NewAPIError(http.StatusBadRequest, "lora_name", "lora_name: %v", err))
		return
	}
	s.lorasMu.Lock()
	defer s.lorasMu.Unlock()
	for _, l := range s.loras {
		if l.Name == req.LoraName {
			writeAPIError(w, NewAPIError(http.StatusBadRequest, "lora_name", "The lora adapter '%s' has already been loaded.", req.LoraName))
			return
		}
	}
	if len(s.loras) >= s.cfg.MaxCPULoras {
		writeAPIError(w, NewAPIError(http.StatusBadRequest, "lora_name", "cannot load '%s': %d adapters are loaded (max-cpu-loras %d)", req.LoraName, len(s.loras), s.cfg.MaxCPULoras))
		return
	}
	s.loras = append(s.loras, LoraModule{Name: req.LoraName, Path: req.LoraPath})
	s.assignLoRAID(req.LoraName)
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.LoraName)
}

func (s *Server) handleUnloadLora(w http.ResponseWriter, r *http.Request) {
	req, ok := s.decodeLora(w, r)
	if !ok {
		return
	}
	s.lorasMu.Lock()
	defer s.lorasMu.Unlock()
	i := slices.IndexFunc(s.loras, func(l LoraModule) bool { return l.Name == req.LoraName })
	if i < 0 {
		writeAPIError(w, NewAPIError(http.StatusNotFound, "lora_name", "The lora adapter '%s' cannot be found.", req.LoraName))
		return
	}
	s.loras = slices.Delete(s.loras, i, i+1)
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.LoraName)
}

// KVEventsState is one engine's KV-event publisher as tests see it: its endpoints, the next
// sequence number, the topic filters subscribed and the vLLM hashes of the blocks cached.
type KVEventsState struct {
	Endpoint, ReplayEndpoint string
	NextSeq                  uint64
	Topics                   []string
	Cached                   []uint64
}

// KVEventsStates returns every engine's KVEventsState, in engine order (nil without KV events).
func (s *Server) KVEventsStates() []KVEventsState {
	var out []KVEventsState
	for _, e := range s.engines {
		if e.events == nil {
			continue
		}
		out = append(out, KVEventsState{Endpoint: e.events.Endpoint(), ReplayEndpoint: e.events.ReplayEndpoint(),
			NextSeq: e.events.Sent(), Topics: e.events.Topics(), Cached: e.engine.CachedBlockHashes()})
	}
	return out
}
