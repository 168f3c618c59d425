package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func node(name string, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Message: "kubelet says " + string(ready)}}
	}
	return n
}

func TestWaitForReadyNode(t *testing.T) {
	tests := []struct {
		name    string
		nodes   []runtime.Object
		wantErr string
	}{
		{"one Ready node among others", []runtime.Object{node("a", corev1.ConditionFalse), node("b", corev1.ConditionTrue)}, ""},
		{"no nodes", nil, "no nodes registered"},
		{"NotReady", []runtime.Object{node("a", corev1.ConditionFalse)}, "a: Ready=False (kubelet says False)"},
		{"no condition", []runtime.Object{node("a", "")}, "a: no Ready condition"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := WaitForReadyNode(t.Context(), fake.NewClientset(tt.nodes...), 1200*time.Millisecond)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

type nsProvider struct {
	Provider
	created []string
}

func (p *nsProvider) CreateNamespace(_ context.Context, name string, _ map[string]string) error {
	p.created = append(p.created, name)
	return nil
}

func TestCreateNamespace(t *testing.T) {
	cs := fake.NewClientset()
	// A provider without NamespaceCreator: created with the clientset, labels kept.
	if err := CreateNamespace(t.Context(), nil, cs, "run-1", map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Get(t.Context(), "run-1", metav1.GetOptions{})
	if err != nil || ns.Labels["a"] != "b" {
		t.Fatalf("namespace run-1: %v %v", ns, err)
	}
	if err := CreateNamespace(t.Context(), nil, cs, "run-1", nil); err == nil || !strings.Contains(err.Error(), "create namespace run-1") {
		t.Errorf("second create: err = %v, want an error naming run-1", err)
	}
	// A NamespaceCreator does it itself.
	p := &nsProvider{}
	if err := CreateNamespace(t.Context(), p, cs, "run-2", nil); err != nil {
		t.Fatal(err)
	}
	if len(p.created) != 1 || p.created[0] != "run-2" {
		t.Errorf("provider created %v, want [run-2]", p.created)
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "run-2", metav1.GetOptions{}); err == nil {
		t.Error("run-2 was created through the clientset instead of the provider")
	}
}

// TestWaitForDefaultServiceAccount: it returns once the service-account controller has created
// "default" (here: a goroutine, 300 ms after the call), and times out naming the namespace when
// nothing does.
func TestWaitForDefaultServiceAccount(t *testing.T) {
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "run"}})
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = cs.CoreV1().ServiceAccounts("run").Create(t.Context(),
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "run"}}, metav1.CreateOptions{})
	}()
	if err := WaitForDefaultServiceAccount(t.Context(), cs, "run", 5*time.Second); err != nil {
		t.Fatalf("with the account created: %v", err)
	}
	err := WaitForDefaultServiceAccount(t.Context(), cs, "other", 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "namespace other: service account default") {
		t.Fatalf("without an account: err = %v, want it to name namespace other", err)
	}
}
