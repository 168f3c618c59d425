// Command prefix-replay replays a score trace (format: tools/prefixtrace) recorded from upstream GIE v1.5.0's
// approx-prefix-cache-producer + prefix-cache-scorer (tools/gie-v1.5.0/score-parity -record) on
// GIE v1.4.0's prefix-cache-scorer — the prefix plugin llm-d-inference-scheduler v0.7.1 runs
// (its default config is GIE v1.4.0's, cmd/epp/runner + pkg/epp/config/loader/defaults.go) —
// and compares every endpoint's MatchBlocks, TotalBlocks and score with v1.5.0's.
//
// It lives in the llm-d tools module so it compiles against exactly the GIE version the llm-d EPP
// binary is built from (a module holds one GIE version; v1.5.0's is in tools/gie-v1.5.0).
//
// Each request goes the way v1.4.0's director sends it: the wire body decoded into a map and
// through pkg/epp/util/request.ExtractRequestBody (requestcontrol/director.go), then the scorer's
// Score (v1.4.0's monolith hashes, matches and scores there), then PreRequest on the endpoint
// v1.5.0's run picked. A difference is classified as D1 when a second v1.4.0 scorer whose
// lruCapacityPerServer is v1.5.0's effective 31250 reproduces v1.5.0 exactly: v1.4.0 honours a
// configured lruCapacityPerServer (plugin.go, makeServer), v1.5.0 does not (D1 of
// reports/interop/score-parity.md).
//
// A request v1.4.0's parser refuses (ExtractRequestBody: 400) is not scored; that is a difference
// only when v1.5.0 hashed blocks for it (an empty prompt has none, and v1.5.0's parser refuses it
// too).
//
// Exit status: 0 when every score is equal or differs only by D1, 1 on any other difference or a
// refused request v1.5.0 scored (printed), 2 on a bad trace or setup error.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sync"
	"unsafe"

	"k8s.io/apimachinery/pkg/types"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	framework "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/prefix"
	requtil "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/util/request"

	"github.com/eppkit/eppkit/tools/prefixtrace"
)

// v150EffectiveLRU is the capacity v1.5.0 indexes every endpoint with unless autoTune gives its
// num_gpu_blocks (approximateprefix/types.go defaultLRUCapacityPerServer, plugin.go makeserver).
const v150EffectiveLRU = 31250

func main() {
	trace := flag.String("trace", "", "score trace written by `score-parity -record` (required)")
	show := flag.Int("show", 10, "print at most this many differences of each kind")
	flag.Parse()
	if *trace == "" {
		fmt.Fprintln(os.Stderr, "prefix-replay: -trace is required")
		os.Exit(2)
	}
	res, err := replay(*trace, *show)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prefix-replay: %s: %v\n", *trace, err)
		os.Exit(2)
	}
	fmt.Printf("prefix-replay: seed=%d params=%s: %d requests, %d endpoint scores compared: %d equal, %d differ by D1 "+
		"(v1.4.0 honours lruCapacityPerServer, v1.5.0 indexes with %d), %d unexplained; %d requests with no block refused by v1.4.0's parser "+
		"(an empty prompt), %d other requests it refused; %d endpoints left the pool\n",
		res.seed, res.params, res.requests, res.compared, res.equal, res.d1, v150EffectiveLRU, res.unexplained, res.refusedEmpty, res.refused, res.leaves)
	if res.unexplained > 0 || res.refused > 0 {
		os.Exit(1)
	}
}

type result struct {
	seed                                                int64
	params                                              string
	requests, compared, equal, d1, unexplained, refused int
	refusedEmpty, leaves                                int
}

// scorer is one v1.4.0 prefix-cache-scorer with handles on its unexported indexer and wait group
// (reflection on the pinned version's struct, as its own tests wait on wg).
type scorer struct {
	p  *prefix.Plugin
	wg *sync.WaitGroup
	ix reflect.Value // Indexer interface value
}

func newScorer(ctx context.Context, params json.RawMessage, lru int) (*scorer, error) {
	cfg := prefix.DefaultConfig // what PrefixCachePluginFactory starts from
	if len(params) > 0 {
		if err := json.Unmarshal(params, &cfg); err != nil {
			return nil, fmt.Errorf("parameters: %w", err)
		}
	}
	if lru > 0 {
		cfg.LRUCapacityPerServer = lru
	}
	p, err := prefix.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	v := reflect.ValueOf(p).Elem()
	wg, ix := v.FieldByName("wg"), v.FieldByName("indexer")
	if !wg.IsValid() || wg.Type() != reflect.TypeOf(sync.WaitGroup{}) || !ix.IsValid() {
		return nil, fmt.Errorf("v1.4.0 prefix.Plugin has no wg/indexer fields: re-check the pinned version")
	}
	return &scorer{p: p, wg: (*sync.WaitGroup)(unsafe.Pointer(wg.UnsafeAddr())), ix: exposed(ix).Elem()}, nil
}

// exposed returns an addressable field value without the read-only flag of an unexported field.
func exposed(f reflect.Value) reflect.Value {
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// removePod is what v1.4.0's CleanUpInactivePods does for a pod that left the pool.
func (s *scorer) removePod(nn types.NamespacedName) {
	m := s.ix.MethodByName("RemovePod")
	m.Call([]reflect.Value{reflect.ValueOf(prefix.ServerID(nn))})
}

// score runs Score and returns each endpoint's score with its MatchBlocks and TotalBlocks from
// the scheduling cycle state the scorer wrote.
func (s *scorer) score(ctx context.Context, req *framework.LLMRequest, eps []framework.Endpoint) ([]prefixtrace.Score, error) {
	cs := framework.NewCycleState()
	scores := s.p.Score(ctx, cs, req, eps)
	v, err := cs.Read(plugin.StateKey(s.p.TypedName().String()))
	if err != nil {
		return nil, fmt.Errorf("cycle state: %w", err)
	}
	st, ok := v.(*prefix.SchedulingContextState)
	if !ok {
		return nil, fmt.Errorf("cycle state holds %T, want *prefix.SchedulingContextState", v)
	}
	out := make([]prefixtrace.Score, len(eps))
	for i, e := range eps {
		out[i] = prefixtrace.Score{Match: st.PrefixCacheServers[prefix.ServerID(e.GetMetadata().NamespacedName)],
			Total: len(st.PrefixHashes), Score: scores[e]}
	}
	return out, nil
}

func (s *scorer) preRequest(ctx context.Context, req *framework.LLMRequest, target framework.Endpoint) {
	s.p.PreRequest(ctx, req, &framework.SchedulingResult{PrimaryProfileName: "default",
		ProfileResults: map[string]*framework.ProfileRunResult{"default": {TargetEndpoints: []framework.Endpoint{target}}}})
	s.wg.Wait()
}

// noBlocks reports whether v1.5.0 hashed no block of the request (TotalBlocks 0 everywhere).
func noBlocks(v150 []prefixtrace.Score) bool {
	for _, s := range v150 {
		if s.Total != 0 {
			return false
		}
	}
	return true
}

func replay(path string, show int) (result, error) {
	var res result
	f, err := os.Open(path)
	if err != nil {
		return res, err
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	var v14, eff *scorer
	shownD1, shownOther := 0, 0
	for n := 1; sc.Scan(); n++ {
		var l prefixtrace.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return res, fmt.Errorf("line %d: %w", n, err)
		}
		if l.Op != prefixtrace.OpConfig && v14 == nil {
			return res, fmt.Errorf("line %d: %q before the config line", n, l.Op)
		}
		switch l.Op {
		case prefixtrace.OpConfig:
			res.seed, res.params = l.Seed, string(l.Params)
			if v14, err = newScorer(ctx, l.Params, 0); err != nil {
				return res, fmt.Errorf("line %d: v1.4.0 scorer: %w", n, err)
			}
			if eff, err = newScorer(ctx, l.Params, v150EffectiveLRU); err != nil {
				return res, fmt.Errorf("line %d: v1.4.0 scorer (capacity %d): %w", n, v150EffectiveLRU, err)
			}
		case prefixtrace.OpLeave:
			if l.Leave == nil {
				return res, fmt.Errorf("line %d: leave without an endpoint", n)
			}
			nn := types.NamespacedName{Namespace: l.Leave.Namespace, Name: l.Leave.Name}
			v14.removePod(nn)
			eff.removePod(nn)
			res.leaves++
		case prefixtrace.OpRequest:
			if l.Pick == nil || *l.Pick < 0 || *l.Pick >= len(l.Endpoints) || len(l.V150) != len(l.Endpoints) {
				return res, fmt.Errorf("line %d: request %s: pick or v150 scores do not fit %d endpoints", n, l.RequestID, len(l.Endpoints))
			}
			res.requests++
			var raw map[string]any
			if err := json.Unmarshal(l.Body, &raw); err != nil {
				return res, fmt.Errorf("line %d: request %s body: %w", n, l.RequestID, err)
			}
			body, err := requtil.ExtractRequestBody(raw, map[string]string{":path": l.Path})
			if err != nil {
				// v1.4.0's EPP answers 400 and schedules nothing. When v1.5.0's producer found no
				// block either (an empty prompt, which v1.5.0's own parser refuses as well:
				// requesthandling/parsers/openai/openai.go), there is no score to compare and
				// its PreRequest indexed nothing.
				if noBlocks(l.V150) {
					res.refusedEmpty++
					continue
				}
				res.refused++
				fmt.Printf("REFUSED %s: v1.4.0 ExtractRequestBody: %v (v1.5.0 scored it)\n", l.Summary, err)
				continue
			}
			req := &framework.LLMRequest{RequestId: l.RequestID, TargetModel: l.Model, Headers: map[string]string{}, Body: body}
			mk := func() []framework.Endpoint {
				eps := make([]framework.Endpoint, len(l.Endpoints))
				for i, e := range l.Endpoints {
					m := fwkdl.NewMetrics()
					m.CacheBlockSize, m.CacheNumGPUBlocks = e.BlockSize, e.NumGPUBlocks
					eps[i] = framework.NewEndpoint(&fwkdl.EndpointMetadata{
						NamespacedName: types.NamespacedName{Namespace: e.Namespace, Name: e.Name},
						PodName:        e.Name, Address: e.Address, Port: fmt.Sprint(e.Port)}, m, nil)
				}
				return eps
			}
			eps, effEps := mk(), mk()
			got, err := v14.score(ctx, req, eps)
			if err != nil {
				return res, fmt.Errorf("line %d: request %s: %w", n, l.RequestID, err)
			}
			gotEff, err := eff.score(ctx, req, effEps)
			if err != nil {
				return res, fmt.Errorf("line %d: request %s: %w", n, l.RequestID, err)
			}
			for i, want := range l.V150 {
				res.compared++
				switch {
				case got[i] == want:
					res.equal++
				case gotEff[i] == want:
					res.d1++
					if shownD1 < show {
						shownD1++
						fmt.Printf("D1 %s endpoint=%s (num_gpu_blocks %d): v1.4.0 %d/%d score %v, v1.5.0 %d/%d score %v\n", l.Summary,
							l.Endpoints[i].Name, l.Endpoints[i].NumGPUBlocks, got[i].Match, got[i].Total, got[i].Score, want.Match, want.Total, want.Score)
					}
				default:
					res.unexplained++
					if shownOther < show {
						shownOther++
						fmt.Printf("DIFF %s endpoint=%s: v1.4.0 %d/%d score %v (at capacity %d: %d/%d), v1.5.0 %d/%d score %v\n", l.Summary,
							l.Endpoints[i].Name, got[i].Match, got[i].Total, got[i].Score, v150EffectiveLRU, gotEff[i].Match, gotEff[i].Total,
							want.Match, want.Total, want.Score)
					}
				}
			}
			v14.preRequest(ctx, req, eps[*l.Pick])
			eff.preRequest(ctx, req, effEps[*l.Pick])
		default:
			return res, fmt.Errorf("line %d: unknown op %q", n, l.Op)
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	if v14 == nil {
		return res, fmt.Errorf("empty trace")
	}
	return res, nil
}
