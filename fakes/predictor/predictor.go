// Package predictor is eppkit's scriptable fake latency predictor: an HTTP server with the
// upstream predictor API (the same paths and JSON as reference/predictor's server and the
// upstream sidecars, gateway-api-inference-extension latencypredictor/) whose behaviour tests
// change at runtime: down (every connection closed without an answer), slow (a delay before each
// answer), erroring (a fixed HTTP status), not ready, and fixed or computed answers. It records
// the calls and the training entries it receives.
//
// Import it under an alias next to the wire types, e.g.
//
//	fakepredictor "github.com/eppkit/eppkit/fakes/predictor"
package predictor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	wire "github.com/eppkit/eppkit/internal/predictorapi"
)

// Behavior is what the fake does now. The zero value answers every call at once, ready, with
// TTFT 0 ms and TPOT 0 ms.
type Behavior struct {
	// Down closes every connection without an HTTP answer (a crashed or unreachable sidecar).
	Down bool `json:"down"`
	// Delay is waited before answering each API call (not /admin); a client that gives up first
	// sees its own timeout.
	Delay time.Duration `json:"delay"`
	// ErrorStatus, when non-zero (400–599), answers every API call except /healthz with it and
	// {"detail": "fake predictor: scripted error"}.
	ErrorStatus int `json:"errorStatus"`
	// NotReady makes /status report is_ready false and /readyz 503; predictions still answer.
	NotReady bool `json:"notReady"`
	// TTFTms and TPOTms are the fixed answers (ms, ≥ 0) when no Func is set.
	TTFTms float64 `json:"ttftMs"`
	TPOTms float64 `json:"tpotMs"`
	// ModelType and Quantile are reported in answers and /status; defaults "bayesian_ridge", 0.9.
	ModelType string  `json:"modelType"`
	Quantile  float64 `json:"quantile"`
}

// Validate checks the behaviour; the error names the field.
func (b *Behavior) Validate() error {
	switch {
	case b.Delay < 0:
		return fmt.Errorf("delay: must be ≥ 0, got %v", b.Delay)
	case b.ErrorStatus != 0 && (b.ErrorStatus < 400 || b.ErrorStatus > 599):
		return fmt.Errorf("errorStatus: must be 0 or 400–599, got %d", b.ErrorStatus)
	case b.TTFTms < 0 || b.TPOTms < 0:
		return fmt.Errorf("ttftMs/tpotMs: must be ≥ 0, got %v/%v", b.TTFTms, b.TPOTms)
	case b.Quantile < 0 || b.Quantile >= 1:
		return fmt.Errorf("quantile: must be in [0,1), got %v", b.Quantile)
	}
	return nil
}

// PredictFunc computes the answer for one request (ms); it overrides TTFTms/TPOTms.
type PredictFunc func(r wire.PredictionRequest) (ttftMs, tpotMs float64)

// Calls counts the API calls the fake received, by path (including refused ones).
type Calls struct {
	Predict, PredictBulk, PredictBulkStrict, AddTrainingData, Status, Readyz, Metrics int
}

// Server is the fake. Create it with New, serve it with Start (or mount Handler yourself).
type Server struct {
	mu      sync.Mutex
	b       Behavior
	fn      PredictFunc
	calls   Calls
	entries []wire.TrainingEntry

	srv *http.Server
	ln  net.Listener
}

// New returns a fake with behaviour b (validated).
func New(b Behavior) (*Server, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &Server{b: b}, nil
}

// Start listens on addr ("127.0.0.1:0" for a free port) and serves until Close.
func (s *Server) Start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return nil
}

// URL is the base URL (http://host:port) after Start.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the server and closes its connections.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Close()
}

// Update changes the behaviour in place (validated; on error nothing changes).
func (s *Server) Update(f func(b *Behavior)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b
	f(&b)
	if err := b.Validate(); err != nil {
		return err
	}
	s.b = b
	return nil
}

// Behavior returns the current behaviour.
func (s *Server) Behavior() Behavior {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b
}

// SetFunc sets (nil: clears) a function computing each answer.
func (s *Server) SetFunc(f PredictFunc) {
	s.mu.Lock()
	s.fn = f
	s.mu.Unlock()
}

// Calls returns the call counts so far.
func (s *Server) Calls() Calls {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// TrainingEntries returns a copy of every training entry accepted so far.
func (s *Server) TrainingEntries() []wire.TrainingEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]wire.TrainingEntry(nil), s.entries...)
}

// Handler serves the API plus GET/POST /admin/behavior (JSON Behavior; delay as nanoseconds or
// a Go duration string) for scripting from another process.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict", s.api(func(c *Calls) { c.Predict++ }, s.predictOne))
	mux.HandleFunc("POST /predict/bulk/strict", s.api(func(c *Calls) { c.PredictBulkStrict++ }, s.predictStrict))
	mux.HandleFunc("POST /predict/bulk", s.api(func(c *Calls) { c.PredictBulk++ }, s.predictBulk))
	mux.HandleFunc("POST /add_training_data_bulk", s.api(func(c *Calls) { c.AddTrainingData++ }, s.addTraining))
	mux.HandleFunc("GET /status", s.api(func(c *Calls) { c.Status++ }, s.status))
	mux.HandleFunc("GET /readyz", s.api(func(c *Calls) { c.Readyz++ }, s.readyz))
	mux.HandleFunc("GET /metrics", s.api(func(c *Calls) { c.Metrics++ }, s.metrics))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if s.Behavior().Down {
			hangUp(w)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /admin/behavior", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, adminBehavior(s.Behavior()))
	})
	mux.HandleFunc("POST /admin/behavior", s.postBehavior)
	return mux
}

// adminBehavior is Behavior with delay as a duration string in JSON.
type adminBehavior Behavior

func (a adminBehavior) MarshalJSON() ([]byte, error) {
	type plain adminBehavior
	return json.Marshal(struct {
		plain
		Delay string `json:"delay"`
	}{plain(a), a.Delay.String()})
}

func (s *Server) postBehavior(w http.ResponseWriter, r *http.Request) {
	var raw map[string]json.RawMessage
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &raw)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "body: malformed JSON: " + err.Error()})
		return
	}
	var delay *time.Duration
	if d, ok := raw["delay"]; ok {
		var str string
		if json.Unmarshal(d, &str) == nil {
			v, err := time.ParseDuration(str)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "delay: " + err.Error()})
				return
			}
			delay = &v
		}
		delete(raw, "delay")
		if delay == nil {
			var ns int64
			if err := json.Unmarshal(d, &ns); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "delay: want a duration string or nanoseconds"})
				return
			}
			v := time.Duration(ns)
			delay = &v
		}
	}
	rest, _ := json.Marshal(raw)
	s.mu.Lock()
	b := s.b
	err = json.Unmarshal(rest, &b)
	if err == nil {
		if delay != nil {
			b.Delay = *delay
		}
		err = b.Validate()
	}
	if err == nil {
		s.b = b
	}
	s.mu.Unlock()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, adminBehavior(s.Behavior()))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// hangUp closes the connection without writing an HTTP answer.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // net/http closes the connection silently
}

// api wraps an API handler with the counting and the scripted down/slow/error behaviour.
func (s *Server) api(count func(*Calls), h func(w http.ResponseWriter, r *http.Request, b Behavior, fn PredictFunc)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		count(&s.calls)
		b, fn := s.b, s.fn
		s.mu.Unlock()
		if b.Down {
			hangUp(w)
			return
		}
		if b.Delay > 0 {
			t := time.NewTimer(b.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if b.ErrorStatus != 0 {
			writeJSON(w, b.ErrorStatus, map[string]string{"detail": "fake predictor: scripted error"})
			return
		}
		h(w, r, b, fn)
	}
}

func (b *Behavior) modelType() string {
	if b.ModelType == "" {
		return wire.ModelTypeBayesianRidge
	}
	return b.ModelType
}

func (b *Behavior) quantile() float64 {
	if b.Quantile == 0 {
		return wire.DefaultQuantile
	}
	return b.Quantile
}

func answer(r *wire.PredictionRequest, b Behavior, fn PredictFunc, now time.Time) wire.PredictionResponse {
	ttft, tpot := b.TTFTms, b.TPOTms
	if fn != nil {
		ttft, tpot = fn(*r)
	}
	return wire.PredictionResponse{TTFT: ttft, TPOT: tpot, PredictedAt: now, ModelType: b.modelType(),
		ObjectiveType: wire.ObjectiveQuantile, Quantile: b.quantile()}
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, wire.MaxBodyBytes))
	if err == nil {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		code := http.StatusBadRequest
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			code = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, code, map[string]string{"detail": "body: " + err.Error()})
		return false
	}
	return true
}

func (s *Server) predictOne(w http.ResponseWriter, r *http.Request, b Behavior, fn PredictFunc) {
	var req wire.PredictionRequest
	if !decode(w, r, &req) {
		return
	}
	if err := req.Validate(); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "body." + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, answer(&req, b, fn, time.Now()))
}

func (s *Server) decodeBulk(w http.ResponseWriter, r *http.Request) ([]wire.PredictionRequest, bool) {
	var req wire.BulkPredictionRequest
	if !decode(w, r, &req) {
		return nil, false
	}
	if len(req.Requests) == 0 || len(req.Requests) > wire.MaxBulkRequests {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": fmt.Sprintf("body.requests: must hold 1 to %d items, got %d", wire.MaxBulkRequests, len(req.Requests))})
		return nil, false
	}
	return req.Requests, true
}

func (s *Server) predictStrict(w http.ResponseWriter, r *http.Request, b Behavior, fn PredictFunc) {
	reqs, ok := s.decodeBulk(w, r)
	if !ok {
		return
	}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "requests[" + strconv.Itoa(i) + "]." + err.Error()})
			return
		}
	}
	now := time.Now()
	out := wire.BulkPredictionResponse{Predictions: make([]wire.PredictionResponse, len(reqs)), TotalRequests: len(reqs), SuccessfulPredictions: len(reqs)}
	for i := range reqs {
		out.Predictions[i] = answer(&reqs[i], b, fn, now)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) predictBulk(w http.ResponseWriter, r *http.Request, b Behavior, fn PredictFunc) {
	reqs, ok := s.decodeBulk(w, r)
	if !ok {
		return
	}
	now := time.Now()
	out := wire.BulkPredictionResponseWithErrors{Predictions: make([]*wire.PredictionResponse, len(reqs)), Errors: []wire.BulkPredictionError{}, TotalRequests: len(reqs)}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			out.Errors = append(out.Errors, wire.BulkPredictionError{Index: i, Error: err.Error(), Request: reqs[i]})
			continue
		}
		a := answer(&reqs[i], b, fn, now)
		out.Predictions[i] = &a
		out.SuccessfulPredictions++
	}
	out.FailedPredictions = len(reqs) - out.SuccessfulPredictions
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) addTraining(w http.ResponseWriter, r *http.Request, _ Behavior, _ PredictFunc) {
	var req wire.BulkTrainingRequest
	if !decode(w, r, &req) {
		return
	}
	for i := range req.Entries {
		if err := req.Entries[i].Validate(); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "entries[" + strconv.Itoa(i) + "]." + err.Error()})
			return
		}
	}
	s.mu.Lock()
	s.entries = append(s.entries, req.Entries...)
	s.mu.Unlock()
	writeJSON(w, http.StatusAccepted, map[string]string{"message": fmt.Sprintf("Accepted %d training samples.", len(req.Entries))})
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request, b Behavior, _ PredictFunc) {
	writeJSON(w, http.StatusOK, wire.ServerStatusResponse{IsReady: !b.NotReady, ModelType: b.modelType(),
		ObjectiveType: wire.ObjectiveQuantile, Quantile: b.quantile(),
		ModelsExist: map[string]bool{"ttft_model": !b.NotReady, "tpot_model": !b.NotReady}})
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request, b Behavior, _ PredictFunc) {
	if b.NotReady {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"detail": "Models are not ready"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "model_type": b.modelType()})
}

// metrics publishes the fixed answers as a constant linear model (intercepts only), which is
// exactly what the fake predicts when no Func is set; with a Func it publishes no coefficients.
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request, b Behavior, fn PredictFunc) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "model_type{type=%q} 1\nobjective_type{type=%q} 1\nmodel_quantile %g\n", b.modelType(), wire.ObjectiveQuantile, b.quantile())
	if fn == nil {
		fmt.Fprintf(w, "ttft_intercept %g\ntpot_intercept %g\n", b.TTFTms, b.TPOTms)
	}
}
