package existing

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/eppkit/eppkit/conformance/cluster"
	"github.com/eppkit/eppkit/conformance/cluster/apply"
	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
)

// writeKubeconfig writes a kubeconfig with contexts "a" and "b" (current: b); cluster a's CA is a
// file next to it, so the handed-out kubeconfig must inline it.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("not really a CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	kc := `apiVersion: v1
kind: Config
current-context: b
clusters:
- name: a
  cluster: {server: "` + server + `", certificate-authority: ca.crt}
- name: b
  cluster: {server: "https://b.example:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: t0k3n}
contexts:
- name: a
  context: {cluster: a, user: u}
- name: b
  context: {cluster: b, user: u, namespace: team-b}
`
	path := filepath.Join(dir, "config")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readyNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func fakeClient(objs ...runtime.Object) (*fake.Clientset, func(*rest.Config) (kubernetes.Interface, error)) {
	cs := fake.NewClientset(objs...)
	return cs, func(*rest.Config) (kubernetes.Interface, error) { return cs, nil }
}

func TestCreateSelectsContext(t *testing.T) {
	tests := []struct {
		name, context, wantContext, wantServer string
	}{
		{"current context", "", "b", "https://b.example:6443"},
		{"named context", "a", "a", "https://a.example:6443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, nc := fakeClient(readyNode())
			dir := t.TempDir()
			p, _ := New(Options{Kubeconfig: writeKubeconfig(t, "https://a.example:6443"), Context: tt.context, Dir: dir, NewClient: nc})
			if err := p.Create(t.Context()); err != nil {
				t.Fatal(err)
			}
			if p.KubeconfigPath() != filepath.Join(dir, "kubeconfig") || p.Server() != tt.wantServer {
				t.Errorf("KubeconfigPath %q Server %q", p.KubeconfigPath(), p.Server())
			}
			got, err := clientcmd.LoadFromFile(p.KubeconfigPath())
			if err != nil {
				t.Fatal(err)
			}
			if got.CurrentContext != tt.wantContext || len(got.Contexts) != 1 || len(got.Clusters) != 1 {
				t.Errorf("handed-out kubeconfig: current %q, %d contexts, %d clusters; want only %q", got.CurrentContext, len(got.Contexts), len(got.Clusters), tt.wantContext)
			}
			c := got.Clusters[got.Contexts[tt.wantContext].Cluster]
			if c.Server != tt.wantServer {
				t.Errorf("server %q, want %q", c.Server, tt.wantServer)
			}
			if tt.wantContext == "a" && (string(c.CertificateAuthorityData) != "not really a CA" || c.CertificateAuthority != "") {
				t.Errorf("CA not inlined: file %q data %q", c.CertificateAuthority, base64.StdEncoding.EncodeToString(c.CertificateAuthorityData))
			}
		})
	}
}

func TestCreateErrors(t *testing.T) {
	noCurrent := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(noCurrent, []byte("apiVersion: v1\nkind: Config\ncontexts:\n- name: x\n  context: {cluster: x}\nclusters:\n- name: x\n  cluster: {server: https://x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notReady := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Message: "PLEG is not healthy"}}}}
	tests := []struct {
		name    string
		opts    Options
		wantErr []string
	}{
		{"missing file", Options{Kubeconfig: "/nonexistent/kubeconfig"}, []string{"/nonexistent/kubeconfig"}},
		{"unknown context", Options{Kubeconfig: writeKubeconfig(t, "https://a"), Context: "c"}, []string{`no context "c"`, "have a, b"}},
		{"no current context", Options{Kubeconfig: noCurrent}, []string{"no current-context", "have x"}},
		{"API server unreachable", Options{Kubeconfig: writeKubeconfig(t, "https://127.0.0.1:1"), Context: "a",
			NewClient: func(c *rest.Config) (kubernetes.Interface, error) {
				c.TLSClientConfig = rest.TLSClientConfig{Insecure: true}
				return kubernetes.NewForConfig(c)
			}},
			[]string{`context "a"`, "API server https://127.0.0.1:1 does not answer"}},
		{"no Ready node", Options{Kubeconfig: writeKubeconfig(t, "https://a"), ReadyTimeout: 1200 * time.Millisecond,
			NewClient: func(*rest.Config) (kubernetes.Interface, error) { return fake.NewClientset(notReady), nil }},
			[]string{`context "b"`, "n1: Ready=False (PLEG is not healthy)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Dir = t.TempDir()
			p, _ := New(tt.opts)
			err := p.Create(t.Context())
			if err == nil {
				t.Fatal("Create succeeded")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func deletedNamespaces(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "namespaces" {
			out = append(out, d.GetName())
		}
	}
	return out
}

// TestDestroyDeletesOnlyCreatedNamespaces: namespaces that existed before (or that a run tried
// to create but found existing) survive Destroy.
func TestDestroyDeletesOnlyCreatedNamespaces(t *testing.T) {
	cs, nc := fakeClient(readyNode(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "users-own"}})
	p, _ := New(Options{Kubeconfig: writeKubeconfig(t, "https://a"), NewClient: nc})
	if err := p.CreateNamespace(t.Context(), "early", nil); err == nil {
		t.Error("CreateNamespace before Create succeeded")
	}
	if err := p.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	kcDir := filepath.Dir(p.KubeconfigPath())
	if err := cluster.CreateNamespace(t.Context(), p, cs, "run-1", map[string]string{"run": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := p.CreateNamespace(t.Context(), "run-2", nil); err != nil {
		t.Fatal(err)
	}
	err := p.CreateNamespace(t.Context(), "users-own", nil)
	if err == nil || !strings.Contains(err.Error(), "namespace users-own already exists and was not created by this run") {
		t.Fatalf("adopting users-own: err = %v", err)
	}
	ns, _ := cs.CoreV1().Namespaces().Get(t.Context(), "run-1", metav1.GetOptions{})
	if diff := cmp.Diff(map[string]string{ManagedByLabel: "eppkit", "run": "1"}, ns.Labels); diff != "" {
		t.Errorf("run-1 labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"run-1", "run-2"}, p.Created()); diff != "" {
		t.Errorf("Created (-want +got):\n%s", diff)
	}
	// run-2 vanished on its own; that is fine.
	if err := cs.CoreV1().Namespaces().Delete(t.Context(), "run-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	if err := p.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"run-1", "run-2"}, deletedNamespaces(cs)); diff != "" {
		t.Errorf("deleted namespaces (-want +got):\n%s", diff)
	}
	for _, keep := range []string{"default", "users-own"} {
		if _, err := cs.CoreV1().Namespaces().Get(t.Context(), keep, metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s gone: %v", keep, err)
		}
	}
	if len(p.Created()) != 0 {
		t.Errorf("Created after Destroy: %v", p.Created())
	}
	if _, err := os.Stat(kcDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary kubeconfig dir %s left: %v", kcDir, err)
	}
	// A second Destroy has nothing to do.
	cs.ClearActions()
	if err := p.Destroy(t.Context()); err != nil || len(deletedNamespaces(cs)) != 0 {
		t.Errorf("second Destroy: %v, deleted %v", err, deletedNamespaces(cs))
	}
}

func TestExportLogsAndLoadImage(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "epp-0", Namespace: "run-1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "epp"}}}}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "run-1"}, Type: "Warning", Reason: "BackOff",
		Message: "restarting", InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "epp-0"}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: "default"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	_, nc := fakeClient(readyNode(), pod, ev, other)
	p, _ := New(Options{Kubeconfig: writeKubeconfig(t, "https://a"), NewClient: nc})
	if err := p.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Destroy(context.Background()) })
	// The pod and event exist before the namespace object in the fake; record the namespace.
	if err := p.CreateNamespace(t.Context(), "run-1", nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := p.ExportLogs(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	var files []string
	_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			files = append(files, rel)
		}
		return nil
	})
	if diff := cmp.Diff([]string{"run-1/epp-0_epp.log", "run-1/events.txt", "run-1/pods.yaml"}, files); diff != "" {
		t.Errorf("exported files (-want +got):\n%s", diff)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "run-1", "epp-0_epp.log")); string(b) != "fake logs" {
		t.Errorf("container log %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "run-1", "events.txt")); !strings.Contains(string(b), "Warning\tPod/epp-0\tBackOff\trestarting") {
		t.Errorf("events.txt %q", b)
	}
	if err := p.LoadImage(t.Context(), "eppkit:dev"); !errors.Is(err, cluster.ErrImageLoadUnsupported) || !strings.Contains(err.Error(), "eppkit:dev") {
		t.Errorf("LoadImage: %v", err)
	}
}

// TestAgainstAPIServer drives the provider against a real kube-apiserver (tools cache; skipped
// when not built): a Ready node is registered by hand (there is no kubelet), then Create,
// CreateNamespace, applying manifests/k8s into it, ExportLogs and Destroy, which marks only its
// namespace for deletion (without kube-controller-manager the namespace stays Terminating).
func TestAgainstAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp, err := apiserver.StartControlPlane(ctx, apiserver.ControlPlaneOptions{})
	if errors.Is(err, apiserver.ErrBinariesMissing) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	node, err := cp.Clientset.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := cp.Clientset.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	p, _ := New(Options{Kubeconfig: cp.KubeconfigPath, ReadyTimeout: 30 * time.Second})
	if err := p.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.CreateNamespace(ctx, "eppkit-run", nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", p.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apply.Manifests(ctx, cfg, apply.Options{Namespace: "eppkit-run"}); err != nil {
		t.Fatalf("apply manifests through the handed-out kubeconfig: %v", err)
	}
	if err := p.ExportLogs(ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := p.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	ns, err := cp.Clientset.CoreV1().Namespaces().Get(ctx, "eppkit-run", metav1.GetOptions{})
	if err == nil && ns.DeletionTimestamp == nil {
		t.Errorf("namespace eppkit-run not being deleted after Destroy")
	}
	for _, keep := range []string{"default", "kube-system"} {
		n, err := cp.Clientset.CoreV1().Namespaces().Get(ctx, keep, metav1.GetOptions{})
		if err != nil || n.DeletionTimestamp != nil {
			t.Errorf("namespace %s touched by Destroy: %v %v", keep, err, n.DeletionTimestamp)
		}
	}
}
