package latency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/reference/predictor"
)

// Producer defaults.
const (
	// DefaultFlightTTL bounds how long a dispatched request is tracked without a
	// ResponseComplete (a lost stream): after it, the sweeper releases its counters (upstream
	// contextTTL, 5 min).
	DefaultFlightTTL = 5 * time.Minute
	// flightSweepInterval is how often the sweeper looks for such requests.
	flightSweepInterval = time.Minute
)

// ProducerParameters are the `parameters` of predicted-latency-producer. The JSON names of the
// upstream fields are GIE v1.5.0's (predictedlatency/plugin.go Config).
type ProducerParameters struct {
	// SLOBufferFactor multiplies the TPOT SLO before it is compared with the prediction
	// (default 1, > 0).
	SLOBufferFactor float64 `json:"sloBufferFactor"`
	// PredictInPrepareData (default true): false only collects training samples and never
	// predicts (every request is scored by the composite fallback).
	PredictInPrepareData bool `json:"predictInPrepareData"`
	// EndpointRoleLabel is the pod label whose value ("prefill", "decode") is sent as the
	// predictor's pod_type; "" sends none.
	EndpointRoleLabel string `json:"endpointRoleLabel,omitempty"`

	// StreamingMode, SamplingMean, MaxDecodeTokenSamplesForPrediction and ContextTTL are
	// upstream parameters that eppkit accepts, so upstream configs load, and ignores with a
	// warning: eppkit detects streaming per response, trains TPOT as the mean over the whole
	// response rather than sampled tokens, and releases abandoned requests after
	// DefaultFlightTTL.
	StreamingMode                      *bool           `json:"streamingMode,omitempty"`
	SamplingMean                       *float64        `json:"samplingMean,omitempty"`
	MaxDecodeTokenSamplesForPrediction *int            `json:"maxDecodeTokenSamplesForPrediction,omitempty"`
	ContextTTL                         json.RawMessage `json:"contextTTL,omitempty"`

	// PredictionServerURLs [eppkit] are the base URLs of upstream-compatible prediction
	// servers; when set (with TrainingServerURL) the producer uses the HTTP client instead of
	// the in-process model. Upstream reads them from PREDICTION_SERVER_URL.
	PredictionServerURLs []string `json:"predictionServerURLs,omitempty"`
	// TrainingServerURL [eppkit] is the training server's base URL (upstream
	// TRAINING_SERVER_URL); required with PredictionServerURLs.
	TrainingServerURL string `json:"trainingServerURL,omitempty"`

	// PerEndpointCalibration [eppkit] (default true) scales each endpoint's predictions by a
	// factor learnt from the ratios actual/predicted of its own last CalibrationWindow requests,
	// chosen so the calibrated prediction keeps the predictor's objective on that endpoint: with
	// the quantile objective (the default, q = InProcess.Quantile or 0.9) the factor is the
	// ratios' q-quantile, so about q of the endpoint's requests finish within the prediction;
	// with the mean objective it is their geometric mean. The predictor's features describe
	// load, not the endpoint, so a pool-wide model predicts the same latency for a fast and a
	// slow server under equal load; calibration is what lets a heterogeneous fleet route by speed
	// (SPEC §6 PredictedLatency). Upstream has no such step.
	PerEndpointCalibration bool `json:"perEndpointCalibration"`
	// InProcess [eppkit] tunes the in-process predictor (ignored with the HTTP client).
	InProcess InProcessParameters `json:"inProcess"`
}

// InProcessParameters tune the in-process predictor (reference/predictor.Config); zero values
// take the predictor's defaults.
type InProcessParameters struct {
	// Objective is "quantile" (default) or "mean".
	Objective string `json:"objective,omitempty"`
	// Quantile in (0,1), default 0.9.
	Quantile float64 `json:"quantile,omitempty"`
	// MinSamples each of TTFT and TPOT needs before the model is trained and ready (default 100).
	MinSamples int `json:"minSamples,omitempty"`
	// RetrainEvery retrains after this many new samples (default 200).
	RetrainEvery int `json:"retrainEvery,omitempty"`
	// RetrainIntervalMs retrains when this much time passed since the last fit (default 5000).
	RetrainIntervalMs int `json:"retrainIntervalMs,omitempty"`
}

// DefaultProducerParameters returns sloBufferFactor 1, predictInPrepareData true,
// perEndpointCalibration true, the in-process predictor with its defaults.
func DefaultProducerParameters() ProducerParameters {
	return ProducerParameters{SLOBufferFactor: 1, PredictInPrepareData: true, PerEndpointCalibration: true}
}

// calibrationQuantile is the quantile the per-endpoint calibration keeps: the predictor's (its
// Quantile, default predictor.DefaultQuantile), or 0 for the mean objective.
func calibrationQuantile(p InProcessParameters) float64 {
	switch {
	case p.Objective == predictor.ObjectiveMean:
		return 0
	case p.Quantile > 0:
		return p.Quantile
	}
	return predictor.DefaultQuantile
}

// CalibrationWindow is how many of an endpoint's newest requests its calibration learns from.
const CalibrationWindow = 20

// minCalibrationSamples is how many samples an endpoint needs before its ratio is applied.
const minCalibrationSamples = 3

// calibration is an endpoint's newest ln(actual/predicted) values, per target.
type calibration struct {
	ttft, tpot logRatios
}

// logRatios is a ring of the newest CalibrationWindow values of ln(actual/predicted).
type logRatios struct {
	v    [CalibrationWindow]float64
	n    int // values held, ≤ CalibrationWindow
	next int // where the next value goes
}

func (r *logRatios) add(actual, predicted float64) {
	if !(actual > 0) || !(predicted > 0) {
		return
	}
	r.v[r.next] = math.Log(actual / predicted)
	r.next = (r.next + 1) % CalibrationWindow
	r.n = min(r.n+1, CalibrationWindow)
}

// factor is the multiplier of the predictions: 1 below minCalibrationSamples; exp of the
// q-quantile of the held values (linear interpolation between order statistics) when q is in
// (0,1), exp of their mean when q is 0 (the mean objective).
func (r *logRatios) factor(q float64) float64 {
	if r.n < minCalibrationSamples {
		return 1
	}
	vs := make([]float64, r.n)
	copy(vs, r.v[:r.n])
	if q <= 0 {
		var s float64
		for _, x := range vs {
			s += x
		}
		return math.Exp(s / float64(len(vs)))
	}
	slices.Sort(vs)
	pos := q * float64(len(vs)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(vs)-1)
	return math.Exp(vs[lo] + (pos-float64(lo))*(vs[hi]-vs[lo]))
}

// Validate returns an error naming the first invalid field.
func (p ProducerParameters) Validate() error {
	switch {
	case !(p.SLOBufferFactor > 0):
		return fmt.Errorf("parameters.sloBufferFactor: must be > 0, got %v", p.SLOBufferFactor)
	case p.InProcess.Quantile != 0 && !(p.InProcess.Quantile > 0 && p.InProcess.Quantile < 1):
		return fmt.Errorf("parameters.inProcess.quantile: must be in (0,1), got %v", p.InProcess.Quantile)
	case p.InProcess.Objective != "" && p.InProcess.Objective != predictor.ObjectiveQuantile && p.InProcess.Objective != predictor.ObjectiveMean:
		return fmt.Errorf("parameters.inProcess.objective: must be %q or %q, got %q", predictor.ObjectiveQuantile, predictor.ObjectiveMean, p.InProcess.Objective)
	case p.InProcess.MinSamples < 0 || p.InProcess.MinSamples == 1:
		return fmt.Errorf("parameters.inProcess.minSamples: must be >= 2, got %d", p.InProcess.MinSamples)
	case p.InProcess.RetrainEvery < 0:
		return fmt.Errorf("parameters.inProcess.retrainEvery: must be >= 1, got %d", p.InProcess.RetrainEvery)
	case p.InProcess.RetrainIntervalMs < 0:
		return fmt.Errorf("parameters.inProcess.retrainIntervalMs: must be >= 1, got %d", p.InProcess.RetrainIntervalMs)
	case len(p.PredictionServerURLs) > 0 && p.TrainingServerURL == "":
		return errors.New("parameters.trainingServerURL: required when parameters.predictionServerURLs is set")
	case len(p.PredictionServerURLs) == 0 && p.TrainingServerURL != "":
		return errors.New("parameters.predictionServerURLs: required when parameters.trainingServerURL is set")
	}
	for i, u := range p.PredictionServerURLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("parameters.predictionServerURLs[%d]: %q is not an http(s) URL", i, u)
		}
	}
	if u := p.TrainingServerURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return fmt.Errorf("parameters.trainingServerURL: %q is not an http(s) URL", u)
	}
	return nil
}

// UsesHTTP reports whether the parameters select the HTTP predictor client.
func (p ProducerParameters) UsesHTTP() bool { return len(p.PredictionServerURLs) > 0 }

// PredictorFactory builds the predictor a producer uses from its parameters (in-process model or
// HTTP client, see ProducerParameters.UsesHTTP). h gives the clock, the logger and the context
// that stops the predictor's background work.
type PredictorFactory func(params ProducerParameters, h framework.Handle) (predictor.Predictor, error)

// ProducerStats are the producer's counters (for tests and logs).
type ProducerStats struct {
	// Predicted counts requests that got predictions; Unpredicted those scored without
	// (predictor not ready, erroring, or predictInPrepareData false); PredictErrors the failed
	// PredictBulk calls.
	Predicted, Unpredicted, PredictErrors int64
	// TrainingEntries counts entries handed to the predictor; TrainingErrors failed hand-overs.
	TrainingEntries, TrainingErrors int64
}

// requestState is what PrepareData keeps in plugin state for PreRequest.
type requestState struct {
	slo         SLO
	inputTokens int
	// features maps Endpoint.Key() to the feature vector predicted with (or that would have been).
	features map[string]predictor.PredictionRequest
	// predicted maps Endpoint.Key() to its prediction, nil when none was made.
	predicted map[string]predictor.PredictionResponse
}

// flight is one dispatched request, from PreRequest to ResponseComplete.
type flight struct {
	requestID  string
	endpoint   string // primary target key
	prefill    string // prefill target key, "" without one
	tpotSLO    float64
	hasTPOT    bool
	prompt     int64 // prompt tokens counted in flight on endpoint (and prefill)
	prefillOut bool  // the prompt tokens are still counted (no first token yet)
	dispatched time.Time
	firstToken time.Time
	streaming  bool
	tokens     tokenCounter
	decodeFeat predictor.PredictionRequest
	ttftFeat   predictor.PredictionRequest
	hasFeat    bool
	// ttftKey is the endpoint the TTFT is measured on (prefill when present); predTTFT and
	// predTPOT are the raw (uncalibrated) predictions made for ttftKey and endpoint, 0 when none.
	ttftKey            string
	predTTFT, predTPOT float64
}

// endpointLoad is what this EPP has in flight on one endpoint.
type endpointLoad struct {
	// requests maps request ID → its TPOT SLO (ms; 0 = none).
	requests     map[string]float64
	promptTokens int64
}

// Producer is predicted-latency-producer: a PrepareData plugin producing LatencyPredictionInfoKey
// (consuming prefix.PrefixCacheMatchInfoKey), a PreRequest plugin that records the dispatch,
// and ResponseHeader/ResponseBody/ResponseComplete plugins that measure TTFT and TPOT and hand
// them to the predictor as training data. No request fails because of the predictor: a
// predictor that is missing, not ready or erroring leaves the candidates without predictions,
// and the latency scorer falls back to its composite score.
type Producer struct {
	typedName framework.TypedName
	params    ProducerParameters
	pred      predictor.Predictor
	clock     clock.PassiveClock
	logger    *slog.Logger
	state     *framework.PluginState
	stateKey  string

	mu        sync.Mutex
	flights   map[string]*flight
	endpoints map[string]*endpointLoad
	calib     map[string]*calibration
	// calibQ is the quantile the calibration keeps (0: the mean objective); see
	// PerEndpointCalibration.
	calibQ float64
	known  func() []*framework.EndpointMetadata

	predicted, unpredicted, predictErrors atomic.Int64
	trainEntries, trainErrors             atomic.Int64
	failing                               atomic.Bool
}

var (
	_ framework.PrepareDataPlugin      = (*Producer)(nil)
	_ framework.DataConsumer           = (*Producer)(nil)
	_ framework.PreRequest             = (*Producer)(nil)
	_ framework.ResponseHeaderPlugin   = (*Producer)(nil)
	_ framework.ResponseBodyPlugin     = (*Producer)(nil)
	_ framework.ResponseCompletePlugin = (*Producer)(nil)
)

// DecodeProducerParameters decodes raw parameters strictly over the defaults and validates them.
func DecodeProducerParameters(raw json.RawMessage) (ProducerParameters, error) {
	p := DefaultProducerParameters()
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return p, err
	}
	return p, p.Validate()
}

// NewProducer builds a producer around pred (nil means no predictor: every request is scored
// by the fallback). h must be non-nil with a plugin state. When h.Context() is non-nil, a
// sweeper on h.Clock() releases requests tracked longer than DefaultFlightTTL until the context
// ends.
func NewProducer(name string, params ProducerParameters, pred predictor.Predictor, h framework.Handle) (*Producer, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if h == nil || h.PluginState() == nil {
		return nil, errors.New("predicted-latency-producer: a framework handle with a plugin state is required")
	}
	logger := h.Logger()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var clk clock.WithTicker = h.Clock()
	if clk == nil {
		clk = clock.RealClock{}
	}
	p := &Producer{
		typedName: typed(ProducerType, name),
		params:    params,
		pred:      pred,
		clock:     clk,
		logger:    logger,
		state:     h.PluginState(),
		flights:   map[string]*flight{},
		endpoints: map[string]*endpointLoad{},
		calib:     map[string]*calibration{},
		known:     h.Endpoints,
		calibQ:    calibrationQuantile(params.InProcess),
	}
	p.stateKey = ProducerType + "/" + p.typedName.Name
	for field, set := range map[string]bool{
		"streamingMode": params.StreamingMode != nil, "samplingMean": params.SamplingMean != nil,
		"maxDecodeTokenSamplesForPrediction": params.MaxDecodeTokenSamplesForPrediction != nil,
		"contextTTL":                         len(params.ContextTTL) > 0,
	} {
		if set {
			logger.Warn("upstream parameter accepted and ignored by eppkit", "field", "parameters."+field)
		}
	}
	if ctx := h.Context(); ctx != nil {
		go p.runSweeper(ctx, clk)
	}
	return p, nil
}

// TypedName returns the plugin's type and name.
func (p *Producer) TypedName() framework.TypedName { return p.typedName }

// Produces declares LatencyPredictionInfoKey as *LatencyPredictionInfo.
func (p *Producer) Produces() map[string]any {
	return map[string]any{LatencyPredictionInfoKey: (*LatencyPredictionInfo)(nil)}
}

// Consumes declares prefix.PrefixCacheMatchInfoKey: the prefix score is a predictor feature, so
// the prefix producer runs first (and is created with defaults when the config has none).
func (p *Producer) Consumes() map[string]any {
	return map[string]any{prefix.PrefixCacheMatchInfoKey: (*prefix.PrefixCacheMatchInfo)(nil)}
}

// Parameters returns the parameters after defaults.
func (p *Producer) Parameters() ProducerParameters { return p.params }

// Predictor returns the predictor in use (nil when none).
func (p *Producer) Predictor() predictor.Predictor { return p.pred }

// PredictorReady reports whether predictions come from a trained model (the predictor is
// present and Ready). latency-fallback-profile-handler reads it.
func (p *Producer) PredictorReady() bool { return p.pred != nil && p.pred.Ready() }

// Stats returns the producer's counters.
func (p *Producer) Stats() ProducerStats {
	return ProducerStats{Predicted: p.predicted.Load(), Unpredicted: p.unpredicted.Load(), PredictErrors: p.predictErrors.Load(),
		TrainingEntries: p.trainEntries.Load(), TrainingErrors: p.trainErrors.Load()}
}

// InputTokens estimates a request's prompt length in tokens from its hashed input
// (prefix.RequestInput, Input.EstimateTokens; SPEC §4.1): one token per id of a token-id prompt;
// for text one per CJK ideograph, kana or Hangul syllable plus one per CharactersPerToken other
// characters. 0 for a headers-only request or one without a prompt.
func InputTokens(req *framework.LLMRequest) int {
	if req == nil {
		return 0
	}
	in, err := prefix.RequestInput(req.Body)
	if err != nil {
		return 0
	}
	return in.EstimateTokens()
}

// PrepareRequestData parses the SLO headers (malformed → error wrapping ErrBadRequest, the
// request ends with 400), builds every candidate's feature vector (KV use, waiting, running,
// input tokens, prefix score, prompt tokens in flight), and — when predictInPrepareData is set
// and the predictor is Ready — predicts them in one PredictBulk call and puts a
// *LatencyPredictionInfo on every candidate. A predictor error is logged and counted and leaves
// the candidates without predictions; it is never returned.
func (p *Producer) PrepareRequestData(ctx context.Context, req *framework.LLMRequest, endpoints []*framework.Endpoint) error {
	if req == nil {
		return errors.New("predicted-latency-producer: nil request")
	}
	slo, err := ParseSLO(req)
	if err != nil {
		return err
	}
	st := &requestState{slo: slo, inputTokens: InputTokens(req), features: make(map[string]predictor.PredictionRequest, len(endpoints))}
	reqs := make([]predictor.PredictionRequest, 0, len(endpoints))
	eps := make([]*framework.Endpoint, 0, len(endpoints))
	p.mu.Lock()
	for _, ep := range endpoints {
		if ep == nil || ep.Metadata == nil {
			continue
		}
		f := p.features(ep, st.inputTokens)
		st.features[ep.Key()] = f
		reqs = append(reqs, f)
		eps = append(eps, ep)
	}
	p.mu.Unlock()

	if p.params.PredictInPrepareData && len(reqs) > 0 && p.PredictorReady() {
		preds, err := p.pred.PredictBulk(ctx, reqs)
		switch {
		case err == nil && len(preds) != len(reqs):
			err = fmt.Errorf("predictor returned %d predictions for %d requests", len(preds), len(reqs))
			fallthrough
		case err != nil:
			p.predictErrors.Add(1)
			if !p.failing.Swap(true) {
				p.logger.Warn("latency predictor failed; scoring without predictions until it answers again",
					"error", err)
			}
		default:
			if p.failing.Swap(false) {
				p.logger.Info("latency predictor answers again")
			}
			st.predicted = make(map[string]predictor.PredictionResponse, len(preds))
			p.mu.Lock()
			for i, ep := range eps {
				st.predicted[ep.Key()] = preds[i]
				ep.Put(LatencyPredictionInfoKey, p.info(ep.Key(), slo, preds[i]))
			}
			p.mu.Unlock()
		}
	}
	if st.predicted != nil {
		p.predicted.Add(1)
	} else {
		p.unpredicted.Add(1)
	}
	if err := ctx.Err(); err != nil {
		// The phase budget is over: do not publish state PreRequest would act on.
		return err
	}
	if req.RequestID != "" {
		p.state.Write(req.RequestID, p.stateKey, st)
	}
	return nil
}

// features builds an endpoint's feature vector. p.mu must be held.
func (p *Producer) features(ep *framework.Endpoint, inputTokens int) predictor.PredictionRequest {
	m := ep.Metrics
	if m == nil {
		m = &framework.Metrics{}
	}
	f := predictor.PredictionRequest{
		KVCachePercentage:  m.KVCacheUsage,
		InputTokenLength:   inputTokens,
		NumRequestWaiting:  m.WaitingQueueSize,
		NumRequestRunning:  m.RunningRequests,
		NumTokensGenerated: 1,
		PrefixCacheScore:   prefix.MatchScore(ep),
	}
	if l := p.endpoints[ep.Key()]; l != nil {
		f.PrefillTokensInFlight = l.promptTokens
	}
	if p.params.EndpointRoleLabel != "" && ep.Metadata.Labels != nil {
		f.PodType = ep.Metadata.Labels[p.params.EndpointRoleLabel]
	}
	return f
}

// info turns one prediction into the attribute. p.mu must be held.
func (p *Producer) info(key string, slo SLO, pred predictor.PredictionResponse) *LatencyPredictionInfo {
	if c := p.calib[key]; c != nil && p.params.PerEndpointCalibration {
		pred.TTFT *= c.ttft.factor(p.calibQ)
		pred.TPOT *= c.tpot.factor(p.calibQ)
	}
	budget := slo.TPOT * p.params.SLOBufferFactor
	l := p.endpoints[key]
	if l != nil && slo.HasTPOT {
		for _, running := range l.requests {
			if running > 0 {
				budget = min(budget, running*p.params.SLOBufferFactor)
			}
		}
	}
	ttftH, tpotH := Headroom(slo, pred.TTFT, pred.TPOT, budget)
	info := &LatencyPredictionInfo{TTFT: pred.TTFT, TPOT: pred.TPOT, TTFTHeadroom: ttftH, TPOTHeadroom: tpotH,
		TTFTValid: ttftH >= 0, TPOTValid: tpotH >= 0}
	if l != nil {
		info.DispatchedRequests = len(l.requests)
		info.PromptTokensInFlight = l.promptTokens
	}
	return info
}

// PreRequest records the dispatch: the primary profile's first target (and the "prefill"
// profile's, when present) gets the request and its prompt tokens in flight, and the request's
// timer starts. It reads and deletes the producer's plugin-state entry.
func (p *Producer) PreRequest(_ context.Context, req *framework.LLMRequest, result *framework.SchedulingResult) {
	if req == nil || req.RequestID == "" {
		return
	}
	v, ok := p.state.Read(req.RequestID, p.stateKey)
	p.state.DeleteKey(req.RequestID, p.stateKey)
	st, _ := v.(*requestState)
	primary := result.Primary()
	if !ok || st == nil || primary == nil || len(primary.TargetEndpoints) == 0 || primary.TargetEndpoints[0] == nil {
		return
	}
	f := &flight{requestID: req.RequestID, endpoint: primary.TargetEndpoints[0].Key(), tpotSLO: st.slo.TPOT,
		hasTPOT: st.slo.HasTPOT, prompt: int64(st.inputTokens), prefillOut: true, dispatched: p.clock.Now()}
	if feat, ok := st.features[f.endpoint]; ok {
		f.decodeFeat, f.ttftFeat, f.hasFeat = feat, feat, true
	}
	f.ttftKey = f.endpoint
	if pr := result.ProfileResults[prefix.PrefillProfileName]; pr != nil && result.PrimaryProfileName != prefix.PrefillProfileName &&
		len(pr.TargetEndpoints) > 0 && pr.TargetEndpoints[0] != nil {
		f.prefill = pr.TargetEndpoints[0].Key()
		if feat, ok := st.features[f.prefill]; ok {
			f.ttftFeat = feat
		}
		f.ttftKey = f.prefill
	}
	if pr, ok := st.predicted[f.ttftKey]; ok {
		f.predTTFT = pr.TTFT
	}
	if pr, ok := st.predicted[f.endpoint]; ok {
		f.predTPOT = pr.TPOT
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.flights[f.requestID]; old != nil {
		p.releaseLocked(old)
	}
	p.flights[f.requestID] = f
	p.load(f.endpoint).requests[f.requestID] = f.tpotSLO
	p.load(f.endpoint).promptTokens += f.prompt
	if f.prefill != "" && f.prefill != f.endpoint {
		p.load(f.prefill).promptTokens += f.prompt
	}
}

// load returns (creating) the endpoint's load. p.mu must be held.
func (p *Producer) load(key string) *endpointLoad {
	l := p.endpoints[key]
	if l == nil {
		l = &endpointLoad{requests: map[string]float64{}}
		p.endpoints[key] = l
	}
	return l
}

// finishPrefillLocked stops counting the flight's prompt tokens. p.mu must be held.
func (p *Producer) finishPrefillLocked(f *flight) {
	if !f.prefillOut {
		return
	}
	f.prefillOut = false
	for _, key := range []string{f.endpoint, f.prefill} {
		if key == "" || (key == f.prefill && f.prefill == f.endpoint) {
			continue
		}
		if l := p.endpoints[key]; l != nil {
			l.promptTokens = max(0, l.promptTokens-f.prompt)
			p.gcLocked(key)
		}
	}
}

// releaseLocked forgets a flight entirely. p.mu must be held.
func (p *Producer) releaseLocked(f *flight) {
	p.finishPrefillLocked(f)
	if l := p.endpoints[f.endpoint]; l != nil {
		delete(l.requests, f.requestID)
		p.gcLocked(f.endpoint)
	}
	delete(p.flights, f.requestID)
}

func (p *Producer) gcLocked(key string) {
	if l := p.endpoints[key]; l != nil && len(l.requests) == 0 && l.promptTokens == 0 {
		delete(p.endpoints, key)
	}
}

// ResponseHeader notes whether the response streams (content-type text/event-stream).
func (p *Producer) ResponseHeader(_ context.Context, req *framework.LLMRequest, resp *framework.Response) {
	if req == nil || resp == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.flights[req.RequestID]; f != nil {
		f.streaming = strings.Contains(strings.ToLower(resp.Headers["content-type"]), "text/event-stream")
	}
}

// ResponseBody counts streamed token events; the first one ends the prefill (its time is the
// TTFT, and the prompt tokens stop counting as in flight).
func (p *Producer) ResponseBody(_ context.Context, req *framework.LLMRequest, _ *framework.Response, chunk []byte) {
	if req == nil {
		return
	}
	now := p.clock.Now()
	p.mu.Lock()
	f := p.flights[req.RequestID]
	streaming := f != nil && f.streaming
	p.mu.Unlock()
	if !streaming {
		return
	}
	// The token counter belongs to this request, whose response hooks run one after another,
	// so chunks are parsed outside the producer's lock.
	if f.tokens.write(chunk) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f.firstToken.IsZero() {
		f.firstToken = now
		p.finishPrefillLocked(f)
	}
}

// ResponseComplete releases the request's counters and, when the response ended normally,
// hands the measured TTFT and TPOT to the predictor as training data (SPEC §4.2):
// TTFT = dispatch → first streamed token, or → end of response when it did not stream;
// TPOT = (end − first token)/(tokens − 1), tokens from the usage block or the token events,
// only when tokens > 1. An abandoned request (EndOfStream false) is released without training.
func (p *Producer) ResponseComplete(ctx context.Context, req *framework.LLMRequest, resp *framework.Response) {
	if req == nil {
		return
	}
	now := p.clock.Now()
	p.mu.Lock()
	f := p.flights[req.RequestID]
	if f != nil {
		p.releaseLocked(f)
	}
	p.mu.Unlock()
	if f == nil || resp == nil || !resp.EndOfStream || !f.hasFeat || p.pred == nil {
		return
	}
	entries := trainingEntries(f, resp.Usage, now)
	if len(entries) == 0 {
		return
	}
	p.calibrate(f, entries)
	p.trainEntries.Add(int64(len(entries)))
	if err := p.pred.AddTrainingData(context.WithoutCancel(ctx), entries); err != nil {
		p.trainErrors.Add(1)
		p.logger.Debug("latency predictor refused training data", "error", err)
	}
}

// trainingEntries turns a finished flight into training entries: one entry with both targets,
// or, when a prefill endpoint served the prompt, a TTFT entry on its features and a TPOT entry
// on the decode endpoint's. Zero targets mean "not measured".
func trainingEntries(f *flight, usage *framework.Usage, end time.Time) []predictor.TrainingEntry {
	var ttft, tpot float64
	tokens := f.tokens.tokens
	if n, ok := usage.Completion(); ok && n > 0 {
		tokens = n
	}
	if f.streaming && !f.firstToken.IsZero() {
		ttft = ms(f.firstToken.Sub(f.dispatched))
		if tokens > 1 {
			tpot = ms(end.Sub(f.firstToken)) / float64(tokens-1)
		}
	} else if !f.streaming {
		ttft = ms(end.Sub(f.dispatched))
	}
	if ttft <= 0 && tpot <= 0 {
		return nil
	}
	entry := func(feat predictor.PredictionRequest, ttft, tpot float64) predictor.TrainingEntry {
		return predictor.TrainingEntry{
			KVCachePercentage: feat.KVCachePercentage, InputTokenLength: feat.InputTokenLength,
			NumRequestWaiting: feat.NumRequestWaiting, NumRequestRunning: feat.NumRequestRunning,
			NumTokensGenerated: feat.NumTokensGenerated, ActualTTFT: ttft, ActualTPOT: tpot,
			PrefixCacheScore: feat.PrefixCacheScore, PodType: feat.PodType,
			PrefillTokensInFlight: feat.PrefillTokensInFlight, DecodeTokensInFlight: feat.DecodeTokensInFlight,
			Timestamp: end,
		}
	}
	if f.prefill != "" && f.prefill != f.endpoint {
		var out []predictor.TrainingEntry
		if ttft > 0 {
			out = append(out, entry(f.ttftFeat, ttft, 0))
		}
		if tpot > 0 {
			out = append(out, entry(f.decodeFeat, 0, tpot))
		}
		return out
	}
	return []predictor.TrainingEntry{entry(f.decodeFeat, ttft, tpot)}
}

// calibrate updates the per-endpoint ratios from a finished flight's measurements.
func (p *Producer) calibrate(f *flight, entries []predictor.TrainingEntry) {
	var ttft, tpot float64
	for _, e := range entries {
		ttft, tpot = max(ttft, e.ActualTTFT), max(tpot, e.ActualTPOT)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	get := func(key string) *calibration {
		c := p.calib[key]
		if c == nil {
			c = &calibration{}
			p.calib[key] = c
		}
		return c
	}
	if ttft > 0 && f.predTTFT > 0 {
		get(f.ttftKey).ttft.add(ttft, f.predTTFT)
	}
	if tpot > 0 && f.predTPOT > 0 {
		get(f.endpoint).tpot.add(tpot, f.predTPOT)
	}
}

// Calibration returns the factors applied to an endpoint's predicted TTFT and TPOT (1 when
// calibration is off or the endpoint has fewer than 3 samples; see PerEndpointCalibration).
func (p *Producer) Calibration(key string) (ttft, tpot float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calib[key]
	if c == nil || !p.params.PerEndpointCalibration {
		return 1, 1
	}
	return c.ttft.factor(p.calibQ), c.tpot.factor(p.calibQ)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// InFlight returns what this EPP has in flight on the endpoint: dispatched requests not yet
// complete and prompt tokens whose prefill has not finished.
func (p *Producer) InFlight(key string) (requests int, promptTokens int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.endpoints[key]; l != nil {
		return len(l.requests), l.promptTokens
	}
	return 0, 0
}

// SweepFlights releases every request dispatched more than ttl ago that never completed, and
// returns how many it released.
func (p *Producer) SweepFlights(ttl time.Duration) int {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, f := range p.flights {
		if now.Sub(f.dispatched) > ttl {
			p.releaseLocked(f)
			n++
		}
	}
	return n
}

// purgeDeparted forgets the calibration of endpoints no longer in the pool.
func (p *Producer) purgeDeparted() {
	if p.known == nil {
		return
	}
	keep := map[string]bool{}
	for _, md := range p.known() {
		if md != nil {
			keep[md.Key()] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.calib {
		if !keep[k] {
			delete(p.calib, k)
		}
	}
}

func (p *Producer) runSweeper(ctx context.Context, clk clock.WithTicker) {
	t := clk.NewTicker(flightSweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if n := p.SweepFlights(DefaultFlightTTL); n > 0 {
				p.logger.Warn("released requests that never completed", "count", n)
			}
			p.purgeDeparted()
		}
	}
}
