package framework

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNewRuntimeProfileDefaults(t *testing.T) {
	f := &keepFilter{base: base{TypedName{"keep-filter", "keep"}}}
	s := &fixedScorer{base: base{TypedName{"fixed-scorer", "fixed"}}}
	p := &maxPicker{base: base{TypedName{"random-picker", "rp"}}}
	other := &recordingProducer{base: base{TypedName{"producer", "prod"}}, produces: map[string]any{"k": 0}}

	tests := []struct {
		name        string
		cfg         *EndpointPickerConfig
		instances   []Plugin
		wantFilters []string
		wantScorers map[string]float64
		wantPicker  string
		wantAuto    []TypedName
	}{
		{
			name:        "no profiles: default profile with every filter, scorer and picker in config order",
			cfg:         cfgWith([]PluginSpec{{Name: "prod", Type: "producer"}, {Name: "keep", Type: "keep-filter"}, {Name: "fixed", Type: "fixed-scorer"}, {Name: "rp", Type: "random-picker"}}),
			instances:   []Plugin{f, s, p, other},
			wantFilters: []string{"keep"},
			wantScorers: map[string]float64{"fixed": 1},
			wantPicker:  "rp",
			wantAuto:    []TypedName{{DefaultProfileHandlerType, DefaultProfileHandlerType}},
		},
		{
			name: "one profile without picker gets max-score-picker, scorer without weight gets 1",
			cfg: cfgWith([]PluginSpec{{Name: "fixed", Type: "fixed-scorer"}},
				ProfileSpec{Name: "only", Plugins: []ProfilePluginRef{{PluginRef: "fixed"}}}),
			instances:   []Plugin{s},
			wantScorers: map[string]float64{"fixed": 1},
			wantPicker:  DefaultPickerType,
			wantAuto:    []TypedName{{DefaultProfileHandlerType, DefaultProfileHandlerType}, {DefaultPickerType, DefaultPickerType}},
		},
		{
			name: "float weight kept",
			cfg: cfgWith([]PluginSpec{{Name: "fixed", Type: "fixed-scorer"}, {Name: "rp", Type: "random-picker"}},
				ProfileSpec{Name: "only", Plugins: []ProfilePluginRef{{PluginRef: "fixed", Weight: ptr(2.5)}, {PluginRef: "rp"}}}),
			instances:   []Plugin{s, p},
			wantScorers: map[string]float64{"fixed": 2.5},
			wantPicker:  "rp",
			wantAuto:    []TypedName{{DefaultProfileHandlerType, DefaultProfileHandlerType}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRuntime(tc.cfg, testRegistry(t, tc.instances...), RuntimeOptions{Logger: quietLogger()})
			if err != nil {
				t.Fatalf("NewRuntime: %v", err)
			}
			if len(r.ProfileNames()) != 1 {
				t.Fatalf("profiles = %v, want one", r.ProfileNames())
			}
			prof := r.Profiles()[r.ProfileNames()[0]]
			var filters []string
			for _, f := range prof.Filters {
				filters = append(filters, f.TypedName().Name)
			}
			scorers := map[string]float64{}
			for _, s := range prof.Scorers {
				scorers[s.TypedName().Name] = s.Weight
			}
			if diff := cmp.Diff(tc.wantFilters, filters); diff != "" {
				t.Errorf("filters (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantScorers, scorers); diff != "" {
				t.Errorf("scorers (-want +got):\n%s", diff)
			}
			if got := prof.Picker.TypedName().Name; got != tc.wantPicker {
				t.Errorf("picker = %s, want %s", got, tc.wantPicker)
			}
			if diff := cmp.Diff(tc.wantAuto, r.AutoCreated()); diff != "" {
				t.Errorf("auto-created (-want +got):\n%s", diff)
			}
			if r.ProfileHandler() == nil {
				t.Error("no profile handler")
			}
		})
	}
}

func TestNewRuntimeErrors(t *testing.T) {
	s := &fixedScorer{base: base{TypedName{"fixed-scorer", "fixed"}}}
	p1 := &maxPicker{base: base{TypedName{"random-picker", "p1"}}}
	p2 := &maxPicker{base: base{TypedName{"random-picker", "p2"}}}
	h1 := &singleHandler{base{TypedName{"handler", "h1"}}}
	h2 := &singleHandler{base{TypedName{"handler", "h2"}}}
	prod := &recordingProducer{base: base{TypedName{"producer", "prod"}}, produces: map[string]any{"k": 0}}

	tests := []struct {
		name      string
		cfg       *EndpointPickerConfig
		instances []Plugin
		reg       func(*Registry)
		wantErr   string
	}{
		{
			name:    "unknown type",
			cfg:     cfgWith([]PluginSpec{{Name: "x", Type: "nope"}}),
			wantErr: `plugins[0] (x/nope): unknown plugin type "nope" (registered types: max-score-picker, single-profile-handler)`,
		},
		{
			name:      "strict plugin parameters through DecodeParameters",
			cfg:       cfgWith([]PluginSpec{{Name: "fixed", Type: "fixed-scorer", Parameters: json.RawMessage(`{"blockSze": 3}`)}}),
			instances: []Plugin{s},
			wantErr:   `plugins[0] (fixed/fixed-scorer): parameters: json: unknown field "blockSze"`,
		},
		{
			name:      "two profile handlers",
			cfg:       cfgWith([]PluginSpec{{Name: "h1", Type: "handler"}, {Name: "h2", Type: "handler"}}),
			instances: []Plugin{h1, h2},
			wantErr:   `plugins: more than one profile handler: h1/handler (plugins[0]) and h2/handler (plugins[1])`,
		},
		{
			name: "two pickers in a profile",
			cfg: cfgWith([]PluginSpec{{Name: "p1", Type: "random-picker"}, {Name: "p2", Type: "random-picker"}},
				ProfileSpec{Name: "x", Plugins: []ProfilePluginRef{{PluginRef: "p1"}, {PluginRef: "p2"}}}),
			instances: []Plugin{p1, p2},
			wantErr:   `schedulingProfiles[0].plugins[1].pluginRef: profile "x" has two pickers: p1/random-picker and p2/random-picker`,
		},
		{
			name:      "two pickers in the implicit profile",
			cfg:       cfgWith([]PluginSpec{{Name: "p1", Type: "random-picker"}, {Name: "p2", Type: "random-picker"}}),
			instances: []Plugin{p1, p2},
			wantErr:   `schedulingProfiles (implicit profile "default").plugins[1].pluginRef: profile "default" has two pickers: p1/random-picker and p2/random-picker`,
		},
		{
			name: "several profiles and no handler",
			cfg: cfgWith([]PluginSpec{{Name: "fixed", Type: "fixed-scorer"}},
				ProfileSpec{Name: "a", Plugins: []ProfilePluginRef{{PluginRef: "fixed"}}},
				ProfileSpec{Name: "b", Plugins: []ProfilePluginRef{{PluginRef: "fixed"}}}),
			instances: []Plugin{s},
			wantErr:   `schedulingProfiles: 2 profiles need a profile handler plugin in plugins; single-profile-handler only handles one`,
		},
		{
			name: "profile entry that is no filter, scorer or picker",
			cfg: cfgWith([]PluginSpec{{Name: "prod", Type: "producer"}},
				ProfileSpec{Name: "a", Plugins: []ProfilePluginRef{{PluginRef: "prod"}}}),
			instances: []Plugin{prod},
			wantErr:   `schedulingProfiles[0].plugins[0].pluginRef: plugin prod/producer is not a filter, scorer or picker`,
		},
		{
			name: "factory returns a plugin with another name",
			cfg:  cfgWith([]PluginSpec{{Name: "x", Type: "liar"}}),
			reg: func(r *Registry) {
				r.MustRegister("liar", func(string, json.RawMessage, Handle) (Plugin, error) { return s, nil })
			},
			wantErr: `plugins[0] (x/liar): factory returned a plugin named fixed/fixed-scorer, want x/liar`,
		},
		{
			name: "factory panics",
			cfg:  cfgWith([]PluginSpec{{Name: "x", Type: "panicky"}}),
			reg: func(r *Registry) {
				r.MustRegister("panicky", func(string, json.RawMessage, Handle) (Plugin, error) { panic("bad params") })
			},
			wantErr: `plugins[0] (x/panicky): factory panicked: bad params`,
		},
		{
			name: "factory returns nil",
			cfg:  cfgWith([]PluginSpec{{Name: "x", Type: "nil"}}),
			reg: func(r *Registry) {
				r.MustRegister("nil", func(string, json.RawMessage, Handle) (Plugin, error) { return nil, nil })
			},
			wantErr: `plugins[0] (x/nil): factory returned no plugin`,
		},
		{
			name: "config errors come from Normalize",
			cfg: cfgWith([]PluginSpec{{Name: "fixed", Type: "fixed-scorer"}},
				ProfileSpec{Name: "a", Plugins: []ProfilePluginRef{{PluginRef: "fixed", Weight: ptr(-1.0)}}}),
			instances: []Plugin{s},
			wantErr:   `schedulingProfiles[0].plugins[0].weight: plugin "fixed": weight must be a finite number ≥ 0, got -1`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := testRegistry(t, tc.instances...)
			if tc.reg != nil {
				tc.reg(reg)
			}
			_, err := NewRuntime(tc.cfg, reg, RuntimeOptions{Logger: quietLogger()})
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("error mismatch:\n got: %v\nwant: %s", err, tc.wantErr)
			}
		})
	}
	if _, err := NewRuntime(nil, nil, RuntimeOptions{}); err == nil {
		t.Fatal("NewRuntime without registry succeeded")
	}
}

func TestNewRuntimeDoesNotModifyConfig(t *testing.T) {
	s := &fixedScorer{base: base{TypedName{"fixed-scorer", "fixed"}}}
	cfg := cfgWith([]PluginSpec{{Type: "fixed-scorer", Name: "fixed"}})
	before := *cfg
	if _, err := NewRuntime(cfg, testRegistry(t, s), RuntimeOptions{Logger: quietLogger()}); err != nil {
		t.Fatal(err)
	}
	if cfg.PrepareData != nil || cfg.SaturationDetector != nil || !cmp.Equal(before.Plugins, cfg.Plugins) {
		t.Fatalf("caller's config was modified: %+v", cfg)
	}
}

func TestSchedulerScoring(t *testing.T) {
	eps := testEndpoints(4)
	k := func(i int) string { return eps[i].Key() }
	tests := []struct {
		name    string
		scorers map[string]map[string]float64 // scorer name → scores
		weights map[string]float64
		want    []float64 // total per endpoint, in order
		pick    int
	}{
		{
			name:    "clamped to [0,1], NaN, Inf and missing count 0, then weighted",
			scorers: map[string]map[string]float64{"a": {k(0): 2, k(1): -1, k(2): math.NaN(), k(3): 0.5}},
			weights: map[string]float64{"a": 3},
			want:    []float64{3, 0, 0, 1.5},
			pick:    0,
		},
		{
			name: "weighted sum of several scorers",
			scorers: map[string]map[string]float64{
				"a": {k(0): 1, k(1): 0.5, k(2): 0, k(3): math.Inf(1)},
				"b": {k(0): 0, k(1): 1, k(2): math.Inf(-1)},
			},
			weights: map[string]float64{"a": 1, "b": 2},
			want:    []float64{1, 2.5, 0, 1},
			pick:    1,
		},
		{
			name:    "a nil score map scores 0, weight 0 ignores the scorer",
			scorers: map[string]map[string]float64{"a": nil, "b": {k(3): 1}},
			weights: map[string]float64{"a": 1, "b": 0},
			want:    []float64{0, 0, 0, 0},
			pick:    0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var instances []Plugin
			var specs []PluginSpec
			var refs []ProfilePluginRef
			for _, name := range []string{"a", "b"} {
				sc, ok := tc.scorers[name]
				if !ok {
					continue
				}
				instances = append(instances, &fixedScorer{base: base{TypedName{"fixed-scorer", name}}, scores: sc})
				specs = append(specs, PluginSpec{Name: name, Type: "fixed-scorer"})
				refs = append(refs, ProfilePluginRef{PluginRef: name, Weight: ptr(tc.weights[name])})
			}
			r, err := NewRuntime(cfgWith(specs, ProfileSpec{Name: "p", Plugins: refs}), testRegistry(t, instances...),
				RuntimeOptions{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.RunScheduling(context.Background(), &LLMRequest{RequestID: "r"}, eps)
			if err != nil {
				t.Fatal(err)
			}
			picker := r.Profiles()["p"].Picker.(*maxPicker)
			var got []float64
			for _, s := range picker.seen[0] {
				got = append(got, s.Score)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("totals (-want +got):\n%s", diff)
			}
			if res.PrimaryProfileName != "p" || res.Primary().TargetEndpoints[0] != eps[tc.pick] {
				t.Errorf("pick = %s of %q, want %s", res.Primary().TargetEndpoints[0].Key(), res.PrimaryProfileName, eps[tc.pick].Key())
			}
		})
	}
}

func TestClampScore(t *testing.T) {
	for in, want := range map[float64]float64{-2: 0, 0: 0, 0.25: 0.25, 1: 1, 7: 1, math.Inf(1): 1, math.Inf(-1): 0} {
		if got := ClampScore(in); got != want {
			t.Errorf("ClampScore(%v) = %v, want %v", in, got, want)
		}
	}
	if got := ClampScore(math.NaN()); got != 0 {
		t.Errorf("ClampScore(NaN) = %v", got)
	}
}

func TestSchedulerFiltersAndErrors(t *testing.T) {
	eps := testEndpoints(3)
	ctx := context.Background()
	req := &LLMRequest{RequestID: "r"}

	t.Run("filters run in order and narrow the candidates", func(t *testing.T) {
		f1 := &keepFilter{base: base{TypedName{"keep", "f1"}}, keep: map[string]bool{eps[0].Key(): true, eps[2].Key(): true}}
		f2 := &keepFilter{base: base{TypedName{"keep", "f2"}}, keep: map[string]bool{eps[1].Key(): true, eps[2].Key(): true}}
		r, err := NewRuntime(cfgWith([]PluginSpec{{Name: "f1", Type: "keep"}, {Name: "f2", Type: "keep"}}), testRegistry(t, f1, f2),
			RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.RunScheduling(ctx, req, eps)
		if err != nil || res.Primary().TargetEndpoints[0] != eps[2] {
			t.Fatalf("RunScheduling = %+v, %v; want %s", res, err, eps[2].Key())
		}
	})
	t.Run("every endpoint filtered out is ErrShed", func(t *testing.T) {
		f := &keepFilter{base: base{TypedName{"keep", "none"}}}
		r, err := NewRuntime(cfgWith([]PluginSpec{{Name: "none", Type: "keep"}}), testRegistry(t, f), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.RunScheduling(ctx, req, eps)
		if !errors.Is(err, ErrShed) || errors.Is(err, ErrInternal) {
			t.Fatalf("err = %v, want ErrShed", err)
		}
	})
	t.Run("no endpoints is ErrNoEndpoints", func(t *testing.T) {
		r, err := NewRuntime(cfgWith(nil), testRegistry(t), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunScheduling(ctx, req, nil); !errors.Is(err, ErrNoEndpoints) {
			t.Fatalf("RunScheduling err = %v", err)
		}
		if _, err := r.Schedule(ctx, req, nil); !errors.Is(err, ErrNoEndpoints) {
			t.Fatalf("Schedule err = %v", err)
		}
	})
	t.Run("handler loop runs profiles round by round", func(t *testing.T) {
		h := &roundsHandler{base: base{TypedName{"rounds", "h"}}, order: []string{"first", "second"}}
		pa := &maxPicker{base: base{TypedName{"picker", "pa"}}}
		pb := &maxPicker{base: base{TypedName{"picker", "pb"}}}
		cfg := cfgWith([]PluginSpec{{Name: "h", Type: "rounds"}, {Name: "pa", Type: "picker"}, {Name: "pb", Type: "picker"}},
			ProfileSpec{Name: "first", Plugins: []ProfilePluginRef{{PluginRef: "pa"}}},
			ProfileSpec{Name: "second", Plugins: []ProfilePluginRef{{PluginRef: "pb"}}})
		r, err := NewRuntime(cfg, testRegistry(t, h, pa, pb), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.RunScheduling(ctx, req, eps)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.ProfileResults) != 2 || len(pa.seen) != 1 || len(pb.seen) != 1 || res.PrimaryProfileName != "first" {
			t.Fatalf("result %+v, picker calls %d/%d", res, len(pa.seen), len(pb.seen))
		}
	})
	t.Run("a handler that never stops hits the round limit", func(t *testing.T) {
		h := &roundsHandler{base: base{TypedName{"rounds", "h"}}, order: []string{"first"}, loop: true}
		pa := &maxPicker{base: base{TypedName{"picker", "pa"}}}
		cfg := cfgWith([]PluginSpec{{Name: "h", Type: "rounds"}, {Name: "pa", Type: "picker"}},
			ProfileSpec{Name: "first", Plugins: []ProfilePluginRef{{PluginRef: "pa"}}})
		r, err := NewRuntime(cfg, testRegistry(t, h, pa), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.RunScheduling(ctx, req, eps)
		if !errors.Is(err, ErrInternal) || !strings.Contains(err.Error(), "still picks profiles after 16 rounds") {
			t.Fatalf("err = %v", err)
		}
		if len(pa.seen) != MaxSchedulingRounds {
			t.Fatalf("profile ran %d times, want %d", len(pa.seen), MaxSchedulingRounds)
		}
	})
	t.Run("handler errors keep typed errors and wrap others as ErrInternal", func(t *testing.T) {
		for _, tc := range []struct {
			err  error
			want error
		}{
			{errors.New("plain"), ErrInternal},
			{ErrBadRequest, ErrBadRequest},
			{ErrShed, ErrShed},
		} {
			h := &roundsHandler{base: base{TypedName{"rounds", "h"}}, order: []string{"first"}, err: tc.err}
			pa := &maxPicker{base: base{TypedName{"picker", "pa"}}}
			cfg := cfgWith([]PluginSpec{{Name: "h", Type: "rounds"}, {Name: "pa", Type: "picker"}},
				ProfileSpec{Name: "first", Plugins: []ProfilePluginRef{{PluginRef: "pa"}}})
			r, err := NewRuntime(cfg, testRegistry(t, h, pa), RuntimeOptions{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.RunScheduling(ctx, req, eps)
			if !errors.Is(err, tc.want) || !errors.Is(err, tc.err) {
				t.Errorf("handler error %v → %v, want it wrapped with %v", tc.err, err, tc.want)
			}
		}
	})
	t.Run("a panicking scorer is ErrInternal, not a crash", func(t *testing.T) {
		s := &panicScorer{base{TypedName{"panic-scorer", "ps"}}}
		r, err := NewRuntime(cfgWith([]PluginSpec{{Name: "ps", Type: "panic-scorer"}}), testRegistry(t, s), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunScheduling(ctx, req, eps); !errors.Is(err, ErrInternal) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a cancelled context stops the loop", func(t *testing.T) {
		r, err := NewRuntime(cfgWith(nil), testRegistry(t), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := r.RunScheduling(cctx, req, eps); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	})
}

type panicScorer struct{ base }

func (panicScorer) Score(context.Context, *CycleState, *LLMRequest, []*Endpoint) map[string]float64 {
	panic("scorer bug")
}

// recorder implements every post-scheduling extension point and an admitter.
type recorder struct {
	base
	calls  *callLog
	refuse error
}

func (p *recorder) AdmitRequest(context.Context, *LLMRequest, []*Endpoint) error {
	p.calls.add(p.tn.Name + ".admit")
	return p.refuse
}
func (p *recorder) PreRequest(context.Context, *LLMRequest, *SchedulingResult) {
	p.calls.add(p.tn.Name + ".pre")
}
func (p *recorder) ResponseHeader(context.Context, *LLMRequest, *Response) {
	p.calls.add(p.tn.Name + ".header")
}
func (p *recorder) ResponseBody(_ context.Context, _ *LLMRequest, _ *Response, chunk []byte) {
	p.calls.add(p.tn.Name + ".body:" + string(chunk))
}
func (p *recorder) ResponseComplete(context.Context, *LLMRequest, *Response) {
	p.calls.add(p.tn.Name + ".complete")
	panic("complete bug") // must be contained
}

func TestExtensionPointsInOrder(t *testing.T) {
	calls := &callLog{}
	a := &recorder{base: base{TypedName{"rec", "a"}}, calls: calls}
	b := &recorder{base: base{TypedName{"rec", "b"}}, calls: calls}
	r, err := NewRuntime(cfgWith([]PluginSpec{{Name: "b", Type: "rec"}, {Name: "a", Type: "rec"}}), testRegistry(t, a, b),
		RuntimeOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, req, eps := context.Background(), &LLMRequest{RequestID: "r1"}, testEndpoints(2)
	res, err := r.Schedule(ctx, req, eps)
	if err != nil {
		t.Fatal(err)
	}
	r.PreRequest(ctx, req, res)
	resp := &Response{RequestID: "r1"}
	r.ResponseHeader(ctx, req, resp)
	r.ResponseBody(ctx, req, resp, []byte("x"))
	r.ResponseComplete(ctx, req, resp)
	// Admitters run in config order; the request hooks in dependency order, which for plugins
	// sharing no data is by name (SPEC §1.1, §9.2).
	want := []string{"b.admit", "a.admit", "a.pre", "b.pre", "a.header", "b.header", "a.body:x", "b.body:x", "a.complete", "b.complete"}
	if diff := cmp.Diff(want, calls.get()); diff != "" {
		t.Fatalf("calls (-want +got):\n%s", diff)
	}

	b.refuse = errors.Join(ErrShed, errors.New("pool saturated"))
	if _, err := r.Schedule(ctx, req, eps); !errors.Is(err, ErrShed) || !strings.HasPrefix(err.Error(), "admission b/rec: ") {
		t.Fatalf("Schedule with refusing admitter: %v", err)
	}

	r.PluginState().Write("r1", "k", 1)
	r.EndRequest(req)
	if r.PluginState().Len() != 0 {
		t.Fatal("EndRequest left plugin state behind")
	}
}

func TestHandle(t *testing.T) {
	var got Handle
	reg := testRegistry(t)
	reg.MustRegister("grabber", func(name string, _ json.RawMessage, h Handle) (Plugin, error) {
		got = h
		return &fixedScorer{base: base{TypedName{"grabber", name}}}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eps := []*EndpointMetadata{{Name: "x"}}
	r, err := NewRuntime(cfgWith([]PluginSpec{{Type: "grabber"}}), reg, RuntimeOptions{
		Context: ctx, Seed: 42, Logger: quietLogger(), Endpoints: func() []*EndpointMetadata { return eps },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Seed() != 42 || got.Context() != ctx || got.PluginState() != r.PluginState() || got.Clock() == nil ||
		got.Logger() == nil || len(got.Endpoints()) != 1 {
		t.Fatalf("handle does not reflect the options: %+v", got)
	}
	if p, ok := got.Plugin("grabber"); !ok || p.TypedName().Type != "grabber" {
		t.Fatalf("Handle.Plugin(grabber) = %v, %v", p, ok)
	}
	if _, ok := r.Plugin(DefaultPickerType); !ok {
		t.Fatal("auto-created picker not reachable by name")
	}
}

// dataRecorder is a recorder that produces and consumes data keys.
type dataRecorder struct {
	recorder
	produces, consumes map[string]any
}

func (p *dataRecorder) Produces() map[string]any { return p.produces }
func (p *dataRecorder) Consumes() map[string]any { return p.consumes }

// TestHookDependencyOrder: at PreRequest and the response hooks a producer runs before its
// consumer whatever the config order and the names (SPEC §9.2; llm-d-router #2040): "a"
// consumes what "z" produces, "m" shares nothing; config order a, m, z.
func TestHookDependencyOrder(t *testing.T) {
	for _, order := range [][]string{{"a", "m", "z"}, {"z", "m", "a"}, {"m", "a", "z"}} {
		calls := &callLog{}
		z := &dataRecorder{recorder: recorder{base: base{TypedName{"rec", "z"}}, calls: calls}, produces: map[string]any{"k": 0}}
		a := &dataRecorder{recorder: recorder{base: base{TypedName{"rec", "a"}}, calls: calls}, consumes: map[string]any{"k": 0}}
		m := &recorder{base: base{TypedName{"rec", "m"}}, calls: calls}
		byName := map[string]Plugin{"a": a, "m": m, "z": z}
		var specs []PluginSpec
		var ps []Plugin
		for _, n := range order {
			specs = append(specs, PluginSpec{Name: n, Type: "rec"})
			ps = append(ps, byName[n])
		}
		r, err := NewRuntime(cfgWith(specs), testRegistry(t, ps...), RuntimeOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		wantOrder := []TypedName{{"rec", "m"}, {"rec", "z"}, {"rec", "a"}}
		for hook, got := range r.HookOrder() {
			if diff := cmp.Diff(wantOrder, got); diff != "" {
				t.Fatalf("config order %v: %s order (-want +got):\n%s", order, hook, diff)
			}
		}
		ctx, req := context.Background(), &LLMRequest{RequestID: "r1"}
		res, err := r.Schedule(ctx, req, testEndpoints(2))
		if err != nil {
			t.Fatal(err)
		}
		before := len(calls.get())
		r.PreRequest(ctx, req, res)
		r.ResponseComplete(ctx, req, &Response{RequestID: "r1"})
		if diff := cmp.Diff([]string{"m.pre", "z.pre", "a.pre", "m.complete", "z.complete", "a.complete"}, calls.get()[before:]); diff != "" {
			t.Fatalf("config order %v: calls (-want +got):\n%s", order, diff)
		}
	}
}
