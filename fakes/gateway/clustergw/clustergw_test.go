package clustergw

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/eppkit/eppkit/fakes/gateway"
)

const ns = "ns"

func pool(name, mode string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
			"targetPorts":       []any{map[string]any{"number": int64(8000)}},
			"endpointPickerRef": map[string]any{"name": "epp", "port": map[string]any{"number": int64(9002)}, "failureMode": mode},
		},
	}}
	return u
}

func readyPod(name, ip string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "vllm"}},
		Status: corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

func slice(name string, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "epp"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("grpc-ext-proc"), Port: ptr.To(port)}, {Name: ptr.To("grpc-health"), Port: ptr.To[int32](9003)}}}
}

func ep(ip string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
}

func start(t *testing.T, poolName string, objs []runtime.Object, pools ...runtime.Object) *Gateway {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "epp", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc-ext-proc", Port: 9002}, {Name: "grpc-health", Port: 9003}}}}
	cs := fake.NewSimpleClientset(append(objs, svc)...)
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{InferencePoolGVR: "InferencePoolList"}, pools...)
	g, err := New(Config{Client: cs, Dynamic: dyn, Namespace: ns, Pool: poolName})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); _ = g.Close() })
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestResolve(t *testing.T) {
	objs := []runtime.Object{
		readyPod("a", "10.0.0.2", true), readyPod("b", "10.0.0.1", true), readyPod("c", "10.0.0.3", false),
		slice("epp-1", 9002, ep("10.0.1.9", false), ep("10.0.1.5", true)),
	}
	g := start(t, "p", objs, pool("p", "FailOpen"))
	got, err := g.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	want := Resolution{EPP: "10.0.1.5:9002", FailureMode: gateway.FailOpen, Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Resolve (-want +got):\n%s", d)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without clients: want an error")
	}
}

func TestNoEPPEndpoint(t *testing.T) {
	// A model server the FailOpen pool falls back to.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-inference-pod", "served-without-epp")
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	mk := func(name, mode string) *unstructured.Unstructured {
		u := pool(name, mode)
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"number": mustInt64(t, port)}}, "spec", "targetPorts")
		return u
	}
	objs := []runtime.Object{readyPod("a", host, true), slice("epp-1", 9002, ep("10.0.1.5", false))}
	req := &gateway.Request{Method: http.MethodPost, Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"x"}`)}

	closeGW := start(t, "closed", objs, mk("closed", "FailClose"))
	r, err := closeGW.Do(context.Background(), req)
	if err != nil || r.Status != http.StatusInternalServerError {
		t.Errorf("FailClose without a Ready EPP endpoint: %+v, %v; want 500", r, err)
	}
	openGW := start(t, "open", objs, mk("open", "FailOpen"))
	r, err = openGW.Do(context.Background(), req)
	if err != nil || r.Status != http.StatusOK || !r.FailedOpen || r.ServedPod != "served-without-epp" {
		t.Errorf("FailOpen without a Ready EPP endpoint: %+v, %v; want 200 from the pool, FailedOpen", r, err)
	}
}

func mustInt64(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
