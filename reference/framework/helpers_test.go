package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
)

// Test plugins of the framework's unit tests. The real plugins live in reference/plugins, which
// imports this package; these are minimal stand-ins registered under the upstream type names the
// runtime's defaults use.

type base struct{ tn TypedName }

func (b base) TypedName() TypedName { return b.tn }

// fixedScorer returns fixed scores by endpoint key.
type fixedScorer struct {
	base
	scores map[string]float64
}

func (s *fixedScorer) Score(context.Context, *CycleState, *LLMRequest, []*Endpoint) map[string]float64 {
	return s.scores
}

// keepFilter keeps the endpoints whose keys it lists.
type keepFilter struct {
	base
	keep map[string]bool
}

func (f *keepFilter) Filter(_ context.Context, _ *CycleState, _ *LLMRequest, eps []*Endpoint) []*Endpoint {
	var out []*Endpoint
	for _, e := range eps {
		if f.keep[e.Key()] {
			out = append(out, e)
		}
	}
	return out
}

// maxPicker picks the highest score (ties: the earliest) and records what it saw.
type maxPicker struct {
	base
	mu   sync.Mutex
	seen [][]ScoredEndpoint
}

func (p *maxPicker) Pick(_ context.Context, _ *CycleState, scored []ScoredEndpoint) *ProfileRunResult {
	p.mu.Lock()
	p.seen = append(p.seen, scored)
	p.mu.Unlock()
	if len(scored) == 0 {
		return nil
	}
	best := 0
	for i, s := range scored {
		if s.Score > scored[best].Score {
			best = i
		}
	}
	return &ProfileRunResult{TargetEndpoints: []*Endpoint{scored[best].Endpoint}}
}

// singleHandler runs every profile once and makes the only (or "primary") one primary.
type singleHandler struct{ base }

func (h *singleHandler) Pick(_ context.Context, _ *CycleState, _ *LLMRequest, profiles map[string]*SchedulerProfile,
	results map[string]*ProfileRunResult) map[string]*SchedulerProfile {
	if len(results) > 0 {
		return nil
	}
	return profiles
}

func (h *singleHandler) ProcessResults(_ context.Context, _ *CycleState, _ *LLMRequest,
	results map[string]*ProfileRunResult) (*SchedulingResult, error) {
	if len(results) != 1 {
		return nil, fmt.Errorf("want exactly one profile result, got %d", len(results))
	}
	for name, r := range results {
		if r == nil {
			return nil, fmt.Errorf("profile %q found no endpoint", name)
		}
		return &SchedulingResult{ProfileResults: results, PrimaryProfileName: name}, nil
	}
	return nil, errors.New("unreachable")
}

// roundsHandler runs the profiles named in order, one per round; forever when loop is set.
type roundsHandler struct {
	base
	order []string
	loop  bool
	err   error
}

func (h *roundsHandler) Pick(_ context.Context, _ *CycleState, _ *LLMRequest, profiles map[string]*SchedulerProfile,
	results map[string]*ProfileRunResult) map[string]*SchedulerProfile {
	if h.loop {
		return map[string]*SchedulerProfile{h.order[0]: profiles[h.order[0]]}
	}
	for _, name := range h.order {
		if _, ran := results[name]; !ran {
			return map[string]*SchedulerProfile{name: profiles[name]}
		}
	}
	return nil
}

func (h *roundsHandler) ProcessResults(_ context.Context, _ *CycleState, _ *LLMRequest,
	results map[string]*ProfileRunResult) (*SchedulingResult, error) {
	if h.err != nil {
		return nil, h.err
	}
	if results[h.order[0]] == nil {
		return nil, errors.New("primary found nothing")
	}
	return &SchedulingResult{ProfileResults: results, PrimaryProfileName: h.order[0]}, nil
}

// recordingProducer is a PrepareData plugin that writes value under each produced key and
// can fail, block until cancelled, or panic.
type recordingProducer struct {
	base
	produces map[string]any
	consumes map[string]any
	value    any
	err      error
	block    bool
	panics   bool
	calls    *callLog
	late     chan struct{} // closed after a blocked plugin wrote its late value
}

func (p *recordingProducer) Produces() map[string]any { return p.produces }
func (p *recordingProducer) Consumes() map[string]any { return p.consumes }
func (p *recordingProducer) PrepareRequestData(ctx context.Context, _ *LLMRequest, eps []*Endpoint) error {
	if p.calls != nil {
		p.calls.add(p.tn.Name)
	}
	if p.panics {
		panic("boom")
	}
	if p.block {
		<-ctx.Done()
		for k := range p.produces {
			for _, e := range eps {
				e.Put(k, "late")
			}
		}
		close(p.late)
		return ctx.Err()
	}
	for k := range p.produces {
		for _, e := range eps {
			e.Put(k, p.value)
		}
	}
	return p.err
}

type callLog struct {
	mu    sync.Mutex
	names []string
}

func (c *callLog) add(n string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, n)
}

func (c *callLog) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.names...)
}

// testRegistry returns a registry with stand-ins for the default handler and picker, plus the
// given plugin instances registered under their types (factories return the instance when the
// name matches, so a spec can prepare instances with behaviour).
func testRegistry(t *testing.T, instances ...Plugin) *Registry {
	t.Helper()
	reg := NewRegistry()
	reg.MustRegister(DefaultProfileHandlerType, func(name string, _ json.RawMessage, _ Handle) (Plugin, error) {
		return &singleHandler{base{TypedName{DefaultProfileHandlerType, name}}}, nil
	})
	reg.MustRegister(DefaultPickerType, func(name string, _ json.RawMessage, _ Handle) (Plugin, error) {
		return &maxPicker{base: base{TypedName{DefaultPickerType, name}}}, nil
	})
	byType := map[string]map[string]Plugin{}
	for _, p := range instances {
		tn := p.TypedName()
		if byType[tn.Type] == nil {
			byType[tn.Type] = map[string]Plugin{}
		}
		byType[tn.Type][tn.Name] = p
	}
	types := make([]string, 0, len(byType))
	for ty := range byType {
		types = append(types, ty)
	}
	sort.Strings(types)
	for _, ty := range types {
		ps := byType[ty]
		reg.MustRegister(ty, func(name string, params json.RawMessage, _ Handle) (Plugin, error) {
			var strict struct{}
			if err := DecodeParameters(params, &strict); err != nil {
				return nil, err
			}
			p, ok := ps[name]
			if !ok {
				return nil, fmt.Errorf("test registry has no %s instance named %q", ty, name)
			}
			return p, nil
		})
	}
	return reg
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testEndpoints(n int) []*Endpoint {
	out := make([]*Endpoint, n)
	for i := range out {
		out[i] = NewEndpoint(&EndpointMetadata{Name: fmt.Sprintf("pod-%d", i), Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000}, nil)
	}
	return out
}

func cfgWith(plugins []PluginSpec, profiles ...ProfileSpec) *EndpointPickerConfig {
	return &EndpointPickerConfig{APIVersion: ConfigAPIVersion, Kind: ConfigKind, Plugins: plugins, SchedulingProfiles: profiles}
}
