package predictor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Required JSON fields (upstream pydantic models declare them with Field(...)).
var (
	requiredPredictionFields = []string{"kv_cache_percentage", "input_token_length", "num_request_waiting",
		"num_request_running", "num_tokens_generated", "prefix_cache_score"}
	requiredTrainingFields = append(append([]string(nil), requiredPredictionFields...), "actual_ttft_ms", "actual_tpot_ms")
)

// ServerOptions configure NewHandler.
type ServerOptions struct {
	// TrainingServerURL is reported in /status training_server_url (eppkit trains in the same
	// process, so the default is "" ).
	TrainingServerURL string
	// Logger receives request errors; nil means slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds request bodies (413 beyond); 0 means MaxBodyBytes.
	MaxBodyBytes int64
}

// errorBody is FastAPI's error shape, which upstream's servers answer with.
type errorBody struct {
	Detail string `json:"detail"`
}

// NewHandler serves the upstream predictor API (prediction_server.py and training_server.py
// merged, as one process) over m:
//
//	POST /predict                 PredictionRequest → PredictionResponse
//	POST /predict/bulk/strict     BulkPredictionRequest → BulkPredictionResponse (all or nothing)
//	POST /predict/bulk            BulkPredictionRequest → BulkPredictionResponseWithErrors (per row)
//	POST /add_training_data_bulk  BulkTrainingRequest → 202 {"message": ...}
//	GET  /status                  ServerStatusResponse
//	GET  /model/download/info     ModelInfo (+ available_endpoints), as the training server
//	GET  /healthz, /readyz        200, or /readyz 503 until the model is trained
//	GET  /metrics                 Prometheus text: model_type, coefficients, bucket counts
//
// Malformed JSON is 400 and a missing or out-of-range field 422 (FastAPI's code), both with
// {"detail": "..."} naming the row and field; a body over MaxBodyBytes is 413.
func NewHandler(m *Model, opts ServerOptions) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = MaxBodyBytes
	}
	s := &server{m: m, opts: opts}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&modelCollector{m: m})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict", s.predict)
	mux.HandleFunc("POST /predict/bulk/strict", s.predictBulkStrict)
	mux.HandleFunc("POST /predict/bulk", s.predictBulk)
	mux.HandleFunc("POST /add_training_data_bulk", s.addTrainingData)
	mux.HandleFunc("GET /status", s.status)
	mux.HandleFunc("GET /model/download/info", s.modelInfo)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

type server struct {
	m    *Model
	opts ServerOptions
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// httpError is an error with its HTTP status.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	var he *httpError
	if errors.As(err, &he) {
		code = he.code
	}
	if code >= 500 {
		s.opts.Logger.Error("predictor request failed", "path", r.URL.Path, "err", err)
	}
	writeJSON(w, code, errorBody{Detail: err.Error()})
}

// readBody reads the bounded body.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", s.opts.MaxBodyBytes)}
		}
		return nil, &httpError{http.StatusBadRequest, "reading request body: " + err.Error()}
	}
	return body, nil
}

// decodeObject decodes one JSON object into v after checking the required keys; where names the
// object in errors ("body", "requests[3]").
func decodeObject(raw []byte, where string, required []string, v any) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return &httpError{http.StatusBadRequest, fmt.Sprintf("%s: malformed JSON object: %v", where, err)}
	}
	for _, k := range required {
		if v, ok := keys[k]; !ok || string(v) == "null" {
			return &httpError{http.StatusUnprocessableEntity, fmt.Sprintf("%s.%s: field required", where, k)}
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &httpError{http.StatusUnprocessableEntity, fmt.Sprintf("%s.%s: cannot use JSON %s as %s", where, te.Field, te.Value, te.Type)}
		}
		return &httpError{http.StatusUnprocessableEntity, fmt.Sprintf("%s: %v", where, err)}
	}
	return nil
}

// decodeList decodes body {"<key>": [objects]} into raw rows; the list must hold 1..max rows.
func decodeList(body []byte, key string, max int) ([]json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, &httpError{http.StatusBadRequest, fmt.Sprintf("body: malformed JSON: %v", err)}
	}
	raw, ok := top[key]
	if !ok || string(raw) == "null" {
		return nil, &httpError{http.StatusUnprocessableEntity, fmt.Sprintf("body.%s: field required", key)}
	}
	var rows []json.RawMessage
	if err := json.Unmarshal(raw, &rows); err != nil {
		return nil, &httpError{http.StatusUnprocessableEntity, fmt.Sprintf("body.%s: must be a list of objects", key)}
	}
	if max > 0 && (len(rows) < 1 || len(rows) > max) {
		return nil, &httpError{http.StatusUnprocessableEntity, fmt.Sprintf("body.%s: must hold 1 to %d items, got %d", key, max, len(rows))}
	}
	return rows, nil
}

func (s *server) decodeRequests(w http.ResponseWriter, r *http.Request) ([]PredictionRequest, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	rows, err := decodeList(body, "requests", MaxBulkRequests)
	if err != nil {
		return nil, err
	}
	reqs := make([]PredictionRequest, len(rows))
	for i, row := range rows {
		where := "requests[" + strconv.Itoa(i) + "]"
		if err := decodeObject(row, where, requiredPredictionFields, &reqs[i]); err != nil {
			return nil, err
		}
		if err := reqs[i].Validate(); err != nil {
			return nil, &httpError{http.StatusUnprocessableEntity, where + "." + err.Error()}
		}
	}
	return reqs, nil
}

func (s *server) predict(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req PredictionRequest
	if err := decodeObject(body, "body", requiredPredictionFields, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := req.Validate(); err != nil {
		s.fail(w, r, &httpError{http.StatusUnprocessableEntity, "body." + err.Error()})
		return
	}
	out, err := s.m.PredictBulk(r.Context(), []PredictionRequest{req})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out[0])
}

func (s *server) predictBulkStrict(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	reqs, err := s.decodeRequests(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.m.PredictBulk(r.Context(), reqs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, BulkPredictionResponse{
		Predictions: out, TotalRequests: len(reqs), SuccessfulPredictions: len(out),
		ProcessingTimeMs: float64(time.Since(start).Microseconds()) / 1000,
	})
}

// predictBulk answers per row: a row that is malformed or out of range gets a null prediction
// and an entry in errors, the others are predicted.
func (s *server) predictBulk(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows, err := decodeList(body, "requests", MaxBulkRequests)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	resp := BulkPredictionResponseWithErrors{Predictions: make([]*PredictionResponse, len(rows)), Errors: []BulkPredictionError{}, TotalRequests: len(rows)}
	var valid []PredictionRequest
	var idx []int
	for i, row := range rows {
		var req PredictionRequest
		where := "requests[" + strconv.Itoa(i) + "]"
		err := decodeObject(row, where, requiredPredictionFields, &req)
		if err == nil {
			if verr := req.Validate(); verr != nil {
				err = fmt.Errorf("%s.%w", where, verr)
			}
		}
		if err != nil {
			resp.Errors = append(resp.Errors, BulkPredictionError{Index: i, Error: err.Error(), Request: req})
			continue
		}
		valid = append(valid, req)
		idx = append(idx, i)
	}
	if len(valid) > 0 {
		out, err := s.m.PredictBulk(r.Context(), valid)
		if err != nil {
			for k, i := range idx {
				resp.Errors = append(resp.Errors, BulkPredictionError{Index: i, Error: "batch prediction error: " + err.Error(), Request: valid[k]})
			}
		} else {
			for k, i := range idx {
				resp.Predictions[i] = &out[k]
			}
			resp.SuccessfulPredictions = len(out)
		}
	}
	resp.FailedPredictions = len(rows) - resp.SuccessfulPredictions
	resp.ProcessingTimeMs = float64(time.Since(start).Microseconds()) / 1000
	writeJSON(w, http.StatusOK, resp)
}

func (s *server) addTrainingData(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows, err := decodeList(body, "entries", 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	entries := make([]TrainingEntry, len(rows))
	for i, row := range rows {
		where := "entries[" + strconv.Itoa(i) + "]"
		if err := decodeObject(row, where, requiredTrainingFields, &entries[i]); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if err := s.m.AddTrainingData(r.Context(), entries); err != nil {
		s.fail(w, r, &httpError{http.StatusUnprocessableEntity, err.Error()})
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"message": fmt.Sprintf("Accepted %d training samples.", len(entries))})
}

func (s *server) status(w http.ResponseWriter, _ *http.Request) {
	cfg := s.m.Config()
	st := s.m.Stats()
	ready := st.Trainings > 0
	writeJSON(w, http.StatusOK, ServerStatusResponse{
		IsReady: ready, ModelType: ModelTypeBayesianRidge, ObjectiveType: cfg.Objective, Quantile: cfg.Quantile,
		LastModelLoad: st.LastTrained, TrainingServerURL: s.opts.TrainingServerURL,
		ModelsExist: map[string]bool{"ttft_model": ready, "tpot_model": ready},
	})
}

// modelInfoResponse is upstream training_server.py's /model/download/info: the ModelInfo fields
// plus where the coefficients are.
type modelInfoResponse struct {
	ModelInfo
	AvailableEndpoints map[string]string `json:"available_endpoints"`
}

func (s *server) modelInfo(w http.ResponseWriter, _ *http.Request) {
	cfg := s.m.Config()
	ready := s.m.Ready()
	writeJSON(w, http.StatusOK, modelInfoResponse{
		ModelInfo: ModelInfo{ModelType: ModelTypeBayesianRidge, ObjectiveType: cfg.Objective, Quantile: cfg.Quantile,
			ModelStatus: map[string]bool{"ttft_model_ready": ready, "tpot_model_ready": ready,
				"ttft_coefficients_ready": ready, "tpot_coefficients_ready": ready}},
		AvailableEndpoints: map[string]string{"coefficients": "/metrics"},
	})
}

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.m.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Detail: "Models are not ready"})
		return
	}
	cfg := s.m.Config()
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "model_type": ModelTypeBayesianRidge,
		"objective_type": cfg.Objective, "quantile": cfg.Quantile})
}

// modelCollector renders the model on /metrics in upstream training_server.py's names:
// model_type{type}, objective_type{type}, model_quantile, ttft_intercept, ttft_coef{feature},
// tpot_intercept, tpot_coef{feature}, training_samples_count{model,queue_bucket,cache_bucket,
// prefix_bucket}; plus eppkit's predictor_ready and predictor_trainings_total. The coefficients
// are exactly the model's (see Model.Coefficients), so upstream's client may predict locally.
type modelCollector struct{ m *Model }

var (
	descModelType     = prometheus.NewDesc("model_type", "Model type in use (label type).", []string{"type"}, nil)
	descObjectiveType = prometheus.NewDesc("objective_type", "Objective in use (label type).", []string{"type"}, nil)
	descQuantile      = prometheus.NewDesc("model_quantile", "Predicted quantile (0,1).", nil, nil)
	descTTFTIntercept = prometheus.NewDesc("ttft_intercept", "TTFT model intercept in ms (quantile offset included).", nil, nil)
	descTTFTCoef      = prometheus.NewDesc("ttft_coef", "TTFT model coefficient per feature unit, ms.", []string{"feature"}, nil)
	descTPOTIntercept = prometheus.NewDesc("tpot_intercept", "TPOT model intercept in ms (quantile offset included).", nil, nil)
	descTPOTCoef      = prometheus.NewDesc("tpot_coef", "TPOT model coefficient per feature unit, ms.", []string{"feature"}, nil)
	descSamples       = prometheus.NewDesc("training_samples_count", "Stored training samples per bucket.", []string{"model", "queue_bucket", "cache_bucket", "prefix_bucket"}, nil)
	descReady         = prometheus.NewDesc("predictor_ready", "1 when a trained model (not the prior) answers.", nil, nil)
	descTrainings     = prometheus.NewDesc("predictor_trainings_total", "Successful model fits.", nil, nil)
)

func (c *modelCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descModelType, descObjectiveType, descQuantile, descTTFTIntercept,
		descTTFTCoef, descTPOTIntercept, descTPOTCoef, descSamples, descReady, descTrainings} {
		ch <- d
	}
}

func (c *modelCollector) Collect(ch chan<- prometheus.Metric) {
	cfg := c.m.Config()
	st, co := c.m.statsAndCoefficients()
	tt, tp := c.m.FeatureNames()
	g := prometheus.GaugeValue
	ch <- prometheus.MustNewConstMetric(descModelType, g, 1, ModelTypeBayesianRidge)
	ch <- prometheus.MustNewConstMetric(descObjectiveType, g, 1, cfg.Objective)
	ch <- prometheus.MustNewConstMetric(descQuantile, g, cfg.Quantile)
	ch <- prometheus.MustNewConstMetric(descTTFTIntercept, g, co.TTFTIntercept)
	for _, f := range tt {
		ch <- prometheus.MustNewConstMetric(descTTFTCoef, g, co.TTFTCoeffs[f], f)
	}
	ch <- prometheus.MustNewConstMetric(descTPOTIntercept, g, co.TPOTIntercept)
	for _, f := range tp {
		ch <- prometheus.MustNewConstMetric(descTPOTCoef, g, co.TPOTCoeffs[f], f)
	}
	for b := range numBuckets {
		q, k, p := b/(KVBuckets*PrefixBuckets), (b/PrefixBuckets)%KVBuckets, b%PrefixBuckets
		qs, ks, ps := strconv.Itoa(q), strconv.Itoa(k), strconv.Itoa(p)
		ch <- prometheus.MustNewConstMetric(descSamples, g, float64(st.TTFTBuckets[b]), "ttft", qs, ks, ps)
		ch <- prometheus.MustNewConstMetric(descSamples, g, float64(st.TPOTBuckets[b]), "tpot", qs, ks, ps)
	}
	ready := 0.0
	if st.Trainings > 0 {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, g, ready)
	ch <- prometheus.MustNewConstMetric(descTrainings, prometheus.CounterValue, float64(st.Trainings))
}
