package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/eppkit/eppkit/conformance/harness"
)

// GVKs of the GIE kinds this package writes (CRDs of gateway-api-inference-extension v1.5.0,
// config/crd/bases).
var (
	InferencePoolGVK      = schema.GroupVersionKind{Group: "inference.networking.k8s.io", Version: "v1", Kind: "InferencePool"}
	InferenceObjectiveGVK = schema.GroupVersionKind{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Kind: "InferenceObjective"}
	// InferenceModelRewriteGVK is GIE's model rewrite (apix/v1alpha2 of the pinned v1.5.0 module).
	InferenceModelRewriteGVK = schema.GroupVersionKind{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Kind: "InferenceModelRewrite"}
	// LLMDInferenceObjectiveGVK and LLMDInferenceModelRewriteGVK are the same kinds in
	// llm-d-router v0.10.0's group (apix/v1alpha2, GroupName llm-d.ai), which it reads first and
	// which makes it ignore the legacy group's objects when both are served.
	LLMDInferenceObjectiveGVK    = schema.GroupVersionKind{Group: "llm-d.ai", Version: "v1alpha2", Kind: "InferenceObjective"}
	LLMDInferenceModelRewriteGVK = schema.GroupVersionKind{Group: "llm-d.ai", Version: "v1alpha2", Kind: "InferenceModelRewrite"}
)

// Defaults of Options.
const (
	DefaultPoolName      = "eppkit-pool"
	DefaultPoolNamespace = "default"
	// MaxTargetPorts is the most spec.targetPorts an InferencePool holds (GIE v1.5.0
	// api/v1 InferencePool, MaxItems=8): a pod has at most 8 data-parallel ranks.
	MaxTargetPorts = 8
	// DefaultEndpointPickerPort is the InferencePool's spec.endpointPickerRef.port (the schema
	// requires a port for the default kind Service); nothing connects to it here.
	DefaultEndpointPickerPort = 9002
	// FakeNodeName is the spec.nodeName of every Pod (there is no kubelet or scheduler).
	FakeNodeName = "eppkit-fake-node"
	// PoolLabel is the Pod label the InferencePool selects on; its value is the pool name.
	PoolLabel = "eppkit.io/pool"
)

// Options configure Start.
type Options struct {
	// PoolName and PoolNamespace name the InferencePool ("" = DefaultPoolName, DefaultPoolNamespace).
	// The namespace is created when missing.
	PoolName, PoolNamespace string
	// Endpoints are the fleet's "ip:port" addresses. Every IP must have the same ports (one for
	// pods without data-parallel ranks), which become the pool's targetPorts in ascending order.
	// At least one is required.
	Endpoints []string
	// Objectives are InferenceObjectives to create in every group the API server serves (GIE's
	// and llm-d.ai): name → spec.priority.
	Objectives map[string]int
	// GroupObjectives are InferenceObjectives to create in one group each (the llm-d.ai group
	// tests).
	GroupObjectives []GroupObjective
	// ModelRewrites are InferenceModelRewrites to create, each referencing the pool.
	ModelRewrites []ModelRewrite
	// EndpointPickerPort is spec.endpointPickerRef.port.number (0 = DefaultEndpointPickerPort).
	EndpointPickerPort int
	// AppProtocol is spec.appProtocol ("" leaves it to the CRD's default, "http";
	// "kubernetes.io/h2c" for a gRPC pool, GIE v1.5.0 api/v1 AppProtocolH2C).
	AppProtocol string
	// ControlPlane configures the etcd + kube-apiserver processes.
	ControlPlane ControlPlaneOptions
}

// Env is a running control plane holding one InferencePool and its Pods.
type Env struct {
	*ControlPlane
	// PoolName and PoolNamespace name the InferencePool.
	PoolName, PoolNamespace string
	// TargetPort is the pool's first targetPort (rank 0's port).
	TargetPort int
	// TargetPorts are all the pool's targetPorts, ascending (rank i on TargetPorts[i]).
	TargetPorts []int

	ownsControlPlane bool

	mu   sync.Mutex
	pods map[string]string // ip → pod name
}

// parseEndpoints checks "ip:port" addresses: valid IPs, and every IP on the same set of ports (1
// to 8 of them: the pool's targetPorts, GIE v1.5.0 api/v1 InferencePool allows at most 8), each
// address once. The ports come back in ascending order (rank i is the i-th port); the IPs in
// order of first appearance. One port per IP is the common case (the fleet's rank-0 addresses);
// several ports per IP are pods with data-parallel ranks.
func parseEndpoints(addrs []string) (ips []string, ports []int, err error) {
	if len(addrs) == 0 {
		return nil, nil, errors.New("apiserver pool: Endpoints: at least one ip:port is required")
	}
	byIP := map[string][]int{}
	for i, a := range addrs {
		ip, p, err := splitAddr(a)
		if err != nil {
			return nil, nil, fmt.Errorf("apiserver pool: Endpoints[%d]: %w", i, err)
		}
		if _, seen := byIP[ip]; !seen {
			ips = append(ips, ip)
		} else if slices.Contains(byIP[ip], p) {
			return nil, nil, fmt.Errorf("apiserver pool: Endpoints[%d]: duplicate IP %s with port %d", i, ip, p)
		}
		byIP[ip] = append(byIP[ip], p)
	}
	ports = slices.Sorted(slices.Values(byIP[ips[0]]))
	if len(ports) > MaxTargetPorts {
		return nil, nil, fmt.Errorf("apiserver pool: Endpoints: %s has %d ports; an InferencePool has at most %d targetPorts", ips[0], len(ports), MaxTargetPorts)
	}
	for _, ip := range ips[1:] {
		if got := slices.Sorted(slices.Values(byIP[ip])); !slices.Equal(got, ports) {
			return nil, nil, fmt.Errorf("apiserver pool: Endpoints: %s has ports %v, %s has %v: an InferencePool's targetPorts apply to every Pod, "+
				"so every endpoint IP needs the same ports (use loopback aliases, not distinct ports)", ip, got, ips[0], ports)
		}
	}
	return ips, ports, nil
}

func splitAddr(a string) (string, int, error) {
	host, ps, err := net.SplitHostPort(a)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: want ip:port: %w", a, err)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return "", 0, fmt.Errorf("address %q: %q is not an IP (Pod IPs must be IPs)", a, host)
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 1 || p > 65535 {
		return "", 0, fmt.Errorf("address %q: port must be 1-65535", a)
	}
	return ip.String(), p, nil
}

// PodNameFor is the name of the Pod for ip: "<pool>-<ip with '.' and ':' as '-'>".
func PodNameFor(pool, ip string) string {
	return pool + "-" + strings.NewReplacer(".", "-", ":", "-").Replace(ip)
}

// Start starts a control plane (StartControlPlane), creates the namespace, the InferencePool
// selecting PoolLabel=<PoolName> with the endpoints' port as its targetPort, the
// InferenceObjectives, and one Running, Ready Pod per endpoint. Errors name the Options field or
// the object that failed; on error everything started is stopped.
func Start(ctx context.Context, opts Options) (*Env, error) {
	if _, _, err := defaultAndCheck(&opts); err != nil {
		return nil, err
	}
	cp, err := StartControlPlane(ctx, opts.ControlPlane)
	if err != nil {
		return nil, err
	}
	e, err := NewPool(ctx, cp, opts)
	if err != nil {
		return nil, cp.fail(err)
	}
	e.ownsControlPlane = true
	return e, nil
}

// NewPool writes another pool (Options as for Start; ControlPlane is ignored) into a running
// control plane, so several pools or tests can share one kube-apiserver. Its Stop leaves the
// control plane running.
func NewPool(ctx context.Context, cp *ControlPlane, opts Options) (*Env, error) {
	ips, ports, err := defaultAndCheck(&opts)
	if err != nil {
		return nil, err
	}
	e := &Env{ControlPlane: cp, PoolName: opts.PoolName, PoolNamespace: opts.PoolNamespace, TargetPort: ports[0],
		TargetPorts: ports, pods: map[string]string{}}
	if err := e.populate(ctx, opts, ips); err != nil {
		return nil, err
	}
	return e, nil
}

// Stop stops the control plane when Start created it; for a NewPool Env it does nothing (the
// objects stay until the control plane stops).
func (e *Env) Stop() error {
	if !e.ownsControlPlane {
		return nil
	}
	return e.ControlPlane.Stop()
}

func defaultAndCheck(opts *Options) (ips []string, ports []int, err error) {
	if opts.PoolName == "" {
		opts.PoolName = DefaultPoolName
	}
	if opts.PoolNamespace == "" {
		opts.PoolNamespace = DefaultPoolNamespace
	}
	if opts.EndpointPickerPort == 0 {
		opts.EndpointPickerPort = DefaultEndpointPickerPort
	}
	if opts.EndpointPickerPort < 1 || opts.EndpointPickerPort > 65535 {
		return nil, nil, fmt.Errorf("EndpointPickerPort: %d is not a port", opts.EndpointPickerPort)
	}
	return parseEndpoints(opts.Endpoints)
}

func (e *Env) populate(ctx context.Context, opts Options, ips []string) error {
	if err := e.ensureNamespace(ctx); err != nil {
		return err
	}
	targetPorts := make([]any, 0, len(e.TargetPorts))
	for _, p := range e.TargetPorts {
		targetPorts = append(targetPorts, map[string]any{"number": int64(p)})
	}
	pool := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": e.PoolName, "namespace": e.PoolNamespace},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": map[string]any{PoolLabel: e.PoolName}},
			"targetPorts":       targetPorts,
			"endpointPickerRef": map[string]any{"name": e.PoolName + "-epp", "port": map[string]any{"number": int64(opts.EndpointPickerPort)}},
		},
	}}
	if opts.AppProtocol != "" {
		pool.Object["spec"].(map[string]any)["appProtocol"] = opts.AppProtocol
	}
	pool.SetGroupVersionKind(InferencePoolGVK)
	if err := e.Client.Create(ctx, pool); err != nil {
		return fmt.Errorf("apiserver: create InferencePool %s/%s: %w", e.PoolNamespace, e.PoolName, err)
	}
	names := make([]string, 0, len(opts.Objectives))
	for n := range opts.Objectives {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := e.PutObjective(ctx, n, opts.Objectives[n]); err != nil {
			return err
		}
	}
	for _, o := range opts.GroupObjectives {
		if err := e.PutObjectiveIn(ctx, o.GVK, o.Name, o.Priority); err != nil {
			return err
		}
	}
	for _, rw := range opts.ModelRewrites {
		if err := e.PutModelRewrite(ctx, rw); err != nil {
			return err
		}
	}
	for _, ip := range ips {
		if err := e.addPod(ctx, ip); err != nil {
			return err
		}
	}
	return nil
}

func (e *Env) ensureNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.PoolNamespace}}
	err := e.Client.Create(ctx, ns)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("apiserver: create namespace %s: %w", e.PoolNamespace, err)
	}
	return nil
}

// GroupObjective is an InferenceObjective in one API group.
type GroupObjective struct {
	// GVK is InferenceObjectiveGVK or LLMDInferenceObjectiveGVK.
	GVK      schema.GroupVersionKind
	Name     string
	Priority int
}

// PutObjective creates or replaces the InferenceObjective name with spec.priority = priority and
// spec.poolRef naming the pool, in GIE's group and in llm-d.ai when the API server serves it, so
// an EPP finds it whichever group it reads.
func (e *Env) PutObjective(ctx context.Context, name string, priority int) error {
	if err := e.PutObjectiveIn(ctx, InferenceObjectiveGVK, name, priority); err != nil {
		return err
	}
	if err := e.PutObjectiveIn(ctx, LLMDInferenceObjectiveGVK, name, priority); err != nil && !meta.IsNoMatchError(errors.Unwrap(err)) {
		return err
	}
	return nil
}

// PutObjectiveIn is PutObjective in the group of gvk only.
func (e *Env) PutObjectiveIn(ctx context.Context, gvk schema.GroupVersionKind, name string, priority int) error {
	if name == "" {
		return errors.New("apiserver: InferenceObjective name is empty")
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name, "namespace": e.PoolNamespace},
		"spec": map[string]any{
			"priority": int64(priority),
			"poolRef":  map[string]any{"name": e.PoolName, "group": InferencePoolGVK.Group},
		},
	}}
	obj.SetGroupVersionKind(gvk)
	err := e.Client.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(gvk)
		if err = e.Client.Get(ctx, client.ObjectKey{Namespace: e.PoolNamespace, Name: name}, cur); err == nil {
			obj.SetResourceVersion(cur.GetResourceVersion())
			err = e.Client.Update(ctx, obj)
		}
	}
	if err != nil {
		return fmt.Errorf("apiserver: put InferenceObjective %s/%s (%s): %w", e.PoolNamespace, name, gvk.Group, err)
	}
	return nil
}

// ModelRewrite is an InferenceModelRewrite (SPEC §9.4) with one rule: requests whose model is
// Alias (an Exact match) go to Targets by weight.
type ModelRewrite struct {
	// Name is the object's name.
	Name string
	// Alias is the model the rule matches.
	Alias string
	// Targets are the weighted target models (at least one).
	Targets []harness.RewriteTarget
	// GVK, when set, is the one group to create it in (InferenceModelRewriteGVK or
	// LLMDInferenceModelRewriteGVK); unset, every group the API server serves.
	GVK schema.GroupVersionKind
}

// PutModelRewrite creates or replaces the InferenceModelRewrite rw.Name with spec.poolRef naming
// the pool and one rule matching rw.Alias exactly, with rw.Targets: in rw.GVK's group, or in
// GIE's group and in llm-d.ai when the API server serves it.
func (e *Env) PutModelRewrite(ctx context.Context, rw ModelRewrite) error {
	if !rw.GVK.Empty() {
		return e.putModelRewrite(ctx, rw, rw.GVK)
	}
	if err := e.putModelRewrite(ctx, rw, InferenceModelRewriteGVK); err != nil {
		return err
	}
	if err := e.putModelRewrite(ctx, rw, LLMDInferenceModelRewriteGVK); err != nil && !meta.IsNoMatchError(errors.Unwrap(err)) {
		return err
	}
	return nil
}

func (e *Env) putModelRewrite(ctx context.Context, rw ModelRewrite, gvk schema.GroupVersionKind) error {
	if rw.Name == "" || rw.Alias == "" || len(rw.Targets) == 0 {
		return fmt.Errorf("apiserver: InferenceModelRewrite %q: name, alias and at least one target are required", rw.Name)
	}
	targets := make([]any, len(rw.Targets))
	for i, t := range rw.Targets {
		targets[i] = map[string]any{"modelRewrite": t.Model, "weight": int64(t.Weight)}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": rw.Name, "namespace": e.PoolNamespace},
		"spec": map[string]any{
			"poolRef": map[string]any{"name": e.PoolName, "group": InferencePoolGVK.Group, "kind": "InferencePool"},
			"rules": []any{map[string]any{
				"matches": []any{map[string]any{"model": map[string]any{"type": "Exact", "value": rw.Alias}}},
				"targets": targets,
			}},
		},
	}}
	obj.SetGroupVersionKind(gvk)
	err := e.Client.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(gvk)
		if err = e.Client.Get(ctx, client.ObjectKey{Namespace: e.PoolNamespace, Name: rw.Name}, cur); err == nil {
			obj.SetResourceVersion(cur.GetResourceVersion())
			err = e.Client.Update(ctx, obj)
		}
	}
	if err != nil {
		return fmt.Errorf("apiserver: put InferenceModelRewrite %s/%s (%s): %w", e.PoolNamespace, rw.Name, gvk.Group, err)
	}
	return nil
}

// ConformanceModelRewrite is the conformance run's rewrite (harness.ModelRewriteName).
func ConformanceModelRewrite() ModelRewrite {
	return ModelRewrite{Name: harness.ModelRewriteName, Alias: harness.ModelRewriteAlias, Targets: harness.ModelRewriteTargets()}
}

// AddPod adds a Running, Ready Pod for addr ("ip:port"; the port must be one of the pool's
// targetPorts: the Pod serves them all).
func (e *Env) AddPod(ctx context.Context, addr string) error {
	ip, port, err := splitAddr(addr)
	if err != nil {
		return fmt.Errorf("apiserver: AddPod: %w", err)
	}
	if !slices.Contains(e.TargetPorts, port) {
		return fmt.Errorf("apiserver: AddPod %s: port %d is not one of the pool's targetPorts %v", addr, port, e.TargetPorts)
	}
	return e.addPod(ctx, ip)
}

func (e *Env) addPod(ctx context.Context, ip string) error {
	name := PodNameFor(e.PoolName, ip)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.PoolNamespace, Labels: map[string]string{PoolLabel: e.PoolName}},
		Spec: corev1.PodSpec{
			NodeName: FakeNodeName,
			Containers: []corev1.Container{{
				Name:  "model-server",
				Image: "eppkit.invalid/fake-vllm:latest",
				Ports: e.containerPorts(),
			}},
		},
	}
	if err := e.Client.Create(ctx, pod); err != nil {
		return fmt.Errorf("apiserver: create Pod %s/%s: %w", e.PoolNamespace, name, err)
	}
	e.mu.Lock()
	e.pods[ip] = name
	e.mu.Unlock()
	return e.writeStatus(ctx, name, ip, true)
}

// containerPorts are the model-server container's ports: one per targetPort ("http", then
// "rank-<i>" for rank i ≥ 1).
func (e *Env) containerPorts() []corev1.ContainerPort {
	out := make([]corev1.ContainerPort, 0, len(e.TargetPorts))
	for i, p := range e.TargetPorts {
		name := "http"
		if i > 0 {
			name = "rank-" + strconv.Itoa(i)
		}
		out = append(out, corev1.ContainerPort{Name: name, ContainerPort: int32(p), Protocol: corev1.ProtocolTCP})
	}
	return out
}

// writeStatus sets phase Running, podIP/podIPs = ip and the Ready/ContainersReady conditions
// through the status subresource.
func (e *Env) writeStatus(ctx context.Context, name, ip string, ready bool) error {
	pods := e.Clientset.CoreV1().Pods(e.PoolNamespace)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("apiserver: get Pod %s/%s: %w", e.PoolNamespace, name, err)
	}
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	now := metav1.NewTime(time.Now())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.HostIP = "127.0.0.1"
	pod.Status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	if pod.Status.StartTime == nil {
		pod.Status.StartTime = &now
	}
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
	}
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("apiserver: update status of Pod %s/%s: %w", e.PoolNamespace, name, err)
	}
	return nil
}

func (e *Env) podFor(addr string) (name, ip string, err error) {
	ip, port, err := splitAddr(addr)
	if err != nil {
		return "", "", err
	}
	if !slices.Contains(e.TargetPorts, port) {
		return "", "", fmt.Errorf("%s: port %d is not one of the pool's targetPorts %v", addr, port, e.TargetPorts)
	}
	e.mu.Lock()
	name, ok := e.pods[ip]
	e.mu.Unlock()
	if !ok {
		return "", "", fmt.Errorf("%s: no Pod with this IP in pool %s", addr, e.PoolName)
	}
	return name, ip, nil
}

// SetReady sets the Ready condition of addr's Pod ("ip:port") to ready.
func (e *Env) SetReady(ctx context.Context, addr string, ready bool) error {
	name, ip, err := e.podFor(addr)
	if err != nil {
		return fmt.Errorf("apiserver: SetReady: %w", err)
	}
	return e.writeStatus(ctx, name, ip, ready)
}

// DeletePod deletes addr's Pod immediately (grace period 0: there is no kubelet to confirm).
func (e *Env) DeletePod(ctx context.Context, addr string) error {
	name, ip, err := e.podFor(addr)
	if err != nil {
		return fmt.Errorf("apiserver: DeletePod: %w", err)
	}
	zero := int64(0)
	if err := e.Clientset.CoreV1().Pods(e.PoolNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return fmt.Errorf("apiserver: delete Pod %s/%s: %w", e.PoolNamespace, name, err)
	}
	e.mu.Lock()
	delete(e.pods, ip)
	e.mu.Unlock()
	return nil
}

// PodNames returns the names of the Pods this Env created and has not deleted, sorted.
func (e *Env) PodNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.pods))
	for _, n := range e.pods {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
