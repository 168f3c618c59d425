package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

type infoA struct{ N int }
type infoB struct{ S string }

// consumerScorer is a scorer that consumes data keys (a DAG node that is never executed).
type consumerScorer struct {
	base
	consumes map[string]any
	params   json.RawMessage
}

func (c *consumerScorer) Consumes() map[string]any { return c.consumes }
func (c *consumerScorer) Score(context.Context, *CycleState, *LLMRequest, []*Endpoint) map[string]float64 {
	return nil
}

// carrierScorer also carries producer parameters.
type carrierScorer struct{ consumerScorer }

func (c *carrierScorer) ProducerParameters(string) json.RawMessage { return c.params }

// pinned is a PrepareData plugin pinned to a layer.
type pinned struct {
	recordingProducer
	layer int
}

func (p *pinned) PrepareDataLayer() int { return p.layer }

// producingScorer is a scheduling-phase producer.
type producingScorer struct {
	consumerScorer
	produces map[string]any
}

func (p *producingScorer) Produces() map[string]any { return p.produces }

func prod(name string, produces, consumes map[string]any) *recordingProducer {
	return &recordingProducer{base: base{TypedName{"prod", name}}, produces: produces, consumes: consumes, value: name}
}

func specsOf(ps ...Plugin) []PluginSpec {
	out := make([]PluginSpec, len(ps))
	for i, p := range ps {
		out[i] = PluginSpec{Name: p.TypedName().Name, Type: p.TypedName().Type}
	}
	return out
}

func TestDataGraphOrder(t *testing.T) {
	a := map[string]any{"a": infoA{}}
	b := map[string]any{"b": infoA{}}
	c := map[string]any{"c": infoA{}}
	tests := []struct {
		name       string
		plugins    []Plugin
		wantLayers [][]string
	}{
		{
			name:       "chain listed backwards",
			plugins:    []Plugin{prod("z3", nil, b), prod("z2", b, a), prod("z1", a, nil)},
			wantLayers: [][]string{{"z1"}, {"z2"}, {"z3"}},
		},
		{
			name: "independent plugins sort by name",
			plugins: []Plugin{prod("m", map[string]any{"m": 0}, nil), prod("b", map[string]any{"b": 0}, nil),
				prod("x", map[string]any{"x": 0}, nil)},
			wantLayers: [][]string{{"b", "m", "x"}},
		},
		{
			name: "diamond and a longest path",
			plugins: []Plugin{
				prod("sink", nil, map[string]any{"b": infoA{}, "c": infoA{}, "a": infoA{}}),
				prod("left", b, a), prod("right", c, a), prod("root", a, nil),
			},
			wantLayers: [][]string{{"root"}, {"left", "right"}, {"sink"}},
		},
		{
			name: "a key with two producers: the consumer waits for both",
			plugins: []Plugin{
				prod("cons", nil, a), prod("p1", a, nil), prod("p2", a, b), prod("p0", b, nil),
			},
			wantLayers: [][]string{{"p0", "p1"}, {"p2"}, {"cons"}},
		},
		{
			name:       "a plugin consuming its own key needs no edge to itself",
			plugins:    []Plugin{prod("self", a, a)},
			wantLayers: [][]string{{"self"}},
		},
		{
			name:       "a pinned plugin moves to a later layer and its consumers follow",
			plugins:    []Plugin{&pinned{recordingProducer: *prod("late", a, nil), layer: 2}, prod("cons", nil, a), prod("free", b, nil)},
			wantLayers: [][]string{{"free"}, {"late"}, {"cons"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRuntime(cfgWith(specsOf(tc.plugins...)), testRegistry(t, tc.plugins...), RuntimeOptions{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			var got [][]string
			for _, layer := range r.PrepareDataLayers() {
				var names []string
				for _, tn := range layer {
					names = append(names, tn.Name)
				}
				got = append(got, names)
			}
			if diff := cmp.Diff(tc.wantLayers, got); diff != "" {
				t.Fatalf("layers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDataGraphErrors(t *testing.T) {
	a := map[string]any{"a": infoA{}}
	tests := []struct {
		name    string
		plugins []Plugin
		reg     func(*Registry)
		wantErr string
	}{
		{
			name:    "two-node cycle",
			plugins: []Plugin{prod("y", map[string]any{"y": 0}, map[string]any{"x": 0}), prod("x", map[string]any{"x": 0}, map[string]any{"y": 0})},
			wantErr: "prepareData DAG: dependency cycle x/prod -> y/prod -> x/prod (each plugin consumes a data key the next one produces)",
		},
		{
			name: "cycle behind a consumer",
			plugins: []Plugin{prod("a", nil, map[string]any{"m": 0}), prod("m", map[string]any{"m": 0}, map[string]any{"n": 0}),
				prod("n", map[string]any{"n": 0}, map[string]any{"m": 0})},
			wantErr: "prepareData DAG: dependency cycle m/prod -> n/prod -> m/prod (each plugin consumes a data key the next one produces)",
		},
		{
			name:    "type mismatch on the second shared key",
			plugins: []Plugin{prod("p", map[string]any{"a": infoA{}, "b": infoA{}}, nil), prod("c", nil, map[string]any{"a": infoA{}, "b": infoB{}})},
			wantErr: `prepareData DAG: data key "b": producer p/prod produces framework.infoA but consumer c/prod consumes framework.infoB`,
		},
		{
			name:    "pointer vs value",
			plugins: []Plugin{prod("p", map[string]any{"a": &infoA{}}, nil), prod("c", nil, map[string]any{"a": infoA{}})},
			wantErr: `prepareData DAG: data key "a": producer p/prod produces *framework.infoA but consumer c/prod consumes framework.infoA`,
		},
		{
			name:    "nil zero value",
			plugins: []Plugin{prod("p", map[string]any{"a": nil}, nil), prod("c", nil, map[string]any{"a": infoA{}})},
			wantErr: `prepareData DAG: plugin p/prod declares data key "a" in Produces with a nil value; declare a typed zero value`,
		},
		{
			name:    "missing producer without default",
			plugins: []Plugin{&consumerScorer{base: base{TypedName{"cs", "scorer"}}, consumes: a}},
			wantErr: `prepareData DAG: plugin scorer/cs consumes data key "a", which no plugin produces, and no default producer is registered for it`,
		},
		{
			name:    "pinned layer not after its producer",
			plugins: []Plugin{prod("p", a, nil), &pinned{recordingProducer: *prod("c", nil, a), layer: 0}},
			wantErr: `prepareData DAG: layer violation: producer p/prod runs in layer 0, not earlier than its consumer c/prod (fixed layer 0), data keys ["a"]`,
		},
		{
			name:    "negative pinned layer",
			plugins: []Plugin{&pinned{recordingProducer: *prod("c", a, nil), layer: -1}},
			wantErr: `prepareData DAG: plugin c/prod declares PrepareDataLayer -1; layers start at 0`,
		},
		{
			name: "scheduling-phase producer consumed in PrepareData",
			plugins: []Plugin{&producingScorer{consumerScorer: consumerScorer{base: base{TypedName{"ps", "sp"}}}, produces: a},
				prod("c", nil, a)},
			wantErr: `prepareData DAG: layer violation: producer sp/ps runs in phase Scheduling, after its consumer c/prod (phase PrepareData), data keys ["a"]`,
		},
		{
			name:    "carrier disagrees with a configured producer",
			plugins: []Plugin{prod("p", a, nil), &carrierScorer{consumerScorer{base: base{TypedName{"cs", "old"}}, consumes: a, params: json.RawMessage(`{"blockSize":64}`)}}},
			wantErr: `prepareData DAG: plugin old/cs carries producer parameters for data key "a" that disagree with configured producer p/prod (plugins[0]) on field "blockSize": 64 vs <unset>; set them on the producer only`,
		},
		{
			name: "two carriers disagree",
			plugins: []Plugin{
				&carrierScorer{consumerScorer{base: base{TypedName{"cs", "one"}}, consumes: a, params: json.RawMessage(`{"blockSize":64}`)}},
				&carrierScorer{consumerScorer{base: base{TypedName{"cs", "two"}}, consumes: a, params: json.RawMessage(`{"blockSize":32}`)}},
			},
			reg: func(r *Registry) {
				r.MustRegister("dflt", func(name string, _ json.RawMessage, _ Handle) (Plugin, error) {
					return &recordingProducer{base: base{TypedName{"dflt", name}}, produces: map[string]any{"a": infoA{}}}, nil
				})
				r.RegisterDefaultProducer("a", "dflt")
			},
			wantErr: `prepareData DAG: plugins one/cs and two/cs carry different producer parameters for data key "a": field "blockSize" is 64 and 32`,
		},
		{
			name:    "default producer that does not produce the key",
			plugins: []Plugin{&consumerScorer{base: base{TypedName{"cs", "scorer"}}, consumes: a}},
			reg: func(r *Registry) {
				r.MustRegister("wrong", func(name string, _ json.RawMessage, _ Handle) (Plugin, error) {
					return &recordingProducer{base: base{TypedName{"wrong", name}}, produces: map[string]any{"other": 0}}, nil
				})
				r.RegisterDefaultProducer("a", "wrong")
			},
			wantErr: `prepareData DAG: default producer wrong/wrong does not produce data key "a"`,
		},
		{
			name:    "default producer type not registered",
			plugins: []Plugin{&consumerScorer{base: base{TypedName{"cs", "scorer"}}, consumes: a}},
			reg:     func(r *Registry) { r.RegisterDefaultProducer("a", "ghost") },
			wantErr: `prepareData DAG: default producer of data key "a" (consumed by scorer/cs): default plugin ghost/ghost: unknown plugin type "ghost" (registered types: cs, max-score-picker, single-profile-handler)`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := testRegistry(t, tc.plugins...)
			if tc.reg != nil {
				tc.reg(reg)
			}
			_, err := NewRuntime(cfgWith(specsOf(tc.plugins...)), reg, RuntimeOptions{Logger: quietLogger()})
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("error mismatch:\n got: %v\nwant: %s", err, tc.wantErr)
			}
		})
	}
}

func TestDefaultProducerAutoCreated(t *testing.T) {
	a := map[string]any{"a": &infoA{}}
	tests := []struct {
		name       string
		consumer   Plugin
		wantParams string
	}{
		{"plain consumer", &consumerScorer{base: base{TypedName{"cs", "scorer"}}, consumes: a}, ""},
		{"carrier moves its parameters", &carrierScorer{consumerScorer{base: base{TypedName{"cs", "scorer"}}, consumes: a,
			params: json.RawMessage(`{"blockSize":64}`)}}, `{"blockSize":64}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := testRegistry(t, tc.consumer)
			var gotParams string
			reg.MustRegister("dflt", func(name string, params json.RawMessage, _ Handle) (Plugin, error) {
				gotParams = string(params)
				// The producer itself consumes a key with another default producer: a chain of defaults.
				return &recordingProducer{base: base{TypedName{"dflt", name}}, produces: map[string]any{"a": &infoA{}},
					consumes: map[string]any{"b": infoB{}}}, nil
			})
			reg.MustRegister("dflt-b", func(name string, _ json.RawMessage, _ Handle) (Plugin, error) {
				return &recordingProducer{base: base{TypedName{"dflt-b", name}}, produces: map[string]any{"b": infoB{}}}, nil
			})
			reg.RegisterDefaultProducer("a", "dflt")
			reg.RegisterDefaultProducer("b", "dflt-b")
			r, err := NewRuntime(cfgWith(specsOf(tc.consumer)), reg, RuntimeOptions{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if gotParams != tc.wantParams {
				t.Errorf("default producer params = %q, want %q", gotParams, tc.wantParams)
			}
			want := []DAGNode{
				{Plugin: TypedName{"dflt-b", "dflt-b"}, Layer: 0, Phase: PhasePrepareData, AutoCreated: true},
				{Plugin: TypedName{"dflt", "dflt"}, Layer: 1, Phase: PhasePrepareData, DependsOn: []TypedName{{"dflt-b", "dflt-b"}}, AutoCreated: true},
				{Plugin: TypedName{"cs", "scorer"}, Layer: 2, Phase: PhaseScheduling, DependsOn: []TypedName{{"dflt", "dflt"}}},
			}
			if diff := cmp.Diff(want, r.DAG()); diff != "" {
				t.Errorf("DAG (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]TypedName{{"dflt-b", "dflt-b"}, {"dflt", "dflt"}}, r.PrepareDataOrder()); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCarrierAgreeingWithConfiguredProducer(t *testing.T) {
	a := map[string]any{"a": infoA{}}
	p := &recordingProducer{base: base{TypedName{"prod", "p"}}, produces: a}
	c := &carrierScorer{consumerScorer{base: base{TypedName{"cs", "old"}}, consumes: a, params: json.RawMessage(`{"blockSize":64.0}`)}}
	reg := NewRegistry()
	reg.MustRegister(DefaultProfileHandlerType, func(name string, _ json.RawMessage, _ Handle) (Plugin, error) {
		return &singleHandler{base{TypedName{DefaultProfileHandlerType, name}}}, nil
	})
	reg.MustRegister(DefaultPickerType, func(name string, _ json.RawMessage, _ Handle) (Plugin, error) {
		return &maxPicker{base: base{TypedName{DefaultPickerType, name}}}, nil
	})
	reg.MustRegister("prod", func(string, json.RawMessage, Handle) (Plugin, error) { return p, nil })
	reg.MustRegister("cs", func(string, json.RawMessage, Handle) (Plugin, error) { return c, nil })
	cfg := cfgWith([]PluginSpec{{Name: "p", Type: "prod", Parameters: json.RawMessage(`{"blockSize":64,"extra":true}`)}, {Name: "old", Type: "cs"}})
	if _, err := NewRuntime(cfg, reg, RuntimeOptions{Logger: quietLogger()}); err != nil {
		t.Fatalf("agreeing parameters rejected: %v", err)
	}
}

func TestPrepareDataExecutor(t *testing.T) {
	ctx := context.Background()
	req := &LLMRequest{RequestID: "r"}
	k := map[string]any{"k": ""}

	t.Run("writes are committed in layer order and consumers see their producers' data", func(t *testing.T) {
		p := prod("p", k, nil)
		c := &readBack{base: base{TypedName{"rb", "c"}}, key: "k"}
		r, err := NewRuntime(cfgWith(specsOf(p, c)), testRegistry(t, p, c), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		eps := testEndpoints(2)
		if err := r.PrepareData(ctx, req, eps); err != nil {
			t.Fatal(err)
		}
		for _, e := range eps {
			if v, _ := AttributeAs[string](e, "k"); v != "p" {
				t.Errorf("%s: k = %q, want p", e.Key(), v)
			}
			if v, _ := AttributeAs[string](e, "seen"); v != "p" {
				t.Errorf("%s: consumer saw %q, want p", e.Key(), v)
			}
		}
	})
	t.Run("several keys per plugin and per layer reach every endpoint, and no view writes into another", func(t *testing.T) {
		// p1 and p2 share layer 0 (p1 writes three keys, more than a view's first-write slot);
		// c reads k in layer 1 and writes "seen" onto endpoints that already carry attributes.
		p1 := prod("p1", map[string]any{"k": "", "k2": "", "k3": ""}, nil)
		p2 := prod("p2", map[string]any{"other": ""}, nil)
		c := &readBack{base: base{TypedName{"rb", "c"}}, key: "k"}
		r, err := NewRuntime(cfgWith(specsOf(p1, p2, c)), testRegistry(t, p1, p2, c), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		for round := range 2 { // the second round's endpoints already hold every key
			eps := testEndpoints(3)
			if round == 1 {
				for _, e := range eps {
					e.Put("k", "old")
				}
			}
			if err := r.PrepareData(ctx, req, eps); err != nil {
				t.Fatal(err)
			}
			for _, e := range eps {
				got := map[string]string{}
				for _, key := range e.Keys() {
					got[key], _ = AttributeAs[string](e, key)
				}
				want := map[string]string{"k": "p1", "k2": "p1", "k3": "p1", "other": "p2", "seen": "p1"}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("round %d %s attributes (-want +got):\n%s", round, e.Key(), diff)
				}
			}
		}
	})
	t.Run("a failing or panicking plugin fails open and its writes are discarded", func(t *testing.T) {
		bad := prod("bad", map[string]any{"bad": ""}, nil)
		bad.err = errors.New("backend down")
		boom := prod("boom", map[string]any{"boom": ""}, nil)
		boom.panics = true
		good := prod("good", map[string]any{"good": ""}, nil)
		r, err := NewRuntime(cfgWith(specsOf(bad, boom, good)), testRegistry(t, bad, boom, good), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		eps := testEndpoints(1)
		if err := r.PrepareData(ctx, req, eps); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"good"}, eps[0].Keys()); diff != "" {
			t.Errorf("keys (-want +got):\n%s", diff)
		}
		st := r.PrepareDataStats()
		if st.Errors[bad.tn] != 1 || st.Errors[boom.tn] != 1 || st.Phases != 1 {
			t.Errorf("stats = %+v", st)
		}
	})
	t.Run("ErrBadRequest ends the phase", func(t *testing.T) {
		bad := prod("bad", map[string]any{"bad": ""}, nil)
		bad.err = fmt.Errorf("x-slo-ttft-ms %q: %w", "abc", ErrBadRequest)
		later := prod("later", map[string]any{"later": ""}, map[string]any{"bad": ""})
		calls := &callLog{}
		later.calls = calls
		r, err := NewRuntime(cfgWith(specsOf(bad, later)), testRegistry(t, bad, later), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		err = r.PrepareData(ctx, req, testEndpoints(1))
		if !errors.Is(err, ErrBadRequest) || err.Error() != `prepareData bad/prod: x-slo-ttft-ms "abc": bad request` {
			t.Fatalf("err = %v", err)
		}
		if len(calls.get()) != 0 {
			t.Fatal("a later layer ran after ErrBadRequest")
		}
		if _, err := r.Schedule(ctx, req, testEndpoints(1)); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("Schedule err = %v", err)
		}
	})
	t.Run("budget overrun on the fake clock: cancelled, discarded, later layers skipped", func(t *testing.T) {
		fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
		slow := prod("slow", map[string]any{"slow": ""}, nil)
		slow.block, slow.late = true, make(chan struct{})
		fast := prod("fast", map[string]any{"fast": ""}, nil)
		after := prod("after", map[string]any{"after": ""}, map[string]any{"fast": ""})
		cfg := cfgWith(specsOf(slow, fast, after))
		cfg.PrepareData = &PrepareDataConfig{TimeoutMs: 250}
		r, err := NewRuntime(cfg, testRegistry(t, slow, fast, after), RuntimeOptions{Logger: quietLogger(), Clock: fc})
		if err != nil {
			t.Fatal(err)
		}
		eps := testEndpoints(2)
		done := make(chan error, 1)
		go func() { done <- r.PrepareData(ctx, req, eps) }()
		for !fc.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		fc.Step(249 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("PrepareData returned before the budget ran out: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		fc.Step(time.Millisecond)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		<-slow.late
		for _, e := range eps {
			if diff := cmp.Diff([]string{"fast"}, e.Keys()); diff != "" {
				t.Errorf("%s keys (-want +got):\n%s", e.Key(), diff)
			}
		}
		st := r.PrepareDataStats()
		if st.Timeouts[slow.tn] != 1 || st.Skipped[after.tn] != 1 || len(st.Errors) != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
	t.Run("a cancelled request context ends the phase without error", func(t *testing.T) {
		slow := prod("slow", map[string]any{"slow": ""}, nil)
		slow.block, slow.late = true, make(chan struct{})
		r, err := NewRuntime(cfgWith(specsOf(slow)), testRegistry(t, slow), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(5 * time.Millisecond); cancel() }()
		eps := testEndpoints(1)
		if err := r.PrepareData(cctx, req, eps); err != nil {
			t.Fatal(err)
		}
		<-slow.late
		if len(eps[0].Keys()) != 0 {
			t.Fatalf("keys = %v", eps[0].Keys())
		}
	})
}

// TestPrepareDataViewsOfARunningPluginAreNeverReused: the executor reuses a layer's staged
// views once every plugin of the layer returned; a plugin still running when its phase ended
// (here: the request was cancelled) keeps writing into its views, so they must not reach another
// request. Twenty later requests on another runtime run while it lingers, then it writes; under
// -race a reused view is a data race, and without -race the later requests' values change.
func TestPrepareDataViewsOfARunningPluginAreNeverReused(t *testing.T) {
	ctx := context.Background()
	slow := &lingering{base: base{TypedName{"linger", "slow"}}, release: make(chan struct{}), done: make(chan struct{})}
	rs, err := NewRuntime(cfgWith(specsOf(slow)), testRegistry(t, slow), RuntimeOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(5 * time.Millisecond); cancel() }()
	slowEps := testEndpoints(3)
	if err := rs.PrepareData(cctx, &LLMRequest{RequestID: "cancelled"}, slowEps); err != nil {
		t.Fatal(err)
	}

	fast := prod("fast", map[string]any{"k": ""}, nil)
	rf, err := NewRuntime(cfgWith(specsOf(fast)), testRegistry(t, fast), RuntimeOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var later [][]*Endpoint
	for i := range 20 {
		eps := testEndpoints(3)
		if err := rf.PrepareData(ctx, &LLMRequest{RequestID: fmt.Sprint("later-", i)}, eps); err != nil {
			t.Fatal(err)
		}
		later = append(later, eps)
	}
	close(slow.release)
	<-slow.done
	for i, eps := range later {
		for _, e := range eps {
			if v, _ := AttributeAs[string](e, "k"); v != "fast" || len(e.Keys()) != 1 {
				t.Errorf("request %d, %s: keys %v, k = %q; want only k = fast", i, e.Key(), e.Keys(), v)
			}
		}
	}
	for _, e := range slowEps {
		if len(e.Keys()) != 0 {
			t.Errorf("cancelled request, %s: keys %v, want none", e.Key(), e.Keys())
		}
	}
}

// lingering is a PrepareData plugin that, once its context ends, keeps writing "late" under k
// (and a "late" key) into every view it was given until release is closed, as a slow plugin does
// after the executor has given up on it.
type lingering struct {
	base
	release, done chan struct{}
}

func (p *lingering) Produces() map[string]any { return map[string]any{"k": ""} }
func (p *lingering) Consumes() map[string]any { return nil }
func (p *lingering) PrepareRequestData(ctx context.Context, _ *LLMRequest, eps []*Endpoint) error {
	<-ctx.Done()
	defer close(p.done)
	for {
		for _, e := range eps {
			e.Put("k", "late")
			e.Put("late", true)
		}
		select {
		case <-p.release:
			return ctx.Err()
		default:
			runtime.Gosched()
		}
	}
}

// readBack is a PrepareData plugin that copies what it sees under key into "seen".
type readBack struct {
	base
	key string
}

func (p *readBack) Produces() map[string]any { return map[string]any{"seen": ""} }
func (p *readBack) Consumes() map[string]any { return map[string]any{p.key: ""} }
func (p *readBack) PrepareRequestData(_ context.Context, _ *LLMRequest, eps []*Endpoint) error {
	for _, e := range eps {
		v, _ := AttributeAs[string](e, p.key)
		e.Put("seen", v)
	}
	return nil
}

func TestPhaseOf(t *testing.T) {
	tests := []struct {
		p    Plugin
		want Phase
	}{
		{prod("p", nil, nil), PhasePrepareData},
		{&recorder{}, PhaseAdmission},
		{&fixedScorer{}, PhaseScheduling},
		{&singleHandler{}, PhaseScheduling},
		{&base{}, PhaseNone},
	}
	for _, tc := range tests {
		if got := PhaseOf(tc.p); got != tc.want {
			t.Errorf("PhaseOf(%T) = %s, want %s", tc.p, got, tc.want)
		}
	}
}
