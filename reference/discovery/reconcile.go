package discovery

import (
	"fmt"
	"maps"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/eppkit/eppkit/reference/framework"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// Pool API groups: v1 (inference.networking.k8s.io, `spec.selector.matchLabels`,
// `spec.targetPorts[].number`) and the older v1alpha2 (inference.networking.x-k8s.io,
// `spec.selector` as a plain map and one `spec.targetPortNumber`).
const (
	GroupV1       = "inference.networking.k8s.io"
	GroupV1Alpha2 = "inference.networking.x-k8s.io"
	// ActivePortsAnnotation on a pod lists (comma separated) which of the pool's target ports
	// serve; ports not listed get no endpoint. Absent means all (upstream v1.5.0
	// pkg/epp/datastore/datastore.go, extractActivePorts).
	ActivePortsAnnotation = "inference.networking.k8s.io/active-ports"
)

// PoolSpec is the part of an InferencePool that selects endpoints.
type PoolSpec struct {
	// Namespace of the pool; only pods in it are members.
	Namespace string
	// Selector are the labels a pod must carry (all of them). An empty selector selects no pod
	// [eppkit: the CRD requires at least one label; upstream would select every pod].
	Selector map[string]string
	// TargetPorts are the model-server ports, in the pool's order; the index is the rank.
	TargetPorts []int
}

// PoolSpecFromV1 reads an inference.networking.k8s.io/v1 InferencePool.
func PoolSpecFromV1(p *giev1.InferencePool) PoolSpec {
	spec := PoolSpec{Namespace: p.Namespace, Selector: map[string]string{}}
	for k, v := range p.Spec.Selector.MatchLabels {
		spec.Selector[string(k)] = string(v)
	}
	for _, tp := range p.Spec.TargetPorts {
		spec.TargetPorts = append(spec.TargetPorts, int(tp.Number))
	}
	return spec
}

// PoolSpecFromV1Alpha2 reads an inference.networking.x-k8s.io/v1alpha2 InferencePool held as
// unstructured data: `spec.selector` (map of strings) and `spec.targetPortNumber` (integer).
// Errors name the field that has the wrong type.
func PoolSpecFromV1Alpha2(u *unstructured.Unstructured) (PoolSpec, error) {
	spec := PoolSpec{Namespace: u.GetNamespace()}
	sel, _, err := unstructured.NestedStringMap(u.Object, "spec", "selector")
	if err != nil {
		return PoolSpec{}, fmt.Errorf("InferencePool %s/%s: spec.selector: %w", u.GetNamespace(), u.GetName(), err)
	}
	spec.Selector = sel
	port, found, err := unstructured.NestedInt64(u.Object, "spec", "targetPortNumber")
	if err != nil {
		return PoolSpec{}, fmt.Errorf("InferencePool %s/%s: spec.targetPortNumber: %w", u.GetNamespace(), u.GetName(), err)
	}
	if found {
		spec.TargetPorts = []int{int(port)}
	}
	return spec, nil
}

// IsPodReady reports whether a pod may take traffic: its Ready condition is True and it is not
// terminating (no deletionTimestamp). Upstream v1.5.0 pkg/epp/util/pod/pod.go, IsPodReady.
func IsPodReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// EndpointName is the endpoint name upstream v1.5.0 gives rank idx of a pod:
// "<pod>-rank-<idx>" for every rank, rank 0 included (pkg/epp/datastore/datastore.go,
// createEndpointNamespacedName).
func EndpointName(pod string, idx int) string {
	return pod + "-rank-" + strconv.Itoa(idx)
}

// PoolEndpoints is the pool membership rule: one endpoint per (Ready pod in the pool's namespace
// whose labels match the selector and that has a pod IP) × (target port that is valid, 1–65535,
// and active per ActivePortsAnnotation). Rank i is the i-th target port; Name is
// EndpointName(pod, i), PodName the pod's name, Labels a copy of the pod's labels. When two
// endpoints would share a Key (two pods with one IP, or a repeated target port) the one from the
// pod whose name sorts first, then the lower rank, is kept. The result is keyed by Key().
func PoolEndpoints(pool PoolSpec, pods []*corev1.Pod) map[string]*framework.EndpointMetadata {
	out := map[string]*framework.EndpointMetadata{}
	if len(pool.Selector) == 0 {
		return out
	}
	for _, pod := range pods {
		if pod == nil || pod.Namespace != pool.Namespace || !IsPodReady(pod) || !labelsMatch(pod.Labels, pool.Selector) {
			continue
		}
		ip, err := netip.ParseAddr(pod.Status.PodIP)
		if err != nil {
			continue // no IP yet
		}
		active := activePorts(pod)
		for idx, port := range pool.TargetPorts {
			if port < 1 || port > 65535 {
				continue
			}
			if active != nil {
				if _, ok := active[port]; !ok {
					continue
				}
			}
			m := &framework.EndpointMetadata{
				Namespace: pod.Namespace, Name: EndpointName(pod.Name, idx), PodName: pod.Name,
				Address: ip.Unmap().String(), Port: port, Labels: maps.Clone(pod.Labels),
			}
			key := m.Key()
			if prev, ok := out[key]; ok && (prev.PodName < m.PodName || prev.PodName == m.PodName) {
				continue
			}
			out[key] = m
		}
	}
	return out
}

func labelsMatch(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// activePorts parses ActivePortsAnnotation; nil means the annotation is absent (all ports).
// Entries that are not integers are ignored, as upstream does.
func activePorts(pod *corev1.Pod) map[int]struct{} {
	v, ok := pod.Annotations[ActivePortsAnnotation]
	if !ok {
		return nil
	}
	out := map[int]struct{}{}
	for s := range strings.SplitSeq(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
			out[n] = struct{}{}
		}
	}
	return out
}
