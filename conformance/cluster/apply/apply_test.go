package apply

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
	"github.com/eppkit/eppkit/manifests"
)

// startControlPlane starts a real kube-apiserver + etcd from the tools cache with NO CRDs
// installed (an empty CRD directory), so the manifests' own CRDs are what makes the
// InferencePool applicable. It skips when the binaries are not built.
func startControlPlane(t *testing.T) *apiserver.ControlPlane {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp, err := apiserver.StartControlPlane(ctx, apiserver.ControlPlaneOptions{CRDDir: t.TempDir()})
	if errors.Is(err, apiserver.ErrBinariesMissing) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatalf("StartControlPlane: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return cp
}

func createNamespace(t *testing.T, cp *apiserver.ControlPlane, name string) {
	t.Helper()
	_, err := cp.Clientset.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// clusterScoped reports whether o's kind is one of the cluster-scoped kinds of the manifests.
func clusterScoped(o *unstructured.Unstructured) bool {
	switch o.GetKind() {
	case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding":
		return true
	}
	return false
}

func gvr(o *unstructured.Unstructured) schema.GroupVersionResource {
	// The manifests' kinds, pluralised as their APIs name them.
	plural := map[string]string{
		"CustomResourceDefinition": "customresourcedefinitions", "ServiceAccount": "serviceaccounts",
		"Role": "roles", "RoleBinding": "rolebindings", "Deployment": "deployments", "Service": "services",
		"ConfigMap": "configmaps", "InferencePool": "inferencepools", "PodDisruptionBudget": "poddisruptionbudgets",
		"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
	}[o.GetKind()]
	gv, _ := schema.ParseGroupVersion(o.GetAPIVersion())
	return gv.WithResource(plural)
}

// TestApplyManifestsToAPIServer applies every object of manifests/k8s to a real kube-apiserver
// (validation, defaulting, CRD schemas and CEL rules included) into two namespaces, then again
// (a no-op), then with mutations; and checks the refusals.
func TestApplyManifestsToAPIServer(t *testing.T) {
	cp := startControlPlane(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(cp.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.K8sObjects()
	if err != nil {
		t.Fatal(err)
	}

	createNamespace(t, cp, "e2e-a")
	applied, err := Manifests(ctx, cp.RestConfig, Options{Namespace: "e2e-a"})
	if err != nil {
		t.Fatalf("Manifests: %v", err)
	}
	if len(applied) != len(objs) {
		t.Fatalf("applied %d objects, want %d", len(applied), len(objs))
	}
	versions := map[string]string{}
	for _, o := range objs {
		ri := dyn.Resource(gvr(o))
		var got *unstructured.Unstructured
		switch {
		case o.GetAnnotations()[PerNamespaceAnnotation] == "true":
			got, err = ri.Get(ctx, o.GetName()+"-e2e-a", metav1.GetOptions{})
			if err == nil {
				subjects, _, _ := unstructured.NestedSlice(got.Object, "subjects")
				if ns := subjects[0].(map[string]any)["namespace"]; ns != "e2e-a" {
					t.Errorf("%s/%s: subject namespace %v, want e2e-a", o.GetKind(), got.GetName(), ns)
				}
			}
		case clusterScoped(o):
			got, err = ri.Get(ctx, o.GetName(), metav1.GetOptions{})
		default:
			got, err = ri.Namespace("e2e-a").Get(ctx, o.GetName(), metav1.GetOptions{})
		}
		if err != nil {
			t.Errorf("get %s/%s: %v", o.GetKind(), o.GetName(), err)
			continue
		}
		versions[o.GetKind()+"/"+got.GetName()] = got.GetResourceVersion()
	}
	pool, err := dyn.Resource(schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}).
		Namespace("e2e-a").Get(ctx, manifests.PoolName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref, _, _ := unstructured.NestedMap(pool.Object, "spec", "endpointPickerRef")
	// kind and group are defaulted by the CRD schema.
	if diff := cmp.Diff(map[string]any{"name": manifests.EPPService, "kind": "Service", "group": "",
		"port": map[string]any{"number": int64(manifests.EPPGRPCPort)}, "failureMode": "FailOpen"}, ref); diff != "" {
		t.Errorf("stored endpointPickerRef (-want +got):\n%s", diff)
	}

	// Again: server-side apply of unchanged objects changes nothing.
	a, err := New(cp.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.Apply(ctx, objs, Options{Namespace: "e2e-a"})
	if err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	for _, o := range again {
		if v := versions[o.GetKind()+"/"+o.GetName()]; v != o.GetResourceVersion() {
			t.Errorf("%s/%s: resourceVersion %s → %s on an unchanged re-apply", o.GetKind(), o.GetName(), v, o.GetResourceVersion())
		}
	}

	// A second namespace with mutations: another image and a FailClose pool.
	createNamespace(t, cp, "e2e-b")
	failClose := func(o *unstructured.Unstructured) error {
		if o.GetKind() != "InferencePool" {
			return nil
		}
		return unstructured.SetNestedField(o.Object, "FailClose", "spec", "endpointPickerRef", "failureMode")
	}
	got, err := a.Apply(ctx, objs, Options{Namespace: "e2e-b", Mutate: Chain(SetImage(manifests.Image, "eppkit:test"), failClose)})
	if err != nil {
		t.Fatalf("Apply with Mutate: %v", err)
	}
	for _, o := range got {
		switch o.GetKind() {
		case "InferencePool":
			if fm, _, _ := unstructured.NestedString(o.Object, "spec", "endpointPickerRef", "failureMode"); fm != "FailClose" {
				t.Errorf("pool failureMode %q, want FailClose", fm)
			}
		case "Deployment":
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			img := cs[0].(map[string]any)["image"]
			if o.GetName() != manifests.EnvoyDeployment && img != "eppkit:test" {
				t.Errorf("Deployment %s image %v, want eppkit:test", o.GetName(), img)
			}
			if o.GetName() == manifests.EnvoyDeployment && img != manifests.EnvoyImage {
				t.Errorf("Envoy image changed to %v", img)
			}
		}
	}
	if len(objs) > 0 && objs[len(objs)-1].GetNamespace() != "" {
		t.Errorf("Apply modified its input (namespace %q set)", objs[len(objs)-1].GetNamespace())
	}

	// Refusals, each naming the object.
	badPool := func(o *unstructured.Unstructured) error {
		if o.GetKind() == "InferencePool" {
			return unstructured.SetNestedField(o.Object, "Sometimes", "spec", "endpointPickerRef", "failureMode")
		}
		return nil
	}
	var otherNS *unstructured.Unstructured
	for _, o := range objs {
		if !clusterScoped(o) {
			otherNS = o.DeepCopy()
		}
	}
	otherNS.SetNamespace("elsewhere")
	mutateErr := func(o *unstructured.Unstructured) error { return errors.New("no") }
	// The first namespaced object, after the CRDs: the first one a namespace-less Apply refuses.
	first := 0
	for first < len(objs) && objs[first].GetKind() == "CustomResourceDefinition" {
		first++
	}
	tests := []struct {
		name    string
		objs    []*unstructured.Unstructured
		opts    Options
		wantErr []string
	}{
		{"no namespace", objs, Options{}, []string{"apply " + objs[first].GetKind() + "/" + objs[first].GetName() + ":", "Options.Namespace is empty"}},
		{"object in another namespace", []*unstructured.Unstructured{otherNS}, Options{Namespace: "e2e-a"},
			[]string{otherNS.GetKind() + "/" + otherNS.GetName(), `names namespace "elsewhere"`}},
		{"schema violation", objs, Options{Namespace: "e2e-a", Mutate: badPool}, []string{"apply InferencePool/fake-vllm", "Sometimes"}},
		{"Mutate error", objs[first:], Options{Namespace: "e2e-a", Mutate: mutateErr}, []string{"Mutate: no"}},
		{"unknown kind", []*unstructured.Unstructured{{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Nope", "metadata": map[string]any{"name": "x"}}}},
			Options{Namespace: "e2e-a"}, []string{"apply Nope/x: no API for example.com/v1, Kind=Nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.Apply(ctx, tt.objs, tt.opts)
			if err == nil {
				t.Fatal("Apply succeeded")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestSetImage(t *testing.T) {
	dep := func(images ...string) *unstructured.Unstructured {
		var cs []any
		for _, i := range images {
			cs = append(cs, map[string]any{"name": "c", "image": i})
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "d"}, "spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": cs}}}}}
	}
	images := func(o *unstructured.Unstructured) []string {
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		var out []string
		for _, c := range cs {
			out = append(out, c.(map[string]any)["image"].(string))
		}
		return out
	}
	tests := []struct {
		name string
		in   *unstructured.Unstructured
		want []string
	}{
		{"replaces only the matching image", dep("eppkit:dev", "envoy:1", "eppkit:dev"), []string{"eppkit:x", "envoy:1", "eppkit:x"}},
		{"no match", dep("other:1"), []string{"other:1"}},
		{"no containers", dep(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := SetImage("eppkit:dev", "eppkit:x")(tt.in); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, images(tt.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}, "data": map[string]any{"image": "eppkit:dev"}}}
	if err := SetImage("eppkit:dev", "eppkit:x")(cm); err != nil || cm.Object["data"].(map[string]any)["image"] != "eppkit:dev" {
		t.Errorf("SetImage changed a ConfigMap: %v %v", cm.Object, err)
	}
}
