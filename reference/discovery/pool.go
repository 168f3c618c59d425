package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/modelrewrite"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	giev1alpha2 "sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
)

// PoolConfig configures an InferencePoolSource.
type PoolConfig struct {
	// RestConfig reaches the API server (see RestConfig). Required.
	RestConfig *rest.Config
	// Name and Namespace of the InferencePool. Required.
	Name, Namespace string
	// Group is the pool's API group: GroupV1 (default) or GroupV1Alpha2.
	Group string
	// Logger receives pool, pod and objective changes; default: discard.
	Logger *slog.Logger
	// ModelRewrites, when set, receives the InferenceModelRewrites that reference the pool
	// (SPEC §9.4): each one is Set under its name with its creation timestamp while it references
	// the pool, and Deleted when it is deleted or points elsewhere. nil: rewrites are not watched.
	ModelRewrites *modelrewrite.Store
}

// InferencePoolSource discovers endpoints from an InferencePool and its pods, priorities from the
// InferenceObjectives that reference the pool, and (PoolConfig.ModelRewrites) the
// InferenceModelRewrites that reference it, through controller-runtime informers
// restricted to the pool's namespace. Every pod, pool or objective event recomputes the endpoint
// set with PoolEndpoints at once, so a pod that stops being Ready, starts terminating or is
// deleted leaves in the same event.
type InferencePoolSource struct {
	cfg       PoolConfig
	log       *slog.Logger
	informers ctrlcache.Informers

	resync sync.Mutex // serialises recompute + replace so the last one reflects the last state
	set    endpointSet

	mu         sync.Mutex
	pool       *PoolSpec // nil until seen, and after deletion
	pods       map[string]*corev1.Pod
	objectives map[string]objective // by object name

	started, cacheSynced atomic.Bool
}

type objective struct {
	priority int
}

var _ Source = (*InferencePoolSource)(nil)

// Scheme returns a runtime.Scheme with core v1, InferencePool v1, and InferenceObjective and
// InferenceModelRewrite v1alpha2.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, giev1.Install, giev1alpha2.Install} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// NewInferencePool validates cfg and builds the source; nothing is watched before Start.
// Errors: RestConfig nil; Name or Namespace empty or not a DNS name; Group not one of GroupV1,
// GroupV1Alpha2; the informer cache could not be built.
func NewInferencePool(cfg PoolConfig) (*InferencePoolSource, error) {
	if cfg.RestConfig == nil {
		return nil, errors.New("pool discovery: RestConfig is required (see --kubeconfig)")
	}
	sc, err := Scheme()
	if err != nil {
		return nil, err
	}
	if err := validatePoolConfig(&cfg); err != nil {
		return nil, err
	}
	setControllerRuntimeLogger(cfg.Logger)
	c, err := ctrlcache.New(cfg.RestConfig, ctrlcache.Options{
		Scheme:            sc,
		DefaultNamespaces: map[string]ctrlcache.Config{cfg.Namespace: {}},
		DefaultTransform:  ctrlcache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("pool discovery: informer cache: %w", err)
	}
	return newInferencePool(cfg, c), nil
}

// NewInferencePoolOn is NewInferencePool on an informer set the caller built: a controller-runtime
// cache restricted to cfg.Namespace whose scheme is Scheme(), shared with other controllers or
// decorated (eppkit's mutant builds wrap its event handlers). cfg.RestConfig is not used. The
// source starts inf in Start. Errors: those of NewInferencePool's validation, or inf nil.
func NewInferencePoolOn(cfg PoolConfig, inf ctrlcache.Informers) (*InferencePoolSource, error) {
	if inf == nil {
		return nil, errors.New("pool discovery: an informer set is required")
	}
	if err := validatePoolConfig(&cfg); err != nil {
		return nil, err
	}
	setControllerRuntimeLogger(cfg.Logger)
	return newInferencePool(cfg, inf), nil
}

var ctrlLogOnce sync.Once

// setControllerRuntimeLogger routes controller-runtime's process-wide logger to l (discarded when
// l is nil) once per process, so its informers do not complain that no logger was set.
func setControllerRuntimeLogger(l *slog.Logger) {
	ctrlLogOnce.Do(func() {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		ctrllog.SetLogger(logr.FromSlogHandler(l.Handler()))
	})
}

func validatePoolConfig(cfg *PoolConfig) error {
	if cfg.Name == "" {
		return errors.New("pool discovery: pool name is required (--pool-name)")
	}
	if errs := validation.IsDNS1123Subdomain(cfg.Name); len(errs) > 0 {
		return fmt.Errorf("pool discovery: pool name %q: %v", cfg.Name, errs)
	}
	if cfg.Namespace == "" {
		return errors.New("pool discovery: pool namespace is required (--pool-namespace)")
	}
	if errs := validation.IsDNS1123Label(cfg.Namespace); len(errs) > 0 {
		return fmt.Errorf("pool discovery: pool namespace %q: %v", cfg.Namespace, errs)
	}
	switch cfg.Group {
	case "":
		cfg.Group = GroupV1
	case GroupV1, GroupV1Alpha2:
	default:
		return fmt.Errorf("pool discovery: pool group %q: want %s or %s", cfg.Group, GroupV1, GroupV1Alpha2)
	}
	return nil
}

// newInferencePool builds the source on any informer set (a controller-runtime cache, or fake
// informers in tests). cfg must be valid.
func newInferencePool(cfg PoolConfig, inf ctrlcache.Informers) *InferencePoolSource {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &InferencePoolSource{
		cfg: cfg, informers: inf,
		log:  log.With("pool", cfg.Namespace+"/"+cfg.Name, "group", cfg.Group),
		pods: map[string]*corev1.Pod{}, objectives: map[string]objective{},
	}
}

// poolObject is the informer's object type for the configured group.
func (s *InferencePoolSource) poolObject() client.Object {
	if s.cfg.Group == GroupV1Alpha2 {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: GroupV1Alpha2, Version: "v1alpha2", Kind: "InferencePool"})
		return u
	}
	return &giev1.InferencePool{}
}

// Start registers the pool, pod and objective informers and starts them; it returns once they
// are registered. Synced turns true when the informers have listed everything and the pool has
// been seen. A missing InferenceObjective API is logged and tolerated (no priorities), and so is
// a missing InferenceModelRewrite API (no rewrites); a missing InferencePool API is an error. A
// second call is an error.
func (s *InferencePoolSource) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("pool discovery: already started")
	}
	poolInf, err := s.informers.GetInformer(ctx, s.poolObject())
	if err != nil {
		return fmt.Errorf("pool discovery: watch InferencePool (%s): %w", s.cfg.Group, err)
	}
	if _, err := poolInf.AddEventHandler(s.handler(s.onPool)); err != nil {
		return fmt.Errorf("pool discovery: InferencePool handler: %w", err)
	}
	podInf, err := s.informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("pool discovery: watch Pods: %w", err)
	}
	if _, err := podInf.AddEventHandler(s.handler(s.onPod)); err != nil {
		return fmt.Errorf("pool discovery: Pod handler: %w", err)
	}
	objInf, objGroup, err := s.informerOf(ctx, "InferenceObjective", &giev1alpha2.InferenceObjective{})
	switch {
	case err != nil:
		return err
	case objInf == nil:
		s.log.Warn("InferenceObjective API not served (neither " + GroupLLMD + " nor " + GroupV1Alpha2 + "); every request has priority 0")
	default:
		s.log.Info("InferenceObjectives read from "+objGroup, "group", objGroup)
		if _, err := objInf.AddEventHandler(s.handler(s.onObjective)); err != nil {
			return fmt.Errorf("pool discovery: InferenceObjective handler: %w", err)
		}
	}
	if s.cfg.ModelRewrites != nil {
		rwInf, rwGroup, err := s.informerOf(ctx, "InferenceModelRewrite", &giev1alpha2.InferenceModelRewrite{})
		switch {
		case err != nil:
			return err
		case rwInf == nil:
			s.log.Warn("InferenceModelRewrite API not served (neither " + GroupLLMD + " nor " + GroupV1Alpha2 + "); no model rewrites")
		default:
			s.log.Info("InferenceModelRewrites read from "+rwGroup, "group", rwGroup)
			if _, err := rwInf.AddEventHandler(s.handler(s.onModelRewrite)); err != nil {
				return fmt.Errorf("pool discovery: InferenceModelRewrite handler: %w", err)
			}
		}
	}
	go func() {
		if err := s.informers.Start(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("informer cache stopped", "error", err)
		}
	}()
	go func() {
		if s.informers.WaitForCacheSync(ctx) {
			s.cacheSynced.Store(true)
			s.recompute()
			s.log.Info("informers synced", "synced", s.Synced(), "endpoints", len(s.set.list()))
		}
	}()
	return nil
}

// GroupLLMD is the API group of InferenceObjective and InferenceModelRewrite since llm-d-router
// v0.10.0 (version v1alpha2; apix/v1alpha2 GroupName). The GIE v1.5.0 group GroupV1Alpha2 is
// the legacy one.
const GroupLLMD = "llm-d.ai"

// informerOf returns the informer of kind (InferenceObjective or InferenceModelRewrite) in the
// group the API server serves, llm-d.ai/v1alpha2 first and the legacy
// inference.networking.x-k8s.io/v1alpha2 (legacy, a typed object) only when llm-d.ai does not
// serve the kind: with both installed, legacy objects are ignored, as llm-d-router v0.10.0 does
// (pkg/epp/server/controller_config.go populateWithDiscovery, decided once at start). A nil
// informer means neither group serves it.
func (s *InferencePoolSource) informerOf(ctx context.Context, kind string, legacy client.Object) (ctrlcache.Informer, string, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: GroupLLMD, Version: "v1alpha2", Kind: kind})
	inf, err := s.informers.GetInformer(ctx, u)
	switch {
	case err == nil:
		s.log.Info(kind+": the "+GroupLLMD+" API is served; "+GroupV1Alpha2+" objects of this kind are ignored", "kind", kind)
		return inf, GroupLLMD, nil
	case !meta.IsNoMatchError(err):
		return nil, "", fmt.Errorf("pool discovery: watch %s (%s): %w", kind, GroupLLMD, err)
	}
	inf, err = s.informers.GetInformer(ctx, legacy)
	switch {
	case meta.IsNoMatchError(err):
		return nil, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("pool discovery: watch %s (%s): %w", kind, GroupV1Alpha2, err)
	}
	return inf, GroupV1Alpha2, nil
}

// typedFrom converts an llm-d.ai object (unstructured; its schema is the legacy kind's) into
// the typed legacy object dst; ok is false for any other object.
func typedFrom(obj any, dst any) bool {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return false
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), dst) == nil
}

// handler adapts an on(obj, deleted) callback to informer events, unwrapping tombstones.
func (s *InferencePoolSource) handler(on func(obj any, deleted bool)) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { on(obj, false) },
		UpdateFunc: func(_, obj any) { on(obj, false) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			on(obj, true)
		},
	}
}

func (s *InferencePoolSource) onPool(obj any, deleted bool) {
	mo, ok := obj.(metav1.Object)
	if !ok || mo.GetName() != s.cfg.Name || mo.GetNamespace() != s.cfg.Namespace {
		return
	}
	var spec *PoolSpec
	if !deleted && mo.GetDeletionTimestamp() == nil {
		switch p := obj.(type) {
		case *giev1.InferencePool:
			ps := PoolSpecFromV1(p)
			spec = &ps
		case *unstructured.Unstructured:
			ps, err := PoolSpecFromV1Alpha2(p)
			if err != nil {
				s.log.Error("InferencePool unreadable; no endpoints", "error", err)
			} else {
				spec = &ps
			}
		}
	}
	s.mu.Lock()
	s.pool = spec
	s.mu.Unlock()
	if spec == nil {
		s.log.Info("InferencePool gone or terminating; no endpoints")
	} else {
		s.log.Info("InferencePool", "selector", spec.Selector, "targetPorts", spec.TargetPorts)
	}
	s.recompute()
}

func (s *InferencePoolSource) onPod(obj any, deleted bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Namespace != s.cfg.Namespace {
		return
	}
	s.mu.Lock()
	if deleted {
		delete(s.pods, pod.Name)
	} else {
		s.pods[pod.Name] = pod
	}
	s.mu.Unlock()
	s.recompute()
}

func (s *InferencePoolSource) onObjective(obj any, deleted bool) {
	o, ok := obj.(*giev1alpha2.InferenceObjective)
	if !ok {
		o = &giev1alpha2.InferenceObjective{}
		ok = typedFrom(obj, o)
	}
	if !ok || o.Namespace != s.cfg.Namespace {
		return
	}
	// Upstream keeps an objective only while its poolRef names this pool and group
	// (pkg/epp/controller/inferenceobjective_reconciler.go); an empty group is the CRD default.
	group := string(o.Spec.PoolRef.Group)
	if group == "" {
		group = GroupV1
	}
	keep := !deleted && o.DeletionTimestamp == nil && string(o.Spec.PoolRef.Name) == s.cfg.Name && group == s.cfg.Group
	s.mu.Lock()
	defer s.mu.Unlock()
	if !keep {
		delete(s.objectives, o.Name)
		return
	}
	p := 0
	if o.Spec.Priority != nil {
		p = *o.Spec.Priority
	}
	s.objectives[o.Name] = objective{priority: p}
}

// onModelRewrite keeps the InferenceModelRewrites whose spec.poolRef names this pool and group
// (upstream v1.5.0 pkg/epp/controller/inferencemodelrewrite_reconciler.go; an empty group is the
// CRD default) in the model rewrite store; a rewrite whose rules the store refuses is logged
// with the field and holds no rules.
func (s *InferencePoolSource) onModelRewrite(obj any, deleted bool) {
	o, ok := obj.(*giev1alpha2.InferenceModelRewrite)
	if !ok {
		o = &giev1alpha2.InferenceModelRewrite{}
		ok = typedFrom(obj, o)
	}
	if !ok || o.Namespace != s.cfg.Namespace {
		return
	}
	ref := o.Spec.PoolRef
	keep := !deleted && o.DeletionTimestamp == nil && ref != nil && string(ref.Name) == s.cfg.Name
	if keep {
		group := string(ref.Group)
		if group == "" {
			group = GroupV1
		}
		keep = group == s.cfg.Group
	}
	if !keep {
		s.cfg.ModelRewrites.Delete(o.Name)
		return
	}
	if err := s.cfg.ModelRewrites.Set(o.Name, o.CreationTimestamp.Time, &o.Spec); err != nil {
		s.log.Error("InferenceModelRewrite refused; its rules do not apply", "name", o.Name, "error", err)
		return
	}
	s.log.Info("InferenceModelRewrite", "name", o.Name, "rules", len(o.Spec.Rules))
}

// recompute derives the endpoint set from the current pool and pods and publishes changes.
func (s *InferencePoolSource) recompute() {
	s.resync.Lock()
	defer s.resync.Unlock()
	s.mu.Lock()
	var next map[string]*framework.EndpointMetadata
	if s.pool != nil {
		pods := make([]*corev1.Pod, 0, len(s.pods))
		for _, p := range s.pods {
			pods = append(pods, p)
		}
		next = PoolEndpoints(*s.pool, pods)
	} else {
		next = map[string]*framework.EndpointMetadata{}
	}
	s.mu.Unlock()
	s.set.replace(next)
}

// Synced reports whether the informers have synced and the InferencePool exists.
func (s *InferencePoolSource) Synced() bool {
	if !s.cacheSynced.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pool != nil
}

// Endpoints returns copies of the current endpoints sorted by Key().
func (s *InferencePoolSource) Endpoints() []*framework.EndpointMetadata { return s.set.list() }

// Snapshot returns the current endpoints sorted by Key(), shared and read-only (Source.Snapshot).
func (s *InferencePoolSource) Snapshot() []*framework.EndpointMetadata { return s.set.snapshot() }

// Subscribe registers fn; see Source.Subscribe. fn runs on the informer's event goroutine, so it
// should return quickly.
func (s *InferencePoolSource) Subscribe(fn func(added, removed []*framework.EndpointMetadata)) {
	s.set.subscribe(fn)
}

// Priority returns spec.priority of the InferenceObjective with that name that references this
// pool (0 when the objective sets none); ok is false when there is no such objective.
func (s *InferencePoolSource) Priority(name string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objectives[name]
	return o.priority, ok
}

// RestConfig loads API server credentials: from kubeconfigPath when set, else from the files in
// $KUBECONFIG, else the in-cluster service account, else ~/.kube/config (the order of
// controller-runtime's config.GetConfig). Errors say which source failed.
func RestConfig(kubeconfigPath string) (*rest.Config, error) {
	if kubeconfigPath != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfigPath, err)
		}
		return c, nil
	}
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig from $%s=%s: %w", clientcmd.RecommendedConfigPathEnvVar, env, err)
		}
		return c, nil
	}
	c, inClusterErr := rest.InClusterConfig()
	if inClusterErr == nil {
		return c, nil
	}
	if home, err := os.UserHomeDir(); err == nil {
		path := filepath.Join(home, clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)
		if _, err := os.Stat(path); err == nil {
			c, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
			}
			return c, nil
		}
	}
	return nil, fmt.Errorf("no kubeconfig: --kubeconfig and $%s are unset, not in a cluster (%v), and ~/.kube/config does not exist",
		clientcmd.RecommendedConfigPathEnvVar, inClusterErr)
}
