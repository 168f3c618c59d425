package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// ErrImageLoadUnsupported is wrapped by LoadImage of providers that cannot put a local image on
// the cluster's nodes (existing: the cluster pulls from registries). Callers that can do without
// (the image is already pullable) may ignore it with errors.Is.
var ErrImageLoadUnsupported = errors.New("this provider cannot load local images")

// NamespaceCreator is implemented by providers that create namespaces for a run and remove them
// in Destroy (existing, which must never delete what it did not create). Use CreateNamespace,
// which falls back to a plain create for providers that destroy the whole cluster anyway.
type NamespaceCreator interface {
	// CreateNamespace creates the namespace (labels may be nil) and remembers it for Destroy.
	// An existing namespace is an error: a run must not adopt someone else's.
	CreateNamespace(ctx context.Context, name string, labels map[string]string) error
}

// CreateNamespace creates a namespace for a run on p's cluster: through p when it is a
// NamespaceCreator, else with cs. An existing namespace is an error naming it.
func CreateNamespace(ctx context.Context, p Provider, cs kubernetes.Interface, name string, labels map[string]string) error {
	if nc, ok := p.(NamespaceCreator); ok {
		return nc.CreateNamespace(ctx, name, labels)
	}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// WaitForDefaultServiceAccount polls namespace ns until its ServiceAccount "default" exists, or
// timeout (or ctx) ends. The ServiceAccount admission plugin refuses a pod whose service account
// does not exist yet ("error looking up service account NS/default"), and the service-account
// controller creates "default" a moment after the namespace, so whoever creates bare pods right
// after CreateNamespace waits here first (controllers retry; a direct Pods().Create does not).
// The error names the namespace and the last API error seen.
func WaitForDefaultServiceAccount(ctx context.Context, cs kubernetes.Interface, ns string, timeout time.Duration) error {
	last := "not created yet"
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s: service account default: %s (after %s: %w)", ns, last, timeout, err)
	}
	return nil
}

// WaitForReadyNode polls the cluster until at least one node has condition Ready=True, or
// timeout (or ctx) ends; the error then says what the nodes reported last (or the API error).
func WaitForReadyNode(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			last = "list nodes: " + err.Error()
			return false, nil
		}
		if len(nodes.Items) == 0 {
			last = "no nodes registered"
			return false, nil
		}
		var states []string
		for _, n := range nodes.Items {
			st := "no Ready condition"
			for _, c := range n.Status.Conditions {
				if c.Type != corev1.NodeReady {
					continue
				}
				if c.Status == corev1.ConditionTrue {
					return true, nil
				}
				st = fmt.Sprintf("Ready=%s (%s)", c.Status, c.Message)
			}
			states = append(states, n.Name+": "+st)
		}
		last = strings.Join(states, "; ")
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no Ready node within %s: %s: %w", timeout, last, err)
	}
	return nil
}
