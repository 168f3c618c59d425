// Command score-parity feeds the same seeded workloads to upstream GIE v1.5.0's
// approx-prefix-cache-producer + prefix-cache-scorer
// (kubernetes-sigs/gateway-api-inference-extension
// pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix and
// pkg/epp/framework/plugins/scheduling/scorer/prefix) and to eppkit's reference/plugins/prefix,
// and compares every endpoint's score exactly (float64 equality, plus MatchBlocks/TotalBlocks).
// It then benchmarks both PrepareRequestData paths on selfcheck/benchfixture in one run.
//
// The comparison with upstream runs eppkit's producer in its v1.5.0-compatible hashing mode
// (prefix.V150). A chain of further eppkit producers then turns SPEC's amendments of the hashing
// on one by one (D3 parts by identity, D4 character blocks, D5 trailing partial block; see
// amendments) and names, for every endpoint whose match SPEC's hashing changes, the amendment
// that changes it.
//
// Exit status: 0 when every score matched or differs only by D1/D2 (upstream v1.5.0 defects,
// see runWorkload and reports/interop/score-parity.md), 1 on any other mismatch (printed with
// seed, request and endpoint), 2 on setup errors.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"k8s.io/apimachinery/pkg/types"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	uplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	ufw "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	uattr "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"
	uprod "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	uscorer "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/prefix"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/selfcheck/benchfixture"
	"github.com/eppkit/eppkit/selfcheck/prefixworkload"
)

// upstreamEffectiveLRU is upstream v1.5.0's defaultLRUCapacityPerServer, the capacity its
// makeserver always uses when autoTune gives none (approximateprefix/types.go).
const upstreamEffectiveLRU = 31250

func main() {
	seed := flag.Int64("seed", 0, "base seed (0 = time-based; printed)")
	runs := flag.Int("runs", 12, "number of workloads (shapes cycle through the list in shapes())")
	requests := flag.Int("requests", 300, "requests per workload")
	bench := flag.Bool("bench", true, "benchmark both producers on selfcheck/benchfixture")
	flag.Parse()
	if *seed == 0 {
		*seed = time.Now().UnixNano()
	}
	fmt.Printf("score-parity: seed=%d (repro: make interop-score-parity SEED=%d, or cd tools/gie-v1.5.0/score-parity && go run . -seed=%d)\n", *seed, *seed, *seed)
	var total counts
	for r := 0; r < *runs; r++ {
		sh := shapes()[r%len(shapes())]
		s := *seed + int64(r)
		c, err := runWorkload(s, sh, *requests)
		if err != nil {
			fmt.Fprintf(os.Stderr, "score-parity: run %d seed %d shape %+v: %v\n", r, s, sh, err)
			os.Exit(2)
		}
		fmt.Printf("run %2d seed=%d shape=%+v: %d scores compared, %d differ by D1, %d by D2 (%d of them cross-endpoint), %d unexplained mismatches; %d endpoints left the pool; SPEC hashing changes %d matches (%s)\n",
			r, s, sh, c.Compared, c.D1, c.D2, c.D2Cross, c.Unexplained, c.Leaves, c.amendedTotal(), c.amendedString())
		total.add(c)
	}
	fmt.Printf("score-parity: seed=%d: %d scores compared over %d workloads, %d equal, %d differ by D1 (upstream ignores lruCapacityPerServer), %d by D2 (upstream keeps blocks evicted within one request; %d of them on an endpoint holding no such block), %d unexplained mismatches; %d endpoints left the pool\n",
		*seed, total.Compared, *runs, total.Compared-total.D1-total.D2-total.Unexplained, total.D1, total.D2, total.D2Cross, total.Unexplained, total.Leaves)
	fmt.Printf("score-parity: seed=%d: SPEC's hashing (the reference EPP's) vs v1.5.0 mode: %d of %d endpoint matches differ, by amendment: %s\n",
		*seed, total.amendedTotal(), total.SpecCompared, total.amendedString())
	for _, a := range amendments {
		fmt.Printf("  %s: %s\n", a.name, a.rule)
	}
	if *bench {
		if err := benchmark(); err != nil {
			fmt.Fprintf(os.Stderr, "score-parity: benchmark: %v\n", err)
			os.Exit(2)
		}
	}
	if total.Unexplained > 0 {
		os.Exit(1)
	}
}

// shape is one producer configuration and pool kind, as in suites/equivalence's shapes.
type shape struct {
	BlockSizeTokens int
	MaxBlocks       int
	LRUCapacity     int
	AutoTune        bool
	PoolBlockSize   int // vllm:cache_config_info{block_size} every endpoint reports (0 = none)
}

func shapes() []shape {
	return []shape{
		{BlockSizeTokens: 16, MaxBlocks: 256, LRUCapacity: 31250, AutoTune: true},
		{BlockSizeTokens: 16, MaxBlocks: 256, LRUCapacity: 31250, AutoTune: true, PoolBlockSize: 8},
		{BlockSizeTokens: 4, MaxBlocks: 8, LRUCapacity: 20, AutoTune: false},
		{BlockSizeTokens: 2, MaxBlocks: 64, LRUCapacity: 50, AutoTune: true, PoolBlockSize: 4},
		{BlockSizeTokens: 1, MaxBlocks: 300, LRUCapacity: 1000, AutoTune: false},
		{BlockSizeTokens: 32, MaxBlocks: 3, LRUCapacity: 5, AutoTune: true},
	}
}

type params struct {
	AutoTune               bool `json:"autoTune"`
	BlockSizeTokens        int  `json:"blockSizeTokens"`
	MaxPrefixBlocksToMatch int  `json:"maxPrefixBlocksToMatch"`
	LRUCapacityPerServer   int  `json:"lruCapacityPerServer"`
}

func (sh shape) raw() json.RawMessage {
	b, _ := json.Marshal(params{AutoTune: sh.AutoTune, BlockSizeTokens: sh.BlockSizeTokens,
		MaxPrefixBlocksToMatch: sh.MaxBlocks, LRUCapacityPerServer: sh.LRUCapacity})
	return b
}

// pair holds one upstream and one eppkit producer/scorer built from the same parameters.
type pair struct {
	up     uplugin.Plugin
	upPrep interface {
		PrepareRequestData(context.Context, *ufw.LLMRequest, []ufw.Endpoint) error
	}
	upPre interface {
		PreRequest(context.Context, *ufw.LLMRequest, *ufw.SchedulingResult)
	}
	upWG     *sync.WaitGroup
	upScorer *uscorer.Plugin
	ours     *prefix.Producer
	ourSc    *prefix.Scorer
	// eff is a second eppkit producer with lruCapacityPerServer set to upstream's effective value
	// (31250, see the D1 note on runWorkload): a mismatch is explained as D1 iff eff matches
	// upstream exactly where ours does not.
	eff      *prefix.Producer
	ourState *framework.PluginState
	// chain are eppkit producers that turn SPEC's amended hashing rules on one at a time (all
	// with ours' parameters): chain[0] is ours (v1.5.0 mode), chain[k] adds amendments[k-1], the
	// last is SPEC. A score where SPEC and v1.5.0 mode differ is attributed to the first rule
	// whose step changes it (see amendments).
	chain      []*prefix.Producer
	chainState []*framework.PluginState
}

// amendment is one rule by which SPEC §2.1/§9.1 hashing differs from upstream v1.5.0's
// (prefix.HashCompat), named as reports/interop/score-parity.md names it.
type amendment struct {
	name, rule string
	apply      func(*prefix.HashCompat)
}

// The order is the chain's: the rules that touch few requests first, so that the trailing
// partial block, which changes almost every request's TotalBlocks, takes only what the others
// leave.
var amendments = []amendment{
	{"D3", "non-text parts by identity: inline data by digest, file parts, tool calls (SPEC §9.1)", func(c *prefix.HashCompat) { c.V150Chat = false }},
	{"D4", "blocks cut in characters, not bytes (SPEC §2.1)", func(c *prefix.HashCompat) { c.ByteBlocks = false }},
	{"D5", "trailing partial block hashed (SPEC §2.1; GIE PR #2823)", func(c *prefix.HashCompat) { c.NoPartialBlock = false }},
}

func newPair(ctx context.Context, raw json.RawMessage) (*pair, error) {
	h := uplugin.NewEppHandle(ctx, func() []types.NamespacedName { return nil })
	up, err := uprod.ApproxPrefixCacheFactory("p", raw, h)
	if err != nil {
		return nil, fmt.Errorf("upstream producer: %w", err)
	}
	sc, err := uscorer.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("upstream scorer: %w", err)
	}
	oh := newHandle(ctx)
	pp, err := prefix.DecodeProducerParameters(raw)
	if err != nil {
		return nil, fmt.Errorf("eppkit parameters: %w", err)
	}
	// ours and eff hash as v1.5.0 does (prefix.V150), so that they can match upstream exactly;
	// the chain measures SPEC's amendments on top.
	pp.Compat = prefix.V150
	ours, err := prefix.NewProducer("p", pp, oh)
	if err != nil {
		return nil, fmt.Errorf("eppkit producer: %w", err)
	}
	pe := pp
	pe.LRUCapacityPerServer = upstreamEffectiveLRU
	eff, err := prefix.NewProducer("eff", pe, newHandle(ctx))
	if err != nil {
		return nil, fmt.Errorf("eppkit producer (upstream-effective capacity): %w", err)
	}
	osc, err := prefix.NewScorer("s", nil)
	if err != nil {
		return nil, fmt.Errorf("eppkit scorer: %w", err)
	}
	pr := &pair{up: up, upPrep: up.(interface {
		PrepareRequestData(context.Context, *ufw.LLMRequest, []ufw.Endpoint) error
	}), upPre: up.(interface {
		PreRequest(context.Context, *ufw.LLMRequest, *ufw.SchedulingResult)
	}), upWG: upstreamWaitGroup(up), upScorer: sc, ours: ours, eff: eff, ourSc: osc, ourState: oh.state}
	pr.chain, pr.chainState = []*prefix.Producer{ours}, []*framework.PluginState{oh.state}
	compat := prefix.V150
	for i, a := range amendments {
		a.apply(&compat)
		pc := pp
		pc.Compat = compat
		h := newHandle(ctx)
		c, err := prefix.NewProducer(fmt.Sprintf("chain%d", i+1), pc, h)
		if err != nil {
			return nil, fmt.Errorf("eppkit producer (%s): %w", a.name, err)
		}
		pr.chain, pr.chainState = append(pr.chain, c), append(pr.chainState, h.state)
	}
	if compat != (prefix.HashCompat{}) {
		return nil, fmt.Errorf("the amendments do not add up to SPEC's hashing: %+v left", compat)
	}
	return pr, nil
}

// spec is the producer with SPEC's hashing (the reference EPP's), the chain's last.
func (p *pair) spec() *prefix.Producer { return p.chain[len(p.chain)-1] }

// upstreamWaitGroup returns the unexported wg of upstream's prepareData: its PreRequest adds to
// the indexer in a goroutine (plugin.go, p.wg.Go), which upstream's own tests wait on. We wait on
// it too, so a score never depends on goroutine timing. Reflection on a pinned version's struct.
func upstreamWaitGroup(p uplugin.Plugin) *sync.WaitGroup {
	f := reflect.ValueOf(p).Elem().FieldByName("wg")
	if !f.IsValid() || f.Type() != reflect.TypeOf(sync.WaitGroup{}) {
		panic("upstream approx-prefix-cache-producer has no wg sync.WaitGroup field: re-check the pinned version")
	}
	return (*sync.WaitGroup)(unsafe.Pointer(f.UnsafeAddr()))
}

// runWorkload runs n requests of the suites/equivalence workload (selfcheck/prefixworkload:
// shared templates, chat and completions shapes, models, salts, a pool of 1–16 endpoints with
// optional small num_gpu_blocks, shuffled candidate order, endpoints leaving and joining) through
// both producers and scorers, and counts the compared scores by outcome.
//
// D1 (reports/interop/score-parity.md): upstream v1.5.0's PreRequest builds the indexed server
// with NumOfGPUBlocks = defaultLRUCapacityPerServer (31250) unless autoTune and the endpoint
// reports num_gpu_blocks (approximateprefix/plugin.go makeserver), and the indexer only falls back
// to the configured lruCapacityPerServer when NumOfGPUBlocks <= 0 (indexer.go Add), so a
// configured lruCapacityPerServer never takes effect. eppkit honours it (SPEC §2.2). A mismatch
// is counted as D1 only when an eppkit producer given capacity 31250 reproduces upstream exactly.
//
// D2: upstream's indexer.Add first adds every hash to the endpoint's LRU (evicting, which removes
// the evicted hash from hashToPods) and then adds every hash to hashToPods, so when one request
// has more blocks than the endpoint's capacity, the blocks evicted during that same Add stay in
// hashToPods with no LRU entry to ever evict them ("ghost" blocks). eppkit's index holds only what
// the LRU holds (SPEC §2.2). The ghosts change matches in two ways: the endpoint itself matches
// its ghost blocks, and, because a walk stops only at a block no endpoint holds (SPEC §2.2,
// upstream matchLongestPrefix), a ghost block 0 (or k) keeps upstream's walk going where eppkit's
// stops, crediting other endpoints with the blocks they hold after it. A mismatch is counted as D2
// only when d2Model, built from the D1 producer's index plus upstream's ghost entries (each of
// which must come from an overflowing request), reproduces upstream's MatchBlocks exactly.
func runWorkload(seed int64, sh shape, n int) (counts, error) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := newPair(ctx, sh.raw())
	if err != nil {
		return counts{}, err
	}
	w := prefixworkload.New(rng, prefixworkload.Config{MaxBlocks: sh.MaxBlocks, PoolBlockSize: sh.PoolBlockSize, ValidUTF8: true})
	w.InitialPool()
	mds := map[string]*framework.EndpointMetadata{} // by Key(), every endpoint ever in the pool
	names := map[string]string{}                    // by Key(): Name
	remember := func() {
		for _, e := range w.InPool() {
			mds[e.Metadata.Key()], names[e.Metadata.Key()] = e.Metadata, e.Metadata.Name
		}
	}
	remember()
	var c counts
	// ghostable[name] holds the hashes upstream may keep as ghosts for that endpoint (D2): the
	// first len(hashes)−capacity hashes of every request indexed on it with more blocks than its
	// upstream capacity.
	ghostable := map[string]map[uint64]bool{}
	uv := newUpstreamView(p.up)
	for i := range n {
		// Churn: an endpoint that leaves is removed from all three indexes at once (upstream
		// removes it with indexer.RemovePod, what its CleanUpInactivePods runs every 2 min).
		if ev := w.Churn(); ev != nil && ev.Left != "" {
			c.Leaves++
			p.ours.RemoveEndpoint(ev.Left)
			p.eff.RemoveEndpoint(ev.Left)
			md := mds[ev.Left]
			uv.removePod(types.NamespacedName{Namespace: md.Namespace, Name: md.Name})
		}
		req, summary := w.Request(i)
		eps := w.InPool()
		remember()
		ureq, err := toUpstream(req)
		if err != nil {
			return counts{}, fmt.Errorf("%s: %w", summary, err)
		}
		ours, effs := w.Snapshot(), w.Snapshot()
		ups := make([]ufw.Endpoint, len(eps))
		for j, e := range eps {
			md := e.Metadata
			ups[j] = ufw.NewEndpoint(&fwkdl.EndpointMetadata{
				NamespacedName: types.NamespacedName{Namespace: md.Namespace, Name: md.Name},
				PodName:        md.PodName, Address: md.Address, Port: fmt.Sprint(md.Port)},
				&fwkdl.Metrics{CacheBlockSize: e.Metrics.CacheBlockSize, CacheNumBlocks: e.Metrics.CacheNumGPUBlocks}, nil)
		}
		if err := p.ours.PrepareRequestData(ctx, req, ours); err != nil {
			return counts{}, fmt.Errorf("%s: eppkit PrepareRequestData: %w", summary, err)
		}
		if err := p.upPrep.PrepareRequestData(ctx, ureq, ups); err != nil {
			return counts{}, fmt.Errorf("%s: upstream PrepareRequestData: %w", summary, err)
		}
		if err := p.eff.PrepareRequestData(ctx, req, effs); err != nil {
			return counts{}, fmt.Errorf("%s: eppkit (effective) PrepareRequestData: %w", summary, err)
		}
		chainEps := make([][]*framework.Endpoint, len(p.chain))
		chainEps[0] = ours
		for k := 1; k < len(p.chain); k++ {
			chainEps[k] = w.Snapshot()
			if err := p.chain[k].PrepareRequestData(ctx, req, chainEps[k]); err != nil {
				return counts{}, fmt.Errorf("%s: eppkit (%s) PrepareRequestData: %w", summary, amendments[k-1].name, err)
			}
		}
		hashes, err := requestHashes(p, req)
		if err != nil {
			return counts{}, fmt.Errorf("%s: %w", summary, err)
		}
		oscores := p.ourSc.Score(ctx, nil, req, ours)
		uscores := p.upScorer.Score(ctx, nil, ureq, ups)
		var model *d2Model // built at the first mismatch D1 does not explain
		for j := range eps {
			// SPEC vs v1.5.0 mode, attributed to the first amendment whose step changes the
			// endpoint's match.
			prevM, prevT := matchInfo(chainEps[0][j])
			c.SpecCompared++
			for k := 1; k < len(p.chain); k++ {
				m, t := matchInfo(chainEps[k][j])
				if m != prevM || t != prevT {
					c.Amended[k-1]++
					break
				}
			}
		}
		for j, e := range eps {
			o := oscores[e.Metadata.Key()]
			u := uscores[ups[j]]
			om, ot := matchInfo(ours[j])
			um, ut := upMatchInfo(ups[j])
			em, et := matchInfo(effs[j])
			c.Compared++
			if o == u && om == um && ot == ut {
				continue
			}
			if em == um && et == ut {
				c.D1++
				continue
			}
			if model == nil {
				model = buildD2Model(hashes, p.eff.Index(), uv, names, ghostable)
			}
			if model.err == "" && ot == ut && model.matches[e.Metadata.Name] == um {
				c.D2++
				if !model.hasGhost[e.Metadata.Name] {
					c.D2Cross++
				}
				continue
			}
			c.Unexplained++
			fmt.Printf("MISMATCH seed=%d %s endpoint=%s: eppkit %v (%d/%d) upstream %v (%d/%d); D1 model %d/%d; D2 model %d (%s)\n",
				seed, summary, e.Metadata.Name, o, om, ot, u, um, ut, em, et, model.matches[e.Metadata.Name], model.why())
		}
		// Both pick the same random endpoint.
		t := rng.IntN(len(eps))
		if capacity := upstreamCapacity(sh, eps[t]); len(hashes) > capacity {
			g := ghostable[eps[t].Metadata.Name]
			if g == nil {
				g = map[uint64]bool{}
				ghostable[eps[t].Metadata.Name] = g
			}
			for _, h := range hashes[:len(hashes)-capacity] {
				g[h] = true
			}
		}
		p.ours.PreRequest(ctx, req, &framework.SchedulingResult{PrimaryProfileName: "default",
			ProfileResults: map[string]*framework.ProfileRunResult{"default": {TargetEndpoints: []*framework.Endpoint{ours[t]}}}})
		p.eff.PreRequest(ctx, req, &framework.SchedulingResult{PrimaryProfileName: "default",
			ProfileResults: map[string]*framework.ProfileRunResult{"default": {TargetEndpoints: []*framework.Endpoint{effs[t]}}}})
		for k := 1; k < len(p.chain); k++ {
			p.chain[k].PreRequest(ctx, req, &framework.SchedulingResult{PrimaryProfileName: "default",
				ProfileResults: map[string]*framework.ProfileRunResult{"default": {TargetEndpoints: []*framework.Endpoint{chainEps[k][t]}}}})
		}
		p.upPre.PreRequest(ctx, ureq, &ufw.SchedulingResult{PrimaryProfileName: "default",
			ProfileResults: map[string]*ufw.ProfileRunResult{"default": {TargetEndpoints: []ufw.Endpoint{ups[t]}}}})
		p.upWG.Wait()
	}
	return c, nil
}

// upstreamCapacity is the LRU size upstream v1.5.0 gives e (makeserver): num_gpu_blocks under
// autoTune when reported, else 31250.
func upstreamCapacity(sh shape, e *prefixworkload.Endpoint) int {
	if sh.AutoTune && e.Metrics.CacheNumGPUBlocks > 0 {
		return e.Metrics.CacheNumGPUBlocks
	}
	return upstreamEffectiveLRU
}

func matchInfo(ep *framework.Endpoint) (int, int) {
	info, ok := framework.AttributeAs[*prefix.PrefixCacheMatchInfo](ep, prefix.PrefixCacheMatchInfoKey)
	if !ok || info == nil {
		return -1, -1
	}
	return info.MatchBlocks, info.TotalBlocks
}

func upMatchInfo(ep ufw.Endpoint) (int, int) {
	v, ok := ep.Get(uattr.PrefixCacheMatchInfoKey)
	if !ok {
		return -1, -1
	}
	info, ok := v.(*uattr.PrefixCacheMatchInfo)
	if !ok {
		return -1, -1
	}
	return info.MatchBlocks(), info.TotalBlocks()
}

// toUpstream converts a request the way upstream receives it: our body is encoded as the OpenAI
// JSON a client would send (wireBody) and decoded with upstream's own types (Content.UnmarshalJSON etc.).
func toUpstream(req *framework.LLMRequest) (*ufw.LLMRequest, error) {
	out := &ufw.LLMRequest{RequestId: req.RequestID, TargetModel: req.TargetModel, Headers: req.Headers, Body: &ufw.LLMRequestBody{}}
	path, wire, err := wireBody(req)
	if err != nil {
		return nil, err
	}
	switch path {
	case pathCompletions:
		out.Body.Completions = &ufw.CompletionsRequest{}
		if err := json.Unmarshal(wire, out.Body.Completions); err != nil {
			return nil, fmt.Errorf("upstream completions decode: %w", err)
		}
	case pathChat:
		out.Body.ChatCompletions = &ufw.ChatCompletionsRequest{}
		if err := json.Unmarshal(wire, out.Body.ChatCompletions); err != nil {
			return nil, fmt.Errorf("upstream chat decode: %w", err)
		}
	}
	return out, nil
}

// The request paths of the two body kinds the workload draws.
const (
	pathCompletions = "/v1/completions"
	pathChat        = "/v1/chat/completions"
)

// wireBody returns the request path and the OpenAI JSON body a client would send for req.
func wireBody(req *framework.LLMRequest) (string, []byte, error) {
	switch {
	case req.Body.Completions != nil:
		b, err := json.Marshal(map[string]any{"model": req.TargetModel, "prompt": req.Body.Completions.Prompt,
			"cache_salt": req.Body.Completions.CacheSalt})
		return pathCompletions, b, err
	case req.Body.ChatCompletions != nil:
		b, err := json.Marshal(map[string]any{"model": req.TargetModel, "messages": req.Body.ChatCompletions.Messages,
			"cache_salt": req.Body.ChatCompletions.CacheSalt})
		return pathChat, b, err
	}
	return "", nil, fmt.Errorf("%s: neither completions nor chat", req.RequestID)
}

// benchmark measures one PrepareRequestData on the benchfixture (100 endpoints, 8,000-character
// ASCII prompt, 10 full and 30 half matches; SPEC's hashing and v1.5.0's agree on it) for
// upstream and for eppkit's producer with SPEC's hashing (the reference EPP's), in one process,
// and prints the ratio.
func benchmark() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := newPair(ctx, nil)
	if err != nil {
		return err
	}
	mds := benchfixture.EndpointMetadata()
	toUp := func() []ufw.Endpoint {
		out := make([]ufw.Endpoint, len(mds))
		for i, md := range mds {
			out[i] = ufw.NewEndpoint(&fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: md.Namespace, Name: md.Name},
				PodName: md.PodName, Address: md.Address, Port: fmt.Sprint(md.Port)}, fwkdl.NewMetrics(), nil)
		}
		return out
	}
	ours, ourState := p.spec(), p.chainState[len(p.chainState)-1]
	for _, w := range benchfixture.Warmups() {
		eps := benchfixture.NewEndpoints(mds)
		if err := ours.PrepareRequestData(ctx, w.Request, eps); err != nil {
			return err
		}
		ours.PreRequest(ctx, w.Request, &framework.SchedulingResult{PrimaryProfileName: "default",
			ProfileResults: map[string]*framework.ProfileRunResult{"default": {TargetEndpoints: []*framework.Endpoint{eps[w.Target]}}}})
		ureq, err := toUpstream(w.Request)
		if err != nil {
			return err
		}
		ueps := toUp()
		if err := p.upPrep.PrepareRequestData(ctx, ureq, ueps); err != nil {
			return err
		}
		p.upPre.PreRequest(ctx, ureq, &ufw.SchedulingResult{PrimaryProfileName: "default",
			ProfileResults: map[string]*ufw.ProfileRunResult{"default": {TargetEndpoints: []ufw.Endpoint{ueps[w.Target]}}}})
		p.upWG.Wait()
	}
	req := benchfixture.Request("bench", benchfixture.Prompt())
	ureq, err := toUpstream(req)
	if err != nil {
		return err
	}
	eps := benchfixture.NewEndpoints(mds)
	ueps := toUp()
	if err := ours.PrepareRequestData(ctx, req, eps); err != nil {
		return err
	}
	if err := p.upPrep.PrepareRequestData(ctx, ureq, ueps); err != nil {
		return err
	}
	for _, i := range []int{0, benchfixture.NumFull, benchfixture.NumEndpoints - 1} {
		om, ot := matchInfo(eps[i])
		um, ut := upMatchInfo(ueps[i])
		if om != um || ot != ut {
			return fmt.Errorf("fixture endpoint %d: eppkit %d/%d upstream %d/%d", i, om, ot, um, ut)
		}
	}
	ourRes := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = ours.PrepareRequestData(ctx, req, eps)
			ourState.DeleteKey(req.RequestID, ours.StateKey())
		}
	})
	upRes := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = p.upPrep.PrepareRequestData(ctx, ureq, ueps)
			p.up.(interface{ PluginState() *uplugin.PluginState }).PluginState().Delete(ureq.RequestId)
		}
	})
	fmt.Printf("benchmark (benchfixture, PrepareRequestData, GOMAXPROCS=%d):\n", runtime.GOMAXPROCS(0))
	fmt.Printf("  eppkit   approx-prefix-cache-producer: %s %s\n", ourRes, ourRes.MemString())
	fmt.Printf("  upstream approx-prefix-cache-producer: %s %s\n", upRes, upRes.MemString())
	fmt.Printf("  ratio upstream/eppkit ns/op: %.2f\n", float64(upRes.NsPerOp())/float64(ourRes.NsPerOp()))
	return nil
}

// counts are one workload's (or a whole run's) comparison results, in endpoint scores.
type counts struct {
	Compared    int // endpoint scores compared
	D1          int // differing, reproduced by an eppkit producer with upstream's effective capacity
	D2          int // differing, reproduced by that producer plus upstream's ghost blocks (d2Model)
	D2Cross     int // of D2: on an endpoint holding none of the request's ghost blocks
	Unexplained int // differing, explained by neither
	Leaves      int // endpoints that left the pool (and every index)
	// SpecCompared counts endpoints compared between SPEC's hashing and v1.5.0 mode; Amended[k]
	// those whose match (MatchBlocks, TotalBlocks) first changes at amendments[k].
	SpecCompared int
	Amended      [3]int
}

// amendedTotal is the number of endpoints whose match differs under SPEC's hashing.
func (c counts) amendedTotal() int {
	n := 0
	for _, a := range c.Amended {
		n += a
	}
	return n
}

// amendedString lists the SPEC-vs-v1.5.0 differences by amendment name.
func (c counts) amendedString() string {
	var parts []string
	for k, a := range amendments {
		parts = append(parts, fmt.Sprintf("%s %d", a.name, c.Amended[k]))
	}
	return strings.Join(parts, ", ")
}

func (c *counts) add(o counts) {
	c.Compared += o.Compared
	c.D1 += o.D1
	c.D2 += o.D2
	c.D2Cross += o.D2Cross
	c.Unexplained += o.Unexplained
	c.Leaves += o.Leaves
	c.SpecCompared += o.SpecCompared
	for k := range c.Amended {
		c.Amended[k] += o.Amended[k]
	}
}

// requestHashes returns the block hashes eppkit's producer computed for req (its plugin state,
// written by PrepareRequestData and deleted by PreRequest).
func requestHashes(p *pair, req *framework.LLMRequest) ([]uint64, error) {
	v, ok := p.ourState.Read(req.RequestID, p.ours.StateKey())
	if !ok {
		return nil, fmt.Errorf("eppkit producer wrote no plugin state")
	}
	st, ok := v.(*prefix.RequestState)
	if !ok || st == nil {
		return nil, fmt.Errorf("eppkit producer state has type %T", v)
	}
	return st.Hashes, nil
}

// upstreamView reads the state of upstream v1.5.0's indexer (approximateprefix/indexer.go:
// hashToPods map[blockHash]podSet, podToLRU map[ServerID]*lru.Cache) by reflection, to tell a
// ghost block (in hashToPods, not in the endpoint's LRU) from a held one. Reflection on the pinned
// version's unexported fields; it panics if they change. Read only between requests, after the
// indexer's goroutines have been waited on.
type upstreamView struct {
	indexer    reflect.Value // *indexer
	hashToPods reflect.Value // map[blockHash]podSet
	podToLRU   reflect.Value // map[ServerID]*lru.Cache[blockHash, struct{}]
}

func newUpstreamView(up uplugin.Plugin) upstreamView {
	f := reflect.ValueOf(up).Elem().FieldByName("indexerInst")
	if !f.IsValid() {
		panic("upstream approx-prefix-cache-producer has no indexerInst field: re-check the pinned version")
	}
	ptr := exposed(f).Elem() // interface -> *indexer
	ind := ptr.Elem()
	v := upstreamView{indexer: ptr, hashToPods: exposed(ind.FieldByName("hashToPods")), podToLRU: exposed(ind.FieldByName("podToLRU"))}
	if v.hashToPods.Kind() != reflect.Map || v.podToLRU.Kind() != reflect.Map {
		panic("upstream indexer has no hashToPods/podToLRU maps: re-check the pinned version")
	}
	return v
}

// exposed returns an addressable field value without the read-only flag of an unexported field.
func exposed(f reflect.Value) reflect.Value {
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// holders returns the endpoint names hashToPods lists for h, split into those whose LRU holds h
// and ghosts (whose LRU does not).
func (v upstreamView) holders(h uint64) (held, ghost []string) {
	set := v.hashToPods.MapIndex(reflect.ValueOf(h).Convert(v.hashToPods.Type().Key()))
	if !set.IsValid() {
		return nil, nil
	}
	for _, pod := range set.MapKeys() {
		name := pod.FieldByName("Name").String()
		l := v.podToLRU.MapIndex(pod)
		if l.IsValid() && l.MethodByName("Contains").Call([]reflect.Value{reflect.ValueOf(h).Convert(v.hashToPods.Type().Key())})[0].Bool() {
			held = append(held, name)
		} else {
			ghost = append(ghost, name)
		}
	}
	slices.Sort(held)
	slices.Sort(ghost)
	return held, ghost
}

// d2Model is upstream's match for one request as D1 and D2 together predict it: the walk of SPEC
// §2.2 over the eppkit index with upstream's effective capacity (D1), where a block also counts as
// held by every endpoint upstream keeps it for as a ghost (D2). It is valid (err == "") only if
// upstream's LRU-backed holders of every walked block equal that index's, and every ghost is one
// D2 can create: a hash in the first len(hashes)−capacity of a request indexed on that endpoint
// with more blocks than its upstream capacity.
type d2Model struct {
	matches  map[string]int  // endpoint name -> predicted MatchBlocks
	hasGhost map[string]bool // endpoint name -> one of the walked blocks is its ghost
	err      string
}

func (m *d2Model) why() string {
	if m.err != "" {
		return "invalid: " + m.err
	}
	return "valid"
}

func buildD2Model(hashes []uint64, eff *prefix.Index, uv upstreamView, names map[string]string, ghostable map[string]map[uint64]bool) *d2Model {
	m := &d2Model{matches: map[string]int{}, hasGhost: map[string]bool{}}
	for k, h := range hashes {
		var live []string
		for _, key := range eff.Holders(h) {
			live = append(live, names[key])
		}
		slices.Sort(live)
		held, ghost := uv.holders(h)
		if !slices.Equal(live, held) {
			m.err = fmt.Sprintf("block %d: upstream LRUs hold it on %v, the effective-capacity eppkit index on %v", k, held, live)
			return m
		}
		for _, g := range ghost {
			if !ghostable[g][h] {
				m.err = fmt.Sprintf("block %d: upstream keeps it for %s, which no overflowing request explains", k, g)
				return m
			}
			m.hasGhost[g] = true
		}
		if len(held)+len(ghost) == 0 {
			break
		}
		for _, e := range held {
			m.matches[e]++
		}
		for _, e := range ghost {
			m.matches[e]++
		}
	}
	return m
}

// removePod calls upstream's indexer.RemovePod (approximateprefix/indexer.go), the removal its
// CleanUpInactivePods makes for a pod that left the pool.
func (v upstreamView) removePod(nn types.NamespacedName) {
	m := v.indexer.MethodByName("RemovePod")
	m.Call([]reflect.Value{reflect.ValueOf(nn).Convert(m.Type().In(0))})
}
