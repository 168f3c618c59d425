// Command score-parity feeds the same seeded workloads to upstream GIE v1.5.0's
// approx-prefix-cache-producer + prefix-cache-scorer
// (kubernetes-sigs/gateway-api-inference-extension
// pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix and
// pkg/epp/framework/plugins/scheduling/scorer/prefix) and to eppkit's reference/plugins/prefix,
// and compares every endpoint's score exactly (float64 equality, plus MatchBlocks/TotalBlocks).
// It then benchmarks both PrepareRequestData paths on reference/plugins/benchfixture in one run.
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
	"github.com/eppkit/eppkit/reference/plugins/benchfixture"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

// upstreamEffectiveLRU is upstream v1.5.0's defaultLRUCapacityPerServer, the capacity its
// makeserver always uses when autoTune gives none (approximateprefix/types.go).
const upstreamEffectiveLRU = 31250

func main() {
	seed := flag.Int64("seed", 0, "base seed (0 = time-based; printed)")
	runs := flag.Int("runs", 12, "number of workloads (shapes cycle through the list in shapes())")
	requests := flag.Int("requests", 300, "requests per workload")
	bench := flag.Bool("bench", true, "benchmark both producers on reference/plugins/benchfixture")
	flag.Parse()
	if *seed == 0 {
		*seed = time.Now().UnixNano()
	}
	fmt.Printf("score-parity: seed=%d (repro: cd tools/gie-v1.5.0/score-parity && go run . -seed=%d)\n", *seed, *seed)
	var total counts
	for r := 0; r < *runs; r++ {
		sh := shapes()[r%len(shapes())]
		s := *seed + int64(r)
		c, err := runWorkload(s, sh, *requests)
		if err != nil {
			fmt.Fprintf(os.Stderr, "score-parity: run %d seed %d shape %+v: %v\n", r, s, sh, err)
			os.Exit(2)
		}
		fmt.Printf("run %2d seed=%d shape=%+v: %d scores compared, %d differ by D1, %d by D2 (%d of them cross-endpoint), %d unexplained mismatches\n",
			r, s, sh, c.Compared, c.D1, c.D2, c.D2Cross, c.Unexplained)
		total.add(c)
	}
	fmt.Printf("score-parity: seed=%d: %d scores compared over %d workloads, %d equal, %d differ by D1 (upstream ignores lruCapacityPerServer), %d by D2 (upstream keeps blocks evicted within one request; %d of them on an endpoint holding no such block), %d unexplained mismatches\n",
		*seed, total.Compared, *runs, total.Compared-total.D1-total.D2-total.Unexplained, total.D1, total.D2, total.D2Cross, total.Unexplained)
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
	return &pair{up: up, upPrep: up.(interface {
		PrepareRequestData(context.Context, *ufw.LLMRequest, []ufw.Endpoint) error
	}), upPre: up.(interface {
		PreRequest(context.Context, *ufw.LLMRequest, *ufw.SchedulingResult)
	}), upWG: upstreamWaitGroup(up), upScorer: sc, ours: ours, eff: eff, ourSc: osc, ourState: oh.state}, nil
}

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

// endpoint is one pool member of the workload.
type endpoint struct {
	md      *framework.EndpointMetadata
	metrics *framework.Metrics
}

var (
	models = []string{"meta-llama/Llama-3.1-8B-Instruct", "sql-lora", "tweet-summary-lora", "Qwen/Qwen2.5-7B"}
	salts  = []string{"", "", "", "tenant-a", "tenant-b"}
)

// text returns at least n bytes from the suites/equivalence alphabet (with <, >, &, quotes, é).
// Unlike the suite, which draws bytes (so half an é can appear), it draws runes: a request body
// is JSON, and a JSON decoder turns invalid UTF-8 into U+FFFD before any EPP hashes it, so raw
// invalid bytes would compare the adapter's conversion rather than the two plugins.
func text(rng *rand.Rand, n int) string {
	alphabet := []rune("abcdefghij klmnopqrstuvwxyz ABC 0123 .,;:!? <>&\"'\n\té")
	var b strings.Builder
	for b.Len() < n {
		b.WriteRune(alphabet[rng.IntN(len(alphabet))])
	}
	return b.String()
}

// runWorkload mirrors suites/equivalence/workload_test.go's generator (templates, chat and
// completions shapes, models, salts, pool of 1–16 endpoints with optional small num_gpu_blocks,
// shuffled candidate order) without pool churn, and returns (mismatches, scores compared).
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
// the LRU holds (SPEC §2.2). A mismatch is counted as D2 only when the endpoint was once indexed
// with more blocks than its capacity and upstream matches more blocks than eppkit.
func runWorkload(seed int64, sh shape, n int) (counts, error) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := newPair(ctx, sh.raw())
	if err != nil {
		return counts{}, err
	}
	var templates []string
	for i := range 7 {
		switch i {
		case 0:
			templates = append(templates, "")
		case 1:
			templates = append(templates, text(rng, 3))
		default:
			templates = append(templates, text(rng, 100+rng.IntN(1900)))
		}
	}
	var eps []*endpoint
	for i := range 1 + rng.IntN(16) {
		name := fmt.Sprintf("vllm-%02d", i)
		e := &endpoint{md: &framework.EndpointMetadata{Namespace: "eq", Name: name, PodName: name,
			Address: fmt.Sprintf("10.1.0.%d", i+1), Port: 8000},
			metrics: &framework.Metrics{CacheBlockSize: sh.PoolBlockSize}}
		if rng.IntN(2) == 0 {
			e.metrics.CacheNumGPUBlocks = max(1, sh.MaxBlocks*(1+rng.IntN(8))/2)
		}
		eps = append(eps, e)
	}
	var c counts
	// ghostable[name] holds the hashes upstream may keep as ghosts for that endpoint (D2): the
	// first len(hashes)−capacity hashes of every request indexed on it with more blocks than its
	// upstream capacity.
	ghostable := map[string]map[uint64]bool{}
	names := map[string]string{} // endpoint key -> name
	for _, e := range eps {
		names[e.md.Key()] = e.md.Name
	}
	uv := newUpstreamView(p.up)
	for i := range n {
		rng.Shuffle(len(eps), func(a, b int) { eps[a], eps[b] = eps[b], eps[a] })
		req, summary, err := genRequest(rng, i, templates)
		if err != nil {
			return counts{}, err
		}
		ureq, err := toUpstream(req)
		if err != nil {
			return counts{}, fmt.Errorf("%s: %w", summary, err)
		}
		ours := make([]*framework.Endpoint, len(eps))
		effs := make([]*framework.Endpoint, len(eps))
		ups := make([]ufw.Endpoint, len(eps))
		for j, e := range eps {
			ours[j] = framework.NewEndpoint(e.md, e.metrics.Clone())
			effs[j] = framework.NewEndpoint(e.md, e.metrics.Clone())
			ups[j] = ufw.NewEndpoint(&fwkdl.EndpointMetadata{
				NamespacedName: types.NamespacedName{Namespace: e.md.Namespace, Name: e.md.Name},
				PodName:        e.md.PodName, Address: e.md.Address, Port: fmt.Sprint(e.md.Port)},
				&fwkdl.Metrics{CacheBlockSize: e.metrics.CacheBlockSize, CacheNumBlocks: e.metrics.CacheNumGPUBlocks}, nil)
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
		hashes, err := requestHashes(p, req)
		if err != nil {
			return counts{}, fmt.Errorf("%s: %w", summary, err)
		}
		oscores := p.ourSc.Score(ctx, nil, req, ours)
		uscores := p.upScorer.Score(ctx, nil, ureq, ups)
		var model *d2Model // built at the first mismatch D1 does not explain
		for j, e := range eps {
			o := oscores[e.md.Key()]
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
			if model.err == "" && ot == ut && model.matches[e.md.Name] == um {
				c.D2++
				if !model.hasGhost[e.md.Name] {
					c.D2Cross++
				}
				continue
			}
			c.Unexplained++
			fmt.Printf("MISMATCH seed=%d %s endpoint=%s: eppkit %v (%d/%d) upstream %v (%d/%d); D1 model %d/%d; D2 model %d (%s)\n",
				seed, summary, e.md.Name, o, om, ot, u, um, ut, em, et, model.matches[e.md.Name], model.why())
		}
		// Both pick the same random endpoint; both record it.
		t := rng.IntN(len(eps))
		if capacity := upstreamCapacity(sh, eps[t]); len(hashes) > capacity {
			g := ghostable[eps[t].md.Name]
			if g == nil {
				g = map[uint64]bool{}
				ghostable[eps[t].md.Name] = g
			}
			for _, h := range hashes[:len(hashes)-capacity] {
				g[h] = true
			}
		}
		p.ours.PreRequest(ctx, req, &framework.SchedulingResult{PrimaryProfileName: "default",
			ProfileResults: map[string]*framework.ProfileRunResult{"default": {TargetEndpoints: []*framework.Endpoint{ours[t]}}}})
		p.eff.PreRequest(ctx, req, &framework.SchedulingResult{PrimaryProfileName: "default",
			ProfileResults: map[string]*framework.ProfileRunResult{"default": {TargetEndpoints: []*framework.Endpoint{effs[t]}}}})
		p.upPre.PreRequest(ctx, ureq, &ufw.SchedulingResult{PrimaryProfileName: "default",
			ProfileResults: map[string]*ufw.ProfileRunResult{"default": {TargetEndpoints: []ufw.Endpoint{ups[t]}}}})
		p.upWG.Wait()
	}
	return c, nil
}

// upstreamCapacity is the LRU size upstream v1.5.0 gives e (makeserver): num_gpu_blocks under
// autoTune when reported, else 31250.
func upstreamCapacity(sh shape, e *endpoint) int {
	if sh.AutoTune && e.metrics.CacheNumGPUBlocks > 0 {
		return e.metrics.CacheNumGPUBlocks
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

// genRequest draws a request as suites/equivalence does: a shared template prefix plus a random
// suffix, 40% chat (string content, content blocks with extra fields, or a JSON-array content
// after a null assistant message), 60% completions; random model and cache salt.
func genRequest(rng *rand.Rand, i int, templates []string) (*framework.LLMRequest, string, error) {
	tpl := rng.IntN(len(templates))
	prefixText := templates[tpl]
	suffix := text(rng, rng.IntN(400))
	model := models[rng.IntN(len(models))]
	salt := salts[rng.IntN(len(salts))]
	req := &framework.LLMRequest{RequestID: fmt.Sprintf("req-%04d", i), TargetModel: model,
		Headers: map[string]string{}, Body: &framework.LLMRequestBody{}}
	kind := "completions"
	if rng.IntN(5) < 2 {
		kind = "chat"
		msgs := []framework.Message{{Role: "system", Content: prefixText}}
		switch v := rng.IntN(3); v {
		case 0:
			msgs = append(msgs, framework.Message{Role: "user", Content: suffix})
		case 1:
			msgs = append(msgs, framework.Message{Role: "user", Content: []any{
				map[string]any{"type": "text", "text": suffix, "cache_control": map[string]any{"type": "ephemeral"}},
			}})
		default:
			js, _ := json.Marshal(suffix)
			var blocks any
			if err := json.Unmarshal([]byte(`[{"type":"text","text":`+string(js)+`}]`), &blocks); err != nil {
				return nil, "", err
			}
			msgs = append(msgs, framework.Message{Role: "assistant", Content: nil},
				framework.Message{Role: "user", Content: blocks})
		}
		kind = fmt.Sprintf("chat/%d", len(msgs))
		req.Body.ChatCompletions = &framework.ChatCompletionsRequest{Messages: msgs, CacheSalt: salt}
	} else {
		req.Body.Completions = &framework.CompletionsRequest{Prompt: prefixText + suffix, CacheSalt: salt}
	}
	return req, fmt.Sprintf("%s %s model=%s salt=%q template=%d suffix=%d", req.RequestID, kind, model, salt, tpl, len(suffix)), nil
}

// toUpstream converts a request the way upstream receives it: our body is encoded as the OpenAI
// JSON a client would send and decoded with upstream's own types (Content.UnmarshalJSON etc.).
func toUpstream(req *framework.LLMRequest) (*ufw.LLMRequest, error) {
	out := &ufw.LLMRequest{RequestId: req.RequestID, TargetModel: req.TargetModel, Headers: req.Headers, Body: &ufw.LLMRequestBody{}}
	switch {
	case req.Body.Completions != nil:
		wire, err := json.Marshal(map[string]any{"model": req.TargetModel, "prompt": req.Body.Completions.Prompt,
			"cache_salt": req.Body.Completions.CacheSalt})
		if err != nil {
			return nil, err
		}
		out.Body.Completions = &ufw.CompletionsRequest{}
		if err := json.Unmarshal(wire, out.Body.Completions); err != nil {
			return nil, fmt.Errorf("upstream completions decode: %w", err)
		}
	case req.Body.ChatCompletions != nil:
		wire, err := json.Marshal(map[string]any{"model": req.TargetModel, "messages": req.Body.ChatCompletions.Messages,
			"cache_salt": req.Body.ChatCompletions.CacheSalt})
		if err != nil {
			return nil, err
		}
		out.Body.ChatCompletions = &ufw.ChatCompletionsRequest{}
		if err := json.Unmarshal(wire, out.Body.ChatCompletions); err != nil {
			return nil, fmt.Errorf("upstream chat decode: %w", err)
		}
	}
	return out, nil
}

// benchmark measures one PrepareRequestData on the benchfixture (100 endpoints, 8,000-character
// prompt, 10 full and 30 half matches) for both, in one process, and prints the ratio.
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
	for _, w := range benchfixture.Warmups() {
		eps := benchfixture.NewEndpoints(mds)
		if err := p.ours.PrepareRequestData(ctx, w.Request, eps); err != nil {
			return err
		}
		p.ours.PreRequest(ctx, w.Request, &framework.SchedulingResult{PrimaryProfileName: "default",
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
	if err := p.ours.PrepareRequestData(ctx, req, eps); err != nil {
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
			_ = p.ours.PrepareRequestData(ctx, req, eps)
			p.ourState.DeleteKey(req.RequestID, p.ours.StateKey())
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
}

func (c *counts) add(o counts) {
	c.Compared += o.Compared
	c.D1 += o.D1
	c.D2 += o.D2
	c.D2Cross += o.D2Cross
	c.Unexplained += o.Unexplained
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
	hashToPods reflect.Value // map[blockHash]podSet
	podToLRU   reflect.Value // map[ServerID]*lru.Cache[blockHash, struct{}]
}

func newUpstreamView(up uplugin.Plugin) upstreamView {
	f := reflect.ValueOf(up).Elem().FieldByName("indexerInst")
	if !f.IsValid() {
		panic("upstream approx-prefix-cache-producer has no indexerInst field: re-check the pinned version")
	}
	ind := exposed(f).Elem().Elem() // interface -> *indexer -> indexer
	v := upstreamView{hashToPods: exposed(ind.FieldByName("hashToPods")), podToLRU: exposed(ind.FieldByName("podToLRU"))}
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
