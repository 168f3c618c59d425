package discovery

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/eppkit/eppkit/reference/framework"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

const ns = "serving"

var poolLabels = map[string]string{"app": "vllm"}

type podOpt func(*corev1.Pod)

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
func terminating(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
}
func noReadyCondition(p *corev1.Pod) { p.Status.Conditions = nil }
func inNamespace(n string) podOpt    { return func(p *corev1.Pod) { p.Namespace = n } }
func withLabels(l map[string]string) podOpt {
	return func(p *corev1.Pod) { p.Labels = l }
}
func activePortsAnn(v string) podOpt {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{ActivePortsAnnotation: v} }
}

func mkPod(name, ip string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "vllm", "pod": name}},
		Status: corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue}, // first, so notReady can flip it
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ep(pod, ip string, port, rank int) *framework.EndpointMetadata {
	return &framework.EndpointMetadata{Namespace: ns, Name: EndpointName(pod, rank), PodName: pod,
		Address: ip, Port: port, Labels: map[string]string{"app": "vllm", "pod": pod}}
}

func TestPoolEndpoints(t *testing.T) {
	one := PoolSpec{Namespace: ns, Selector: poolLabels, TargetPorts: []int{8000}}
	three := PoolSpec{Namespace: ns, Selector: poolLabels, TargetPorts: []int{8000, 8001, 8002}}
	tests := []struct {
		name string
		pool PoolSpec
		pods []*corev1.Pod
		want []*framework.EndpointMetadata
	}{
		{"one Ready pod, one port", one, []*corev1.Pod{mkPod("a", "10.0.0.1")},
			[]*framework.EndpointMetadata{ep("a", "10.0.0.1", 8000, 0)}},
		{"not Ready pods are left out", one, []*corev1.Pod{mkPod("a", "10.0.0.1", notReady), mkPod("b", "10.0.0.2", noReadyCondition)}, nil},
		{"terminating pod is left out though Ready", one, []*corev1.Pod{mkPod("a", "10.0.0.1", terminating)}, nil},
		{"pod without IP is left out", one, []*corev1.Pod{mkPod("a", "")}, nil},
		{"other namespace", one, []*corev1.Pod{mkPod("a", "10.0.0.1", inNamespace("other"))}, nil},
		{"selector mismatch", one, []*corev1.Pod{mkPod("a", "10.0.0.1", withLabels(map[string]string{"app": "other"}))}, nil},
		{"empty selector selects nothing", PoolSpec{Namespace: ns, TargetPorts: []int{8000}}, []*corev1.Pod{mkPod("a", "10.0.0.1")}, nil},
		{"three target ports: three ranks per pod", three, []*corev1.Pod{mkPod("a", "10.0.0.1"), mkPod("b", "10.0.0.2")},
			[]*framework.EndpointMetadata{
				ep("a", "10.0.0.1", 8000, 0), ep("a", "10.0.0.1", 8001, 1), ep("a", "10.0.0.1", 8002, 2),
				ep("b", "10.0.0.2", 8000, 0), ep("b", "10.0.0.2", 8001, 1), ep("b", "10.0.0.2", 8002, 2)}},
		{"active-ports annotation keeps listed ports, ranks unchanged", three, []*corev1.Pod{mkPod("a", "10.0.0.1", activePortsAnn("8002, 8000,junk,9999"))},
			[]*framework.EndpointMetadata{ep("a", "10.0.0.1", 8000, 0), ep("a", "10.0.0.1", 8002, 2)}},
		{"invalid target ports are skipped", PoolSpec{Namespace: ns, Selector: poolLabels, TargetPorts: []int{0, 8001, 70000}},
			[]*corev1.Pod{mkPod("a", "10.0.0.1")}, []*framework.EndpointMetadata{ep("a", "10.0.0.1", 8001, 1)}},
		{"IPv6 pod", one, []*corev1.Pod{mkPod("a", "fd00::7")}, []*framework.EndpointMetadata{ep("a", "fd00::7", 8000, 0)}},
		{"two pods with one IP: the first name wins", one, []*corev1.Pod{mkPod("z", "10.0.0.1"), mkPod("b", "10.0.0.1")},
			[]*framework.EndpointMetadata{ep("b", "10.0.0.1", 8000, 0)}},
		{"repeated target port: the lower rank wins", PoolSpec{Namespace: ns, Selector: poolLabels, TargetPorts: []int{8000, 8000}},
			[]*corev1.Pod{mkPod("a", "10.0.0.1")}, []*framework.EndpointMetadata{ep("a", "10.0.0.1", 8000, 0)}},
		{"nil pod ignored", one, []*corev1.Pod{nil}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PoolEndpoints(tc.pool, tc.pods)
			list := make([]*framework.EndpointMetadata, 0, len(got))
			for k, m := range got {
				if k != m.Key() {
					t.Errorf("map key %q != Key() %q", k, m.Key())
				}
				list = append(list, m)
			}
			sortByKey(list)
			want := tc.want
			if want == nil {
				want = []*framework.EndpointMetadata{}
			}
			if diff := cmp.Diff(want, list); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPoolSpecConversions(t *testing.T) {
	v1 := &giev1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
		Spec: giev1.InferencePoolSpec{
			Selector:    giev1.LabelSelector{MatchLabels: map[giev1.LabelKey]giev1.LabelValue{"app": "vllm"}},
			TargetPorts: []giev1.Port{{Number: 8000}, {Number: 8001}},
		},
	}
	want := PoolSpec{Namespace: ns, Selector: map[string]string{"app": "vllm"}, TargetPorts: []int{8000, 8001}}
	if diff := cmp.Diff(want, PoolSpecFromV1(v1)); diff != "" {
		t.Errorf("v1 (-want +got):\n%s", diff)
	}

	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferencePool",
		"metadata": map[string]any{"name": "p", "namespace": ns},
		"spec":     map[string]any{"selector": map[string]any{"app": "vllm"}, "targetPortNumber": int64(8000)},
	}}
	got, err := PoolSpecFromV1Alpha2(u)
	if err != nil {
		t.Fatal(err)
	}
	want.TargetPorts = []int{8000}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("v1alpha2 (-want +got):\n%s", diff)
	}

	bad := u.DeepCopy()
	bad.Object["spec"].(map[string]any)["targetPortNumber"] = "8000"
	if _, err := PoolSpecFromV1Alpha2(bad); err == nil || !strings.Contains(err.Error(), "spec.targetPortNumber") {
		t.Errorf("string targetPortNumber: error = %v, want one naming spec.targetPortNumber", err)
	}
	bad = u.DeepCopy()
	bad.Object["spec"].(map[string]any)["selector"] = map[string]any{"app": int64(1)}
	if _, err := PoolSpecFromV1Alpha2(bad); err == nil || !strings.Contains(err.Error(), "spec.selector") {
		t.Errorf("non-string selector: error = %v, want one naming spec.selector", err)
	}
}
