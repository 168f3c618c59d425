// Package latencytest holds what the predictedlatency and profiles suites share: a scriptable
// in-process latency predictor, a registry of the reference plugins wired to it, and builders of
// runtimes, endpoints and requests.
package latencytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/filters"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/reference/plugins/pickers"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/reference/plugins/profiles"
	"github.com/eppkit/eppkit/reference/plugins/scorers"
	"github.com/eppkit/eppkit/reference/predictor"
)

// ErrScripted is what a Predictor in FailMode returns.
var ErrScripted = errors.New("scripted predictor failure")

// Predictor is a scriptable predictor.Predictor: it answers each request with its answer
// function, fails with ErrScripted while SetFail(true), blocks until its context ends while
// SetBlock(true), reports SetReady's value, and records every training entry. Safe for
// concurrent use.
type Predictor struct {
	mu      sync.Mutex
	ready   bool
	fail    bool
	block   bool
	answer  func(predictor.PredictionRequest) predictor.PredictionResponse
	entries []predictor.TrainingEntry
	calls   int
}

// NewPredictor returns a ready predictor answering with answer.
func NewPredictor(answer func(predictor.PredictionRequest) predictor.PredictionResponse) *Predictor {
	return &Predictor{ready: true, answer: answer}
}

// SetReady sets what Ready reports.
func (p *Predictor) SetReady(v bool) { p.mu.Lock(); p.ready = v; p.mu.Unlock() }

// SetFail makes PredictBulk and AddTrainingData fail with ErrScripted.
func (p *Predictor) SetFail(v bool) { p.mu.Lock(); p.fail = v; p.mu.Unlock() }

// SetBlock makes PredictBulk block until its context ends.
func (p *Predictor) SetBlock(v bool) { p.mu.Lock(); p.block = v; p.mu.Unlock() }

// SetAnswer replaces the answer function.
func (p *Predictor) SetAnswer(f func(predictor.PredictionRequest) predictor.PredictionResponse) {
	p.mu.Lock()
	p.answer = f
	p.mu.Unlock()
}

// Ready implements predictor.Predictor.
func (p *Predictor) Ready() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.ready }

// Calls returns how many PredictBulk calls were made.
func (p *Predictor) Calls() int { p.mu.Lock(); defer p.mu.Unlock(); return p.calls }

// Entries returns the training entries received so far.
func (p *Predictor) Entries() []predictor.TrainingEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]predictor.TrainingEntry(nil), p.entries...)
}

// PredictBulk implements predictor.Predictor.
func (p *Predictor) PredictBulk(ctx context.Context, reqs []predictor.PredictionRequest) ([]predictor.PredictionResponse, error) {
	p.mu.Lock()
	p.calls++
	fail, block, answer := p.fail, p.block, p.answer
	p.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if fail {
		return nil, ErrScripted
	}
	out := make([]predictor.PredictionResponse, len(reqs))
	for i, r := range reqs {
		if answer != nil {
			out[i] = answer(r)
		}
	}
	return out, nil
}

// AddTrainingData implements predictor.Predictor.
func (p *Predictor) AddTrainingData(_ context.Context, entries []predictor.TrainingEntry) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail {
		return ErrScripted
	}
	p.entries = append(p.entries, entries...)
	return nil
}

// Registry returns a registry with every reference plugin type the latency suites use, whose
// predicted-latency producers all use pred (nil: no predictor).
func Registry(pred predictor.Predictor) *framework.Registry {
	reg := framework.NewRegistry()
	for _, r := range []func(*framework.Registry) error{prefix.Register, scorers.Register, filters.Register, pickers.Register, profiles.Register,
		func(r *framework.Registry) error {
			return latency.Register(r, func(latency.ProducerParameters, framework.Handle) (predictor.Predictor, error) {
				if pred == nil {
					return nil, nil
				}
				return pred, nil
			})
		}} {
		if err := r(reg); err != nil {
			panic(err)
		}
	}
	return reg
}

// Runtime builds a runtime from a YAML config with Registry(pred), the given clock (nil = real)
// and seed. The context stops background work.
func Runtime(ctx context.Context, yaml string, pred predictor.Predictor, clk clock.WithTicker, seed int64) (*framework.Runtime, error) {
	cfg, err := framework.LoadConfig([]byte(yaml))
	if err != nil {
		return nil, err
	}
	return framework.NewRuntime(cfg, Registry(pred), framework.RuntimeOptions{Context: ctx, Clock: clk, Seed: seed,
		Logger: slog.New(slog.DiscardHandler)})
}

// ConfigHead starts every test config.
const ConfigHead = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"

// Endpoint returns a candidate 10.0.0.<i>:8000 with the given metrics (UpdateTime unset).
func Endpoint(i int, m framework.Metrics) *framework.Endpoint {
	md := &framework.EndpointMetadata{Namespace: "default", Name: fmt.Sprintf("pod-%d", i), PodName: fmt.Sprintf("pod-%d", i),
		Address: fmt.Sprintf("10.0.0.%d", i), Port: 8000}
	mm := m
	return framework.NewEndpoint(md, &mm)
}

// Endpoints returns n fresh candidates with zero metrics (10.0.0.1 .. 10.0.0.n).
func Endpoints(n int) []*framework.Endpoint {
	out := make([]*framework.Endpoint, n)
	for i := range out {
		out[i] = Endpoint(i+1, framework.Metrics{})
	}
	return out
}

// Fresh returns new request-scoped copies of eps (same metadata and metrics, no attributes).
func Fresh(eps []*framework.Endpoint) []*framework.Endpoint {
	out := make([]*framework.Endpoint, len(eps))
	for i, e := range eps {
		m := *e.Metrics
		out[i] = framework.NewEndpoint(e.Metadata, &m)
	}
	return out
}

// Request returns a completions request with id, prompt and headers (lower-case keys).
func Request(id, prompt string, headers map[string]string) *framework.LLMRequest {
	h := map[string]string{"x-request-id": id}
	for k, v := range headers {
		h[k] = v
	}
	return &framework.LLMRequest{RequestID: id, TargetModel: "m", Headers: h,
		Body: &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: prompt}}}
}

// ByLoad answers from the request's features only — a predictor cannot see addresses — so
// specs vary the endpoints' metrics and map them
// here: TTFT = base + perWaiting × waiting, TPOT = tpot + perRunning × running.
func ByLoad(base, perWaiting, tpot, perRunning float64) func(predictor.PredictionRequest) predictor.PredictionResponse {
	return func(r predictor.PredictionRequest) predictor.PredictionResponse {
		return predictor.PredictionResponse{TTFT: base + perWaiting*float64(r.NumRequestWaiting),
			TPOT: tpot + perRunning*float64(r.NumRequestRunning)}
	}
}
