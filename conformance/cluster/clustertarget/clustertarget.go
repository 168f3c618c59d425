// Package clustertarget runs the conformance registry against an EPP deployed in a cluster of a
// cluster.Provider: `eppkit conformance --target cluster --endpoint-source cluster`.
//
// Everything the EPP sees is in the cluster, as a gateway implementation would have it:
//   - the fleet (Run.StartFleet, the harness's "fleet" stage): one Pod per member running the
//     eppkit image's fake vLLM server with the member's model, LoRA adapters and seed, Ready
//     when its /health answers; members are the pods' IPs on port 8000, named by pod name (their
//     x-inference-pod);
//   - the endpoint source ("cluster"): the InferencePool selecting those pods and the
//     InferenceObjectives, in a namespace of the run. SetReady fails or restores a pod's
//     readiness probe through the fake's admin API and waits for the kubelet to report it;
//     RemoveEndpoint / AddEndpoint take a pod out of the pool's selector and put it back;
//   - the target ("cluster"): the EPP's manifests — manifests/k8s's reference EPP (RBAC,
//     ConfigMap, Deployment, Service) by default, told the pool's name, the run's --config-file
//     and --seed; or the user's own YAML (Options.ManifestsDir, rendered as a text/template with
//     TargetEnv's fields and .Namespace) — applied into that namespace.
//
// This process reaches the cluster only through its API server: the EPP's ext_proc, health and
// metrics ports and every fleet pod are reached through pods/portforward (DialEndpoint), never
// by routing to the pod network, so the same run works on kind and on an existing cluster.
package clustertarget

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/eppkit/eppkit/conformance/cluster"
	"github.com/eppkit/eppkit/conformance/cluster/apply"
	"github.com/eppkit/eppkit/conformance/cluster/portforward"
	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/manifests"
)

// Defaults of Options.
const (
	// DefaultEPPService is the Service whose pods are the EPP under test.
	DefaultEPPService = manifests.EPPService
	// DefaultEPPDeployment is waited for until available.
	DefaultEPPDeployment = manifests.EPPDeployment
	// FleetPort is the port every fleet pod's fake vLLM server listens on.
	FleetPort = 8000
	// FleetLabel labels the run's fleet pods (value: the pool's name); PoolMemberLabel, "true"
	// on a member, is what the InferencePool selects (RemoveEndpoint takes it away).
	FleetLabel      = "eppkit.io/conformance-fleet"
	PoolMemberLabel = "eppkit.io/conformance-pool-member"
)

// Options configure a Run.
type Options struct {
	// Provider is the cluster (required). It is created in StartFleet and destroyed in
	// Source.Stop unless KeepCluster.
	Provider cluster.Provider
	// KeepCluster keeps the cluster and the namespace after the run.
	KeepCluster bool
	// Namespace is the run's namespace ("" = a fresh eppkit-conformance-<n>): the fleet pods,
	// the InferencePool and the EPP go there, and it is deleted at the end unless KeepCluster.
	// The e2e-framework env funcs name it so a test can look at what the run deployed.
	Namespace string
	// ManifestsDir holds the EPP's YAML ("" = manifests/k8s's reference EPP). Files are
	// text/templates over TargetEnv's fields plus .Namespace.
	ManifestsDir string
	// EPPService and EPPDeployment name the EPP's Service and Deployment (defaults above).
	EPPService, EPPDeployment string
	// Image is the eppkit image the fleet pods run (default manifests.Image, loaded into the
	// cluster with Provider.LoadImage where the provider can).
	Image string
	// ReadyTimeout bounds the waits for the fleet pods and the EPP Deployment (default 3 minutes).
	ReadyTimeout time.Duration
	// Logger receives progress (default: discard).
	Logger *slog.Logger
}

// Run is one conformance run on a cluster: its fleet, endpoint source and target share the
// cluster and the namespace.
type Run struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	rest     *rest.Config
	cs       kubernetes.Interface
	ns       string
	pool     *apiserver.Env
	forwards *portforward.Pool
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	members  []harness.ExternalMember
	eppPod   *corev1.Pod
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
	if opts.Image == "" {
		opts.Image = manifests.Image
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
	return &Run{opts: opts, log: log}, nil
}

// Source returns the run's endpoint source ("cluster"), a harness.FleetSource.
func (r *Run) Source() harness.EndpointSource { return (*source)(r) }

// Target returns the run's target ("cluster").
func (r *Run) Target() harness.Target { return (*target)(r) }

type source Run

var _ harness.FleetSource = (*source)(nil)

func (s *source) Name() string { return "cluster" }

// StartFleet implements harness.FleetSource: it brings the cluster up, creates the run's
// namespace, installs the GIE CRDs and runs one fake vLLM pod per member.
func (s *source) StartFleet(ctx context.Context, spec harness.FleetSpec) (harness.ExternalFleet, error) {
	r := (*Run)(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ns != "" {
		return nil, errors.New("cluster fleet: already started")
	}
	start := time.Now()
	if err := r.opts.Provider.Create(ctx); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", r.opts.Provider.Name(), err)
	}
	r.log.Info("cluster up", "provider", r.opts.Provider.Name(), "after", time.Since(start).Round(time.Millisecond))
	if err := r.opts.Provider.LoadImage(ctx, r.opts.Image); err != nil && !errors.Is(err, cluster.ErrImageLoadUnsupported) {
		return nil, fmt.Errorf("cluster: load %s: %w", r.opts.Image, err)
	}
	var err error
	if r.rest, err = clientcmd.BuildConfigFromFlags("", r.opts.Provider.KubeconfigPath()); err != nil {
		return nil, fmt.Errorf("cluster kubeconfig: %w", err)
	}
	r.rest.QPS, r.rest.Burst = 50, 100
	if r.cs, err = kubernetes.NewForConfig(r.rest); err != nil {
		return nil, err
	}
	objs, err := manifests.K8sObjects()
	if err != nil {
		return nil, err
	}
	applier, err := apply.New(r.rest)
	if err != nil {
		return nil, err
	}
	var crds []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
		}
	}
	if _, err := applier.Apply(ctx, crds, apply.Options{}); err != nil {
		return nil, fmt.Errorf("cluster: install the GIE CRDs: %w", err)
	}
	r.ns = r.opts.Namespace
	if r.ns == "" {
		r.ns = fmt.Sprintf("eppkit-conformance-%d", time.Now().UnixNano()%1_000_000_000)
	}
	if err := cluster.CreateNamespace(ctx, r.opts.Provider, r.cs, r.ns, map[string]string{"eppkit.io/conformance": "true"}); err != nil {
		return nil, err
	}
	if err := cluster.WaitForDefaultServiceAccount(ctx, r.cs, r.ns, time.Minute); err != nil {
		return nil, fmt.Errorf("cluster fleet: %w", err)
	}
	r.forwards = portforward.NewPool(r.rest, nil)
	r.dial = r.forwards.PodDialer(portforward.LookupByIP(r.cs), r.ns)
	for i := 0; i < spec.Count; i++ {
		pod := fleetPod(r.opts.Image, harness.DefaultPoolName, i, spec)
		if _, err := r.cs.CoreV1().Pods(r.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("cluster fleet: create pod %s: %w", pod.Name, err)
		}
	}
	members, err := r.waitFleet(ctx, spec.Count)
	if err != nil {
		return nil, err
	}
	r.members = members
	r.log.Info("cluster fleet Ready", "pods", len(members), "namespace", r.ns)
	return (*fleet)(r), nil
}

// fleetPod is member i of the fleet: the fake vLLM server with the harness's settings, named
// <pool>-<i>, listening on all interfaces (port-forwards arrive on the pod's localhost).
func fleetPod(image, pool string, i int, spec harness.FleetSpec) *corev1.Pod {
	args := []string{"fake-vllm", "--model", spec.ModelName, "--host", "0.0.0.0", "--port", strconv.Itoa(FleetPort),
		"--enable-kvcache", "--max-num-seqs", strconv.Itoa(spec.MaxNumSeqs), "--seed", strconv.FormatInt(spec.Seed+int64(i), 10)}
	if i < len(spec.Adapters) && len(spec.Adapters[i]) > 0 {
		args = append(args, "--max-loras", strconv.Itoa(len(spec.Adapters[i])))
		for _, a := range spec.Adapters[i] {
			args = append(args, "--lora-modules", fmt.Sprintf(`{"name": %q}`, a))
		}
	}
	env := []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	grace := int64(2)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", pool, i), Labels: map[string]string{FleetLabel: pool, PoolMemberLabel: "true"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "vllm", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Args: args, Env: env,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: FleetPort}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(FleetPort)}},
					PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1,
				},
			}},
		},
	}
}

// waitFleet waits until n fleet pods are Ready and returns them in member order.
func (r *Run) waitFleet(ctx context.Context, n int) ([]harness.ExternalMember, error) {
	deadline := time.Now().Add(r.opts.ReadyTimeout)
	var last string
	for {
		pods, err := r.cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: FleetLabel})
		if err == nil {
			var out []harness.ExternalMember
			for i := 0; i < n; i++ {
				name := fmt.Sprintf("%s-%d", harness.DefaultPoolName, i)
				for j := range pods.Items {
					p := &pods.Items[j]
					if p.Name != name {
						continue
					}
					if why := waitingReason(p); why != "" {
						return nil, fmt.Errorf("cluster fleet: pod %s cannot start: %s", p.Name, why)
					}
					if ready(p) {
						out = append(out, harness.ExternalMember{Name: p.Name, Addr: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(FleetPort))})
					}
				}
			}
			if len(out) == n {
				return out, nil
			}
			last = fmt.Sprintf("%d of %d pods Ready", len(out), n)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster fleet: not Ready within %s: %s", r.opts.ReadyTimeout, last)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitingReason is why a pod's container cannot start ("" while it may still): an image the
// node does not have and cannot pull, or a configuration error.
func waitingReason(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "InvalidImageName":
				return w.Reason + ": " + w.Message
			}
		}
	}
	return ""
}

// FleetStartTimeout implements harness.FleetSource: creating a kind cluster (two attempts of
// up to 5 minutes each) and waiting for the fleet pods (ReadyTimeout).
func (s *source) FleetStartTimeout() time.Duration { return 10*time.Minute + s.opts.ReadyTimeout }

// DialEndpoint implements harness.FleetSource: a port-forward to the pod with addr's IP.
func (s *source) DialEndpoint(ctx context.Context, network, addr string) (net.Conn, error) {
	s.mu.Lock()
	d := s.dial
	s.mu.Unlock()
	if d == nil {
		return nil, errors.New("cluster fleet: DialEndpoint before StartFleet")
	}
	return d(ctx, network, addr)
}

// fleet is the run's ExternalFleet.
type fleet Run

func (f *fleet) Members() []harness.ExternalMember {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.members)
}

// DistinctIPs: every pod has its own IP.
func (f *fleet) DistinctIPs() bool { return true }

// UnpinMetrics: the fakes take null.
func (f *fleet) UnpinMetrics() any { return nil }

// Close deletes the fleet pods (the namespace goes with the source's Stop).
func (f *fleet) Close() {
	f.mu.Lock()
	cs, ns := f.cs, f.ns
	f.mu.Unlock()
	if cs == nil || ns == "" || f.opts.KeepCluster {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: FleetLabel})
}

// Start implements harness.EndpointSource: the InferencePool over the fleet pods (selector
// PoolMemberLabel, targetPort FleetPort, endpointPickerRef the EPP Service) and the
// InferenceObjectives.
func (s *source) Start(ctx context.Context, addrs []string) (harness.Env, error) {
	r := (*Run)(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ns == "" {
		return harness.Env{}, errors.New("cluster endpoint source: the cluster fleet is not started (it runs its own model servers)")
	}
	ctrlLogOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) }) // its client would warn that no logger is set
	crc, err := client.New(r.rest, client.Options{})
	if err != nil {
		return harness.Env{}, err
	}
	pool := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": harness.DefaultPoolName, "namespace": r.ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": map[string]any{PoolMemberLabel: "true", FleetLabel: harness.DefaultPoolName}},
			"targetPorts":       []any{map[string]any{"number": int64(FleetPort)}},
			"endpointPickerRef": map[string]any{"name": r.opts.EPPService, "port": map[string]any{"number": int64(manifests.EPPGRPCPort)}},
		},
	}}
	pool.SetGroupVersionKind(apiserver.InferencePoolGVK)
	if err := crc.Create(ctx, pool); err != nil {
		return harness.Env{}, fmt.Errorf("cluster: create InferencePool %s/%s: %w", r.ns, harness.DefaultPoolName, err)
	}
	r.pool = &apiserver.Env{ControlPlane: &apiserver.ControlPlane{RestConfig: r.rest, KubeconfigPath: r.opts.Provider.KubeconfigPath(), Client: crc, Clientset: r.cs},
		PoolName: harness.DefaultPoolName, PoolNamespace: r.ns, TargetPort: FleetPort, TargetPorts: []int{FleetPort}}
	for name, prio := range harness.Objectives() {
		if err := r.pool.PutObjective(ctx, name, prio); err != nil {
			return harness.Env{}, err
		}
	}
	if err := r.pool.PutModelRewrite(ctx, apiserver.ConformanceModelRewrite()); err != nil {
		return harness.Env{}, err
	}
	return harness.Env{Kubeconfig: r.opts.Provider.KubeconfigPath(), PoolName: harness.DefaultPoolName, PoolNamespace: r.ns}, nil
}

var ctrlLogOnce sync.Once

// member returns the fleet pod whose address is addr.
func (r *Run) member(addr string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.members {
		if m.Addr == addr {
			return m.Name, nil
		}
	}
	return "", fmt.Errorf("cluster endpoint source: no fleet pod at %s", addr)
}

// SetReady implements harness.EndpointSource: the pod's readiness probe (GET /health) is
// made to fail (503) or pass again through the fake's admin API, and SetReady returns once the
// kubelet reports the pod's Ready condition so (within ReadyTimeout).
func (s *source) SetReady(ctx context.Context, addr string, ready bool) error {
	r := (*Run)(s)
	name, err := r.member(addr)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: s.DialEndpoint}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/admin/config", strings.NewReader(fmt.Sprintf(`{"health-status":%d}`, status)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cluster endpoint source: set %s health %d: %w", name, status, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cluster endpoint source: set %s health %d: HTTP %d", name, status, resp.StatusCode)
	}
	deadline := time.Now().Add(r.opts.ReadyTimeout)
	for {
		p, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && podReadyCondition(p) == ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster endpoint source: pod %s not Ready=%v within %s", name, ready, r.opts.ReadyTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func podReadyCondition(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

var _ harness.PoolEditor = (*source)(nil)

// RemoveEndpoint implements harness.PoolEditor (EndpointChurn): the pod loses
// PoolMemberLabel, so the InferencePool no longer selects it.
func (s *source) RemoveEndpoint(ctx context.Context, addr string) error {
	return s.setMember(ctx, addr, false)
}

// AddEndpoint implements harness.PoolEditor: a fleet pod taken out is selected again.
func (s *source) AddEndpoint(ctx context.Context, addr string) error {
	return s.setMember(ctx, addr, true)
}

func (s *source) setMember(ctx context.Context, addr string, in bool) error {
	r := (*Run)(s)
	name, err := r.member(addr)
	if err != nil {
		return err
	}
	val := `"false"`
	if in {
		val = `"true"`
	}
	_, err = r.cs.CoreV1().Pods(r.ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"`+PoolMemberLabel+`":`+val+`}}}`), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("cluster endpoint source: relabel pod %s: %w", name, err)
	}
	return nil
}

// Stop implements harness.EndpointSource: it stops the port-forwards, deletes the
// namespace and destroys the cluster, unless KeepCluster.
func (s *source) Stop(ctx context.Context) error {
	r := (*Run)(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.forwards != nil {
		r.forwards.Close()
	}
	if r.ns == "" {
		return nil
	}
	var errs []error
	if !r.opts.KeepCluster {
		if err := r.cs.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{}); err != nil {
			errs = append(errs, err)
		}
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

// Exited implements harness.Target: the EPP is not a process of this one.
func (t *target) Exited() <-chan struct{} { return nil }

// ExitErr implements harness.Target.
func (t *target) ExitErr() error { return nil }

// Start implements harness.Target: apply the EPP's manifests into the run's namespace, wait
// for its Deployment, and return its pod's addresses.
func (t *target) Start(ctx context.Context, env harness.TargetEnv) (harness.TargetAddrs, error) {
	r := (*Run)(t)
	r.mu.Lock()
	ns, rc := r.ns, r.rest
	r.mu.Unlock()
	if ns == "" || env.Kubeconfig != r.opts.Provider.KubeconfigPath() {
		return harness.TargetAddrs{}, errors.New("--target cluster needs --endpoint-source cluster (the pool must live in the same cluster)")
	}
	objs, err := r.objects(env, ns)
	if err != nil {
		return harness.TargetAddrs{}, err
	}
	applier, err := apply.New(rc)
	if err != nil {
		return harness.TargetAddrs{}, err
	}
	if _, err := applier.Apply(ctx, objs, apply.Options{Namespace: ns}); err != nil {
		return harness.TargetAddrs{}, fmt.Errorf("apply the EPP manifests: %w", err)
	}
	pod, err := r.waitEPP(ctx, ns)
	if err != nil {
		return harness.TargetAddrs{}, err
	}
	r.mu.Lock()
	r.eppPod = pod
	fwds := r.forwards
	r.mu.Unlock()
	svc, err := r.cs.CoreV1().Services(ns).Get(ctx, r.opts.EPPService, metav1.GetOptions{})
	if err != nil {
		return harness.TargetAddrs{}, fmt.Errorf("EPP Service %s: %w", r.opts.EPPService, err)
	}
	// The EPP's ports, each through a port-forward to its pod.
	port := func(number int) (string, error) {
		for _, p := range svc.Spec.Ports {
			if int(p.Port) == number {
				target := number
				if p.TargetPort.IntValue() > 0 {
					target = p.TargetPort.IntValue()
				}
				return fwds.Addr(ctx, portforward.Target{Namespace: ns, Pod: pod.Name, Port: target})
			}
		}
		return "", nil
	}
	var a harness.TargetAddrs
	for _, x := range []struct {
		dst  *string
		port int
	}{{&a.GRPC, manifests.EPPGRPCPort}, {&a.Health, manifests.EPPHealthPort}, {&a.Metrics, manifests.EPPMetricsPort}} {
		if *x.dst, err = port(x.port); err != nil {
			return harness.TargetAddrs{}, fmt.Errorf("port-forward to EPP pod %s port %d: %w", pod.Name, x.port, err)
		}
	}
	if a.GRPC == "" {
		return harness.TargetAddrs{}, fmt.Errorf("EPP Service %s has no port %d (ext_proc)", r.opts.EPPService, manifests.EPPGRPCPort)
	}
	if a.Health == "" {
		a.Health = a.GRPC
	}
	r.log.Info("EPP deployed", "pod", pod.Name, "ip", pod.Status.PodIP, "grpc (port-forward)", a.GRPC)
	return a, nil
}

// objects are the EPP's objects for this run.
func (r *Run) objects(env harness.TargetEnv, ns string) ([]*unstructured.Unstructured, error) {
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
		case strings.HasPrefix(o.GetKind(), "Role") || strings.HasPrefix(o.GetKind(), "ClusterRole") || o.GetKind() == "ServiceAccount",
			o.GetKind() == "PodDisruptionBudget":
		default:
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

// setReferenceArgs points the reference EPP at the run's pool and seed.
func setReferenceArgs(u *unstructured.Unstructured, env harness.TargetEnv) error {
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
func renderDir(dir string, env harness.TargetEnv, ns string) ([]*unstructured.Unstructured, error) {
	data := struct {
		harness.TargetEnv
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
					if why := waitingReason(p); why != "" {
						return nil, fmt.Errorf("EPP pod %s cannot start: %s", p.Name, why)
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

// Stop implements harness.Target: delete the EPP Deployment (the namespace goes with the
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

// LogPath names where the EPP pod's log is read from (the API server's pods/log).
func (t *target) LogPath() string {
	r := (*Run)(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.eppPod == nil {
		return ""
	}
	return "pods/log of " + r.eppPod.Namespace + "/" + r.eppPod.Name
}

// LogTail returns the last n lines of the EPP pod's log ("" when unknown).
func (t *target) LogTail(n int) string {
	r := (*Run)(t)
	r.mu.Lock()
	p, cs := r.eppPod, r.cs
	r.mu.Unlock()
	if p == nil || cs == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lines := int64(n)
	b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &lines}).DoRaw(ctx)
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\n")
}
