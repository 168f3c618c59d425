package main

import (
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/cluster/clustertarget"
	"github.com/eppkit/eppkit/conformance/cluster/local"
)

// The "cluster" target and endpoint source of `eppkit conformance` (conformance/cluster/
// clustertarget): the EPP runs as a Deployment in a cluster of a provider, next to the
// InferencePool the source writes there. They share one run, so they are used together:
//
//	eppkit conformance --target cluster --endpoint-source cluster ...
//
// Configured through the environment (the conformance flags are the same for every target):
// EPPKIT_PROVIDER (local; the only provider whose pod network this machine reaches),
// EPPKIT_CLUSTER_NAME (default eppkit-conformance), EPPKIT_CLUSTER_MANIFESTS (a directory of
// the EPP's own YAML, templated with the target's fields; default: manifests/k8s's reference EPP),
// EPPKIT_KEEP_CLUSTER=true (keep cluster and namespace).
// ClusterTargetPodCIDR is the local cluster's pod range for --target cluster.
const ClusterTargetPodCIDR = "198.18.1.0/24"

var (
	clusterRunOnce sync.Once
	clusterRun     *clustertarget.Run
	clusterRunErr  error
)

func sharedClusterRun() (*clustertarget.Run, error) {
	clusterRunOnce.Do(func() {
		provider := os.Getenv("EPPKIT_PROVIDER")
		if provider == "" {
			provider = "local"
		}
		if provider != "local" {
			clusterRunErr = fmt.Errorf("EPPKIT_PROVIDER=%s: --target cluster supports the local provider (the harness must reach the EPP pod and the EPP the fleet on this machine)", provider)
			return
		}
		name := os.Getenv("EPPKIT_CLUSTER_NAME")
		if name == "" {
			name = "eppkit-conformance"
		}
		self, err := os.Executable()
		if err != nil {
			clusterRunErr = err
			return
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		// Its own pod CIDR, so it can run while suites/e2e has the default one.
		p, err := local.New(local.Options{Name: name, Eppkit: self, PodCIDR: ClusterTargetPodCIDR, Logger: logger})
		if err != nil {
			clusterRunErr = err
			return
		}
		clusterRun, clusterRunErr = clustertarget.New(clustertarget.Options{Provider: p,
			KeepCluster: os.Getenv("EPPKIT_KEEP_CLUSTER") == "true", ManifestsDir: os.Getenv("EPPKIT_CLUSTER_MANIFESTS"), Logger: logger})
	})
	return clusterRun, clusterRunErr
}

func init() {
	conformance.RegisterEndpointSource("cluster", func() (conformance.EndpointSource, error) {
		r, err := sharedClusterRun()
		if err != nil {
			return nil, err
		}
		return r.Source(), nil
	})
	conformance.RegisterTarget("cluster", func(conformance.TargetOptions) (conformance.Target, error) {
		r, err := sharedClusterRun()
		if err != nil {
			return nil, err
		}
		return r.Target(), nil
	})
}
