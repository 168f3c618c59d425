package predictor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/internal/predictorapi"
)

// Bucket grid of the training samples (upstream training_server.py): 5 queue buckets (waiting
// 0, 1–2, 3–5, 6–10, 11+), 20 KV buckets (5 % steps), 4 prefix buckets (25 % steps).
const (
	QueueBuckets  = 5
	KVBuckets     = 20
	PrefixBuckets = 4
	numBuckets    = QueueBuckets * KVBuckets * PrefixBuckets
)

// Defaults of Config.
const (
	DefaultQuantile        = predictorapi.DefaultQuantile
	DefaultMaxPerBucket    = 500 // upstream LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET
	DefaultMinSamples      = 100
	DefaultRetrainInterval = 5 * time.Second
	DefaultRetrainEvery    = 200
	DefaultPriorTTFTms     = 100
	DefaultPriorTPOTms     = 20
)

// Quantile methods of Config.QuantileMethod.
const (
	QuantileAdditive = "additive"
	QuantileRelative = "relative"
)

// Config configures a Model. The zero value of every field means its default.
type Config struct {
	// Objective is ObjectiveQuantile (default) or ObjectiveMean.
	Objective string
	// Quantile is the predicted quantile in (0,1) when Objective is quantile; default 0.9.
	Quantile float64
	// QuantileMethod is how the quantile is put on top of the posterior mean ŷ: QuantileRelative
	// (default; ŷ times the q-quantile of y/ŷ over the training samples, for errors that grow
	// with the latency) or QuantileAdditive (ŷ + the q-quantile of the residuals y − ŷ). The
	// default is chosen on the fake-fleet traces (docs/predictor.md).
	QuantileMethod string
	// Features is the feature set; default FeaturesFull.
	Features FeatureSet
	// MaxPerBucket bounds each of the 400 sample buckets per target; the newest sample replaces
	// the oldest. Default 500.
	MaxPerBucket int
	// MinSamples is how many samples each target needs before the model is trained and Ready;
	// default 100 (minimum 2).
	MinSamples int
	// RetrainInterval: a retrain runs when this much time has passed since the last one and new
	// samples arrived; default 5 s.
	RetrainInterval time.Duration
	// RetrainEvery: a retrain runs once this many new samples arrived; default 200.
	RetrainEvery int
	// PriorTTFTms and PriorTPOTms are served (ms) until the model is trained; defaults 100, 20.
	PriorTTFTms, PriorTPOTms float64
	// Clock drives retraining and predicted_at; default the real clock.
	Clock clock.PassiveClock
}

func (c *Config) setDefaults() error {
	if c.Objective == "" {
		c.Objective = ObjectiveQuantile
	}
	if c.Objective != ObjectiveQuantile && c.Objective != ObjectiveMean {
		return fmt.Errorf("objective: want %q or %q, got %q", ObjectiveQuantile, ObjectiveMean, c.Objective)
	}
	if c.Quantile == 0 {
		c.Quantile = DefaultQuantile
	}
	if !(c.Quantile > 0 && c.Quantile < 1) {
		return fmt.Errorf("quantile: must be in (0,1), got %v", c.Quantile)
	}
	if c.QuantileMethod == "" {
		c.QuantileMethod = QuantileRelative
	}
	if c.QuantileMethod != QuantileAdditive && c.QuantileMethod != QuantileRelative {
		return fmt.Errorf("quantileMethod: want %q or %q, got %q", QuantileAdditive, QuantileRelative, c.QuantileMethod)
	}
	if c.Features == "" {
		c.Features = FeaturesFull
	}
	if _, err := c.Features.spec(); err != nil {
		return fmt.Errorf("features: %w", err)
	}
	if c.MaxPerBucket == 0 {
		c.MaxPerBucket = DefaultMaxPerBucket
	}
	if c.MaxPerBucket < 1 {
		return fmt.Errorf("maxPerBucket: must be ≥ 1, got %d", c.MaxPerBucket)
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultMinSamples
	}
	if c.MinSamples < 2 {
		return fmt.Errorf("minSamples: must be ≥ 2, got %d", c.MinSamples)
	}
	if c.RetrainInterval == 0 {
		c.RetrainInterval = DefaultRetrainInterval
	}
	if c.RetrainInterval < 0 {
		return fmt.Errorf("retrainInterval: must be > 0, got %v", c.RetrainInterval)
	}
	if c.RetrainEvery == 0 {
		c.RetrainEvery = DefaultRetrainEvery
	}
	if c.RetrainEvery < 1 {
		return fmt.Errorf("retrainEvery: must be ≥ 1, got %d", c.RetrainEvery)
	}
	if c.PriorTTFTms == 0 {
		c.PriorTTFTms = DefaultPriorTTFTms
	}
	if c.PriorTPOTms == 0 {
		c.PriorTPOTms = DefaultPriorTPOTms
	}
	if !finite(c.PriorTTFTms) || c.PriorTTFTms < 0 || !finite(c.PriorTPOTms) || c.PriorTPOTms < 0 {
		return fmt.Errorf("priorTTFTms/priorTPOTms: must be finite and ≥ 0, got %v/%v", c.PriorTTFTms, c.PriorTPOTms)
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return nil
}

// sample is one observation of one target.
type sample struct {
	req PredictionRequest
	y   float64
}

// ring is a bounded bucket: the newest sample replaces the oldest.
type ring struct {
	buf  []sample
	next int
}

func (r *ring) push(s sample, max int) {
	if len(r.buf) < max {
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % max
}

// target is the sample store and fitted model of one of TTFT or TPOT.
type target struct {
	names   []string
	buckets [numBuckets]ring
	count   int
}

// trainedModel is an immutable snapshot the predict path reads without locks. A prediction is
// scale·(posterior mean) + off: for the mean objective scale 1, off 0; for the quantile objective
// with QuantileAdditive scale 1 and off the q-quantile of the training residuals y − ŷ, with
// QuantileRelative off 0 and scale the q-quantile of y/ŷ. Either way it stays linear.
type trainedModel struct {
	ttft, tpot           *linearFit
	ttftOff, tpotOff     float64
	ttftScale, tpotScale float64
	ttftN, tpotN         int
	trainedAt            time.Time
}

// Model is the in-process online predictor (SPEC §4.2): Bayesian ridge regressions for TTFT and
// TPOT over engineered features, trained from stratified sample buckets, predicting the mean or a
// quantile (mean + the training residuals' quantile; the result is still linear, so its
// coefficients are published honestly as bayesian_ridge). Until each target has MinSamples
// samples it serves the prior and Ready() is false. Safe for concurrent use.
type Model struct {
	cfg  Config
	spec featureSpec

	mu         sync.Mutex
	ttft, tpot target
	sinceFit   int
	lastFit    time.Time
	training   bool
	trainDone  chan struct{} // closed when the running retrain ends
	snap       *trainedModel
	lastErr    error
	trainCount int
}

// NewModel returns an untrained Model; it errors on an invalid Config, naming the field.
func NewModel(cfg Config) (*Model, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	spec, _ := cfg.Features.spec()
	m := &Model{cfg: cfg, spec: spec}
	m.ttft.names = spec.ttft
	m.tpot.names = spec.tpot
	m.lastFit = cfg.Clock.Now()
	return m, nil
}

// Config returns the effective configuration (defaults filled in).
func (m *Model) Config() Config { return m.cfg }

func clamp01(f float64) float64 { return math.Max(0, math.Min(1, f)) }

func bucketIndex(r *PredictionRequest) int {
	var q int
	switch w := r.NumRequestWaiting; {
	case w <= 0:
		q = 0
	case w <= 2:
		q = 1
	case w <= 5:
		q = 2
	case w <= 10:
		q = 3
	default:
		q = 4
	}
	c := min(int(clamp01(r.KVCachePercentage)*KVBuckets), KVBuckets-1)
	p := min(int(clamp01(r.PrefixCacheScore)*PrefixBuckets), PrefixBuckets-1)
	return (q*KVBuckets+c)*PrefixBuckets + p
}

// AddTrainingData validates every entry first (an invalid entry refuses the whole batch, with an
// error naming its index and field) and stores each measured target (ActualTTFT > 0 trains TTFT,
// ActualTPOT > 0 trains TPOT). It may start a background retrain and never waits for one.
func (m *Model) AddTrainingData(_ context.Context, entries []TrainingEntry) error {
	for i := range entries {
		if err := entries[i].Validate(); err != nil {
			return fmt.Errorf("entries[%d].%w", i, err)
		}
	}
	m.mu.Lock()
	for i := range entries {
		e := &entries[i]
		req := e.Request()
		b := bucketIndex(&req)
		if e.ActualTTFT > 0 {
			m.ttft.buckets[b].push(sample{req: req, y: e.ActualTTFT}, m.cfg.MaxPerBucket)
			m.ttft.count++
		}
		if e.ActualTPOT > 0 {
			m.tpot.buckets[b].push(sample{req: req, y: e.ActualTPOT}, m.cfg.MaxPerBucket)
			m.tpot.count++
		}
	}
	m.sinceFit += len(entries)
	m.maybeRetrainLocked()
	m.mu.Unlock()
	return nil
}

// maybeRetrainLocked starts a background retrain when due (m.mu held).
func (m *Model) maybeRetrainLocked() {
	if m.training || m.sinceFit == 0 {
		return
	}
	if m.stored(&m.ttft) < m.cfg.MinSamples || m.stored(&m.tpot) < m.cfg.MinSamples {
		return
	}
	due := m.snap == nil || m.sinceFit >= m.cfg.RetrainEvery || m.cfg.Clock.Since(m.lastFit) >= m.cfg.RetrainInterval
	if !due {
		return
	}
	m.startTrainingLocked()
	go func() { _ = m.retrain() }()
}

func (m *Model) stored(t *target) int {
	n := 0
	for i := range t.buckets {
		n += len(t.buckets[i].buf)
	}
	return n
}

// Retrain fits both targets now from the stored samples, synchronously. It returns an error
// when a target has fewer than MinSamples samples or the fit fails; the previous model (or the
// prior) keeps serving then.
func (m *Model) Retrain() error {
	m.mu.Lock()
	m.waitLocked()
	m.startTrainingLocked()
	m.mu.Unlock()
	return m.retrain()
}

// Wait blocks until no background retrain is running.
func (m *Model) Wait() {
	m.mu.Lock()
	m.waitLocked()
	m.mu.Unlock()
}

// waitLocked waits (releasing m.mu meanwhile) until no retrain runs; m.mu is held on return.
func (m *Model) waitLocked() {
	for m.training {
		ch := m.trainDone
		m.mu.Unlock()
		<-ch
		m.mu.Lock()
	}
}

func (m *Model) startTrainingLocked() {
	m.training = true
	m.trainDone = make(chan struct{})
}

// retrain requires m.training set by the caller; it clears it.
func (m *Model) retrain() error {
	m.mu.Lock()
	ttftS := m.collect(&m.ttft)
	tpotS := m.collect(&m.tpot)
	m.sinceFit = 0
	m.lastFit = m.cfg.Clock.Now()
	m.mu.Unlock()

	snap, err := m.fitBoth(ttftS, tpotS)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.training = false
	close(m.trainDone)
	m.lastErr = err
	if err != nil {
		return err
	}
	m.snap = snap
	m.trainCount++
	return nil
}

func (m *Model) collect(t *target) []sample {
	out := make([]sample, 0, m.stored(t))
	for i := range t.buckets {
		out = append(out, t.buckets[i].buf...)
	}
	return out
}

func (m *Model) fitBoth(ttftS, tpotS []sample) (*trainedModel, error) {
	if len(ttftS) < m.cfg.MinSamples || len(tpotS) < m.cfg.MinSamples {
		return nil, fmt.Errorf("%w: %d TTFT and %d TPOT samples, need %d each", ErrNotReady, len(ttftS), len(tpotS), m.cfg.MinSamples)
	}
	ttft, ttftScale, ttftOff, err := m.fitOne(m.spec.ttft, ttftS)
	if err != nil {
		return nil, fmt.Errorf("ttft: %w", err)
	}
	tpot, tpotScale, tpotOff, err := m.fitOne(m.spec.tpot, tpotS)
	if err != nil {
		return nil, fmt.Errorf("tpot: %w", err)
	}
	return &trainedModel{ttft: ttft, tpot: tpot, ttftOff: ttftOff, tpotOff: tpotOff, ttftScale: ttftScale, tpotScale: tpotScale,
		ttftN: len(ttftS), tpotN: len(tpotS), trainedAt: m.cfg.Clock.Now()}, nil
}

func (m *Model) fitOne(names []string, ss []sample) (fit *linearFit, scale, off float64, err error) {
	st := newSuffStats(len(names))
	x := make([]float64, len(names))
	for i := range ss {
		fillFeatures(x, names, &ss[i].req)
		st.add(x, ss[i].y)
	}
	f, err := st.fit()
	if err != nil {
		return nil, 0, 0, err
	}
	if m.cfg.Objective == ObjectiveMean {
		return f, 1, 0, nil
	}
	res := make([]float64, 0, len(ss))
	for i := range ss {
		fillFeatures(x, names, &ss[i].req)
		mu, _ := f.predict(x)
		if m.cfg.QuantileMethod == QuantileRelative {
			if mu > 0 {
				res = append(res, ss[i].y/mu)
			}
			continue
		}
		res = append(res, ss[i].y-mu)
	}
	if m.cfg.QuantileMethod == QuantileRelative {
		if len(res) == 0 {
			return f, 1, 0, nil
		}
		return f, quantileOf(res, m.cfg.Quantile), 0, nil
	}
	return f, 1, quantileOf(res, m.cfg.Quantile), nil
}

// quantileOf returns the q-quantile of xs (linear interpolation between order statistics); it
// sorts xs in place.
func quantileOf(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	pos := q * float64(len(xs)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(xs)-1)
	fr := pos - float64(lo)
	return xs[lo]*(1-fr) + xs[hi]*fr
}

// Ready reports whether a trained model (not the prior) answers.
func (m *Model) Ready() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snap != nil
}

// PredictBulk predicts every request (validated first; an invalid one fails the whole call with
// an error naming its index and field). Before training it returns the prior. It may start a due
// interval retrain in the background.
func (m *Model) PredictBulk(_ context.Context, reqs []PredictionRequest) ([]PredictionResponse, error) {
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, fmt.Errorf("requests[%d].%w", i, err)
		}
	}
	m.mu.Lock()
	snap := m.snap
	m.maybeRetrainLocked()
	m.mu.Unlock()
	now := m.cfg.Clock.Now()
	out := make([]PredictionResponse, len(reqs))
	xt := make([]float64, len(m.spec.ttft))
	xp := make([]float64, len(m.spec.tpot))
	for i := range reqs {
		r := &out[i]
		r.PredictedAt = now
		r.ModelType = ModelTypeBayesianRidge
		r.ObjectiveType = m.cfg.Objective
		r.Quantile = m.cfg.Quantile
		if snap == nil {
			r.TTFT, r.TPOT = m.cfg.PriorTTFTms, m.cfg.PriorTPOTms
			r.TTFTPredictionBounds = [2]float64{r.TTFT, r.TTFT}
			r.TPOTPredictionBounds = [2]float64{r.TPOT, r.TPOT}
			continue
		}
		t := snap.trainedAt
		r.LastModelLoad = &t
		fillFeatures(xt, m.spec.ttft, &reqs[i])
		fillFeatures(xp, m.spec.tpot, &reqs[i])
		mt, st := snap.ttft.predict(xt)
		mp, sp := snap.tpot.predict(xp)
		r.TTFT = math.Max(0, snap.ttftScale*mt+snap.ttftOff)
		r.TPOT = math.Max(0, snap.tpotScale*mp+snap.tpotOff)
		r.TTFTUncertainty, r.TPOTUncertainty = st, sp
		r.TTFTPredictionBounds = [2]float64{math.Max(0, mt-2*st), math.Max(0, mt+2*st)}
		r.TPOTPredictionBounds = [2]float64{math.Max(0, mp-2*sp), math.Max(0, mp+2*sp)}
	}
	return out, nil
}

// Coefficients returns the published linear form of the current predictions: intercept (the
// residual quantile folded in for the quantile objective) and per-feature coefficients keyed by
// the upstream feature names. Before training it is the prior: intercepts = prior, coefficients
// 0, which reproduces the prior exactly. Predictions are max(0, ·) of this form.
func (m *Model) Coefficients() ModelCoefficients {
	m.mu.Lock()
	snap := m.snap
	m.mu.Unlock()
	return m.coefficientsOf(snap)
}

func (m *Model) coefficientsOf(snap *trainedModel) ModelCoefficients {
	c := ModelCoefficients{TTFTCoeffs: map[string]float64{}, TPOTCoeffs: map[string]float64{}}
	if snap == nil {
		c.TTFTIntercept, c.TPOTIntercept = m.cfg.PriorTTFTms, m.cfg.PriorTPOTms
		for _, n := range m.spec.ttft {
			c.TTFTCoeffs[n] = 0
		}
		for _, n := range m.spec.tpot {
			c.TPOTCoeffs[n] = 0
		}
		return c
	}
	c.TTFTIntercept = snap.ttftScale*snap.ttft.Intercept + snap.ttftOff
	c.TPOTIntercept = snap.tpotScale*snap.tpot.Intercept + snap.tpotOff
	for i, n := range m.spec.ttft {
		c.TTFTCoeffs[n] = snap.ttftScale * snap.ttft.Coef[i]
	}
	for i, n := range m.spec.tpot {
		c.TPOTCoeffs[n] = snap.tpotScale * snap.tpot.Coef[i]
	}
	return c
}

// statsAndCoefficients returns Stats and Coefficients of the same model snapshot.
func (m *Model) statsAndCoefficients() (Stats, ModelCoefficients) {
	m.mu.Lock()
	st := m.statsLocked()
	snap := m.snap
	m.mu.Unlock()
	return st, m.coefficientsOf(snap)
}

// FeatureNames returns the ordered TTFT and TPOT feature names of the model's feature set.
func (m *Model) FeatureNames() (ttft, tpot []string) {
	return append([]string(nil), m.spec.ttft...), append([]string(nil), m.spec.tpot...)
}

// Stats is a snapshot of the model's training state.
type Stats struct {
	// TTFTSamples and TPOTSamples are the samples stored now (bounded by the buckets);
	// TTFTSeen and TPOTSeen all ever added.
	TTFTSamples, TPOTSamples int
	TTFTSeen, TPOTSeen       int
	// Trainings is the number of successful fits; LastTrained is nil before the first.
	Trainings   int
	LastTrained *time.Time
	// LastError is the last fit's error ("" when it succeeded).
	LastError string
	// TTFTBuckets and TPOTBuckets count stored samples per bucket index
	// (queue·KVBuckets + kv)·PrefixBuckets + prefix.
	TTFTBuckets, TPOTBuckets [numBuckets]int
}

// Stats returns the model's training state.
func (m *Model) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statsLocked()
}

func (m *Model) statsLocked() Stats {
	s := Stats{TTFTSamples: m.stored(&m.ttft), TPOTSamples: m.stored(&m.tpot),
		TTFTSeen: m.ttft.count, TPOTSeen: m.tpot.count, Trainings: m.trainCount}
	if m.snap != nil {
		t := m.snap.trainedAt
		s.LastTrained = &t
	}
	if m.lastErr != nil && !errors.Is(m.lastErr, ErrNotReady) {
		s.LastError = m.lastErr.Error()
	}
	for i := range numBuckets {
		s.TTFTBuckets[i] = len(m.ttft.buckets[i].buf)
		s.TPOTBuckets[i] = len(m.tpot.buckets[i].buf)
	}
	return s
}

var _ Predictor = (*Model)(nil)
