// Package e2eframework puts eppkit's cluster providers and conformance suite behind
// sigs.k8s.io/e2e-framework (v0.7.0), for implementers whose own end-to-end tests use it:
//
//   - Provider adapts any cluster.Provider (kind, existing) to e2e-framework's
//     support.E2EClusterProviderWithImageLoader, so envfuncs.CreateCluster, LoadImageToCluster,
//     ExportClusterLogs and DestroyCluster drive it; Kind builds one over eppkit's kind
//     provider (the kind Go library in process, not the kind CLI e2e-framework's own kind
//     support shells out to);
//   - DeployFleet, DeployPool and DeployEPP are env.Funcs applying manifests/k8s's fake vLLM
//     Deployment, InferencePool and an EPP (the reference, or the implementer's manifests) into
//     a namespace;
//   - Conformance is a features.Feature that runs eppkit's conformance registry against an EPP
//     deployed in the environment's cluster (conformance/cluster/clustertarget: its own fleet
//     pods and pool, the EPP's manifests, everything reached through port-forwards).
//
// example_kind_test.go does all of it on kind.
package e2eframework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/e2e-framework/klient"
	"sigs.k8s.io/e2e-framework/support"

	"github.com/eppkit/eppkit/conformance/cluster"
	"github.com/eppkit/eppkit/conformance/cluster/kind"
)

// Provider is an eppkit cluster provider as an e2e-framework cluster provider. The eppkit
// provider is built on the first Create from the name WithName gave.
type Provider struct {
	build   func(name, configFile string) (cluster.Provider, error)
	name    string
	version string
	p       cluster.Provider
}

var _ support.E2EClusterProviderWithImageLoader = (*Provider)(nil)

// New adapts the providers build returns: build gets the cluster name (WithName) and the kind
// config file of CreateWithConfig ("" for Create).
func New(build func(name, configFile string) (cluster.Provider, error)) *Provider {
	return &Provider{build: build}
}

// Kind is eppkit's kind provider behind e2e-framework: opts as for kind.New, with Name from
// WithName, Config from CreateWithConfig's file, and NodeImage from WithVersion when that is a
// kindest/node tag ("v1.37.0") and opts.NodeImage is empty.
func Kind(opts kind.Options) *Provider {
	p := &Provider{}
	p.build = func(name, configFile string) (cluster.Provider, error) {
		o := opts
		o.Name = name
		if configFile != "" {
			b, err := os.ReadFile(configFile)
			if err != nil {
				return nil, fmt.Errorf("kind config: %w", err)
			}
			o.Config = b
		}
		if o.NodeImage == "" && p.version != "" {
			o.NodeImage = "kindest/node:" + p.version
		}
		return kind.New(o)
	}
	return p
}

// Unwrap returns the eppkit provider (nil before Create).
func (p *Provider) Unwrap() cluster.Provider { return p.p }

// WithName sets the cluster name.
func (p *Provider) WithName(name string) support.E2EClusterProvider { p.name = name; return p }

// WithVersion sets the Kubernetes version (kind: the kindest/node tag).
func (p *Provider) WithVersion(version string) support.E2EClusterProvider {
	p.version = version
	return p
}

// WithPath is ignored: eppkit's providers need no CLI binary.
func (p *Provider) WithPath(string) support.E2EClusterProvider { return p }

// WithOpts applies opts.
func (p *Provider) WithOpts(opts ...support.ClusterOpts) support.E2EClusterProvider {
	for _, o := range opts {
		o(p)
	}
	return p
}

// SetDefaults is a no-op: the eppkit providers default their own options.
func (p *Provider) SetDefaults() support.E2EClusterProvider { return p }

// Create creates (or reuses) the cluster and returns its kubeconfig path; args are ignored.
func (p *Provider) Create(ctx context.Context, _ ...string) (string, error) {
	return p.create(ctx, "")
}

// CreateWithConfig creates the cluster from a provider config file (kind: a v1alpha4 Cluster).
func (p *Provider) CreateWithConfig(ctx context.Context, configFile string) (string, error) {
	return p.create(ctx, configFile)
}

func (p *Provider) create(ctx context.Context, configFile string) (string, error) {
	if p.p == nil {
		if p.name == "" {
			return "", errors.New("e2eframework: no cluster name (WithName)")
		}
		cp, err := p.build(p.name, configFile)
		if err != nil {
			return "", err
		}
		p.p = cp
	}
	if err := p.p.Create(ctx); err != nil {
		return "", err
	}
	return p.p.KubeconfigPath(), nil
}

// GetKubeconfig is the kubeconfig path ("" before Create).
func (p *Provider) GetKubeconfig() string {
	if p.p == nil {
		return ""
	}
	return p.p.KubeconfigPath()
}

// GenerateKubeconfig returns the kubeconfig path: the providers write it in Create.
func (p *Provider) GenerateKubeconfig(...string) (string, error) {
	if p.p == nil {
		return "", errors.New("e2eframework: GenerateKubeconfig before Create")
	}
	return p.p.KubeconfigPath(), nil
}

// GetKubectlContext is the kubeconfig's current context.
func (p *Provider) GetKubectlContext() string {
	if p.p == nil {
		return ""
	}
	cfg, err := clientcmd.LoadFromFile(p.p.KubeconfigPath())
	if err != nil {
		return ""
	}
	return cfg.CurrentContext
}

// ExportLogs writes the cluster's logs under dest.
func (p *Provider) ExportLogs(ctx context.Context, dest string) error {
	if p.p == nil {
		return errors.New("e2eframework: ExportLogs before Create")
	}
	return p.p.ExportLogs(ctx, dest)
}

// Destroy tears the cluster down (existing: only what eppkit created).
func (p *Provider) Destroy(ctx context.Context) error {
	if p.p == nil {
		return nil
	}
	return p.p.Destroy(ctx)
}

// WaitForControlPlane waits (up to 5 minutes) for a Ready node; Create has already waited, so
// this returns at once on a cluster that stayed up.
func (p *Provider) WaitForControlPlane(ctx context.Context, c klient.Client) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	return cluster.WaitForReadyNode(ctx, cs, 5*time.Minute)
}

// KubernetesRestConfig is the cluster's REST config (nil before Create or on a bad kubeconfig).
func (p *Provider) KubernetesRestConfig() *rest.Config {
	if p.p == nil {
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", p.p.KubeconfigPath())
	if err != nil {
		return nil
	}
	return cfg
}

// LoadImage makes a local image runnable on the nodes (cluster.Provider.LoadImage).
func (p *Provider) LoadImage(ctx context.Context, image string, _ ...string) error {
	if p.p == nil {
		return errors.New("e2eframework: LoadImage before Create")
	}
	return p.p.LoadImage(ctx, image)
}

// LoadImageArchive imports an image archive into the nodes where the provider can (kind).
func (p *Provider) LoadImageArchive(ctx context.Context, archive string, _ ...string) error {
	if p.p == nil {
		return errors.New("e2eframework: LoadImageArchive before Create")
	}
	l, ok := p.p.(interface {
		LoadImageArchive(ctx context.Context, archive string) error
	})
	if !ok {
		return fmt.Errorf("e2eframework: provider %s: %w", p.p.Name(), cluster.ErrImageLoadUnsupported)
	}
	return l.LoadImageArchive(ctx, archive)
}
