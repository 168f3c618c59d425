package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// RuntimeOptions are the environment a Runtime is built in. Every field has a default.
type RuntimeOptions struct {
	// Context is what Handle.Context returns: cancelled when the EPP shuts down. Nil means
	// context.Background().
	Context context.Context
	// Clock is the time source of the runtime and its plugins (PrepareData budget, plugin state).
	// Nil means the real clock.
	Clock clock.WithTicker
	// Seed is the base seed of every random choice plugins make (Handle.Seed).
	Seed int64
	// Logger receives the runtime's and the plugins' logs. Nil means slog.Default().
	Logger *slog.Logger
	// PluginState is the per-request store. Nil means NewPluginState(Clock, 0, 0) (5 min TTL,
	// 1 min sweep).
	PluginState *PluginState
	// Endpoints returns the pool's current endpoints (Handle.Endpoints). Nil means none.
	Endpoints func() []*EndpointMetadata
	// ObservePlugin, when set, is called after every plugin call of the request flow with the
	// plugin, the extension point ("PrepareData", "Admission", "Filter", "Scorer", "Picker",
	// "PreRequest", "ResponseHeader", "ResponseBody", "ResponseComplete") and the call's wall-clock
	// duration (time.Now, not Clock, so fake clocks do not zero it). It runs on the request's
	// goroutine (PrepareData: the plugin's) and must be cheap and safe for concurrent use. Added
	// for the reference EPP's per-plugin duration metric (SPEC §5.4).
	ObservePlugin func(plugin TypedName, extensionPoint string, d time.Duration)
}

// Runtime is one built configuration: the plugin instances, the scheduling profiles with their
// profile handler, the PrepareData DAG and its executor. It runs the extension points of one
// request after another (SPEC §1): PrepareData → Admission → Scheduling → PreRequest → Response*.
// A Runtime is safe for concurrent use by many requests once NewRuntime has returned.
type Runtime struct {
	cfg         *EndpointPickerConfig
	reg         *Registry
	ctx         context.Context
	clock       clock.WithTicker
	seed        int64
	logger      *slog.Logger
	pluginState *PluginState
	endpoints   func() []*EndpointMetadata
	observe     func(TypedName, string, time.Duration)

	// mu guards plugins while NewRuntime builds them (factories may call Handle.Plugin); after
	// NewRuntime returns they are read-only.
	mu      sync.RWMutex
	plugins map[string]Plugin
	// ordered holds every plugin: the configured ones in config order, then the ones the runtime
	// created (profile handler, picker, default producers) in creation order.
	ordered []Plugin
	// configured maps the instance name of a configured plugin to its index in cfg.Plugins.
	configured map[string]int
	// autoCreated lists the plugins the runtime created, in creation order.
	autoCreated []TypedName

	profiles     map[string]*SchedulerProfile
	profileOrder []string
	handler      ProfileHandler

	admitters         []Admitter
	preRequests       []PreRequest
	responseHeaders   []ResponseHeaderPlugin
	responseBodies    []ResponseBodyPlugin
	responseCompletes []ResponseCompletePlugin

	dag        *dataGraph
	prepLayers [][]PrepareDataPlugin
	prepBudget time.Duration
	prepStats  prepareDataStats

	background sync.WaitGroup
}

// MaxSchedulingRounds bounds the profile handler loop: a handler still returning profiles after
// this many rounds fails the request with ErrInternal instead of looping forever.
const MaxSchedulingRounds = 16

// NewRuntime builds a Runtime from a config (nil means DefaultConfig()) and a registry:
//
//  1. normalises a copy of cfg (see EndpointPickerConfig.Normalize) and logs its warnings;
//  2. builds every plugin through its registry factory, with a Handle whose logger names the
//     plugin; errors read `plugins[i] (name/type): ...`;
//  3. applies the profile defaults (SPEC §1): no profiles → profile "default" with every filter,
//     scorer and picker; one profile and no profile handler → single-profile-handler; a profile
//     without picker → max-score-picker; a scorer without weight → 1. More than one profile
//     handler, several profiles without one, two pickers in a profile, or a profile entry that is
//     not a filter, scorer or picker are errors naming the plugin and the field;
//  4. builds the PrepareData DAG (SPEC §1.1; see dag.go): auto-creates the registered default
//     producers of consumed keys nobody produces, checks ProducerParametersCarrier parameters,
//     type-checks every shared key, sorts, assigns layers and checks them.
func NewRuntime(cfg *EndpointPickerConfig, reg *Registry, opts RuntimeOptions) (*Runtime, error) {
	if reg == nil {
		return nil, fmt.Errorf("runtime: a plugin registry is required")
	}
	if cfg == nil {
		cfg = DefaultConfig()
	}
	c := *cfg
	c.Plugins = slices.Clone(cfg.Plugins)
	c.SchedulingProfiles = slices.Clone(cfg.SchedulingProfiles)
	if cfg.SaturationDetector != nil {
		sd := *cfg.SaturationDetector
		c.SaturationDetector = &sd
	}
	if cfg.PrepareData != nil {
		pd := *cfg.PrepareData
		c.PrepareData = &pd
	}
	if err := c.Normalize(); err != nil {
		return nil, err
	}

	r := &Runtime{
		cfg:         &c,
		reg:         reg,
		ctx:         opts.Context,
		clock:       opts.Clock,
		seed:        opts.Seed,
		logger:      opts.Logger,
		pluginState: opts.PluginState,
		endpoints:   opts.Endpoints,
		observe:     opts.ObservePlugin,
		plugins:     map[string]Plugin{},
		configured:  map[string]int{},
		profiles:    map[string]*SchedulerProfile{},
		prepBudget:  c.PrepareData.Timeout(),
	}
	if r.ctx == nil {
		r.ctx = context.Background()
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	if r.pluginState == nil {
		r.pluginState = NewPluginState(r.clock, 0, 0)
	}
	if r.endpoints == nil {
		r.endpoints = func() []*EndpointMetadata { return nil }
	}
	for _, w := range c.Warnings {
		r.logger.Warn("config: " + w)
	}

	for i, spec := range c.Plugins {
		tn := TypedName{Type: spec.Type, Name: spec.Name}
		p, err := r.instantiate(tn, spec.Parameters)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d] (%s): %w", i, tn, err)
		}
		r.add(p)
		r.configured[spec.Name] = i
	}
	if err := r.buildProfiles(); err != nil {
		return nil, err
	}
	g, err := buildDataGraph(r)
	if err != nil {
		return nil, err
	}
	r.dag = g
	r.prepLayers = g.prepareDataLayers()

	for _, p := range r.ordered {
		if a, ok := p.(Admitter); ok {
			r.admitters = append(r.admitters, a)
		}
	}
	// The request hooks plugins share data through run in dependency order (SPEC §1.1, §9.2;
	// llm-d-router #2040): producers before their consumers, then by name and type.
	for _, p := range g.hookOrder(r.ordered) {
		if pr, ok := p.(PreRequest); ok {
			r.preRequests = append(r.preRequests, pr)
		}
		if rh, ok := p.(ResponseHeaderPlugin); ok {
			r.responseHeaders = append(r.responseHeaders, rh)
		}
		if rb, ok := p.(ResponseBodyPlugin); ok {
			r.responseBodies = append(r.responseBodies, rb)
		}
		if rc, ok := p.(ResponseCompletePlugin); ok {
			r.responseCompletes = append(r.responseCompletes, rc)
		}
	}
	r.logger.Info("runtime built", "plugins", len(r.ordered), "profiles", r.profileOrder,
		"profileHandler", r.handler.TypedName().String(), "prepareDataOrder", typedNamesString(r.PrepareDataOrder()),
		"prepareDataBudget", r.prepBudget)
	return r, nil
}

// instantiate builds one plugin through its factory. A factory that panics, returns no plugin or
// returns a plugin with another TypedName is an error.
func (r *Runtime) instantiate(tn TypedName, params json.RawMessage) (p Plugin, err error) {
	f, ok := r.reg.Factory(tn.Type)
	if !ok {
		return nil, fmt.Errorf("unknown plugin type %q (registered types: %s)", tn.Type, strings.Join(r.reg.Types(), ", "))
	}
	r.mu.RLock()
	_, taken := r.plugins[tn.Name]
	r.mu.RUnlock()
	if taken {
		return nil, fmt.Errorf("a plugin named %q already exists", tn.Name)
	}
	defer func() {
		if v := recover(); v != nil {
			p, err = nil, fmt.Errorf("factory panicked: %v", v)
		}
	}()
	p, err = f(tn.Name, params, r.pluginHandle(tn))
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("factory returned no plugin")
	}
	if got := p.TypedName(); got != tn {
		return nil, fmt.Errorf("factory returned a plugin named %s, want %s", got, tn)
	}
	return p, nil
}

// add registers a built plugin under its name.
func (r *Runtime) add(p Plugin) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plugins[p.TypedName().Name] = p
	r.ordered = append(r.ordered, p)
}

// autoCreate builds a plugin the config did not list (instance name = type) or returns the
// existing plugin of that name when it has that type.
func (r *Runtime) autoCreate(pluginType string, params json.RawMessage) (Plugin, error) {
	tn := TypedName{Type: pluginType, Name: pluginType}
	if p, ok := r.Plugin(pluginType); ok {
		if p.TypedName() == tn {
			return p, nil
		}
		return nil, fmt.Errorf("cannot create a default %q plugin: the name is taken by %s", pluginType, p.TypedName())
	}
	p, err := r.instantiate(tn, params)
	if err != nil {
		return nil, fmt.Errorf("default plugin %s: %w", tn, err)
	}
	r.add(p)
	r.autoCreated = append(r.autoCreated, tn)
	return p, nil
}

// buildProfiles applies the profile defaults and builds the SchedulerProfiles and the handler.
func (r *Runtime) buildProfiles() error {
	var handlers []Plugin
	for _, p := range r.ordered {
		if _, ok := p.(ProfileHandler); ok {
			handlers = append(handlers, p)
		}
	}
	if len(handlers) > 1 {
		return fmt.Errorf("plugins: more than one profile handler: %s (plugins[%d]) and %s (plugins[%d])",
			handlers[0].TypedName(), r.configured[handlers[0].TypedName().Name],
			handlers[1].TypedName(), r.configured[handlers[1].TypedName().Name])
	}

	specs := r.cfg.SchedulingProfiles
	implicit := len(specs) == 0
	if implicit {
		def := ProfileSpec{Name: DefaultProfileName}
		for _, p := range r.ordered {
			_, isF := p.(Filter)
			_, isS := p.(Scorer)
			_, isP := p.(Picker)
			if isF || isS || isP {
				def.Plugins = append(def.Plugins, ProfilePluginRef{PluginRef: p.TypedName().Name})
			}
		}
		specs = []ProfileSpec{def}
	}

	if len(handlers) == 1 {
		r.handler = handlers[0].(ProfileHandler)
	} else {
		if len(specs) > 1 {
			return fmt.Errorf("schedulingProfiles: %d profiles need a profile handler plugin in plugins; %s only handles one",
				len(specs), DefaultProfileHandlerType)
		}
		p, err := r.autoCreate(DefaultProfileHandlerType, nil)
		if err != nil {
			return fmt.Errorf("schedulingProfiles: %w", err)
		}
		h, ok := p.(ProfileHandler)
		if !ok {
			return fmt.Errorf("schedulingProfiles: plugin %s is not a profile handler", p.TypedName())
		}
		r.handler = h
		r.logger.Info("added the default profile handler", "plugin", p.TypedName().String())
	}

	for i, spec := range specs {
		path := fmt.Sprintf("schedulingProfiles[%d]", i)
		if implicit {
			path = fmt.Sprintf("schedulingProfiles (implicit profile %q)", DefaultProfileName)
		}
		prof := &SchedulerProfile{Name: spec.Name}
		for j, ref := range spec.Plugins {
			refPath := fmt.Sprintf("%s.plugins[%d]", path, j)
			p, ok := r.Plugin(ref.PluginRef)
			if !ok {
				return fmt.Errorf("%s.pluginRef: no plugin named %q", refPath, ref.PluginRef)
			}
			f, isF := p.(Filter)
			s, isS := p.(Scorer)
			pk, isP := p.(Picker)
			if !isF && !isS && !isP {
				return fmt.Errorf("%s.pluginRef: plugin %s is not a filter, scorer or picker", refPath, p.TypedName())
			}
			if isF {
				prof.Filters = append(prof.Filters, f)
			}
			if isS {
				w := 1.0
				if ref.Weight != nil {
					w = *ref.Weight
				}
				prof.Scorers = append(prof.Scorers, WeightedScorer{Scorer: s, Weight: w})
			} else if ref.Weight != nil {
				r.logger.Warn("config: weight ignored: plugin is not a scorer", "field", refPath+".weight", "plugin", p.TypedName().String())
			}
			if isP {
				if prof.Picker != nil {
					return fmt.Errorf("%s.pluginRef: profile %q has two pickers: %s and %s",
						refPath, spec.Name, prof.Picker.TypedName(), p.TypedName())
				}
				prof.Picker = pk
			}
		}
		if prof.Picker == nil {
			p, err := r.autoCreate(DefaultPickerType, nil)
			if err != nil {
				return fmt.Errorf("%s: profile %q: %w", path, spec.Name, err)
			}
			pk, ok := p.(Picker)
			if !ok {
				return fmt.Errorf("%s: profile %q: plugin %s is not a picker", path, spec.Name, p.TypedName())
			}
			prof.Picker = pk
			r.logger.Info("profile has no picker; using the default", "profile", spec.Name, "picker", p.TypedName().String())
		}
		r.profiles[spec.Name] = prof
		r.profileOrder = append(r.profileOrder, spec.Name)
	}
	return nil
}

// Config returns the normalised config the runtime was built from. Callers must not modify it.
func (r *Runtime) Config() *EndpointPickerConfig { return r.cfg }

// Handle returns the runtime's handle (the one plugins got, without a plugin-specific logger).
func (r *Runtime) Handle() Handle { return &runtimeHandle{r: r, logger: r.logger} }

// PluginState returns the per-request store shared by all extension points.
func (r *Runtime) PluginState() *PluginState { return r.pluginState }

// Plugin returns a plugin instance by name: configured or created by the runtime.
func (r *Runtime) Plugin(name string) (Plugin, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.plugins[name]
	return p, ok
}

// Plugins returns every plugin instance: configured ones in config order, then the ones the
// runtime created.
func (r *Runtime) Plugins() []Plugin {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.ordered)
}

// AutoCreated returns the plugins the runtime created because the config did not list them
// (profile handler, picker, default producers), in creation order.
func (r *Runtime) AutoCreated() []TypedName { return slices.Clone(r.autoCreated) }

// Profiles returns the scheduling profiles by name. Callers must not modify them.
func (r *Runtime) Profiles() map[string]*SchedulerProfile { return r.profiles }

// ProfileNames returns the profile names in config order.
func (r *Runtime) ProfileNames() []string { return slices.Clone(r.profileOrder) }

// ProfileHandler returns the profile handler in use.
func (r *Runtime) ProfileHandler() ProfileHandler { return r.handler }

// Start starts the runtime's background work, the plugin-state sweeper, which stops when ctx is
// cancelled (Wait returns then). Plugins with background work start it themselves from
// Handle.Context.
func (r *Runtime) Start(ctx context.Context) {
	r.background.Add(1)
	go func() {
		defer r.background.Done()
		r.pluginState.Run(ctx)
	}()
}

// Wait blocks until the background work started by Start has stopped.
func (r *Runtime) Wait() { r.background.Wait() }

// EndRequest deletes the request's plugin state. The director calls it once per request when
// the request ends, however it ends (success, error, client cancel).
func (r *Runtime) EndRequest(req *LLMRequest) {
	if req != nil {
		r.pluginState.Delete(req.RequestID)
	}
}

// Admit runs every admitter in plugin order; the first refusal is returned wrapped with the
// admitter's name (`admission name/type: ...`). Admitters wrap ErrShed (429) or ErrBadRequest
// (400); any other error maps to 500.
func (r *Runtime) Admit(ctx context.Context, req *LLMRequest, endpoints []*Endpoint) error {
	for _, a := range r.admitters {
		var err error
		r.guard(a, "Admission", func() { err = a.AdmitRequest(ctx, req, endpoints) }, &err)
		if err != nil {
			return fmt.Errorf("admission %s: %w", a.TypedName(), err)
		}
	}
	return nil
}

// Schedule runs PrepareData, Admission and Scheduling for one request. It returns ErrNoEndpoints
// (wrapped) without running any plugin when endpoints is empty.
func (r *Runtime) Schedule(ctx context.Context, req *LLMRequest, endpoints []*Endpoint) (*SchedulingResult, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("scheduling: %w", ErrNoEndpoints)
	}
	if err := r.PrepareData(ctx, req, endpoints); err != nil {
		return nil, err
	}
	if err := r.Admit(ctx, req, endpoints); err != nil {
		return nil, err
	}
	return r.RunScheduling(ctx, req, endpoints)
}

// PreRequest runs every PreRequest plugin in dependency order (HookOrder) with the final result.
// A panicking plugin is logged and skipped.
func (r *Runtime) PreRequest(ctx context.Context, req *LLMRequest, res *SchedulingResult) {
	for _, p := range r.preRequests {
		r.guard(p, "PreRequest", func() { p.PreRequest(ctx, req, res) }, nil)
	}
}

// ResponseHeader runs every ResponseHeader plugin in dependency order (HookOrder).
func (r *Runtime) ResponseHeader(ctx context.Context, req *LLMRequest, resp *Response) {
	for _, p := range r.responseHeaders {
		r.guard(p, "ResponseHeader", func() { p.ResponseHeader(ctx, req, resp) }, nil)
	}
}

// ResponseBody runs every ResponseBody plugin in dependency order (HookOrder) with one streamed
// chunk.
func (r *Runtime) ResponseBody(ctx context.Context, req *LLMRequest, resp *Response, chunk []byte) {
	for _, p := range r.responseBodies {
		r.guard(p, "ResponseBody", func() { p.ResponseBody(ctx, req, resp, chunk) }, nil)
	}
}

// ResponseComplete runs every ResponseComplete plugin in dependency order (HookOrder).
func (r *Runtime) ResponseComplete(ctx context.Context, req *LLMRequest, resp *Response) {
	for _, p := range r.responseCompletes {
		r.guard(p, "ResponseComplete", func() { p.ResponseComplete(ctx, req, resp) }, nil)
	}
}

// guard runs fn and turns a panic of plugin p into a logged error (stored in *errp, wrapping
// ErrInternal, when errp is non-nil), so that no plugin can bring the EPP down.
func (r *Runtime) guard(p Plugin, point string, fn func(), errp *error) {
	defer r.timed(p, point)()
	defer func() {
		if v := recover(); v != nil {
			r.logger.Error("plugin panicked", "plugin", p.TypedName().String(), "extensionPoint", point,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if errp != nil {
				*errp = fmt.Errorf("%s panicked: %v: %w", point, v, ErrInternal)
			}
		}
	}()
	fn()
}

// runtimeHandle is the Handle given to plugins.
type runtimeHandle struct {
	r      *Runtime
	logger *slog.Logger
}

func (r *Runtime) pluginHandle(tn TypedName) Handle {
	return &runtimeHandle{r: r, logger: r.logger.With("plugin", tn.String())}
}

func (h *runtimeHandle) Context() context.Context          { return h.r.ctx }
func (h *runtimeHandle) PluginState() *PluginState         { return h.r.pluginState }
func (h *runtimeHandle) Plugin(name string) (Plugin, bool) { return h.r.Plugin(name) }
func (h *runtimeHandle) Clock() clock.WithTicker           { return h.r.clock }
func (h *runtimeHandle) Seed() int64                       { return h.r.seed }
func (h *runtimeHandle) Logger() *slog.Logger              { return h.logger }
func (h *runtimeHandle) Endpoints() []*EndpointMetadata    { return h.r.endpoints() }

func typedNamesString(tns []TypedName) string {
	parts := make([]string, len(tns))
	for i, tn := range tns {
		parts[i] = tn.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// timed starts timing one plugin call for RuntimeOptions.ObservePlugin; call the returned
// function when the call ends. Without an observer it costs nothing.
func (r *Runtime) timed(p Plugin, point string) func() {
	if r.observe == nil {
		return func() {}
	}
	start := time.Now()
	return func() { r.observe(p.TypedName(), point, time.Since(start)) }
}
