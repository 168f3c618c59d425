package wiring

import (
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/cluster"
	"github.com/eppkit/eppkit/conformance/cluster/clustertarget"
	"github.com/eppkit/eppkit/conformance/cluster/existing"
	"github.com/eppkit/eppkit/conformance/cluster/kind"
	"github.com/eppkit/eppkit/conformance/harness"
)

// The "cluster" target and endpoint source of `eppkit conformance` (conformance/cluster/
// clustertarget): the fleet, the InferencePool and the EPP all run in a cluster of a provider,
// reached through port-forwards. They share one run, so they are used together:
//
//	eppkit conformance --target cluster --endpoint-source cluster --provider kind ...
//
// --provider (env EPPKIT_PROVIDER; default kind): kind (node image: EPPKIT_KIND_NODE_IMAGE, as
// suites/e2e) or existing (the current kubeconfig, EPPKIT_CONTEXT). EPPKIT_CLUSTER_NAME
// (default eppkit-conformance), EPPKIT_CLUSTER_MANIFESTS (a directory of the EPP's own YAML,
// templated with the target's fields; default: manifests/k8s's reference EPP),
// EPPKIT_KEEP_CLUSTER=true (keep cluster and namespace).

// ClusterProvider is --provider, the cluster provider of the cluster target ("" = EPPKIT_PROVIDER,
// else kind); set it before the run's options are validated.
var ClusterProvider string

var (
	clusterRunOnce sync.Once
	clusterRun     *clustertarget.Run
	clusterRunErr  error
)

func sharedClusterRun() (*clustertarget.Run, error) {
	clusterRunOnce.Do(func() {
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		p, err := clusterProviderFor(firstNonEmpty(ClusterProvider, os.Getenv("EPPKIT_PROVIDER"), "kind"),
			firstNonEmpty(os.Getenv("EPPKIT_CLUSTER_NAME"), "eppkit-conformance"))
		if err != nil {
			clusterRunErr = err
			return
		}
		clusterRun, clusterRunErr = clustertarget.New(clustertarget.Options{Provider: p,
			KeepCluster: os.Getenv("EPPKIT_KEEP_CLUSTER") == "true", ManifestsDir: os.Getenv("EPPKIT_CLUSTER_MANIFESTS"), Logger: logger})
	})
	return clusterRun, clusterRunErr
}

// clusterProviderFor builds the --provider of the cluster target.
func clusterProviderFor(name, clusterName string) (cluster.Provider, error) {
	switch name {
	case "kind":
		return kind.New(kind.Options{Name: clusterName, NodeImage: os.Getenv(kind.NodeImageEnv), RecreateUnready: true, Log: os.Stderr})
	case "existing":
		return existing.New(existing.Options{Context: os.Getenv("EPPKIT_CONTEXT")})
	}
	return nil, fmt.Errorf("--provider %q: want kind or existing", name)
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func init() {
	conformance.RegisterEndpointSource("cluster", func() (harness.EndpointSource, error) {
		r, err := sharedClusterRun()
		if err != nil {
			return nil, err
		}
		return r.Source(), nil
	})
	conformance.RegisterTarget("cluster", func(conformance.TargetOptions) (harness.Target, error) {
		r, err := sharedClusterRun()
		if err != nil {
			return nil, err
		}
		return r.Target(), nil
	})
}
