// Package clustergw is the gateway stand-in for an InferencePool in a Kubernetes cluster whose
// Services this process cannot reach (kind without Envoy's image): it resolves the pool the way a GIE
// gateway implementation does — InferencePool → spec.endpointPickerRef Service → its
// EndpointSlices → a Ready EPP pod IP and port — and sends each request through fakes/gateway
// with the pool's failureMode. The pool's own endpoints (Ready pods matching spec.selector, on
// spec.targetPorts[0]) are the FailOpen fallback, as Envoy's failure_mode_allow routes to the
// pool without the EPP (GIE v1.5.0 api/v1 inferencepool_types.go, EndpointPickerFailureMode).
//
// Resolution reads informer caches, so it follows the cluster within the watch latency: an EPP
// pod that turns not-Ready or goes away stops being used as soon as its EndpointSlice says so.
// With no Ready EPP endpoint at all, FailClose answers 500 (Envoy's ext_proc status_on_error
// default) and FailOpen forwards round-robin over the pool's Ready pods (503 when there is none).
// It dials pod IPs, directly (a pod network this machine routes to) or through Config.Dial (the
// e2e suite's port-forwards).
package clustergw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/eppkit/eppkit/fakes/gateway"
)

// InferencePoolGVR is the InferencePool resource this gateway reads (GIE v1).
var InferencePoolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// Config configures New. Client, Dynamic, Namespace and Pool are required.
type Config struct {
	// Client reads Services, EndpointSlices and Pods; Dynamic reads the InferencePool.
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Namespace and Pool name the InferencePool; the EPP Service and the pods are in Namespace.
	Namespace, Pool string
	// MessageTimeout, BodyChunkSize and StatusOnError are passed to fakes/gateway (0 = its defaults).
	MessageTimeout time.Duration
	BodyChunkSize  int
	StatusOnError  int
	// Logger receives resolution changes (default: discard).
	Logger *slog.Logger
	// Dial is passed to fakes/gateway (gateway.Config.Dial): how the EPP's and the endpoints'
	// pod IPs are reached (nil = directly).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Resolution is what the pool resolves to at one moment.
type Resolution struct {
	// EPP is a Ready EPP endpoint "ip:port" from the endpointPickerRef Service's EndpointSlices,
	// "" when there is none.
	EPP string
	// FailureMode is the pool's spec.endpointPickerRef.failureMode (default FailClose).
	FailureMode gateway.FailureMode
	// Endpoints are the pool's Ready pods as "ip:targetPort", sorted.
	Endpoints []string
}

func (r Resolution) key() string {
	return r.EPP + "|" + r.FailureMode.String() + "|" + strings.Join(r.Endpoints, ",")
}

// Gateway is the cluster-resolving gateway stand-in. It is an http.Handler.
type Gateway struct {
	cfg    Config
	log    *slog.Logger
	cancel context.CancelFunc

	pools    cache.GenericLister
	services cache.Indexer
	slices   cache.Indexer
	pods     cache.Indexer

	mu       sync.Mutex
	last     string
	gateways map[string]*gateway.Gateway
}

// New validates cfg; Start begins watching.
func New(cfg Config) (*Gateway, error) {
	switch {
	case cfg.Client == nil || cfg.Dynamic == nil:
		return nil, errors.New("clustergw: Client and Dynamic are required")
	case cfg.Namespace == "":
		return nil, errors.New("clustergw: Namespace is required")
	case cfg.Pool == "":
		return nil, errors.New("clustergw: Pool is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Gateway{cfg: cfg, log: log.With("pool", cfg.Namespace+"/"+cfg.Pool), gateways: map[string]*gateway.Gateway{}}, nil
}

// Start starts the informers (InferencePools, Services, EndpointSlices and Pods of Namespace)
// and waits for their first list. They stop with Close or ctx.
func (g *Gateway) Start(ctx context.Context) error {
	ctx, g.cancel = context.WithCancel(ctx)
	core := informers.NewSharedInformerFactoryWithOptions(g.cfg.Client, 0, informers.WithNamespace(g.cfg.Namespace))
	dyn := dynamicinformer.NewFilteredDynamicSharedInformerFactory(g.cfg.Dynamic, 0, g.cfg.Namespace, nil)
	poolInf := dyn.ForResource(InferencePoolGVR)
	svcInf := core.Core().V1().Services().Informer()
	sliceInf := core.Discovery().V1().EndpointSlices().Informer()
	podInf := core.Core().V1().Pods().Informer()
	g.pools, g.services, g.slices, g.pods = poolInf.Lister(), svcInf.GetIndexer(), sliceInf.GetIndexer(), podInf.GetIndexer()
	core.Start(ctx.Done())
	dyn.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), poolInf.Informer().HasSynced, svcInf.HasSynced, sliceInf.HasSynced, podInf.HasSynced) {
		return fmt.Errorf("clustergw: informers of namespace %s did not sync: %w", g.cfg.Namespace, ctx.Err())
	}
	return nil
}

// Close stops the informers and the per-resolution gateways.
func (g *Gateway) Close() error {
	if g.cancel != nil {
		g.cancel()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, gw := range g.gateways {
		_ = gw.Close()
		delete(g.gateways, k)
	}
	return nil
}

// Resolve reads the pool, the EPP Service's EndpointSlices and the pool's pods from the caches.
func (g *Gateway) Resolve() (Resolution, error) {
	obj, err := g.pools.ByNamespace(g.cfg.Namespace).Get(g.cfg.Pool)
	if err != nil {
		return Resolution{}, fmt.Errorf("clustergw: InferencePool %s/%s: %w", g.cfg.Namespace, g.cfg.Pool, err)
	}
	pool, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return Resolution{}, fmt.Errorf("clustergw: InferencePool %s: unexpected type %T", g.cfg.Pool, obj)
	}
	var res Resolution
	mode, _, _ := unstructured.NestedString(pool.Object, "spec", "endpointPickerRef", "failureMode")
	res.FailureMode = gateway.FailClose
	if mode == "FailOpen" {
		res.FailureMode = gateway.FailOpen
	}
	svcName, _, _ := unstructured.NestedString(pool.Object, "spec", "endpointPickerRef", "name")
	svcPort, _, _ := unstructured.NestedInt64(pool.Object, "spec", "endpointPickerRef", "port", "number")
	if kind, _, _ := unstructured.NestedString(pool.Object, "spec", "endpointPickerRef", "kind"); kind != "" && kind != "Service" {
		return Resolution{}, fmt.Errorf("clustergw: InferencePool %s: endpointPickerRef kind %q is not supported (only Service)", g.cfg.Pool, kind)
	}
	if svcName == "" {
		return Resolution{}, fmt.Errorf("clustergw: InferencePool %s: spec.endpointPickerRef.name is empty", g.cfg.Pool)
	}
	res.EPP = g.eppEndpoint(svcName, int32(svcPort))

	ports, _, _ := unstructured.NestedSlice(pool.Object, "spec", "targetPorts")
	var target int64
	if len(ports) > 0 {
		if m, ok := ports[0].(map[string]any); ok {
			target, _, _ = unstructured.NestedInt64(m, "number")
		}
	}
	sel, _, _ := unstructured.NestedStringMap(pool.Object, "spec", "selector", "matchLabels")
	if target > 0 && len(sel) > 0 {
		selector := labels.SelectorFromSet(sel)
		for _, o := range g.pods.List() {
			p, ok := o.(*corev1.Pod)
			if !ok || !selector.Matches(labels.Set(p.Labels)) || !podReady(p) {
				continue
			}
			res.Endpoints = append(res.Endpoints, net.JoinHostPort(p.Status.PodIP, strconv.FormatInt(target, 10)))
		}
		sort.Strings(res.Endpoints)
	}
	return res, nil
}

// eppEndpoint returns the first (sorted) Ready address:port of the Service's EndpointSlices for
// the Service port numbered port, "" when there is none.
func (g *Gateway) eppEndpoint(svcName string, port int32) string {
	obj, ok, _ := g.services.GetByKey(g.cfg.Namespace + "/" + svcName)
	if !ok {
		return ""
	}
	svc := obj.(*corev1.Service)
	portName, found := "", false
	for _, sp := range svc.Spec.Ports {
		if sp.Port == port || (port == 0 && len(svc.Spec.Ports) == 1) {
			portName, found = sp.Name, true
			break
		}
	}
	if !found {
		return ""
	}
	var addrs []string
	for _, o := range g.slices.List() {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok || s.Labels[discoveryv1.LabelServiceName] != svcName || s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		var num int32
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil && portName == "" || p.Name != nil && *p.Name == portName) {
				num = *p.Port
			}
		}
		if num == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) || len(ep.Addresses) == 0 {
				continue
			}
			addrs = append(addrs, net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(num))))
		}
	}
	if len(addrs) == 0 {
		return ""
	}
	sort.Strings(addrs)
	return addrs[0]
}

// podReady: Ready=True, an IP, not terminating (what the pool's endpoints are; GIE v1.5.0
// pkg/epp/util/pod IsPodReady).
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gatewayFor returns the fakes/gateway for a resolution, built once per distinct resolution.
// With no EPP endpoint: FailOpen → round-robin over the pool; FailClose → nil (local reply).
func (g *Gateway) gatewayFor(res Resolution) (*gateway.Gateway, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := res.key()
	if key != g.last {
		g.log.Info("pool resolution", "epp", res.EPP, "failureMode", res.FailureMode.String(), "endpoints", res.Endpoints)
		g.last = key
	}
	if gw, ok := g.gateways[key]; ok {
		return gw, nil
	}
	cfg := gateway.Config{EPPAddress: res.EPP, FailureMode: res.FailureMode, Endpoints: res.Endpoints, Dial: g.cfg.Dial,
		MessageTimeout: g.cfg.MessageTimeout, BodyChunkSize: g.cfg.BodyChunkSize, StatusOnError: g.cfg.StatusOnError, Logger: g.log}
	if res.EPP == "" {
		if res.FailureMode != gateway.FailOpen || len(res.Endpoints) == 0 {
			return nil, nil
		}
		cfg.Mode = gateway.ModeRoundRobin
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		return nil, err
	}
	g.gateways[key] = gw
	return gw, nil
}

// Do resolves the pool and sends req through fakes/gateway. Without a usable EPP endpoint it
// answers like Envoy: FailClose → StatusOnError (500); FailOpen without Ready pods → 503.
// Result.FailedOpen is set when the request bypassed the EPP.
func (g *Gateway) Do(ctx context.Context, req *gateway.Request) (*gateway.Result, error) {
	res, err := g.Resolve()
	if err != nil {
		return nil, err
	}
	gw, err := g.gatewayFor(res)
	if err != nil {
		return nil, err
	}
	if gw == nil {
		status := g.cfg.StatusOnError
		if status == 0 {
			status = gateway.DefaultStatusOnError
		}
		if res.FailureMode == gateway.FailOpen {
			status = http.StatusServiceUnavailable
		}
		return &gateway.Result{Status: status, Headers: http.Header{},
			Body: []byte("clustergw: no Ready endpoint for the pool's endpointPickerRef (" + res.FailureMode.String() + ")")}, nil
	}
	out, err := gw.Do(ctx, req)
	if err == nil && res.EPP == "" {
		out.FailedOpen = true
	}
	return out, err
}

// ServeHTTP implements http.Handler with Do.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	res, err := g.Resolve()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	gw, err := g.gatewayFor(res)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if gw == nil {
		status := g.cfg.StatusOnError
		if status == 0 {
			status = gateway.DefaultStatusOnError
		}
		if res.FailureMode == gateway.FailOpen {
			status = http.StatusServiceUnavailable
		}
		http.Error(w, "clustergw: no Ready endpoint for the pool's endpointPickerRef", status)
		return
	}
	gw.ServeHTTP(w, r)
}
