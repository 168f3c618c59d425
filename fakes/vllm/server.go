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
	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
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

// Server is one data-parallel rank of a fake vLLM server.
type Server struct {
	cfg   Config
	rank  int
	opts  Options
	log   *slog.Logger
	pod   string
	portS string
	engMu sync.RWMutex
	eng   *engine.Engine
	met   *metrics
	dyn   atomic.Pointer[dynamic]
	// adminMu serialises UpdateAdminConfig's read-modify-store of dyn.
	adminMu sync.Mutex
	start   time.Time
	reqSeq  atomic.Uint64

	lorasMu sync.RWMutex
	loras   []LoraModule

	rngMu sync.Mutex
	rng   *rand.Rand

	httpSrv  *http.Server
	ln       net.Listener
	done     chan struct{}
	serveErr error
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
	eng, err := s.newEngine(cfg.Latency)
	if err != nil {
		return nil, err
	}
	s.eng = eng
	s.met = newMetrics(cfg.DisplayModel(), cfg.MaxLoras, cfg.BlockSize, cfg.GaugeOnly,
		s.engineStats, func() *FakeMetrics { return s.dyn.Load().fakeMetrics }, opts.Clock.Now)
	s.httpSrv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	return s, nil
}

func (s *Server) newEngine(l Latency) (*engine.Engine, error) {
	return engine.New(engine.Config{
		MaxNumSeqs:              s.cfg.MaxNumSeqs,
		MaxWaitingQueueLength:   s.cfg.MaxWaitingQueueLength,
		BlockSize:               s.cfg.BlockSize,
		KVCacheSize:             s.cfg.KVCacheSize,
		EnablePrefixCaching:     s.cfg.EnableKVCache,
		MaxModelLen:             s.cfg.MaxModelLen,
		MaxLoras:                s.cfg.MaxLoras,
		PrefillOverhead:         l.PrefillOverhead.D(),
		PrefillTimePerToken:     l.PrefillTimePerToken.D(),
		PrefillTimeStdDev:       l.PrefillTimeStdDev.D(),
		TimeToFirstToken:        l.TimeToFirstToken.D(),
		TimeToFirstTokenStdDev:  l.TimeToFirstTokenStdDev.D(),
		InterTokenLatency:       l.InterTokenLatency.D(),
		InterTokenLatencyStdDev: l.InterTokenLatencyStdDev.D(),
		TimeFactorUnderLoad:     l.TimeFactorUnderLoad,
		Seed:                    s.cfg.Seed + int64(s.rank),
		Clock:                   s.opts.Clock,
	})
}

func (s *Server) engine() *engine.Engine {
	s.engMu.RLock()
	defer s.engMu.RUnlock()
	return s.eng
}

func convertStats(st engine.Stats) EngineStats {
	return EngineStats{Running: st.Running, Waiting: st.Waiting, KVUsage: st.KVUsage,
		RunningLoRAs: st.RunningLoRAs, WaitingLoRAs: st.WaitingLoRAs, NumGPUBlocks: st.NumGPUBlocks,
		PrefixCacheQueries: int64(st.PrefixCacheQueries), PrefixCacheHits: int64(st.PrefixCacheHits),
		PromptTokens: int64(st.PromptTokens), GenerationTokens: int64(st.GenerationTokens)}
}

// engineStats reads the engine.
func (s *Server) engineStats() EngineStats { return convertStats(s.engine().Stats()) }

// setLatency applies a new latency profile to the running engine (engine.SetLatencies): tokens
// already scheduled keep their times; later ones use the new profile.
func (s *Server) setLatency(l Latency) error {
	return s.engine().SetLatencies(engine.Latencies{
		PrefillOverhead: l.PrefillOverhead.D(), PrefillTimePerToken: l.PrefillTimePerToken.D(),
		PrefillTimeStdDev: l.PrefillTimeStdDev.D(), TimeToFirstToken: l.TimeToFirstToken.D(),
		TimeToFirstTokenStdDev: l.TimeToFirstTokenStdDev.D(), InterTokenLatency: l.InterTokenLatency.D(),
		InterTokenLatencyStdDev: l.InterTokenLatencyStdDev.D(), TimeFactorUnderLoad: l.TimeFactorUnderLoad,
	})
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
	if s.ln != nil {
		_ = s.ln.Close()
	}
	s.closeEngine()
	return err
}

func (s *Server) closeEngine() { _ = s.engine().Close() }

// Handler returns the server's HTTP handler (all endpoints, with the identity headers).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.handleCompletion(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.handleCompletion(w, r, true) })
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
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{}))
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
		mux.ServeHTTP(w, r)
	})
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

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request, chat bool) {
	clk := s.opts.Clock
	arrival := clk.Now()
	body, apiErr := s.readBody(w, r)
	if apiErr != nil {
		writeAPIError(w, apiErr)
		return
	}
	req, err := DecodeRequest(body, chat)
	if err != nil {
		writeAPIError(w, err.(*APIError))
		return
	}
	lora, ok := s.resolveModel(req.Model)
	if !ok {
		writeAPIError(w, NewAPIError(http.StatusNotFound, "model", "The model `%s` does not exist.", req.Model))
		return
	}
	abort := false
	switch kind := s.pickFailure(); kind {
	case "":
	case FailureReset:
		resetConnection(w)
		return
	case FailureAbort:
		abort = true
	case FailureSlowFirstByte:
		t := clk.NewTimer(s.cfg.SlowFirstByteDelay.D())
		select {
		case <-t.C():
		case <-r.Context().Done():
			t.Stop()
			return
		}
	default:
		writeAPIError(w, s.simFailure(kind))
		return
	}

	promptTokens := len(engine.Tokenize(req.promptText))
	maxTok := req.maxTokens()
	if promptTokens+maxTok > s.cfg.MaxModelLen || promptTokens >= s.cfg.MaxModelLen {
		param := "prompt"
		if chat {
			param = "messages"
		}
		writeAPIError(w, NewAPIError(http.StatusBadRequest, param,
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the %s, %d in the completion). Please reduce the length of the %s or completion.",
			s.cfg.MaxModelLen, promptTokens+maxTok, promptTokens, param, maxTok, param))
		return
	}
	limit := s.cfg.MaxModelLen - promptTokens
	if maxTok > 0 {
		limit = maxTok
	}
	var out []engine.Token
	if s.cfg.Mode == ModeEcho {
		out = engine.Tokenize(req.echoText)
	} else {
		s.rngMu.Lock()
		if maxTok > 0 {
			out = randomTokens(s.rng, maxTok)
		} else {
			out = randomTokens(s.rng, 0)
		}
		s.rngMu.Unlock()
	}
	finish := "stop"
	if len(out) > limit {
		out, finish = out[:limit], "length"
	} else if maxTok > 0 && len(out) == maxTok && s.cfg.Mode == ModeRandom {
		finish = "length"
	}
	nOut := max(len(out), 1)

	id := r.Header.Get(HeaderRequestID)
	if id == "" {
		id = strconv.Itoa(s.rank) + "-" + strconv.FormatUint(s.reqSeq.Add(1), 10)
	}
	ctx := r.Context()
	ereq := engine.Request{ID: id, Model: s.cfg.Model, LoRA: lora, Prompt: req.promptText,
		MaxTokens: nOut, FinishReason: finish, CacheSalt: req.CacheSalt}
	seq, err := s.engine().Submit(ctx, ereq)
	if err != nil {
		switch {
		case errors.Is(err, engine.ErrQueueFull):
			writeAPIError(w, NewAPIError(http.StatusTooManyRequests, "", "the waiting queue is full (max-waiting-queue-length %d)", s.cfg.MaxWaitingQueueLength))
		case errors.Is(err, engine.ErrPromptTooLong):
			writeAPIError(w, NewAPIError(http.StatusBadRequest, "prompt", "%v", err))
		case ctx.Err() != nil:
		case errors.Is(err, engine.ErrEngineClosed):
			writeAPIError(w, NewAPIError(http.StatusServiceUnavailable, "", "the server is shutting down"))
		default:
			writeAPIError(w, NewAPIError(http.StatusInternalServerError, "", "engine: %v", err))
		}
		return
	}
	defer seq.Close()

	model := req.Model
	created := arrival.Unix()
	var respID string
	if chat {
		respID = "chatcmpl-" + id
	} else {
		respID = "cmpl-" + id
	}
	tokenText := func(i int) string {
		if i < len(out) {
			return out[i].Text
		}
		return ""
	}

	var st *sseWriter
	if req.Stream {
		st = newSSEWriter(w, chat, respID, model, created)
	}
	var prevAt time.Time
	var ttftAt time.Time
	var pending []time.Time // due times of tokens written but not yet flushed
	n := 0
	for {
		ev, err := seq.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return // client went away or the engine shut down
		}
		if n == 0 {
			ttftAt = ev.At
		} else {
			s.met.tokenGap(ev.At.Sub(prevAt))
		}
		prevAt = ev.At
		n++
		if st != nil {
			st.token(tokenText(ev.Index), n == 1)
			pending = append(pending, ev.At)
			// Tokens already due (a consumer that fell behind) go out in one write and one flush;
			// on time, each token is flushed alone.
			if ev.Final || abort || ev.Buffered == 0 {
				if err := st.flush(); err != nil {
					return
				}
				for _, at := range pending {
					s.met.tokenLate(clk.Since(at))
				}
				pending = pending[:0]
			}
			if abort {
				panic(http.ErrAbortHandler)
			}
		}
		if ev.Final {
			break
		}
	}
	usage := Usage{PromptTokens: seq.PromptTokens(), CompletionTokens: n,
		TotalTokens: seq.PromptTokens() + n, PromptTokensDetails: PromptTokensDetails{CachedTokens: seq.CachedTokens()}}
	_ = ttftAt
	s.met.requestDone(finish, seq.QueueWait(), seq.TTFT(), prevAt.Sub(arrival), n)
	if st != nil {
		_ = st.finish(finish, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, usage)
		return
	}
	text := joinTokens(out)
	resp := completionOut{ID: respID, Created: created, Model: model, Usage: usage}
	if chat {
		resp.Object = "chat.completion"
		resp.Choices = []choiceOut{{Message: &chatMessageOut{Role: "assistant", Content: text}, FinishReason: finish}}
	} else {
		resp.Object = "text_completion"
		resp.Choices = []choiceOut{{Text: &text, FinishReason: finish}}
	}
	b, _ := json.Marshal(resp)
	w.Header().Set("Content-Type", "application/json")
	if abort {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b[:len(b)/2])
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

func joinTokens(t []engine.Token) string {
	n := 0
	for _, x := range t {
		n += len(x.Text)
	}
	b := make([]byte, 0, n)
	for _, x := range t {
		b = append(b, x.Text...)
	}
	return string(b)
}

// sseWriter writes OpenAI server-sent-event chunks with hand-built JSON (a fixed prefix per
// request and the escaped token text) into a buffer that flush writes and flushes.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	chat    bool
	prefix  []byte // `data: {"id":..,"object":..,"created":..,"model":..,"choices":[`
	buf     []byte
	started bool
}

func newSSEWriter(w http.ResponseWriter, chat bool, id, model string, created int64) *sseWriter {
	obj := "text_completion"
	if chat {
		obj = "chat.completion.chunk"
	}
	p := []byte(`data: {"id":`)
	p = appendJSONString(p, id)
	p = append(p, `,"object":"`...)
	p = append(p, obj...)
	p = append(p, `","created":`...)
	p = strconv.AppendInt(p, created, 10)
	p = append(p, `,"model":`...)
	p = appendJSONString(p, model)
	p = append(p, `,"choices":[`...)
	return &sseWriter{w: w, rc: http.NewResponseController(w), chat: chat, prefix: p, buf: make([]byte, 0, 512)}
}

func (s *sseWriter) header() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
}

func (s *sseWriter) flush() error {
	s.header()
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	s.buf = s.buf[:0]
	return s.rc.Flush()
}

// token appends one token chunk to the buffer (flush sends it); the first chat chunk is preceded
// by the role chunk.
func (s *sseWriter) token(text string, first bool) {
	if s.chat {
		if first {
			s.buf = append(s.buf, s.prefix...)
			s.buf = append(s.buf, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
		}
		s.buf = append(s.buf, s.prefix...)
		s.buf = append(s.buf, `{"index":0,"delta":{"content":`...)
		s.buf = appendJSONString(s.buf, text)
		s.buf = append(s.buf, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	} else {
		s.buf = append(s.buf, s.prefix...)
		s.buf = append(s.buf, `{"index":0,"text":`...)
		s.buf = appendJSONString(s.buf, text)
		s.buf = append(s.buf, `,"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	}
}

// finish writes the finish_reason chunk, the usage chunk when asked, and [DONE].
func (s *sseWriter) finish(reason string, includeUsage bool, u Usage) error {
	s.buf = append(s.buf, s.prefix...)
	if s.chat {
		s.buf = append(s.buf, `{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
	} else {
		s.buf = append(s.buf, `{"index":0,"text":"","logprobs":null,"finish_reason":`...)
	}
	s.buf = appendJSONString(s.buf, reason)
	s.buf = append(s.buf, "}]}\n\n"...)
	if includeUsage {
		ub, _ := json.Marshal(u)
		s.buf = append(s.buf, s.prefix...)
		s.buf = append(s.buf, `],"usage":`...)
		s.buf = append(s.buf, ub...)
		s.buf = append(s.buf, "}\n\n"...)
	}
	s.buf = append(s.buf, "data: [DONE]\n\n"...)
	return s.flush()
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
