// Package cluster is the cluster-provider interface of the cluster end-to-end tier (DESIGN.md test
// tier 5): a Kubernetes cluster the e2e suite and `eppkit conformance --target cluster` apply
// manifests to. Implementations live in subpackages: kind (sigs.k8s.io/kind/pkg/cluster in
// process; needs a container engine) and existing (any kubeconfig and context).
package cluster

import "context"

// Provider creates (or reuses) a cluster and hands out its kubeconfig. Implementations are safe for
// use from one goroutine at a time; they are used from e2e-framework env funcs and from Ginkgo.
type Provider interface {
	// Name is the provider's --provider value: "kind" or "existing".
	Name() string
	// Create brings the cluster up, or reuses a running one with the same name. It returns when
	// the API server answers and at least one node is Ready. Errors name what failed (for
	// example the container engine, or the node that never became Ready) and the log to read.
	Create(ctx context.Context) error
	// KubeconfigPath is the absolute path of a kubeconfig file for the cluster; valid after Create.
	KubeconfigPath() string
	// LoadImage makes a locally built image (for example "eppkit:dev") runnable on the cluster's
	// nodes (kind imports it from the container engine into every node). Providers that cannot
	// (existing) return an error wrapping ErrImageLoadUnsupported: the cluster must pull it.
	LoadImage(ctx context.Context, image string) error
	// ExportLogs writes the control-plane, node and pod logs under dir (created if missing).
	ExportLogs(ctx context.Context, dir string) error
	// Destroy tears the cluster down and removes its state; destroying a cluster that does not
	// exist is not an error. The existing provider never deletes the cluster, only what it created.
	Destroy(ctx context.Context) error
}
