package dag_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"sync"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/framework"
)

// Test plugins. Each is one instance prepared by the spec; the registry's factory for its type
// hands out the prepared instance by name, after decoding the parameters strictly.

// calls records the order in which PrepareData plugins were entered.
type calls struct {
	mu    sync.Mutex
	names []string
}

func (c *calls) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, name)
}

func (c *calls) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.names...)
}

// node is a PrepareData plugin with declared produced and consumed keys. When it runs it records
// its call, then (by its options) fails, waits for a barrier, or blocks until cancelled and writes
// late; otherwise it writes, under each produced key of type string, "<name>(<inputs>)" where
// inputs are the string values it read under its consumed keys, so a spec can see data flow.
type node struct {
	tn       framework.TypedName
	produces map[string]any
	consumes map[string]any
	log      *calls

	err error
	// barrier: the plugin waits for it to close (or for ctx) before writing.
	barrier <-chan struct{}
	started func()
	// block: wait for ctx to end, then write "late" and report ctx.Err() on lateDone.
	block    bool
	lateDone chan error
}

func (n *node) TypedName() framework.TypedName { return n.tn }
func (n *node) Produces() map[string]any       { return n.produces }
func (n *node) Consumes() map[string]any       { return n.consumes }

func (n *node) PrepareRequestData(ctx context.Context, _ *framework.LLMRequest, eps []*framework.Endpoint) error {
	if n.log != nil {
		n.log.add(n.tn.Name)
	}
	if n.started != nil {
		n.started()
	}
	if n.block {
		<-ctx.Done()
		n.write(eps, func(*framework.Endpoint) string { return "late" })
		n.lateDone <- ctx.Err()
		return ctx.Err()
	}
	if n.barrier != nil {
		select {
		case <-n.barrier:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if n.err != nil {
		return n.err
	}
	n.write(eps, func(e *framework.Endpoint) string {
		keys := make([]string, 0, len(n.consumes))
		for k := range n.consumes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		in := ""
		for _, k := range keys {
			if v, ok := framework.AttributeAs[string](e, k); ok {
				in += v
			}
		}
		return fmt.Sprintf("%s(%s)", n.tn.Name, in)
	})
	return nil
}

func (n *node) write(eps []*framework.Endpoint, value func(*framework.Endpoint) string) {
	for k, zero := range n.produces {
		if _, isString := zero.(string); !isString {
			continue
		}
		for _, e := range eps {
			e.Put(k, value(e))
		}
	}
}

// newNode returns a PrepareData plugin of type "node" producing and consuming string keys.
func newNode(name string, produces, consumes []string, log *calls) *node {
	n := &node{tn: framework.TypedName{Type: "node", Name: name}, produces: map[string]any{}, consumes: map[string]any{}, log: log}
	for _, k := range produces {
		n.produces[k] = ""
	}
	for _, k := range consumes {
		n.consumes[k] = ""
	}
	return n
}

// pinnedNode is a node that declares a fixed PrepareData layer.
type pinnedNode struct {
	*node
	layer int
}

func (p *pinnedNode) PrepareDataLayer() int { return p.layer }

// keyScorer is a scorer that consumes keys: it scores 1 for endpoints holding every key it
// consumes, else 0, and records the attribute values it saw.
type keyScorer struct {
	tn       framework.TypedName
	consumes map[string]any
	params   json.RawMessage

	mu   sync.Mutex
	seen []map[string]any
}

func (s *keyScorer) TypedName() framework.TypedName { return s.tn }
func (s *keyScorer) Consumes() map[string]any       { return s.consumes }
func (s *keyScorer) Score(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest,
	eps []*framework.Endpoint) map[string]float64 {
	out := map[string]float64{}
	for _, e := range eps {
		seen := map[string]any{}
		score := 1.0
		for k := range s.consumes {
			v, ok := e.Get(k)
			if !ok {
				score = 0
				continue
			}
			seen[k] = v
		}
		s.mu.Lock()
		s.seen = append(s.seen, seen)
		s.mu.Unlock()
		out[e.Key()] = score
	}
	return out
}

func (s *keyScorer) lastSeen() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.seen...)
}

// carrierScorer is a keyScorer that carries producer parameters (old monolith configs).
type carrierScorer struct{ *keyScorer }

func (c *carrierScorer) ProducerParameters(string) json.RawMessage { return c.params }

// producingFilter is a scheduling-phase data producer.
type producingFilter struct {
	tn       framework.TypedName
	produces map[string]any
}

func (f *producingFilter) TypedName() framework.TypedName { return f.tn }
func (f *producingFilter) Produces() map[string]any       { return f.produces }
func (f *producingFilter) Filter(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest,
	eps []*framework.Endpoint) []*framework.Endpoint {
	return eps
}

// topPicker picks the highest total score (ties: the first) and counts its calls.
type topPicker struct {
	tn    framework.TypedName
	mu    sync.Mutex
	calls int
}

func (p *topPicker) TypedName() framework.TypedName { return p.tn }
func (p *topPicker) Pick(_ context.Context, _ *framework.CycleState, scored []framework.ScoredEndpoint) *framework.ProfileRunResult {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	best := 0
	for i, s := range scored {
		if s.Score > scored[best].Score {
			best = i
		}
	}
	return &framework.ProfileRunResult{TargetEndpoints: []*framework.Endpoint{scored[best].Endpoint}}
}

func (p *topPicker) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// oneProfile is a stand-in single-profile-handler: one round, the only profile is primary.
type oneProfile struct{ tn framework.TypedName }

func (h *oneProfile) TypedName() framework.TypedName { return h.tn }
func (h *oneProfile) Pick(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest,
	profiles map[string]*framework.SchedulerProfile, results map[string]*framework.ProfileRunResult) map[string]*framework.SchedulerProfile {
	if len(results) > 0 {
		return nil
	}
	return profiles
}
func (h *oneProfile) ProcessResults(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest,
	results map[string]*framework.ProfileRunResult) (*framework.SchedulingResult, error) {
	for name, r := range results {
		if r == nil {
			return nil, fmt.Errorf("profile %q found no endpoint", name)
		}
		return &framework.SchedulingResult{ProfileResults: results, PrimaryProfileName: name}, nil
	}
	return nil, errors.New("no profile ran")
}

// env is one spec's world: a fresh registry, the config's plugin list, a log buffer, and the
// picker every profile falls back to.
type env struct {
	reg       *framework.Registry
	instances map[string]map[string]framework.Plugin // type → name → instance
	typeOrder []string
	specs     []framework.PluginSpec
	logs      *gbytes.Buffer
	picker    *topPicker
	// defaultParams records the parameters each auto-created default producer got.
	defaultParams map[string]json.RawMessage
}

func newEnv() *env {
	e := &env{
		reg:           framework.NewRegistry(),
		instances:     map[string]map[string]framework.Plugin{},
		logs:          gbytes.NewBuffer(),
		picker:        &topPicker{tn: framework.TypedName{Type: framework.DefaultPickerType, Name: framework.DefaultPickerType}},
		defaultParams: map[string]json.RawMessage{},
	}
	e.reg.MustRegister(framework.DefaultProfileHandlerType, func(name string, _ json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
		return &oneProfile{tn: framework.TypedName{Type: framework.DefaultProfileHandlerType, Name: name}}, nil
	})
	e.reg.MustRegister(framework.DefaultPickerType, func(string, json.RawMessage, framework.Handle) (framework.Plugin, error) {
		return e.picker, nil
	})
	return e
}

// add lists plugins in the config (in the given order) with their instances for the factories.
func (e *env) add(ps ...framework.Plugin) *env {
	for _, p := range ps {
		tn := p.TypedName()
		if e.instances[tn.Type] == nil {
			e.instances[tn.Type] = map[string]framework.Plugin{}
			e.typeOrder = append(e.typeOrder, tn.Type)
		}
		e.instances[tn.Type][tn.Name] = p
		e.specs = append(e.specs, framework.PluginSpec{Name: tn.Name, Type: tn.Type})
	}
	return e
}

// registerTypes registers one factory per plugin type, in typeOrder.
func (e *env) registerTypes() {
	for _, typ := range e.typeOrder {
		byName := e.instances[typ]
		gomega.Expect(e.reg.Register(typ, func(name string, params json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
			var none struct{}
			if err := framework.DecodeParameters(params, &none); err != nil {
				return nil, err
			}
			p, ok := byName[name]
			if !ok {
				return nil, fmt.Errorf("no %s instance named %q", typ, name)
			}
			return p, nil
		})).To(gomega.Succeed())
	}
}

// defaultProducer registers pluginType as the default producer of key; the factory builds a
// fresh node producing key (and consuming the given keys) and records its parameters.
func (e *env) defaultProducer(key, pluginType string, consumes []string, log *calls) {
	e.reg.MustRegister(pluginType, func(name string, params json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
		e.defaultParams[name] = params
		n := newNode(name, []string{key}, consumes, log)
		n.tn.Type = pluginType
		return n, nil
	})
	e.reg.RegisterDefaultProducer(key, pluginType)
}

func (e *env) config() *framework.EndpointPickerConfig {
	return &framework.EndpointPickerConfig{
		APIVersion: framework.ConfigAPIVersion,
		Kind:       framework.ConfigKind,
		Plugins:    append([]framework.PluginSpec(nil), e.specs...),
	}
}

// build registers the types and builds the runtime; clk nil means the real clock.
func (e *env) build(cfg *framework.EndpointPickerConfig, clk clock.WithTicker) (*framework.Runtime, error) {
	e.registerTypes()
	return framework.NewRuntime(cfg, e.reg, framework.RuntimeOptions{
		Clock:  clk,
		Seed:   1,
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
}

// mustBuild builds with the env's own config and fails the spec on error.
func (e *env) mustBuild() *framework.Runtime {
	r, err := e.build(e.config(), nil)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return r
}

// buildErr builds with the env's own config and returns the error text ("" on success).
func (e *env) buildErr() string {
	_, err := e.build(e.config(), nil)
	if err == nil {
		return ""
	}
	return err.Error()
}

// names returns the instance names (nil for none).
func names(tns []framework.TypedName) []string {
	var out []string
	for _, tn := range tns {
		out = append(out, tn.Name)
	}
	return out
}

// attr returns an endpoint's attribute, nil when absent.
func attr(e *framework.Endpoint, key string) any {
	v, _ := e.Get(key)
	return v
}

func layerNames(r *framework.Runtime) [][]string {
	var out [][]string
	for _, layer := range r.PrepareDataLayers() {
		out = append(out, names(layer))
	}
	return out
}

// dependsOn returns node name → names of the producers it depends on, from Runtime.DAG.
func dependsOn(r *framework.Runtime) map[string][]string {
	out := map[string][]string{}
	for _, n := range r.DAG() {
		out[n.Plugin.Name] = names(n.DependsOn)
	}
	return out
}

func endpoints(n int) []*framework.Endpoint {
	out := make([]*framework.Endpoint, n)
	for i := range out {
		out[i] = framework.NewEndpoint(&framework.EndpointMetadata{
			Name: fmt.Sprintf("pod-%d", i), Address: fmt.Sprintf("10.9.0.%d", i+1), Port: 8000,
		}, nil)
	}
	return out
}

func request() *framework.LLMRequest {
	return &framework.LLMRequest{RequestID: fmt.Sprintf("req-%d", ginkgo.GinkgoParallelProcess()), TargetModel: "m"}
}

// typeName prints a Go type as the DAG's error messages do.
func typeName(v any) string { return reflect.TypeOf(v).String() }
