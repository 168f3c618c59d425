package wrap

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	giev1alpha2 "sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"

	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/reference/datalayer"
	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/discovery"
	"github.com/eppkit/eppkit/reference/eppserver"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
	"github.com/eppkit/eppkit/reference/plugins/legacyprefix"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/selfcheck/mutant"
)

// frameworkInterfaces are the optional interfaces the runtime looks for on a plugin; a wrapper
// must keep exactly the set its inner plugin has, or the DAG and the extension points change.
var frameworkInterfaces = []reflect.Type{
	reflect.TypeFor[framework.DataProducer](), reflect.TypeFor[framework.DataConsumer](),
	reflect.TypeFor[framework.PrepareDataPlugin](), reflect.TypeFor[framework.Admitter](),
	reflect.TypeFor[framework.Filter](), reflect.TypeFor[framework.Scorer](), reflect.TypeFor[framework.IndexedScorer](),
	reflect.TypeFor[framework.Picker](), reflect.TypeFor[framework.ProfileHandler](), reflect.TypeFor[framework.PreRequest](),
	reflect.TypeFor[framework.ResponseHeaderPlugin](), reflect.TypeFor[framework.ResponseBodyPlugin](),
	reflect.TypeFor[framework.ResponseCompletePlugin](), reflect.TypeFor[framework.ProducerParametersCarrier](),
	reflect.TypeFor[eppserver.EndpointRemover](),
}

func implemented(p framework.Plugin) []string {
	var out []string
	for _, it := range frameworkInterfaces {
		if reflect.TypeOf(p).Implements(it) {
			out = append(out, it.String())
		}
	}
	return out
}

func eps(n int) []*framework.Endpoint {
	mds := make([]*framework.EndpointMetadata, n)
	keys := make([]string, n)
	ms := make([]*framework.Metrics, n)
	for i := range mds {
		mds[i] = &framework.EndpointMetadata{Name: string(rune('a' + i)), Address: "127.0.10." + string(rune('1'+i)), Port: 8000}
		keys[i] = mds[i].Key()
		ms[i] = &framework.Metrics{WaitingQueueSize: 10 * i, KVCacheUsage: 0.3 * float64(i), UpdateTime: time.Now()}
	}
	return framework.NewEndpoints(mds, keys, ms)
}

// TestPluginWrappersKeepInterfacesAndBreakTheirScore: each wrapper plugin is what Registry
// builds for its type, implements the same framework interfaces as the real plugin, and changes
// the real plugin's scores the way its mutant says.
func TestPluginWrappersKeepInterfacesAndBreakTheirScore(t *testing.T) {
	for _, m := range PluginMutants() {
		t.Run(string(m), func(t *testing.T) {
			typ := pluginMutants[m].pluginType
			real, wrapped := framework.NewRegistry(), framework.NewRegistry()
			plugins.RegisterAll(real)
			plugins.RegisterAll(wrapped)
			if err := Registry(wrapped, m); err != nil {
				t.Fatal(err)
			}
			rf, _ := real.Factory(typ)
			wf, _ := wrapped.Factory(typ)
			rp, err := rf("x", nil, newHandle(t))
			if err != nil {
				t.Fatal(err)
			}
			wp, err := wf("x", nil, newHandle(t))
			if err != nil {
				t.Fatal(err)
			}
			if reflect.TypeOf(wp) == reflect.TypeOf(rp) {
				t.Fatalf("%s: Registry did not wrap %s", m, typ)
			}
			if got, want := implemented(wp), implemented(rp); !slices.Equal(got, want) {
				t.Errorf("wrapper implements %v, the real %s %v", got, typ, want)
			}
			if wp.TypedName() != rp.TypedName() {
				t.Errorf("wrapper is %v, want %v", wp.TypedName(), rp.TypedName())
			}
			s, ok := wp.(framework.IndexedScorer)
			if !ok {
				return // the producer: TestProducerWithoutState
			}
			e := eps(3)
			got := s.Score(context.Background(), framework.NewCycleState(), &framework.LLMRequest{RequestID: "r"}, e)
			idx := make([]float64, len(e))
			s.ScoreIndexed(context.Background(), framework.NewCycleState(), &framework.LLMRequest{RequestID: "r"}, e, idx)
			want := 1.0
			if m == mutant.PrefixAffinityOff {
				want = 0
			}
			for i, ep := range e {
				if got[ep.Key()] != want || idx[i] != want {
					t.Errorf("%s: endpoint %s scored %v / %v, want %v", m, ep.Key(), got[ep.Key()], idx[i], want)
				}
			}
		})
	}
	if err := Registry(framework.NewRegistry(), mutant.KVIgnored); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("Registry on an empty registry: %v", err)
	}
	reg := framework.NewRegistry()
	if err := Registry(reg, mutant.HeaderMetadataDisagree); err != nil || len(reg.Types()) != 0 {
		t.Errorf("a protocol mutant changed the registry: %v %v", err, reg.Types())
	}
}

// TestLegacyOffByOne: the wrapped legacy scorer scores every match one block short.
func TestLegacyOffByOne(t *testing.T) {
	cfg, err := legacyprefix.ParseConfig([]byte(`{"blockSizeTokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	h := newHandle(t)
	lp := legacyprefix.New("x", cfg, h)
	w := &offByOneLegacy{Plugin: lp, h: h}
	e := eps(2)
	req := &framework.LLMRequest{RequestID: "r", TargetModel: "m", Body: &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: strings.Repeat("abcd", 8)}}}
	lp.Score(context.Background(), framework.NewCycleState(), req, e)
	lp.PreRequest(context.Background(), req, &framework.SchedulingResult{PrimaryProfileName: "p",
		ProfileResults: map[string]*framework.ProfileRunResult{"p": {TargetEndpoints: e[:1]}}})
	real := lp.Score(context.Background(), framework.NewCycleState(), req, e)
	cycle := framework.NewCycleState()
	got := w.Score(context.Background(), cycle, req, e)
	v, _ := cycle.Read(lp.StateKey())
	st := v.(*legacyprefix.State)
	n := len(st.Hashes)
	if n < 2 || real[e[0].Key()] != 1 || got[e[0].Key()] != float64(n-1)/float64(n) || st.Matches[e[0].Key()] != n-1 {
		t.Errorf("%d blocks: real score %v, wrapped %v, state match %d; want 1, %d/%d, %d", n, real[e[0].Key()], got[e[0].Key()], st.Matches[e[0].Key()], n-1, n, n-1)
	}
}

// TestProducerWithoutState: the wrapped producer leaves no plugin state after PrepareData.
func TestProducerWithoutState(t *testing.T) {
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	for _, mut := range []mutant.Name{"", mutant.PluginStateScoreOnly} {
		cfg, err := framework.LoadConfig([]byte(`apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
- type: queue-scorer
- type: max-score-picker
`))
		if err != nil {
			t.Fatal(err)
		}
		r := framework.NewRegistry()
		plugins.RegisterAll(r)
		if err := Registry(r, mut); err != nil {
			t.Fatal(err)
		}
		state := framework.NewPluginState(nil, 0, 0)
		rt, err := framework.NewRuntime(cfg, r, framework.RuntimeOptions{Context: t.Context(), PluginState: state})
		if err != nil {
			t.Fatal(err)
		}
		req := &framework.LLMRequest{RequestID: "r", TargetModel: "m", Body: &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: strings.Repeat("abcd", 40)}}}
		if err := rt.PrepareData(t.Context(), req, eps(2)); err != nil {
			t.Fatal(err)
		}
		var pp *prefix.Producer
		for _, p := range rt.Plugins() {
			switch v := p.(type) {
			case *prefix.Producer:
				pp = v
			case *statelessProducer:
				pp = v.Producer
			}
		}
		_, has := state.Read("r", pp.StateKey())
		if has != (mut == "") {
			t.Errorf("mutant %q: plugin state after PrepareData = %v", mut, has)
		}
	}
}

// fakeCollector reports every endpoint stale.
type fakeCollector struct{ waited bool }

func (c *fakeCollector) Metrics(string) *framework.Metrics {
	return &framework.Metrics{WaitingQueueSize: 3}
}
func (c *fakeCollector) Stale(string) bool { return true }
func (c *fakeCollector) Read(string) (*framework.Metrics, bool) {
	return &framework.Metrics{WaitingQueueSize: 3}, true
}
func (c *fakeCollector) SetEndpoints(eps []*framework.EndpointMetadata) {}
func (c *fakeCollector) Start(context.Context)                          {}
func (c *fakeCollector) Wait()                                          { c.waited = true }

func TestCollectorNeverStale(t *testing.T) {
	fc := &fakeCollector{}
	if c, err := Collector(fc, datalayer.Config{}, mutant.KVIgnored); err != nil || c != eppserver.Collector(fc) {
		t.Errorf("another mutant decorated the collector (err %v)", err)
	}
	c, err := Collector(fc, datalayer.Config{}, mutant.StaleEndpointKept)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := c.(interface {
		Read(string) (*framework.Metrics, bool)
	})
	if !ok {
		t.Fatal("the decorated collector lost Read")
	}
	m, stale := r.Read("k")
	if c.Stale("k") || stale || m.WaitingQueueSize != 3 || c.Metrics("k").WaitingQueueSize != 3 {
		t.Errorf("Stale %v, Read %v %v; want never stale with the real metrics", c.Stale("k"), m, stale)
	}
	c.(interface{ Wait() }).Wait()
	if !fc.waited {
		t.Error("Wait was not passed on")
	}
}

// handle is a framework.Handle for plugins built outside a runtime.
type handle struct {
	ctx   context.Context
	state *framework.PluginState
}

func newHandle(t *testing.T) *handle {
	return &handle{ctx: t.Context(), state: framework.NewPluginState(nil, 0, 0)}
}

func (h *handle) Context() context.Context                 { return h.ctx }
func (h *handle) PluginState() *framework.PluginState      { return h.state }
func (h *handle) Plugin(string) (framework.Plugin, bool)   { return nil, false }
func (h *handle) Clock() clock.WithTicker                  { return clock.RealClock{} }
func (h *handle) Seed() int64                              { return 1 }
func (h *handle) Logger() *slog.Logger                     { return slog.New(slog.DiscardHandler) }
func (h *handle) Endpoints() []*framework.EndpointMetadata { return nil }

const ns = "mut"

func pod(name, ip string, ready bool, deleting bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "vllm"}},
		Status: corev1.PodStatus{PodIP: ip}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if deleting {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	return p
}

// TestEndpointMutants drives a real InferencePoolSource on decorated fake informers.
func TestEndpointMutants(t *testing.T) {
	for _, tc := range []struct {
		m    mutant.Name
		want []string
	}{
		{"", []string{"10.0.0.1:8000", "10.0.0.1:8001"}},
		{mutant.NotReadyPicked, []string{"10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000", "10.0.0.2:8001"}},
		{mutant.RanksBeyondFirstDropped, []string{"10.0.0.1:8000"}},
		{mutant.RemovedEndpointKept, []string{"10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.3:8000", "10.0.0.3:8001", "10.0.0.4:8000", "10.0.0.4:8001"}},
	} {
		t.Run(string(tc.m), func(t *testing.T) {
			sc, err := discovery.Scheme()
			if err != nil {
				t.Fatal(err)
			}
			fake := &informertest.FakeInformers{Scheme: sc}
			inf := informersFor(fake, tc.m)
			src, err := discovery.NewInferencePoolOn(discovery.PoolConfig{Name: "pool", Namespace: ns}, inf)
			if err != nil {
				t.Fatal(err)
			}
			if err := src.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			fi := func(obj any) *controllertest.FakeInformer {
				var f *controllertest.FakeInformer
				switch o := obj.(type) {
				case *corev1.Pod:
					f, err = fake.FakeInformerFor(t.Context(), o)
				case *giev1.InferencePool:
					f, err = fake.FakeInformerFor(t.Context(), o)
				}
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			pools, pods := fi(&giev1.InferencePool{}), fi(&corev1.Pod{})
			_ = giev1alpha2.InferenceObjective{}
			pools.Add(&giev1.InferencePool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
				Spec: giev1.InferencePoolSpec{Selector: giev1.LabelSelector{MatchLabels: map[giev1.LabelKey]giev1.LabelValue{"app": "vllm"}},
					TargetPorts: []giev1.Port{{Number: 8000}, {Number: 8001}}}})
			pods.Add(pod("a", "10.0.0.1", true, false))
			pods.Add(pod("b", "10.0.0.2", false, false))
			c := pod("c", "10.0.0.3", true, false)
			pods.Add(c)
			pods.Update(c, pod("c", "10.0.0.3", true, true))
			d := pod("d", "10.0.0.4", true, false)
			pods.Add(d)
			pods.Delete(d)
			var got []string
			for _, e := range src.Endpoints() {
				got = append(got, e.Key())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("endpoints %v, want %v", got, tc.want)
			}
		})
	}
}

// informersFor is what PoolSource decorates the cache with.
func informersFor(fake *informertest.FakeInformers, m mutant.Name) informers {
	rewrite, ok := endpointMutants[m]
	if !ok {
		rewrite = func(obj any, _ bool) (any, bool) { return obj, true }
	}
	return informers{Informers: fake, rewrite: rewrite}
}

// TestMetricsMutantsRead: each metrics-source mutant, scraping a real fake vLLM server, reads
// what its catalogue entry says and the unmutated collector reads the true values: current
// names (KV only as vllm:kv_cache_usage_perc), LoRA off (no vllm:lora_requests_info), three
// data-parallel engines behind one port with the deep queue on engine 2.
func TestMetricsMutantsRead(t *testing.T) {
	cfg := vllm.DefaultConfig()
	cfg.Model, cfg.Host, cfg.Port = "m", "127.0.0.1", 0
	cfg.DPSize, cfg.DataParallelMode = 3, vllm.DataParallelInternal
	cfg.FakeMetrics = &vllm.FakeMetrics{KVCacheUsage: 0.6, Engines: []vllm.EngineGauges{
		{RunningRequests: 1, KVCacheUsage: 0.6}, {RunningRequests: 1, KVCacheUsage: 0.6}, {RunningRequests: 1, WaitingRequests: 30, KVCacheUsage: 0.6}}}
	read := metricsReader(t, cfg)

	m, stale := read("")
	if m == nil || stale || m.WaitingQueueSize != 30 || m.RunningRequests != 3 || m.KVCacheUsage < 0.59 || m.KVCacheUsage > 0.61 {
		t.Fatalf("unmutated collector: %+v stale %v; want waiting 30 (summed), running 3, KV 0.6, fresh", m, stale)
	}
	if m, stale := read(mutant.KVLegacyNameOnly); m == nil || !stale || m.KVCacheUsage != 0 || m.WaitingQueueSize != 30 {
		t.Errorf("%s: %+v stale %v; want KV unread (0, scrape error: no vllm:gpu_cache_usage_perc), the queue still read", mutant.KVLegacyNameOnly, m, stale)
	}
	if m, stale := read(mutant.LoRAFamilyRequired); m == nil || !stale || m.WaitingQueueSize != 0 || m.ScrapeError == nil ||
		!strings.Contains(m.ScrapeError.Error(), "vllm:lora_requests_info") {
		t.Errorf("%s: %+v stale %v; want nothing read, the scrape failing on the missing vllm:lora_requests_info", mutant.LoRAFamilyRequired, m, stale)
	}
	if m, stale := read(mutant.EngineSeriesIgnored); m == nil || stale || m.WaitingQueueSize != 0 || m.RunningRequests != 1 {
		t.Errorf("%s: %+v stale %v; want engine 0's series only (waiting 0, running 1)", mutant.EngineSeriesIgnored, m, stale)
	}
}

// TestKVCurrentNameOnlyRead: against a fake vLLM with legacy names only (vllm:gpu_cache_usage_perc),
// the unmutated collector reads KV use through its fallback and kv-current-name-only leaves it 0.
func TestKVCurrentNameOnlyRead(t *testing.T) {
	cfg := vllm.DefaultConfig()
	cfg.Model, cfg.Host, cfg.Port = "m", "127.0.0.1", 0
	cfg.MetricsNames = vllm.MetricsLegacy
	cfg.FakeMetrics = &vllm.FakeMetrics{KVCacheUsage: 0.6, WaitingRequests: 7}
	read := metricsReader(t, cfg)
	if m, stale := read(""); m == nil || stale || m.WaitingQueueSize != 7 || m.KVCacheUsage < 0.59 || m.KVCacheUsage > 0.61 {
		t.Fatalf("unmutated collector on legacy names: %+v stale %v; want waiting 7, KV 0.6 (the fallback name), fresh", m, stale)
	}
	if m, _ := read(mutant.KVCurrentNameOnly); m == nil || m.KVCacheUsage != 0 || m.WaitingQueueSize != 7 {
		t.Errorf("%s: %+v; want KV unread (0: no vllm:kv_cache_usage_perc), the queue still read", mutant.KVCurrentNameOnly, m)
	}
}

// prefixRun builds approx-prefix-cache-producer with mutant m (none: the real one) and returns a
// function that prepares req on two endpoints, indexes it on endpoint pick (−1: not indexed) and
// returns the match on endpoint 0: matched and total blocks.
func prefixRun(t *testing.T, m mutant.Name) (prepare func(req *framework.LLMRequest) (match, total int), preRequest func(req *framework.LLMRequest, pick int)) {
	t.Helper()
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	if err := Registry(reg, m); err != nil {
		t.Fatal(err)
	}
	f, _ := reg.Factory(prefix.ProducerType)
	p, err := f("x", nil, newHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	dp := p.(framework.PrepareDataPlugin)
	pr := p.(framework.PreRequest)
	e := eps(2)
	prepare = func(req *framework.LLMRequest) (int, int) {
		if err := dp.PrepareRequestData(t.Context(), req, e); err != nil {
			t.Fatal(err)
		}
		v, _ := e[0].Get(prefix.PrefixCacheMatchInfoKey)
		mi := v.(*prefix.PrefixCacheMatchInfo)
		return mi.MatchBlocks, mi.TotalBlocks
	}
	preRequest = func(req *framework.LLMRequest, pick int) {
		pr.PreRequest(t.Context(), req, &framework.SchedulingResult{PrimaryProfileName: "p",
			ProfileResults: map[string]*framework.ProfileRunResult{"p": {TargetEndpoints: e[pick : pick+1]}}})
	}
	return prepare, preRequest
}

// TestProducerMutantsBreakTheirRule: each request-surface mutant of the prefix producer makes
// a pair of requests that SPEC's hashing tells apart score as a full match (or, for token ids,
// leaves nothing to match), where the real producer does not.
func TestProducerMutantsBreakTheirRule(t *testing.T) {
	long := strings.Repeat("abcdefgh", 40)
	chat := func(id, data string) *framework.LLMRequest {
		return &framework.LLMRequest{RequestID: id, XRequestID: id, TargetModel: "m", Body: &framework.LLMRequestBody{API: framework.APIChatCompletions,
			ChatCompletions: &framework.ChatCompletionsRequest{Messages: []framework.Message{{Role: "user", Content: []any{
				map[string]any{"type": "text", "text": "look"},
				map[string]any{"type": "file", "file": map[string]any{"filename": "a.pdf", "file_data": "data:application/pdf;base64," + data}},
				map[string]any{"type": "text", "text": long},
			}}}}}}
	}
	messages := func(id, system string) *framework.LLMRequest {
		return &framework.LLMRequest{RequestID: id, XRequestID: id, TargetModel: "m", Body: &framework.LLMRequestBody{API: framework.APIMessages,
			Messages: &framework.MessagesRequest{System: system, Messages: []framework.Message{{Role: "user", Content: long}}}}}
	}
	completion := func(id, prompt string) *framework.LLMRequest {
		return &framework.LLMRequest{RequestID: id, XRequestID: id, TargetModel: "m", Body: &framework.LLMRequestBody{API: framework.APICompletions,
			Completions: &framework.CompletionsRequest{Prompt: prompt}}}
	}
	for _, tc := range []struct {
		m          mutant.Name
		base, next *framework.LLMRequest
	}{
		{mutant.MessagesSystemUnhashed, messages("a", "You are terse."), messages("b", "You are chatty.")},
		{mutant.PartsHashedAsText, chat("a", "QUFB"), chat("b", "QUFC")},
		{mutant.PartialBlockDropped, completion("a", long+"tail one"), completion("b", long+"tail two")},
	} {
		t.Run(string(tc.m), func(t *testing.T) {
			for _, m := range []mutant.Name{"", tc.m} {
				prepare, preRequest := prefixRun(t, m)
				prepare(tc.base)
				preRequest(tc.base, 0)
				match, total := prepare(tc.next)
				if full := total > 0 && match == total; full != (m != "") {
					t.Errorf("mutant %q: the second request matches %d of %d blocks on the first's endpoint", m, match, total)
				}
			}
		})
	}
	t.Run(string(mutant.TokenIDsUnhashed), func(t *testing.T) {
		for _, m := range []mutant.Name{"", mutant.TokenIDsUnhashed} {
			prepare, _ := prefixRun(t, m)
			for _, body := range []*framework.LLMRequestBody{
				{API: framework.APICompletions, Completions: &framework.CompletionsRequest{TokenIDs: make([]uint32, 64)}},
				{API: framework.APIEmbeddings, Embeddings: &framework.EmbeddingsRequest{TokenIDs: make([]uint32, 64)}},
			} {
				if _, total := prepare(&framework.LLMRequest{RequestID: "r", TargetModel: "m", Body: body}); (total > 0) != (m == "") {
					t.Errorf("mutant %q: %s token ids hashed into %d blocks", m, body.API, total)
				}
			}
		}
	})
	t.Run(string(mutant.GRPCPromptUnhashed), func(t *testing.T) {
		for _, m := range []mutant.Name{"", mutant.GRPCPromptUnhashed} {
			prepare, _ := prefixRun(t, m)
			grpcBody := &framework.LLMRequestBody{API: framework.APIVLLMGRPCGenerate, Completions: &framework.CompletionsRequest{TokenIDs: make([]uint32, 64)}}
			if _, total := prepare(&framework.LLMRequest{RequestID: "g", TargetModel: "m", Body: grpcBody}); (total > 0) != (m == "") {
				t.Errorf("mutant %q: a gRPC Generate call's token ids hashed into %d blocks", m, total)
			}
			http := &framework.LLMRequestBody{API: framework.APICompletions, Completions: &framework.CompletionsRequest{TokenIDs: make([]uint32, 64)}}
			if _, total := prepare(&framework.LLMRequest{RequestID: "h", TargetModel: "m", Body: http}); total == 0 {
				t.Errorf("mutant %q: a completions request's token ids were not hashed", m)
			}
		}
	})
	t.Run(string(mutant.StateKeyedByXRequestID), func(t *testing.T) {
		for _, m := range []mutant.Name{"", mutant.StateKeyedByXRequestID} {
			prepare, preRequest := prefixRun(t, m)
			a, b := completion("a", long+"first"), completion("b", strings.Repeat("zyxwvuts", 40))
			a.XRequestID, b.XRequestID = "same", "same"
			prepare(a)
			prepare(b)
			preRequest(a, 0)
			preRequest(b, 1)
			again := completion("c", long+"first")
			if match, total := prepare(again); (match == total) != (m == "") {
				t.Errorf("mutant %q: a repeat of the first request matches %d of %d blocks on its endpoint", m, match, total)
			}
		}
	})
}

// TestModelRewriteNotSplit: the decorated rules keep answering a model with its first target.
func TestModelRewriteNotSplit(t *testing.T) {
	if ModelRewrites(nil, mutant.ModelRewriteNotSplit) != nil {
		t.Error("a nil rewriter was decorated")
	}
	alt := &alternating{}
	if ModelRewrites(alt, mutant.KVIgnored) != director.ModelRewriter(alt) {
		t.Error("another mutant decorated the rules")
	}
	r := ModelRewrites(alt, mutant.ModelRewriteNotSplit)
	for i := 0; i < 4; i++ {
		if tg, name, ok := r.Rewrite("alias"); !ok || tg != "t0" || name != "rw" {
			t.Errorf("request %d: %q %q %v, want the first target t0 of rw", i, tg, name, ok)
		}
	}
	if _, _, ok := r.Rewrite("other"); ok {
		t.Error("a model without a rule was rewritten")
	}
}

// alternating rewrites "alias" to t0, t1, t0, … (any other model: no rule).
type alternating struct{ n int }

func (a *alternating) Rewrite(model string) (string, string, bool) {
	if model != "alias" {
		return "", "", false
	}
	a.n++
	return "t" + string(rune('0'+(a.n-1)%2)), "rw", true
}

// metricsReader starts a fake vLLM server with cfg and returns a function that scrapes it with
// the collector of mutant m ("" = unmutated) until the first scrape ends, returning what it read
// and whether the endpoint is stale.
func metricsReader(t *testing.T, cfg vllm.Config) func(m mutant.Name) (*framework.Metrics, bool) {
	t.Helper()
	inst, err := vllm.Start(cfg, vllm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.Close)
	addr := strings.TrimPrefix(inst.URL(), "http://")
	host, port, _ := strings.Cut(addr, ":")
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	ep := &framework.EndpointMetadata{Name: addr, Address: host, Port: p}
	dl := datalayer.Config{Interval: 20 * time.Millisecond, StaleThreshold: time.Second, Names: datalayer.DefaultMetricNames()}

	return func(m mutant.Name) (*framework.Metrics, bool) {
		t.Helper()
		base, err := datalayer.New(dl)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Collector(base, dl, m)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		c.SetEndpoints([]*framework.EndpointMetadata{ep})
		c.Start(ctx)
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := c.Metrics(ep.Key())
			if got != nil && (!got.UpdateTime.IsZero() || got.ScrapeError != nil) || time.Now().After(deadline) {
				return got, c.Stale(ep.Key())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestLLMDGroupIgnoredHidesTheGroup: llmd-group-ignored's informers say llm-d.ai is not served
// and hand out every other informer.
func TestLLMDGroupIgnoredHidesTheGroup(t *testing.T) {
	sc, err := discovery.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	inf := informers{Informers: &informertest.FakeInformers{Scheme: sc}, rewrite: endpointMutants[mutant.LLMDGroupIgnored], hideLLMD: true}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: discovery.GroupLLMD, Version: "v1alpha2", Kind: "InferenceObjective"})
	if _, err := inf.GetInformer(t.Context(), u); !meta.IsNoMatchError(err) {
		t.Errorf("llm-d.ai informer: %v, want a no-match error", err)
	}
	if _, err := inf.GetInformer(t.Context(), &corev1.Pod{}); err != nil {
		t.Errorf("Pod informer: %v", err)
	}
}
