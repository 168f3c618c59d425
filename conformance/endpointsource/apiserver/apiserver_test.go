package apiserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/eppkit/eppkit/conformance/harness"
)

// startOrSkip starts the real control plane from the tools cache, skipping when it is not built.
func startOrSkip(t *testing.T, opts Options) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	env, err := Start(ctx, opts)
	if errors.Is(err, ErrBinariesMissing) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", env.LogTail(40))
		}
		if err := env.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return env
}

// childProcesses returns "comm(pid)" of this process's children named kube-apiserver or etcd.
func childProcesses(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		open, closeIdx := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closeIdx < open {
			continue
		}
		comm := s[open+1 : closeIdx]
		fields := strings.Fields(s[closeIdx+1:])
		if len(fields) < 2 || fields[1] != self || fields[0] == "Z" {
			continue
		}
		if comm == "kube-apiserver" || comm == "etcd" {
			out = append(out, comm+"("+e.Name()+")")
		}
	}
	return out
}

func TestControlPlanePoolAndPods(t *testing.T) {
	addrs := []string{"127.0.10.1:8000", "127.0.10.2:8000", "127.0.10.3:8000"}
	env := startOrSkip(t, Options{PoolName: "pool-a", PoolNamespace: "ns-a", Endpoints: addrs, Objectives: map[string]int{"critical": 10, "sheddable": -1},
		ModelRewrites: []ModelRewrite{ConformanceModelRewrite()}})
	ctx := t.Context()

	if procs := childProcesses(t); len(procs) != 2 {
		t.Errorf("child control plane processes = %v, want kube-apiserver and etcd", procs)
	}

	// A client built only from the kubeconfig file (what a target EPP gets) sees the version and objects.
	kc, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigPath)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", env.KubeconfigPath, err)
	}
	cs, err := kubernetes.NewForConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	ver, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if ver.GitVersion != "v1.37.2" {
		t.Errorf("kube-apiserver gitVersion = %q, want v1.37.2 (the -ldflags stamp)", ver.GitVersion)
	}

	pool := &unstructured.Unstructured{}
	pool.SetGroupVersionKind(InferencePoolGVK)
	if err := env.Client.Get(ctx, keyOf("ns-a", "pool-a"), pool); err != nil {
		t.Fatalf("get InferencePool: %v", err)
	}
	gotPorts, _, _ := unstructured.NestedSlice(pool.Object, "spec", "targetPorts")
	if diff := cmp.Diff([]any{map[string]any{"number": int64(8000)}}, gotPorts); diff != "" {
		t.Errorf("InferencePool targetPorts (-want +got):\n%s", diff)
	}
	sel, _, _ := unstructured.NestedStringMap(pool.Object, "spec", "selector", "matchLabels")
	if diff := cmp.Diff(map[string]string{PoolLabel: "pool-a"}, sel); diff != "" {
		t.Errorf("InferencePool selector (-want +got):\n%s", diff)
	}
	for name, want := range map[string]int64{"critical": 10, "sheddable": -1} {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(InferenceObjectiveGVK)
		if err := env.Client.Get(ctx, keyOf("ns-a", name), obj); err != nil {
			t.Fatalf("get InferenceObjective %s: %v", name, err)
		}
		if got, _, _ := unstructured.NestedInt64(obj.Object, "spec", "priority"); got != want {
			t.Errorf("InferenceObjective %s priority = %d, want %d", name, got, want)
		}
	}

	// The model rewrite passed the CRD's schema (weights, Exact) and names the pool.
	rw := &unstructured.Unstructured{}
	rw.SetGroupVersionKind(InferenceModelRewriteGVK)
	if err := env.Client.Get(ctx, keyOf("ns-a", harness.ModelRewriteName), rw); err != nil {
		t.Fatalf("get InferenceModelRewrite: %v", err)
	}
	if ref, _, _ := unstructured.NestedString(rw.Object, "spec", "poolRef", "name"); ref != "pool-a" {
		t.Errorf("InferenceModelRewrite poolRef.name = %q, want pool-a", ref)
	}
	rules, _, _ := unstructured.NestedSlice(rw.Object, "spec", "rules")
	if len(rules) != 1 {
		t.Fatalf("InferenceModelRewrite rules = %v, want one", rules)
	}
	if tg, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "targets"); len(tg) != len(harness.ModelRewriteTargets()) {
		t.Errorf("InferenceModelRewrite targets = %v, want %v", tg, harness.ModelRewriteTargets())
	}

	type podView struct {
		Name, IP string
		Phase    corev1.PodPhase
		Ready    corev1.ConditionStatus
		Node     string
	}
	list := func() []podView {
		t.Helper()
		pods, err := cs.CoreV1().Pods("ns-a").List(ctx, metav1.ListOptions{LabelSelector: PoolLabel + "=pool-a"})
		if err != nil {
			t.Fatalf("list pods: %v", err)
		}
		var out []podView
		for _, p := range pods.Items {
			v := podView{Name: p.Name, IP: p.Status.PodIP, Phase: p.Status.Phase, Node: p.Spec.NodeName}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady {
					v.Ready = c.Status
				}
			}
			out = append(out, v)
		}
		return out
	}
	want := []podView{
		{Name: "pool-a-127-0-10-1", IP: "127.0.10.1", Phase: corev1.PodRunning, Ready: corev1.ConditionTrue, Node: FakeNodeName},
		{Name: "pool-a-127-0-10-2", IP: "127.0.10.2", Phase: corev1.PodRunning, Ready: corev1.ConditionTrue, Node: FakeNodeName},
		{Name: "pool-a-127-0-10-3", IP: "127.0.10.3", Phase: corev1.PodRunning, Ready: corev1.ConditionTrue, Node: FakeNodeName},
	}
	if diff := cmp.Diff(want, list()); diff != "" {
		t.Fatalf("pods after Start (-want +got):\n%s", diff)
	}

	if err := env.SetReady(ctx, "127.0.10.2:8000", false); err != nil {
		t.Fatal(err)
	}
	want[1].Ready = corev1.ConditionFalse
	if diff := cmp.Diff(want, list()); diff != "" {
		t.Fatalf("pods after SetReady(false) (-want +got):\n%s", diff)
	}
	if err := env.DeletePod(ctx, "127.0.10.3:8000"); err != nil {
		t.Fatal(err)
	}
	if err := env.AddPod(ctx, "127.0.10.4:8000"); err != nil {
		t.Fatal(err)
	}
	want = append(want[:2], podView{Name: "pool-a-127-0-10-4", IP: "127.0.10.4", Phase: corev1.PodRunning, Ready: corev1.ConditionTrue, Node: FakeNodeName})
	if diff := cmp.Diff(want, list()); diff != "" {
		t.Fatalf("pods after DeletePod + AddPod (-want +got):\n%s", diff)
	}

	// Errors name what is wrong.
	for _, tc := range []struct {
		err  error
		want string
	}{
		{env.SetReady(ctx, "127.0.10.9:8000", true), "no Pod with this IP"},
		{env.SetReady(ctx, "127.0.10.1:9999", true), "is not one of the pool's targetPorts [8000]"},
		{env.AddPod(ctx, "127.0.10.1:8000"), "already exists"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error = %v, want it to contain %q", tc.err, tc.want)
		}
	}

	// A second pool in the same control plane, of pods with data-parallel ranks: one targetPort
	// per rank, ascending, and every port on the Pod's container.
	side, err := NewPool(ctx, env.ControlPlane, Options{PoolName: "pool-dp", PoolNamespace: "ns-a", AppProtocol: "kubernetes.io/h2c",
		Endpoints: []string{"127.0.11.1:8001", "127.0.11.1:8000", "127.0.11.2:8000", "127.0.11.2:8001"}})
	if err != nil {
		t.Fatalf("NewPool with ranks: %v", err)
	}
	dpPool := &unstructured.Unstructured{}
	dpPool.SetGroupVersionKind(InferencePoolGVK)
	if err := env.Client.Get(ctx, keyOf("ns-a", "pool-dp"), dpPool); err != nil {
		t.Fatalf("get InferencePool pool-dp: %v", err)
	}
	gotPorts, _, _ = unstructured.NestedSlice(dpPool.Object, "spec", "targetPorts")
	if diff := cmp.Diff([]any{map[string]any{"number": int64(8000)}, map[string]any{"number": int64(8001)}}, gotPorts); diff != "" {
		t.Errorf("InferencePool pool-dp targetPorts (-want +got):\n%s", diff)
	}
	if got, _, _ := unstructured.NestedString(dpPool.Object, "spec", "appProtocol"); got != "kubernetes.io/h2c" {
		t.Errorf("InferencePool pool-dp appProtocol %q, want kubernetes.io/h2c (Options.AppProtocol)", got)
	}
	if got, _, _ := unstructured.NestedString(pool.Object, "spec", "appProtocol"); got != "http" {
		t.Errorf("InferencePool without Options.AppProtocol has appProtocol %q, want the CRD's default http", got)
	}
	pod, err := cs.CoreV1().Pods("ns-a").Get(ctx, PodNameFor("pool-dp", "127.0.11.2"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get a pool-dp Pod: %v", err)
	}
	if got := pod.Spec.Containers[0].Ports; len(got) != 2 || got[0].ContainerPort != 8000 || got[1].ContainerPort != 8001 || got[1].Name != "rank-1" {
		t.Errorf("pool-dp Pod container ports = %+v, want http:8000 and rank-1:8001", got)
	}
	if err := side.SetReady(ctx, "127.0.11.1:8001", false); err != nil {
		t.Errorf("SetReady by a rank-1 address: %v", err)
	}
	if err := side.Stop(); err != nil {
		t.Errorf("Stop of a NewPool Env (leaves the control plane): %v", err)
	}

	if err := env.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if procs := childProcesses(t); len(procs) != 0 {
		t.Errorf("after Stop, control plane processes still running: %v", procs)
	}
	if _, err := os.Stat(env.Dir); !os.IsNotExist(err) {
		t.Errorf("after Stop, temp dir %s still exists (err %v)", env.Dir, err)
	}
}

func TestSourceImplementsEndpointSource(t *testing.T) {
	src := NewSource(Options{PoolName: "pool-s"})
	if err := src.SetReady(t.Context(), "127.0.10.1:8000", false); err == nil {
		t.Fatal("SetReady before Start succeeded, want error")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	got, err := src.Start(ctx, []string{"127.0.10.1:8000", "127.0.10.2:8000"})
	if errors.Is(err, ErrBinariesMissing) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = src.Stop(context.Background()) })
	if got.PoolName != "pool-s" || got.PoolNamespace != DefaultPoolNamespace || got.Kubeconfig == "" || got.Endpoints != "" {
		t.Errorf("Env = %+v, want pool-s/%s with a kubeconfig and no static endpoints", got, DefaultPoolNamespace)
	}
	if _, err := os.Stat(got.Kubeconfig); err != nil {
		t.Errorf("kubeconfig: %v", err)
	}
	if _, err := src.Start(ctx, []string{"127.0.10.1:8000"}); err == nil {
		t.Error("second Start succeeded, want error")
	}
	if err := src.SetReady(ctx, "127.0.10.1:8000", false); err != nil {
		t.Errorf("SetReady: %v", err)
	}
	if err := src.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if procs := childProcesses(t); len(procs) != 0 {
		t.Errorf("after Stop, control plane processes still running: %v", procs)
	}
}

func keyOf(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
