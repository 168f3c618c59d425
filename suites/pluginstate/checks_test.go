package pluginstate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/selfcheck/mutant"
	"github.com/eppkit/eppkit/selfcheck/mutant/wrap"
)

// variant names the producer under test.
type variant string

const (
	variantReal      variant = prefix.ProducerType   // approx-prefix-cache-producer
	variantScoreOnly variant = scoreOnlyProducerType // negative control
)

// mode says how the producer enters the runtime.
type mode string

const (
	// explicit: the producer is a configured plugin; the only profile scores with queue-scorer.
	explicit mode = "explicit"
	// autoCreated: nothing configures a producer; the profile's observer filter consumes
	// PrefixCacheMatchInfo, so the runtime instantiates the registered default producer.
	autoCreated mode = "auto-created"
	// scoredBy: the producer is configured and also a scorer of the profile (weight 0.1). Only
	// meaningful for the negative control: with its Score running, the faulty variant works,
	// which shows the control fails for the reason it models.
	scoredBy mode = "scored"
)

const (
	poolSize = 4
	// promptBlocks is the prompt length in blocks of the default 16 tokens (64 characters).
	promptBlocks = 40
	blockChars   = prefix.DefaultBlockSizeTokens * prefix.AverageCharactersPerToken
	// sharedBlocks of the first prompt start the second one.
	sharedBlocks = 25
)

func configFor(v variant, m mode) string {
	head := "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
	switch m {
	case explicit:
		return head + fmt.Sprintf(`plugins:
- type: %s
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
`, v)
	case scoredBy:
		return head + fmt.Sprintf(`plugins:
- type: %s
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: %s
    weight: 0.1
`, v, v)
	}
	return head + fmt.Sprintf(`plugins:
- type: queue-scorer
- type: %s
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: %s
  - pluginRef: queue-scorer
`, observerType, observerType)
}

// env is one runtime on a fake clock over a pool of poolSize endpoints.
type env struct {
	ctx   context.Context
	rt    *framework.Runtime
	clock *clocktesting.FakeClock
	state *framework.PluginState
	pool  []*framework.EndpointMetadata
	rnd   *rand.Rand
	seed  int64
	// producer is the instance name of the producer under test.
	producer string
}

func newEnv(ctx context.Context, v variant, m mode, seed int64) (*env, error) {
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	// In a mutant build (`make mutants`) the active mutant's wrapper plugin replaces the one it breaks.
	if err := wrap.Registry(reg, mutant.Active()); err != nil {
		return nil, err
	}
	reg.MustRegister(scoreOnlyProducerType, scoreOnlyProducerFactory)
	reg.MustRegister(observerType, observerFactory)
	if v == variantScoreOnly {
		reg.RegisterDefaultProducer(prefix.PrefixCacheMatchInfoKey, scoreOnlyProducerType)
	}
	cfg, err := framework.LoadConfig([]byte(configFor(v, m)))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	state := framework.NewPluginState(fc, 0, 0)
	pool := make([]*framework.EndpointMetadata, poolSize)
	for i := range pool {
		name := fmt.Sprintf("vllm-%d", i)
		pool[i] = &framework.EndpointMetadata{Namespace: "pluginstate", Name: name, PodName: name,
			Address: fmt.Sprintf("127.0.10.%d", i+1), Port: 8000}
	}
	rt, err := framework.NewRuntime(cfg, reg, framework.RuntimeOptions{
		Context: ctx, Clock: fc, Seed: seed, PluginState: state,
		Logger:    slog.New(slog.DiscardHandler),
		Endpoints: func() []*framework.EndpointMetadata { return pool },
	})
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	e := &env{ctx: ctx, rt: rt, clock: fc, state: state, pool: pool, seed: seed,
		rnd: rand.New(rand.NewPCG(uint64(seed), 0x70_6c_75_67))}
	for _, p := range rt.Plugins() {
		if tn := p.TypedName(); tn.Type == string(v) {
			e.producer = tn.Name
		}
	}
	if e.producer == "" {
		return nil, fmt.Errorf("no %s instance in the runtime", v)
	}
	return e, nil
}

// endpoints returns fresh request snapshots in which pool[pick] has an empty waiting queue and
// the others a queue of 10, so queue-scorer makes pool[pick] the pick.
func (e *env) endpoints(pick int) []*framework.Endpoint {
	out := make([]*framework.Endpoint, len(e.pool))
	for i, md := range e.pool {
		q := 10
		if i == pick {
			q = 0
		}
		out[i] = framework.NewEndpoint(md, &framework.Metrics{WaitingQueueSize: q, UpdateTime: e.clock.Now()})
	}
	return out
}

// prompt returns n random characters of lower-case words.
func (e *env) prompt(n int) string {
	var b strings.Builder
	for b.Len() < n {
		w := 2 + e.rnd.IntN(8)
		for range w {
			b.WriteByte(byte('a' + e.rnd.IntN(26)))
		}
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

func request(id, prompt string) *framework.LLMRequest {
	return &framework.LLMRequest{RequestID: id, TargetModel: "pluginstate-model",
		Body: &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: prompt}}}
}

// matchBlocks reads the producer's attribute from each endpoint (−1 when absent or mistyped).
func matchBlocks(eps []*framework.Endpoint) []int {
	out := make([]int, len(eps))
	for i, ep := range eps {
		info, ok := framework.AttributeAs[*prefix.PrefixCacheMatchInfo](ep, prefix.PrefixCacheMatchInfoKey)
		if !ok || info == nil {
			out[i] = -1
			continue
		}
		out[i] = info.MatchBlocks
	}
	return out
}

// schedule runs Schedule and checks the pick is pool[pick].
func (e *env) schedule(req *framework.LLMRequest, pick int) ([]*framework.Endpoint, *framework.SchedulingResult, error) {
	eps := e.endpoints(pick)
	res, err := e.rt.Schedule(e.ctx, req, eps)
	if err != nil {
		return nil, nil, fmt.Errorf("request %s: Schedule: %w", req.RequestID, err)
	}
	if got := res.Primary().TargetEndpoints[0].Key(); got != e.pool[pick].Key() {
		return nil, nil, fmt.Errorf("request %s: picked %s, the fixture expects %s", req.RequestID, got, e.pool[pick].Key())
	}
	return eps, res, nil
}

// check is one plugin-state rule; it returns nil when the rule holds.
type check struct {
	name string
	run  func(e *env) error
}

var checks = []check{
	{"state written during PrepareData", checkStateWrittenDuringPrepareData},
	{"PreRequest indexes the pick", checkPreRequestIndexesPick},
	{"state deleted by PreRequest", checkStateDeletedByPreRequest},
	{"abandoned state swept after the TTL", checkAbandonedStateSwept},
	{"running sweeper removes abandoned state", checkRunningSweeper},
	{"1,000 concurrent requests leave the store empty and indexed", checkConcurrentRequests},
}

// checkStateWrittenDuringPrepareData: after the PrepareData phase alone, the producer's state for
// the request exists and every candidate carries the attribute.
func checkStateWrittenDuringPrepareData(e *env) error {
	req := request("prepare-only", e.prompt(promptBlocks*blockChars))
	defer e.rt.EndRequest(req)
	eps := e.endpoints(0)
	if err := e.rt.PrepareData(e.ctx, req, eps); err != nil {
		return fmt.Errorf("PrepareData: %w", err)
	}
	for i, mb := range matchBlocks(eps) {
		if mb != 0 {
			return fmt.Errorf("cold index: endpoint %s has MatchBlocks %d, want 0 (attribute present on every candidate)", e.pool[i].Key(), mb)
		}
	}
	if n := e.state.Len(); n != 1 {
		return fmt.Errorf("after PrepareData the plugin state holds %d requests, want 1 (the producer's)", n)
	}
	return nil
}

// checkPreRequestIndexesPick: PreRequest indexes the pick, and the next request sharing the
// prefix sees MatchBlocks > 0 on that endpoint only.
func checkPreRequestIndexesPick(e *env) error {
	first := e.prompt(promptBlocks * blockChars)
	req1 := request("first", first)
	_, res, err := e.schedule(req1, 2)
	if err != nil {
		return err
	}
	e.rt.PreRequest(e.ctx, req1, res)
	e.rt.EndRequest(req1)

	req2 := request("second", first[:sharedBlocks*blockChars]+e.prompt((promptBlocks-sharedBlocks)*blockChars))
	eps, res2, err := e.schedule(req2, 0)
	if err != nil {
		return err
	}
	defer func() { e.rt.PreRequest(e.ctx, req2, res2); e.rt.EndRequest(req2) }()
	got := matchBlocks(eps)
	want := []int{0, 0, sharedBlocks, 0}
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("second request's MatchBlocks per endpoint = %v, want %v (the first request's pick %s only)",
				got, want, e.pool[2].Key())
		}
	}
	return nil
}

// checkStateDeletedByPreRequest: after PreRequest the store holds nothing for the request, with no
// EndRequest call. (Vacuous for a producer that never wrote state.)
func checkStateDeletedByPreRequest(e *env) error {
	req := request("deleted", e.prompt(promptBlocks*blockChars))
	_, res, err := e.schedule(req, 1)
	if err != nil {
		return err
	}
	e.rt.PreRequest(e.ctx, req, res)
	if n := e.state.Len(); n != 0 {
		e.rt.EndRequest(req)
		return fmt.Errorf("after PreRequest the plugin state holds %d requests, want 0", n)
	}
	return nil
}

// checkAbandonedStateSwept: state of a request that never reaches PreRequest survives until the
// TTL and is removed by the first sweep after it.
func checkAbandonedStateSwept(e *env) error {
	req := request("abandoned", e.prompt(promptBlocks*blockChars))
	if err := e.rt.PrepareData(e.ctx, req, e.endpoints(0)); err != nil {
		return fmt.Errorf("PrepareData: %w", err)
	}
	if n := e.state.Len(); n != 1 {
		return fmt.Errorf("after PrepareData the plugin state holds %d requests, want 1: nothing to sweep", n)
	}
	e.clock.Step(framework.DefaultPluginStateTTL - time.Second)
	if n := e.state.Sweep(); n != 0 || e.state.Len() != 1 {
		return fmt.Errorf("a sweep 1 s before the TTL removed %d requests, want 0", n)
	}
	e.clock.Step(2 * time.Second)
	if n := e.state.Sweep(); n != 1 || e.state.Len() != 0 {
		return fmt.Errorf("a sweep 1 s after the TTL removed %d requests (%d left), want 1 (0 left)", n, e.state.Len())
	}
	return nil
}

// checkRunningSweeper: with the runtime's sweeper running, abandoned state disappears once the
// fake clock passes the TTL, and not before.
func checkRunningSweeper(e *env) error {
	req := request("abandoned-running", e.prompt(promptBlocks*blockChars))
	if err := e.rt.PrepareData(e.ctx, req, e.endpoints(0)); err != nil {
		return fmt.Errorf("PrepareData: %w", err)
	}
	if n := e.state.Len(); n != 1 {
		return fmt.Errorf("after PrepareData the plugin state holds %d requests, want 1: nothing to sweep", n)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	e.rt.Start(ctx)
	start := e.clock.Now()
	deadline := time.Now().Add(10 * time.Second)
	for e.state.Len() != 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the running sweeper left the abandoned state after %v of fake time", e.clock.Since(start))
		}
		e.clock.Step(10 * time.Second)
		time.Sleep(time.Millisecond)
	}
	if elapsed := e.clock.Since(start); elapsed <= framework.DefaultPluginStateTTL {
		return fmt.Errorf("the sweeper removed the state after %v, before the TTL %v", elapsed, framework.DefaultPluginStateTTL)
	}
	return nil
}

// checkConcurrentRequests: 1,000 requests through Schedule and PreRequest at once leave the store
// empty, and each request's pick is indexed (a probe of its prompt matches on its pick).
func checkConcurrentRequests(e *env) error {
	const n = 1000
	prompts := make([]string, n)
	for i := range prompts {
		prompts[i] = fmt.Sprintf("request %04d: ", i) + e.prompt(8*blockChars)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := request(fmt.Sprintf("concurrent-%04d", i), prompts[i])
			_, res, err := e.schedule(req, i%poolSize)
			if err != nil {
				errs <- err
				return
			}
			e.rt.PreRequest(e.ctx, req, res)
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		return fmt.Errorf("%d of %d requests failed: %w", len(all), n, errors.Join(all[:min(3, len(all))]...))
	}
	if l := e.state.Len(); l != 0 {
		return fmt.Errorf("after %d concurrent requests the plugin state holds %d requests, want 0", n, l)
	}
	for _, i := range []int{0, 1, 2, 3, 499, 998, 999} {
		probe := request(fmt.Sprintf("probe-%04d", i), prompts[i])
		eps := e.endpoints(0)
		if err := e.rt.PrepareData(e.ctx, probe, eps); err != nil {
			return fmt.Errorf("probe %d: %w", i, err)
		}
		e.rt.EndRequest(probe)
		if got := matchBlocks(eps)[i%poolSize]; got <= 0 {
			return fmt.Errorf("request %d was not indexed on its pick %s: probe MatchBlocks %v", i, e.pool[i%poolSize].Key(), matchBlocks(eps))
		}
	}
	return nil
}
