package wrap

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"

	"github.com/eppkit/eppkit/reference/datalayer"
	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/discovery"
	"github.com/eppkit/eppkit/reference/eppserver"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
	"github.com/eppkit/eppkit/selfcheck/mutant"
)

// endpointMutants are the mutants of the InferencePool endpoint source: each rewrites (or drops)
// the Kubernetes events the source's informers deliver, before the source's own rule
// (discovery.PoolEndpoints) sees them.
var endpointMutants = map[mutant.Name]func(obj any, deleted bool) (any, bool){
	// Every Pod reads as Ready: the Ready condition is ignored (a terminating Pod still is not).
	mutant.NotReadyPicked: func(obj any, deleted bool) (any, bool) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || deleted {
			return obj, true
		}
		pod = pod.DeepCopy()
		i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
		if i < 0 {
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady})
			i = len(pod.Status.Conditions) - 1
		}
		pod.Status.Conditions[i].Status = corev1.ConditionTrue
		return pod, true
	},
	// A Pod's deletion, graceful (deletionTimestamp) or not, never reaches the source: the Pod
	// keeps its last state.
	mutant.RemovedEndpointKept: func(obj any, deleted bool) (any, bool) {
		o := obj
		if t, tomb := obj.(toolscache.DeletedFinalStateUnknown); tomb {
			o = t.Obj
		}
		pod, ok := o.(*corev1.Pod)
		if !ok {
			return obj, true
		}
		return obj, !deleted && pod.DeletionTimestamp == nil
	},
	// The InferencePool reads as having only its first targetPort: ranks beyond the first of
	// every pod are no endpoints.
	mutant.RanksBeyondFirstDropped: func(obj any, deleted bool) (any, bool) {
		pool, ok := obj.(*giev1.InferencePool)
		if !ok || len(pool.Spec.TargetPorts) < 2 {
			return obj, true
		}
		pool = pool.DeepCopy()
		pool.Spec.TargetPorts = pool.Spec.TargetPorts[:1]
		return pool, true
	},

	// The llm-d.ai group reads as not served (informers.hideLLMD), so the source reads the legacy
	// group's InferenceObjectives and InferenceModelRewrites, as an EPP that knows only GIE v1.5.0's
	// group; events themselves pass unchanged.
	mutant.LLMDGroupIgnored: func(obj any, _ bool) (any, bool) { return obj, true },
}

// inEveryPool is the pool-selector-ignored mutant: every Pod of the namespace reads as labelled
// for the pool (the apiserver endpoint source's label apiserver.PoolLabel), another pool's Pods
// included, as an EPP that does not apply its pool's selector.
func inEveryPool(pool string) func(obj any, deleted bool) (any, bool) {
	return func(obj any, deleted bool) (any, bool) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || deleted {
			return obj, true
		}
		pod = pod.DeepCopy()
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[apiserver.PoolLabel] = pool
		return pod, true
	}
}

// EndpointMutants lists the endpoint-source mutants Reference applies: those PoolSource implements
// and ready-before-sync.
func EndpointMutants() []mutant.Name {
	out := make([]mutant.Name, 0, len(endpointMutants))
	// ready-before-sync decorates the source's sync state, pool-selector-ignored its pool's label.
	out = append(out, mutant.ReadyBeforeSync, mutant.PoolSelectorIgnored)
	for n := range endpointMutants {
		out = append(out, n)
	}
	return out
}

// PoolSource builds the InferencePool source of cfg as discovery.NewInferencePool does, on a
// controller-runtime cache of cfg.RestConfig restricted to cfg.Namespace, with the informers'
// events decorated by mutant m when m is an endpoint-source mutant. Errors: those of
// discovery.NewInferencePoolOn, or the cache could not be built.
func PoolSource(cfg discovery.PoolConfig, m mutant.Name) (*discovery.InferencePoolSource, error) {
	if cfg.RestConfig == nil {
		return nil, fmt.Errorf("pool discovery: RestConfig is required (see --kubeconfig)")
	}
	sc, err := discovery.Scheme()
	if err != nil {
		return nil, err
	}
	c, err := ctrlcache.New(cfg.RestConfig, ctrlcache.Options{
		Scheme:            sc,
		DefaultNamespaces: map[string]ctrlcache.Config{cfg.Namespace: {}},
		DefaultTransform:  ctrlcache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("pool discovery: informer cache: %w", err)
	}
	var inf ctrlcache.Informers = c
	if rewrite, ok := endpointMutants[m]; ok {
		inf = informers{Informers: c, rewrite: rewrite, hideLLMD: m == mutant.LLMDGroupIgnored}
	}
	if m == mutant.PoolSelectorIgnored {
		inf = informers{Informers: c, rewrite: inEveryPool(cfg.Name)}
	}
	return discovery.NewInferencePoolOn(cfg, inf)
}

// informers decorates every informer it hands out so that its event handlers see rewritten
// events; with hideLLMD, the llm-d.ai API group reads as not served.
type informers struct {
	ctrlcache.Informers
	rewrite  func(obj any, deleted bool) (any, bool)
	hideLLMD bool
}

func (i informers) GetInformer(ctx context.Context, obj client.Object, opts ...ctrlcache.InformerGetOption) (ctrlcache.Informer, error) {
	if gvk := obj.GetObjectKind().GroupVersionKind(); i.hideLLMD && gvk.Group == discovery.GroupLLMD {
		return nil, &meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
	}
	inf, err := i.Informers.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	return informer{Informer: inf, rewrite: i.rewrite}, nil
}

type informer struct {
	ctrlcache.Informer
	rewrite func(obj any, deleted bool) (any, bool)
}

func (i informer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandler(handler{h, i.rewrite})
}

func (i informer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, d time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandlerWithResyncPeriod(handler{h, i.rewrite}, d)
}

func (i informer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandlerWithOptions(handler{h, i.rewrite}, o)
}

// handler passes the rewritten event on, or drops it.
type handler struct {
	inner   toolscache.ResourceEventHandler
	rewrite func(obj any, deleted bool) (any, bool)
}

func (h handler) OnAdd(obj any, initial bool) {
	if obj, ok := h.rewrite(obj, false); ok {
		h.inner.OnAdd(obj, initial)
	}
}

func (h handler) OnUpdate(old, obj any) {
	if obj, ok := h.rewrite(obj, false); ok {
		h.inner.OnUpdate(old, obj)
	}
}

func (h handler) OnDelete(obj any) {
	if obj, ok := h.rewrite(obj, true); ok {
		h.inner.OnDelete(obj)
	}
}

// metricsMutants are the mutants of the metrics source. Each returns the source the reference
// runs with: c decorated, or a new collector built from dl, the configuration c was built from,
// changed as the mutant says.
var metricsMutants = map[mutant.Name]func(c eppserver.Collector, dl datalayer.Config) (eppserver.Collector, error){
	// No endpoint is ever stale: the stale-endpoint filter has nothing to drop.
	mutant.StaleEndpointKept: func(c eppserver.Collector, _ datalayer.Config) (eppserver.Collector, error) {
		return neverStale{c}, nil
	},
	// The KV-cache gauge is read only under vLLM's legacy name, with no fallback to the current
	// one (the bug GIE PR #1905 fixed in the other direction).
	mutant.KVLegacyNameOnly: func(_ eppserver.Collector, dl datalayer.Config) (eppserver.Collector, error) {
		dl.Names = namesOf(dl)
		dl.Names.KVCacheUsage, dl.Names.KVCacheUsageFallback = datalayer.DefaultLegacyKVCacheMetric, ""
		return datalayer.New(dl)
	},
	// The KV-cache gauge is read only under vLLM's current name, with no fallback to the legacy
	// one: upstream v1.5.0's default engine config (pkg/epp/framework/plugins/datalayer/extractor/
	// metrics/factories.go defaultEngineConfigs), so on vLLM before v0.10 KV use reads 0.
	mutant.KVCurrentNameOnly: func(_ eppserver.Collector, dl datalayer.Config) (eppserver.Collector, error) {
		dl.Names = namesOf(dl)
		dl.Names.KVCacheUsage, dl.Names.KVCacheUsageFallback = datalayer.DefaultKVCacheMetric, ""
		return datalayer.New(dl)
	},
	// A scrape whose exposition has no vllm:lora_requests_info family fails as a whole, as the
	// EPP of llm-d-router #926 ("extract failed": metric family not found) on vLLM without LoRA.
	mutant.LoRAFamilyRequired: func(_ eppserver.Collector, dl datalayer.Config) (eppserver.Collector, error) {
		names := namesOf(dl)
		base := dl.HTTPClient
		if base == nil {
			base = &http.Client{}
		}
		client := *base
		client.Transport = loraRequired{next: base.Transport, family: names.LoRAInfo}
		dl.HTTPClient = &client
		return datalayer.New(dl)
	},
	// Data-parallel engines' series are not told apart: the engine label is never looked for,
	// so of each family the first series (engine "0") is read, as upstream v1.5.0's
	// getLatestMetric does (GIE #2950).
	mutant.EngineSeriesIgnored: func(_ eppserver.Collector, dl datalayer.Config) (eppserver.Collector, error) {
		dl.Names = namesOf(dl)
		dl.Names.EngineLabel = "eppkit_mutant_no_such_label"
		return datalayer.New(dl)
	},
}

// namesOf returns the metric names dl selects (its zero Names means the defaults).
func namesOf(dl datalayer.Config) datalayer.MetricNames {
	if dl.Names == (datalayer.MetricNames{}) {
		return datalayer.DefaultMetricNames()
	}
	return dl.Names
}

// loraRequired fails every /metrics response whose exposition lacks the family.
type loraRequired struct {
	next   http.RoundTripper
	family string
}

func (l loraRequired) RoundTrip(req *http.Request) (*http.Response, error) {
	next := l.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, datalayer.MaxBodyBytes+1))
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if !hasFamily(body, l.family) {
		return nil, fmt.Errorf("extract failed: metric family %q not found", l.family)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// hasFamily reports whether a text exposition has a sample or a TYPE line of family.
func hasFamily(body []byte, family string) bool {
	for line := range bytes.Lines(body) {
		if bytes.HasPrefix(line, []byte(family)) && len(line) > len(family) && (line[len(family)] == '{' || line[len(family)] == ' ') {
			return true
		}
		if bytes.HasPrefix(line, []byte("# TYPE "+family+" ")) {
			return true
		}
	}
	return false
}

// MetricsMutants lists the mutants Collector implements.
func MetricsMutants() []mutant.Name {
	out := make([]mutant.Name, 0, len(metricsMutants))
	for n := range metricsMutants {
		out = append(out, n)
	}
	return out
}

// Collector returns the metrics source of mutant m when m is a metrics-source mutant, else c:
// c decorated, or a collector built anew from dl (the datalayer.Config c was built from) with
// the mutant's change. Errors: those of datalayer.New.
func Collector(c eppserver.Collector, dl datalayer.Config, m mutant.Name) (eppserver.Collector, error) {
	if f, ok := metricsMutants[m]; ok && c != nil {
		return f(c, dl)
	}
	return c, nil
}

// neverStale is a metrics source whose endpoints are never stale; metrics are the real ones.
type neverStale struct{ eppserver.Collector }

func (c neverStale) Stale(string) bool { return false }

// Read implements the director's one-lookup read with stale always false.
func (c neverStale) Read(key string) (*framework.Metrics, bool) {
	if r, ok := c.Collector.(interface {
		Read(string) (*framework.Metrics, bool)
	}); ok {
		m, _ := r.Read(key)
		return m, false
	}
	return c.Collector.Metrics(key), false
}

// Wait waits for the decorated collector's scrapers, as eppserver does for one that has Wait.
func (c neverStale) Wait() {
	if w, ok := c.Collector.(interface{ Wait() }); ok {
		w.Wait()
	}
}

// rewriteMutants are the mutants of the pool's model rewrite rules.
var rewriteMutants = map[mutant.Name]func(director.ModelRewriter) director.ModelRewriter{
	// The first target chosen for a model sticks: no weighted split.
	mutant.ModelRewriteNotSplit: func(r director.ModelRewriter) director.ModelRewriter {
		return &stickyRewriter{inner: r, chosen: map[string][2]string{}}
	},
}

// RewriteMutants lists the mutants ModelRewrites implements.
func RewriteMutants() []mutant.Name {
	out := make([]mutant.Name, 0, len(rewriteMutants))
	for n := range rewriteMutants {
		out = append(out, n)
	}
	return out
}

// ModelRewrites returns r decorated by mutant m when m is a model-rewrite mutant, else r.
func ModelRewrites(r director.ModelRewriter, m mutant.Name) director.ModelRewriter {
	if f, ok := rewriteMutants[m]; ok && r != nil {
		return f(r)
	}
	return r
}

// stickyRewriter answers every request for a model with the first target the real rules chose
// for it (the rules' precedence kept, their weights lost after the first request).
type stickyRewriter struct {
	inner  director.ModelRewriter
	mu     sync.Mutex
	chosen map[string][2]string // model → {target, rewrite name}
}

func (r *stickyRewriter) Rewrite(model string) (target, rewrite string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, seen := r.chosen[model]; seen {
		return c[0], c[1], true
	}
	target, rewrite, ok = r.inner.Rewrite(model)
	if ok {
		r.chosen[model] = [2]string{target, rewrite}
	}
	return target, rewrite, ok
}

// Reference applies mutant m to the options of a reference EPP: the plugin registry (nil means
// plugins.RegisterAll's, which Reference then builds), the metrics source (opts.Collector, built
// from dl), the model rewrite rules, and, when pool is not nil (Kubernetes discovery), an
// InferencePool source built from it that replaces opts.Discovery. Names that are not mutants of
// these leave opts unchanged.
func Reference(opts *eppserver.Options, pool *discovery.PoolConfig, dl datalayer.Config, m mutant.Name) error {
	if _, ok := pluginMutants[m]; ok {
		if opts.Registry == nil {
			opts.Registry = defaultRegistry()
		}
		if err := Registry(opts.Registry, m); err != nil {
			return err
		}
	}
	c, err := Collector(opts.Collector, dl, m)
	if err != nil {
		return fmt.Errorf("mutant %s: metrics source: %w", m, err)
	}
	opts.Collector = c
	opts.ModelRewrites = ModelRewrites(opts.ModelRewrites, m)
	switch m {
	case mutant.FollowerServing:
		// Only replicas with leader election are broken (the run's own target has none).
		if opts.Leader != nil {
			opts.Leader = alwaysLeader{opts.Leader}
		}
	case mutant.DrainDropsInFlight:
		opts.DrainTimeout, opts.DrainHandover = time.Millisecond, 0
	}
	if _, ok := endpointMutants[m]; ok || m == mutant.ReadyBeforeSync || m == mutant.PoolSelectorIgnored {
		if pool == nil {
			return fmt.Errorf("mutant %s needs Kubernetes discovery (--pool-name)", m)
		}
		src, err := PoolSource(*pool, m)
		if err != nil {
			return err
		}
		opts.Discovery = src
		if m == mutant.ReadyBeforeSync {
			opts.Discovery = syncedFromStart{src}
		}
	}
	return nil
}

// alwaysLeader is the leader election of the follower-serving mutant: it campaigns as the real
// one does (the Lease has one holder) but reports this replica the leader whatever it holds.
type alwaysLeader struct{ eppserver.Leader }

// IsLeader is always true.
func (alwaysLeader) IsLeader() bool { return true }

// syncedFromStart is the InferencePool source of the ready-before-sync mutant: it reports itself
// synced from the start, whether or not its pool exists, so the EPP's readiness turns SERVING
// before its datastore has synced.
type syncedFromStart struct{ *discovery.InferencePoolSource }

// Synced is always true.
func (syncedFromStart) Synced() bool { return true }

func defaultRegistry() *framework.Registry {
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	return reg
}
