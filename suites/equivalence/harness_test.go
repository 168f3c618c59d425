package equivalence_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/onsi/ginkgo/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/internal/testseed"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
	"github.com/eppkit/eppkit/reference/plugins/filters"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/selfcheck/mutant"
	"github.com/eppkit/eppkit/selfcheck/mutant/wrap"
	"github.com/eppkit/eppkit/selfcheck/prefixworkload"
)

// Workload size (the brief: at least 20 seeds × 500 requests).
const (
	numWorkloads        = 20
	requestsPerWorkload = 500
)

// reproCommand reproduces one workload.
func reproCommand(base int64, focus string) string {
	return testseed.Repro{Seed: base, Suite: "equivalence", LabelFilter: "equivalence", Focus: focus, Race: true}.Command()
}

// shape is the per-workload configuration drawn from the workload's seed.
type shape struct {
	BlockSizeTokens int
	MaxBlocks       int
	LRUCapacity     int
	AutoTune        bool
	// PoolBlockSize is the vllm:cache_config_info{block_size} every endpoint reports (0 = none):
	// a pool has one KV block size (upstream getBlockSize's assumption), so the legacy scorer,
	// which sees only the filtered candidates, and the producer, which sees all of them, read the
	// same value.
	PoolBlockSize int
	// Filter is the filter before the scorers: "" none, "subset" the suite's seeded
	// random-subset filter (keep probability Keep), "header" header-based-testing-filter with a
	// random non-empty selection of the pool in every request's header.
	Filter string
	Keep   float64
	// ParamsOnScorer gives the producer parameters to prefix-cache-scorer (the old-config path:
	// the runtime auto-creates the producer with them) instead of configuring the producer.
	ParamsOnScorer bool
	// LoadScorers adds queue-scorer and kv-cache-utilization-scorer, so picks depend on metrics.
	LoadScorers bool
	// PrefillDecode adds a "prefill" profile (its own subset filter, the same prefix scorer, its
	// own picker) beside the "decode" one, with the suite's prefill/decode profile handler.
	PrefillDecode bool
}

func drawShape(rng *rand.Rand) shape {
	s := shape{
		BlockSizeTokens: []int{1, 2, 4, 16}[rng.IntN(4)],
		MaxBlocks:       []int{3, 8, 32, 256}[rng.IntN(4)],
		AutoTune:        rng.IntN(2) == 0,
		Filter:          []string{"", "subset", "subset", "header"}[rng.IntN(4)],
		Keep:            0.3 + 0.6*rng.Float64(),
		ParamsOnScorer:  rng.IntN(3) == 0,
		LoadScorers:     rng.IntN(4) > 0,
		PrefillDecode:   rng.IntN(4) == 0,
	}
	// Capacities of one to four requests' worth of blocks: small enough that LRUs evict across
	// requests, large enough that a request's own block 0 survives it so prefixes can match.
	// (Capacities below one request's blocks come from num_gpu_blocks under autoTune.)
	s.LRUCapacity = max(2, s.MaxBlocks*(1+rng.IntN(4)))
	if rng.IntN(2) == 0 {
		s.PoolBlockSize = []int{1, 4, 8}[rng.IntN(3)]
	}
	return s
}

// producerParams is the JSON `parameters` both prefix implementations are given.
func (s shape) producerParams() string {
	return fmt.Sprintf(`{"autoTune": %t, "blockSizeTokens": %d, "maxPrefixBlocksToMatch": %d, "lruCapacityPerServer": %d}`,
		s.AutoTune, s.BlockSizeTokens, s.MaxBlocks, s.LRUCapacity)
}

// configYAML renders one pipeline. legacyType "" renders pipeline B (producer + thin scorer);
// otherwise pipeline A with that legacy scorer type.
func (s shape) configYAML(legacyType string, filterSeed int64) string {
	var b strings.Builder
	b.WriteString("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n")
	b.WriteString("prepareData:\n  timeoutMs: 600000\nplugins:\n")
	switch {
	case legacyType != "":
		fmt.Fprintf(&b, "- name: prefix\n  type: %s\n  parameters:\n    inner: %s\n    innerParameters: %s\n",
			recorderType, legacyType, s.producerParams())
	case s.ParamsOnScorer:
		fmt.Fprintf(&b, "- name: prefix\n  type: %s\n  parameters:\n    inner: %s\n    innerParameters: %s\n",
			recorderType, prefix.ScorerType, s.producerParams())
	default:
		fmt.Fprintf(&b, "- name: producer\n  type: %s\n  parameters: %s\n", prefix.ProducerType, s.producerParams())
		fmt.Fprintf(&b, "- name: prefix\n  type: %s\n  parameters:\n    inner: %s\n", recorderType, prefix.ScorerType)
	}
	switch s.Filter {
	case "subset":
		fmt.Fprintf(&b, "- name: filter\n  type: %s\n  parameters: {seed: %d, keep: %g}\n", subsetFilterType, filterSeed, s.Keep)
	case "header":
		fmt.Fprintf(&b, "- name: filter\n  type: %s\n", filters.HeaderBasedTestingFilterType)
	}
	if s.LoadScorers {
		b.WriteString("- name: queue\n  type: queue-scorer\n- name: kv\n  type: kv-cache-utilization-scorer\n")
	}
	b.WriteString("- name: picker\n  type: max-score-picker\n")
	profile := "default"
	if s.PrefillDecode {
		profile = "decode"
		fmt.Fprintf(&b, "- name: handler\n  type: %s\n", prefillDecodeHandlerType)
		fmt.Fprintf(&b, "- name: prefill-filter\n  type: %s\n  parameters: {seed: %d, keep: 0.5}\n", subsetFilterType, filterSeed+1)
		b.WriteString("- name: prefill-picker\n  type: max-score-picker\n")
	}
	b.WriteString("schedulingProfiles:\n")
	if s.PrefillDecode {
		b.WriteString("- name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n  - pluginRef: prefix\n    weight: 3\n  - pluginRef: prefill-picker\n")
	}
	fmt.Fprintf(&b, "- name: %s\n  plugins:\n", profile)
	if s.Filter != "" {
		b.WriteString("  - pluginRef: filter\n")
	}
	b.WriteString("  - pluginRef: prefix\n    weight: 3\n")
	if s.LoadScorers {
		b.WriteString("  - pluginRef: queue\n    weight: 2\n  - pluginRef: kv\n    weight: 2\n")
	}
	b.WriteString("  - pluginRef: picker\n")
	return b.String()
}

// pipeline is one built runtime with the handles the suite compares.
type pipeline struct {
	rt   *framework.Runtime
	sink *scoreSink
	yaml string
	// contents returns the prefix index per endpoint (sorted hashes); purge tells the index an
	// endpoint left (by key), sweep runs the departed-endpoint sweep against the pool.
	contents func() map[string][]uint64
	remove   func(key string)
	sweep    func() []string
}

func suiteRegistry(sink *scoreSink) *framework.Registry {
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	// In a mutant build (`make mutants`) the active mutant's wrapper plugin replaces the one it breaks.
	if err := wrap.Registry(reg, mutant.Active()); err != nil {
		panic(err)
	}
	reg.MustRegister(recorderType, recorderFactory(reg, sink))
	reg.MustRegister(subsetFilterType, subsetFilterFactory)
	reg.MustRegister(offByOneType, offByOneFactory)
	reg.MustRegister(candidatesOnlyType, candidatesOnlyFactory)
	reg.MustRegister(prefillDecodeHandlerType, prefillDecodeHandlerFactory)
	return reg
}

// buildPipeline loads yaml and builds it through framework.NewRuntime.
func buildPipeline(ctx context.Context, yaml string, seed int64, pool func() []*framework.EndpointMetadata, logger *slog.Logger) (*pipeline, error) {
	cfg, err := framework.LoadConfig([]byte(yaml))
	if err != nil {
		return nil, fmt.Errorf("load config: %w\n%s", err, yaml)
	}
	sink := &scoreSink{}
	rt, err := framework.NewRuntime(cfg, suiteRegistry(sink), framework.RuntimeOptions{
		Context:   ctx,
		Clock:     clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0)),
		Seed:      seed,
		Logger:    logger,
		Endpoints: pool,
	})
	if err != nil {
		return nil, fmt.Errorf("build runtime: %w\n%s", err, yaml)
	}
	p := &pipeline{rt: rt, sink: sink, yaml: yaml}
	rec, ok := rt.Plugin("prefix")
	if !ok {
		return nil, fmt.Errorf("no plugin named prefix")
	}
	inner := rec.(*recordingScorer).Inner()
	if li, ok := inner.(legacyIndex); ok {
		p.contents, p.remove, p.sweep = li.IndexContents, li.RemoveEndpoint, li.PurgeDeparted
		return p, nil
	}
	var prod *prefix.Producer
	for _, pl := range rt.Plugins() {
		if pp, ok := pl.(*prefix.Producer); ok {
			prod = pp
		}
	}
	if prod == nil {
		return nil, fmt.Errorf("pipeline has neither a legacy scorer nor an %s", prefix.ProducerType)
	}
	p.contents, p.remove, p.sweep = prod.Index().Contents, prod.RemoveEndpoint, prod.SweepDeparted
	return p, nil
}

// divergence describes the first request on which the pipelines disagree.
type divergence struct {
	Request int
	What    string
	Summary string
	Diff    string
	// Shape and the two pipelines' YAML, filled in by runWorkload.
	Shape        shape
	LegacyYAML   string
	ProducerYAML string
}

// String is the failure report: the request, what differed and the go-cmp diff, then the
// workload's shape and both configs.
func (d *divergence) String() string {
	return fmt.Sprintf("first diverging request #%d (%s): %s differ (-legacy +producer):\n%s\nworkload shape: %+v\n"+
		"pipeline A (legacy):\n%s\npipeline B (producer):\n%s",
		d.Request, d.Summary, d.What, d.Diff, d.Shape, d.LegacyYAML, d.ProducerYAML)
}

// pool is the set of endpoints in the pool, shared by both pipelines through Handle.Endpoints.
type pool struct {
	mu  sync.Mutex
	eps []*framework.EndpointMetadata
}

func (p *pool) list() []*framework.EndpointMetadata {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.eps)
}

// runStats counts what a workload exercised, so a vacuous run is visible.
type runStats struct {
	Requests, Scheduled, WithMatch, Joins, Leaves, Filtered, Chat int
	// PrefillElsewhere counts requests whose prefill target differs from the decode target.
	PrefillElsewhere, MaxIndex int
}

// runWorkload drives both pipelines through one randomised workload and returns the first
// divergence (nil when none) or a harness error.
// force, when non-nil, overrides parts of the drawn shape (the negative controls use it to make
// the situation their bug needs likely).
func runWorkload(seed int64, legacyType string, n int, force func(*shape)) (d *divergence, st runStats, err error) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	sh := drawShape(rng)
	if force != nil {
		force(&sh)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := slog.New(slog.NewTextHandler(ginkgo.GinkgoWriter, &slog.HandlerOptions{Level: slog.LevelWarn}))

	pl := &pool{}
	w := prefixworkload.New(rng, prefixworkload.Config{MaxBlocks: sh.MaxBlocks, PoolBlockSize: sh.PoolBlockSize,
		SelectionHeader: sh.Filter == "header", AllAPIs: true})
	pl.eps = w.InitialPool()

	a, err := buildPipeline(ctx, sh.configYAML(legacyType, seed), seed, pl.list, logger)
	if err != nil {
		return nil, st, err
	}
	b, err := buildPipeline(ctx, sh.configYAML("", seed), seed, pl.list, logger)
	if err != nil {
		return nil, st, err
	}
	defer func() {
		if d != nil {
			d.Shape, d.LegacyYAML, d.ProducerYAML = sh, a.yaml, b.yaml
		}
	}()
	ginkgo.GinkgoWriter.Printf("workload seed %d shape %+v\n", seed, sh)

	for i := range n {
		// Churn: endpoints leave (both indexes are told, by key or by a sweep) and join.
		if ev := w.Churn(); ev != nil {
			pl.mu.Lock()
			pl.eps = w.PoolMetadata()
			pl.mu.Unlock()
			if ev.Left != "" {
				st.Leaves++
				if ev.BySweep {
					ga, gb := a.sweep(), b.sweep()
					if !slices.Equal(ga, gb) {
						return &divergence{Request: i, What: "swept endpoints", Summary: "sweep after " + ev.Left,
							Diff: cmp.Diff(ga, gb)}, st, nil
					}
				} else {
					a.remove(ev.Left)
					b.remove(ev.Left)
				}
			} else {
				st.Joins++
			}
		}
		req, summary := w.Request(i)
		st.Requests++
		if req.Body.ChatCompletions != nil {
			st.Chat++
		}
		epsA, epsB := w.Snapshot(), w.Snapshot()
		resA, errA := a.rt.Schedule(ctx, cloneRequest(req), epsA)
		resB, errB := b.rt.Schedule(ctx, cloneRequest(req), epsB)
		callsA, callsB := a.sink.take(), b.sink.take()
		if (errA == nil) != (errB == nil) {
			return &divergence{Request: i, What: "scheduling errors", Summary: summary,
				Diff: fmt.Sprintf("legacy: %v\nproducer: %v", errA, errB)}, st, nil
		}
		if !reflect.DeepEqual(callsA, callsB) {
			return &divergence{Request: i, What: "scores", Summary: summary, Diff: cmp.Diff(callsA, callsB)}, st, nil
		}
		if errA != nil {
			continue
		}
		st.Scheduled++
		for _, c := range callsA {
			if len(c.Candidates) < len(epsA) {
				st.Filtered++
			}
			for _, v := range c.Scores {
				if v > 0 {
					st.WithMatch++
					break
				}
			}
		}
		if ka, kb := targetKeys(resA), targetKeys(resB); !maps.EqualFunc(ka, kb, slices.Equal) {
			return &divergence{Request: i, What: "picks", Summary: summary, Diff: cmp.Diff(ka, kb)}, st, nil
		}
		if pf := resA.ProfileResults["prefill"]; pf != nil && len(pf.TargetEndpoints) > 0 &&
			pf.TargetEndpoints[0].Key() != resA.Primary().TargetEndpoints[0].Key() {
			st.PrefillElsewhere++
		}
		a.rt.PreRequest(ctx, req, resA)
		b.rt.PreRequest(ctx, req, resB)
		a.rt.EndRequest(req)
		b.rt.EndRequest(req)
		ca, cb := a.contents(), b.contents()
		if !maps.EqualFunc(ca, cb, slices.Equal) {
			return &divergence{Request: i, What: "index contents after PreRequest", Summary: summary, Diff: cmp.Diff(ca, cb)}, st, nil
		}
		total := 0
		for _, hs := range ca {
			total += len(hs)
		}
		st.MaxIndex = max(st.MaxIndex, total)
	}
	return nil, st, nil
}

// targetKeys returns every profile's target keys, in order, and the primary profile's name
// under the key "primary:<name>".
func targetKeys(res *framework.SchedulingResult) map[string][]string {
	out := map[string][]string{"primary:" + res.PrimaryProfileName: nil}
	for name, pr := range res.ProfileResults {
		if pr == nil {
			out[name] = nil
			continue
		}
		keys := make([]string, len(pr.TargetEndpoints))
		for i, ep := range pr.TargetEndpoints {
			keys[i] = ep.Key()
		}
		out[name] = keys
	}
	return out
}

// cloneRequest gives each pipeline its own request value (plugins may not share mutable state).
func cloneRequest(r *framework.LLMRequest) *framework.LLMRequest {
	c := *r
	c.Headers = maps.Clone(r.Headers)
	if r.Body != nil {
		body := *r.Body
		if r.Body.Completions != nil {
			cp := *r.Body.Completions
			body.Completions = &cp
		}
		if r.Body.ChatCompletions != nil {
			cp := *r.Body.ChatCompletions
			cp.Messages = slices.Clone(cp.Messages)
			body.ChatCompletions = &cp
		}
		c.Body = &body
	}
	return &c
}
