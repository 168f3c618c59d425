package equivalence_test

// Suite-local plugin types. They are registered only in the registries this suite builds, never
// by plugins.RegisterAll.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/legacyprefix"
)

const (
	// recorderType wraps a scorer built from the registry and records every Score call.
	recorderType = "eqsuite-score-recorder"
	// subsetFilterType drops a pseudo-random subset of the candidates, the same subset for the
	// same request in every pipeline.
	subsetFilterType = "eqsuite-random-subset-filter"
	// offByOneType is the negative control: the legacy scorer with every non-zero match length
	// counted one block short.
	offByOneType = "eqsuite-legacy-off-by-one"
	// candidatesOnlyType is a second negative control: the legacy scorer whose match walk stops
	// at the first block no *candidate* holds, instead of no endpoint in the whole index.
	candidatesOnlyType = "eqsuite-legacy-candidates-only"
	// prefillDecodeHandlerType runs a "prefill" and a "decode" profile and makes decode primary,
	// so PreRequest indexes two targets (P/D disaggregation, SPEC §2.2).
	prefillDecodeHandlerType = "eqsuite-prefill-decode-handler"
)

// scoreCall is one Score call as a recorder saw it.
type scoreCall struct {
	// Candidates are the keys of the endpoints the scorer was given, in order.
	Candidates []string
	// Scores is the map the scorer returned.
	Scores map[string]float64
}

// scoreSink collects the Score calls of one pipeline for the current request.
type scoreSink struct {
	mu    sync.Mutex
	calls []scoreCall
}

func (s *scoreSink) add(c scoreCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

// take returns the calls recorded since the last take and clears them.
func (s *scoreSink) take() []scoreCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.calls
	s.calls = nil
	return out
}

type recorderParams struct {
	// Inner is the plugin type to wrap; it must be a scorer.
	Inner string `json:"inner"`
	// InnerParameters are handed to the inner plugin's factory as they are.
	InnerParameters json.RawMessage `json:"innerParameters,omitempty"`
}

// recordingScorer forwards everything to its inner scorer and records what Score returned. It
// forwards Consumes, ProducerParameters and PreRequest so the runtime builds the same DAG and
// runs the same extension points as with the bare scorer.
type recordingScorer struct {
	typed framework.TypedName
	inner framework.Scorer
	sink  *scoreSink
}

var (
	_ framework.Scorer                    = (*recordingScorer)(nil)
	_ framework.PreRequest                = (*recordingScorer)(nil)
	_ framework.ProducerParametersCarrier = (*recordingScorer)(nil)
)

func recorderFactory(reg *framework.Registry, sink *scoreSink) framework.FactoryFunc {
	return func(name string, raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
		var p recorderParams
		if err := framework.DecodeParameters(raw, &p); err != nil {
			return nil, err
		}
		f, ok := reg.Factory(p.Inner)
		if !ok {
			return nil, fmt.Errorf("parameters.inner: unknown plugin type %q", p.Inner)
		}
		inner, err := f(name, p.InnerParameters, h)
		if err != nil {
			return nil, fmt.Errorf("parameters.innerParameters: %w", err)
		}
		sc, ok := inner.(framework.Scorer)
		if !ok {
			return nil, fmt.Errorf("parameters.inner: %q is not a scorer", p.Inner)
		}
		return &recordingScorer{typed: framework.TypedName{Type: recorderType, Name: name}, inner: sc, sink: sink}, nil
	}
}

func (r *recordingScorer) TypedName() framework.TypedName { return r.typed }

func (r *recordingScorer) Score(ctx context.Context, cycle *framework.CycleState, req *framework.LLMRequest, eps []*framework.Endpoint) map[string]float64 {
	out := r.inner.Score(ctx, cycle, req, eps)
	keys := make([]string, len(eps))
	for i, ep := range eps {
		keys[i] = ep.Key()
	}
	r.sink.add(scoreCall{Candidates: keys, Scores: maps.Clone(out)})
	return out
}

func (r *recordingScorer) Consumes() map[string]any {
	if c, ok := r.inner.(framework.DataConsumer); ok {
		return c.Consumes()
	}
	return map[string]any{}
}

func (r *recordingScorer) ProducerParameters(key string) json.RawMessage {
	if c, ok := r.inner.(framework.ProducerParametersCarrier); ok {
		return c.ProducerParameters(key)
	}
	return nil
}

func (r *recordingScorer) PreRequest(ctx context.Context, req *framework.LLMRequest, res *framework.SchedulingResult) {
	if p, ok := r.inner.(framework.PreRequest); ok {
		p.PreRequest(ctx, req, res)
	}
}

// Inner returns the wrapped scorer.
func (r *recordingScorer) Inner() framework.Scorer { return r.inner }

// subsetFilter keeps each candidate with probability keep, decided by xxhash(seed ‖ request ID
// ‖ endpoint key), so both pipelines drop the same endpoints for the same request. When it would
// drop every candidate it keeps the first one.
type subsetFilter struct {
	typed framework.TypedName
	seed  uint64
	keep  float64
}

type subsetParams struct {
	Seed int64   `json:"seed"`
	Keep float64 `json:"keep"`
}

func subsetFilterFactory(name string, raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	p := subsetParams{Keep: 0.5}
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return nil, err
	}
	if p.Keep <= 0 || p.Keep > 1 {
		return nil, fmt.Errorf("parameters.keep: must be in (0,1], got %v", p.Keep)
	}
	return &subsetFilter{typed: framework.TypedName{Type: subsetFilterType, Name: name}, seed: uint64(p.Seed), keep: p.Keep}, nil
}

func (f *subsetFilter) TypedName() framework.TypedName { return f.typed }

func (f *subsetFilter) Filter(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest, eps []*framework.Endpoint) []*framework.Endpoint {
	var out []*framework.Endpoint
	var seed [8]byte
	binary.LittleEndian.PutUint64(seed[:], f.seed)
	for _, ep := range eps {
		d := xxhash.New()
		_, _ = d.Write(seed[:])
		_, _ = d.WriteString(req.RequestID)
		_, _ = d.WriteString(ep.Key())
		if float64(d.Sum64()>>11)/float64(1<<53) < f.keep {
			out = append(out, ep)
		}
	}
	if len(out) == 0 && len(eps) > 0 {
		out = append(out, eps[0])
	}
	return out
}

// legacyIndex is what the suite needs from a legacy-scorer plugin (the real one or a mutant).
type legacyIndex interface {
	IndexContents() map[string][]uint64
	RemoveEndpoint(key string)
	PurgeDeparted() []string
}

// offByOneLegacy is the real legacy scorer with a deliberate bug: a non-zero match length m is
// scored as (m-1)/total. Indexing (PreRequest) is the real one.
type offByOneLegacy struct {
	*legacyprefix.Plugin
	typed framework.TypedName
}

func offByOneFactory(name string, raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	p, err := legacyprefix.Factory(name, raw, h)
	if err != nil {
		return nil, err
	}
	return &offByOneLegacy{Plugin: p.(*legacyprefix.Plugin), typed: framework.TypedName{Type: offByOneType, Name: name}}, nil
}

func (m *offByOneLegacy) TypedName() framework.TypedName { return m.typed }

func (m *offByOneLegacy) Score(ctx context.Context, cycle *framework.CycleState, req *framework.LLMRequest, eps []*framework.Endpoint) map[string]float64 {
	scores := m.Plugin.Score(ctx, cycle, req, eps)
	v, _ := cycle.Read(m.Plugin.StateKey())
	st := v.(*legacyprefix.State)
	for _, ep := range eps {
		if n := st.Matches[ep.Key()]; n > 0 {
			scores[ep.Key()] = float64(n-1) / float64(len(st.Hashes))
		}
	}
	return scores
}

// candidatesOnlyLegacy is the real legacy scorer with the candidate-set bug: the match walk
// stops at the first block that none of the candidates holds, so an endpoint that a filter
// removed no longer bridges blocks that the candidates lost to eviction.
type candidatesOnlyLegacy struct {
	*legacyprefix.Plugin
	typed framework.TypedName
}

func candidatesOnlyFactory(name string, raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	p, err := legacyprefix.Factory(name, raw, h)
	if err != nil {
		return nil, err
	}
	return &candidatesOnlyLegacy{Plugin: p.(*legacyprefix.Plugin), typed: framework.TypedName{Type: candidatesOnlyType, Name: name}}, nil
}

func (m *candidatesOnlyLegacy) TypedName() framework.TypedName { return m.typed }

func (m *candidatesOnlyLegacy) Score(ctx context.Context, cycle *framework.CycleState, req *framework.LLMRequest, eps []*framework.Endpoint) map[string]float64 {
	scores := m.Plugin.Score(ctx, cycle, req, eps)
	v, _ := cycle.Read(m.Plugin.StateKey())
	st := v.(*legacyprefix.State)
	if len(st.Hashes) == 0 {
		return scores
	}
	cands := map[string]bool{}
	for _, ep := range eps {
		cands[ep.Key()] = true
	}
	counts := map[string]int{}
	for _, h := range st.Hashes {
		held := slices.DeleteFunc(m.Plugin.Holders(h), func(k string) bool { return !cands[k] })
		if len(held) == 0 {
			break
		}
		for _, k := range held {
			counts[k]++
		}
	}
	for _, ep := range eps {
		scores[ep.Key()] = float64(counts[ep.Key()]) / float64(len(st.Hashes))
	}
	return scores
}

// prefillDecodeHandler runs every profile in the first round and returns "decode" as the primary
// profile; the "prefill" result rides along, so prefix PreRequest plugins index its target too.
type prefillDecodeHandler struct{ typed framework.TypedName }

func prefillDecodeHandlerFactory(name string, raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	if err := framework.DecodeParameters(raw, &struct{}{}); err != nil {
		return nil, err
	}
	return &prefillDecodeHandler{typed: framework.TypedName{Type: prefillDecodeHandlerType, Name: name}}, nil
}

func (h *prefillDecodeHandler) TypedName() framework.TypedName { return h.typed }

func (h *prefillDecodeHandler) Pick(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest,
	profiles map[string]*framework.SchedulerProfile, results map[string]*framework.ProfileRunResult) map[string]*framework.SchedulerProfile {
	if len(results) > 0 {
		return nil
	}
	return profiles
}

func (h *prefillDecodeHandler) ProcessResults(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest,
	results map[string]*framework.ProfileRunResult) (*framework.SchedulingResult, error) {
	if results["decode"] == nil {
		return nil, fmt.Errorf("profile decode found no endpoint")
	}
	return &framework.SchedulingResult{ProfileResults: results, PrimaryProfileName: "decode"}, nil
}
