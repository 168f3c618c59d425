// Package clustertarget runs the conformance registry against an EPP deployed in a cluster of a
// cluster.Provider: `eppkit conformance --target cluster --endpoint-source cluster`.
//
// The harness keeps its own fake vLLM fleet (fakes/fleet, on 127.0.10.x) and its gateway
// stand-in; the cluster holds the rest, as a gateway implementation would see it:
//   - the endpoint source ("cluster") brings the provider's cluster up, creates a namespace per
//     run, and writes the InferencePool, the InferenceObjectives and one Ready Pod per fleet
//     member (conformance/apiserver.NewPool, the same objects as the apiserver source) bound to
//     a node that a node-only process kubelet keeps registered (fakes/kubelet NodeOnly, tainted
//     NoSchedule), so the pod garbage collector and the node lifecycle controller leave the pods
//     alone;
//   - the target ("cluster") applies the EPP's manifests into that namespace — manifests/k8s's
//     reference EPP (RBAC, ConfigMap, Deployment, Service) by default, told the pool's name, the
//     run's --config-file and --seed; or the user's own YAML (Options.ManifestsDir, rendered as a
//     text/template with TargetEnv's fields and .Namespace) — waits for the Deployment, and
//     hands the harness the EPP pod's IP with the ext_proc (9002), health (9003) and metrics
//     (9090) ports of its Service.
//
// The harness dials the EPP pod and the EPP dials the fleet directly, so both must be reachable
// from this machine: true on the local provider; on kind or an existing cluster the pod network
// is usually not, and Start says so when the readiness check times out.
package clustertarget

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/apiserver"
	"github.com/eppkit/eppkit/conformance/cluster"
	"github.com/eppkit/eppkit/conformance/cluster/apply"
	"github.com/eppkit/eppkit/fakes/kubelet"
	"github.com/eppkit/eppkit/internal/logtail"
	"github.com/eppkit/eppkit/manifests"
)

// Defaults of Options.
const (
	// DefaultEPPService is the Service whose pods are the EPP under test.
	DefaultEPPService = manifests.EPPService
	// DefaultEPPDeployment is waited for until available.
	DefaultEPPDeployment = manifests.EPPDeployment
	// ExternalNodeCIDR is the podCIDR of the node the pool's Pods are bound to (the fleet's
	// loopback block; informational only).
	ExternalNodeCIDR = "127.0.10.0/24"
)

// Options configure a Run.
type Options struct {
	// Provider is the cluster (required). It is created in Source.Start and destroyed in
	// Source.Stop unless KeepCluster.
	Provider cluster.Provider
	// KeepCluster keeps the cluster and the namespace after the run.
	KeepCluster bool
	// ManifestsDir holds the EPP's YAML ("" = manifests/k8s's reference EPP). Files are
	// text/templates over TargetEnv's fields plus .Namespace.
	ManifestsDir string
	// EPPService and EPPDeployment name the EPP's Service and Deployment (defaults above).
	EPPService, EPPDeployment string
	// ReadyTimeout bounds the wait for the EPP Deployment (default 3 minutes).
	ReadyTimeout time.Duration
	// Logger receives progress (default: discard).
	Logger *slog.Logger
}

// Run is one conformance run on a cluster: its endpoint source and its target share the cluster
// and the namespace.
type Run struct {
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	rest      *rest.Config
	cs        kubernetes.Interface
	ns        string
	pool      *apiserver.Env
	stopNode  context.CancelFunc
	nodeDone  chan struct{}
	podLogger func(namespace, pod, uid, container string) string
	eppPod    *corev1.Pod
}

// New validates opts.
func New(opts Options) (*Run, error) {
	if opts.Provider == nil {
		return nil, errors.New("cluster target: Provider is required")
	}
	if opts.EPPService == "" {
		opts.EPPService = DefaultEPPService
	}
	if opts.EPPDeployment == "" {
		opts.EPPDeployment = DefaultEPPDeployment
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 3 * time.Minute
	}
	if opts.ManifestsDir != "" {
		if fi, err := os.Stat(opts.ManifestsDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("cluster target: manifests directory %q: not a directory (%v)", opts.ManifestsDir, err)
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Run{opts: opts, log: log}
	if lp, ok := opts.Provider.(interface {
		PodLogPath(namespace, pod, uid, container string) string
	}); ok {
		r.podLogger = lp.PodLogPath
	}
	return r, nil
}

// Source returns the run's endpoint source ("cluster").
func (r *Run) Source() conformance.EndpointSource { return (*source)(r) }

// Target returns the run's target ("cluster").
func (r *Run) Target() conformance.Target { return (*target)(r) }

type source Run

func (s *source) Name() string { return "cluster" }

// Start implements conformance.EndpointSource.
func (s *source) Start(ctx context.Context, addrs []string) (conformance.Env, error) {
	r := (*Run)(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ns != "" {
		return conformance.Env{}, errors.New("cluster endpoint source: already started")
	}
	start := time.Now()
	if err := r.opts.Provider.Create(ctx); err != nil {
		return conformance.Env{}, fmt.Errorf("cluster %s: %w", r.opts.Provider.Name(), err)
	}
	r.log.Info("cluster up", "provider", r.opts.Provider.Name(), "after", time.Since(start).Round(time.Millisecond))
	var err error
	if r.rest, err = clientcmd.BuildConfigFromFlags("", r.opts.Provider.KubeconfigPath()); err != nil {
		return conformance.Env{}, fmt.Errorf("cluster kubeconfig: %w", err)
	}
	r.rest.QPS, r.rest.Burst = 50, 100
	if r.cs, err = kubernetes.NewForConfig(r.rest); err != nil {
		return conformance.Env{}, err
	}
	// The GIE CRDs (idempotent: the local cluster has them already).
	objs, err := manifests.K8sObjects()
	if err != nil {
		return conformance.Env{}, err
	}
	applier, err := apply.New(r.rest)
	if err != nil {
		return conformance.Env{}, err
	}
	var crds []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
		}
	}
	if _, err := applier.Apply(ctx, crds, apply.Options{}); err != nil {
		return conformance.Env{}, fmt.Errorf("cluster: install the GIE CRDs: %w", err)
	}

	// The node the pool's Pods are bound to, kept Ready for as long as the run lasts.
	k, err := kubelet.New(kubelet.Config{Client: r.cs, NodeName: apiserver.FakeNodeName, PodCIDR: ExternalNodeCIDR, NodeOnly: true,
		Taints: []corev1.Taint{{Key: "eppkit.io/external-pods", Value: "true", Effect: corev1.TaintEffectNoSchedule}}, Logger: r.log})
	if err != nil {
		return conformance.Env{}, err
	}
	nctx, cancel := context.WithCancel(context.Background())
	r.stopNode, r.nodeDone = cancel, make(chan struct{})
	go func() {
		defer close(r.nodeDone)
		if err := k.Run(nctx); err != nil && nctx.Err() == nil {
			r.log.Error("external node", "err", err)
		}
	}()

	r.ns = fmt.Sprintf("eppkit-conformance-%d", time.Now().UnixNano()%1_000_000_000)
	if err := cluster.CreateNamespace(ctx, r.opts.Provider, r.cs, r.ns, map[string]string{"eppkit.io/conformance": "true"}); err != nil {
		return conformance.Env{}, err
	}
	crc, err := client.New(r.rest, client.Options{})
	if err != nil {
		return conformance.Env{}, err
	}
	cp := &apiserver.ControlPlane{RestConfig: r.rest, KubeconfigPath: r.opts.Provider.KubeconfigPath(), Client: crc, Clientset: r.cs}
	r.pool, err = apiserver.NewPool(ctx, cp, apiserver.Options{PoolName: conformance.DefaultPoolName, PoolNamespace: r.ns,
		Endpoints: addrs, Objectives: conformance.Objectives(), EndpointPickerPort: manifests.EPPGRPCPort})
	if err != nil {
		return conformance.Env{}, err
	}
	return conformance.Env{Kubeconfig: r.opts.Provider.KubeconfigPath(), PoolName: r.pool.PoolName, PoolNamespace: r.ns}, nil
}

// SetReady implements conformance.EndpointSource.
func (s *source) SetReady(ctx context.Context, addr string, ready bool) error {
	s.mu.Lock()
	pool := s.pool
	s.mu.Unlock()
	if pool == nil {
		return errors.New("cluster endpoint source: SetReady before Start")
	}
	return pool.SetReady(ctx, addr, ready)
}

var _ conformance.PoolEditor = (*source)(nil)

func (s *source) env() *apiserver.Env {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pool
}

// RemoveEndpoint implements conformance.PoolEditor (EndpointChurn): the member's Pod is deleted.
func (s *source) RemoveEndpoint(ctx context.Context, addr string) error {
	if pool := s.env(); pool != nil {
		return pool.DeletePod(ctx, addr)
	}
	return errors.New("cluster endpoint source: RemoveEndpoint before Start")
}

// AddEndpoint implements conformance.PoolEditor: a Ready Pod with addr's IP joins the pool.
func (s *source) AddEndpoint(ctx context.Context, addr string) error {
	if pool := s.env(); pool != nil {
		return pool.AddPod(ctx, addr)
	}
	return errors.New("cluster endpoint source: AddEndpoint before Start")
}

// Stop implements conformance.EndpointSource: it deletes the namespace and the external node
// and destroys the cluster, unless KeepCluster.
func (s *source) Stop(ctx context.Context) error {
	r := (*Run)(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopNode != nil {
		r.stopNode()
		<-r.nodeDone
		r.stopNode = nil
	}
	if r.ns == "" {
		return nil
	}
	var errs []error
	if !r.opts.KeepCluster {
		if err := r.cs.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{}); err != nil {
			errs = append(errs, err)
		}
		_ = r.cs.CoreV1().Nodes().Delete(ctx, apiserver.FakeNodeName, metav1.DeleteOptions{})
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		errs = append(errs, r.opts.Provider.Destroy(dctx))
		cancel()
	} else {
		r.log.Info("keeping the cluster and the namespace", "namespace", r.ns, "kubeconfig", r.opts.Provider.KubeconfigPath())
	}
	r.ns, r.pool = "", nil
	return errors.Join(errs...)
}

type target Run

func (t *target) Name() string { return "cluster" }

// Exited implements conformance.Target: the EPP is not a process of this one.
func (t *target) Exited() <-chan struct{} { return nil }

// ExitErr implements conformance.Target.
func (t *target) ExitErr() error { return nil }

// Start implements conformance.Target: apply the EPP's manifests into the run's namespace, wait
// for its Deployment, and return its pod's addresses.
func (t *target) Start(ctx context.Context, env conformance.TargetEnv) (conformance.TargetAddrs, error) {
	r := (*Run)(t)
	r.mu.Lock()
	ns, rc := r.ns, r.rest
	r.mu.Unlock()
	if ns == "" || env.Kubeconfig != r.opts.Provider.KubeconfigPath() {
		return conformance.TargetAddrs{}, errors.New("--target cluster needs --endpoint-source cluster (the pool must live in the same cluster)")
	}
	objs, err := r.objects(env, ns)
	if err != nil {
		return conformance.TargetAddrs{}, err
	}
	applier, err := apply.New(rc)
	if err != nil {
		return conformance.TargetAddrs{}, err
	}
	if _, err := applier.Apply(ctx, objs, apply.Options{Namespace: ns}); err != nil {
		return conformance.TargetAddrs{}, fmt.Errorf("apply the EPP manifests: %w", err)
	}
	pod, err := r.waitEPP(ctx, ns)
	if err != nil {
		return conformance.TargetAddrs{}, err
	}
	r.mu.Lock()
	r.eppPod = pod
	r.mu.Unlock()
	svc, err := r.cs.CoreV1().Services(ns).Get(ctx, r.opts.EPPService, metav1.GetOptions{})
	if err != nil {
		return conformance.TargetAddrs{}, fmt.Errorf("EPP Service %s: %w", r.opts.EPPService, err)
	}
	port := func(number int) string {
		for _, p := range svc.Spec.Ports {
			if int(p.Port) == number {
				if p.TargetPort.IntValue() > 0 {
					return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(p.TargetPort.IntValue()))
				}
				return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(number))
			}
		}
		return ""
	}
	a := conformance.TargetAddrs{GRPC: port(manifests.EPPGRPCPort), Health: port(manifests.EPPHealthPort), Metrics: port(manifests.EPPMetricsPort)}
	if a.GRPC == "" {
		return conformance.TargetAddrs{}, fmt.Errorf("EPP Service %s has no port %d (ext_proc)", r.opts.EPPService, manifests.EPPGRPCPort)
	}
	if a.Health == "" {
		a.Health = a.GRPC
	}
	r.log.Info("EPP deployed", "pod", pod.Name, "grpc", a.GRPC)
	return a, nil
}

// objects are the EPP's objects for this run.
func (r *Run) objects(env conformance.TargetEnv, ns string) ([]*unstructured.Unstructured, error) {
	if r.opts.ManifestsDir != "" {
		return renderDir(r.opts.ManifestsDir, env, ns)
	}
	all, err := manifests.K8sObjects()
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, o := range all {
		switch {
		case o.GetKind() == "ConfigMap" && o.GetName() == manifests.EPPConfigMap:
			if env.ConfigFile != "" {
				b, err := os.ReadFile(env.ConfigFile)
				if err != nil {
					return nil, fmt.Errorf("--config-file: %w", err)
				}
				if err := unstructured.SetNestedField(o.Object, string(b), "data", "config.yaml"); err != nil {
					return nil, err
				}
			}
		case o.GetKind() == "Deployment" && o.GetName() == manifests.EPPDeployment:
			if err := setReferenceArgs(o, env); err != nil {
				return nil, err
			}
		case o.GetKind() == "Service" && o.GetName() == manifests.EPPService:
		case strings.HasPrefix(o.GetKind(), "Role") || strings.HasPrefix(o.GetKind(), "ClusterRole") || o.GetKind() == "ServiceAccount":
		default:
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

// setReferenceArgs points the reference EPP at the run's pool and seed.
func setReferenceArgs(u *unstructured.Unstructured, env conformance.TargetEnv) error {
	containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		return fmt.Errorf("deployment %s: no containers", u.GetName())
	}
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--pool-name" {
			args[i+1] = env.PoolName
		}
	}
	args = append(args, "--seed", strconv.FormatInt(env.Seed, 10))
	anyArgs := make([]any, len(args))
	for i, a := range args {
		anyArgs[i] = a
	}
	c["args"] = anyArgs
	containers[0] = c
	return unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

// renderDir reads every *.yaml/*.yml of dir as a text/template over env (plus .Namespace).
func renderDir(dir string, env conformance.TargetEnv, ns string) ([]*unstructured.Unstructured, error) {
	data := struct {
		conformance.TargetEnv
		Namespace string
	}{env, ns}
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := filepath.Ext(p); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []*unstructured.Unstructured
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(filepath.Base(p)).Option("missingkey=error").Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, data); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		objs, err := manifests.DecodeObjects(buf.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, objs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("manifests directory %s holds no objects", dir)
	}
	return out, nil
}

// waitEPP waits for the EPP Deployment to have a Ready pod selected by the EPP Service.
func (r *Run) waitEPP(ctx context.Context, ns string) (*corev1.Pod, error) {
	deadline := time.Now().Add(r.opts.ReadyTimeout)
	var last string
	for time.Now().Before(deadline) {
		svc, err := r.cs.CoreV1().Services(ns).Get(ctx, r.opts.EPPService, metav1.GetOptions{})
		if err == nil {
			pods, err := r.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
			if err == nil {
				last = fmt.Sprintf("%d pods", len(pods.Items))
				for i := range pods.Items {
					p := &pods.Items[i]
					for _, cs := range p.Status.ContainerStatuses {
						if w := cs.State.Waiting; w != nil && (w.Reason == kubelet.ReasonImageNotMapped || w.Reason == kubelet.ReasonConfigError) {
							return nil, fmt.Errorf("EPP pod %s cannot start: %s: %s", p.Name, w.Reason, w.Message)
						}
					}
					if ready(p) {
						return p, nil
					}
					last = fmt.Sprintf("pod %s phase %s not Ready", p.Name, p.Status.Phase)
				}
			} else {
				last = err.Error()
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("EPP Deployment %s/%s not Ready within %s: %s", ns, r.opts.EPPDeployment, r.opts.ReadyTimeout, last)
}

func ready(p *corev1.Pod) bool {
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

// Stop implements conformance.Target: delete the EPP Deployment (the namespace goes with the
// endpoint source).
func (t *target) Stop(timeout time.Duration) error {
	r := (*Run)(t)
	r.mu.Lock()
	ns, cs := r.ns, r.cs
	r.mu.Unlock()
	if ns == "" || cs == nil || r.opts.KeepCluster {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := cs.AppsV1().Deployments(ns).Delete(ctx, r.opts.EPPDeployment, metav1.DeleteOptions{})
	if err != nil && !strings.Contains(err.Error(), "not found") {
		return err
	}
	return nil
}

// LogPath and LogTail let the harness show the EPP pod's log (local provider) on failures.
func (t *target) LogPath() string {
	r := (*Run)(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.podLogger == nil || r.eppPod == nil {
		return ""
	}
	p := r.eppPod
	return r.podLogger(p.Namespace, p.Name, string(p.UID), p.Spec.Containers[0].Name)
}

// LogTail returns the last n lines of the EPP pod's log ("" when unknown).
func (t *target) LogTail(n int) string { return logtail.String(t.LogPath(), n) }
