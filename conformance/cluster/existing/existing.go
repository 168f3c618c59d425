// Package existing is the "existing" cluster provider: any cluster a kubeconfig reaches (how users
// run the e2e suite and `eppkit conformance --target cluster` beyond one machine). It never
// creates or deletes the cluster: Create checks that the API server answers and a node is Ready,
// CreateNamespace creates (and records) the namespaces of a run, and Destroy deletes exactly
// those namespaces, nothing else.
package existing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/eppkit/eppkit/conformance/cluster"
)

// ManagedByLabel marks the namespaces this provider creates (value "eppkit").
const ManagedByLabel = "app.kubernetes.io/managed-by"

// Options configure New. Zero values take the defaults noted per field.
type Options struct {
	// Kubeconfig is the kubeconfig file ("" = client-go's default rules: $KUBECONFIG, else
	// ~/.kube/config).
	Kubeconfig string
	// Context is the kubeconfig context to use ("" = its current-context).
	Context string
	// Dir receives the kubeconfig this provider hands out: the chosen context only, with
	// certificate files inlined ("" = a new temporary directory, removed by Destroy).
	Dir string
	// ReadyTimeout bounds Create's wait for a Ready node (default 60s).
	ReadyTimeout time.Duration
	// DeleteTimeout, when > 0, makes Destroy wait that long for its namespaces to be gone;
	// 0 = delete and return (the namespaces finish terminating in the background).
	DeleteTimeout time.Duration
	// NewClient builds the clientset from the rest config (tests; nil = kubernetes.NewForConfig).
	NewClient func(*rest.Config) (kubernetes.Interface, error)
}

// Provider is the existing-cluster provider (cluster.Provider and cluster.NamespaceCreator).
type Provider struct {
	opts       Options
	removeDir  bool
	kubeconfig string
	server     string
	cs         kubernetes.Interface
	created    []string
}

var (
	_ cluster.Provider         = (*Provider)(nil)
	_ cluster.NamespaceCreator = (*Provider)(nil)
)

// New returns the provider; nothing is contacted until Create.
func New(opts Options) (*Provider, error) {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	if opts.NewClient == nil {
		opts.NewClient = func(c *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(c) }
	}
	return &Provider{opts: opts}, nil
}

// Name is "existing".
func (p *Provider) Name() string { return "existing" }

// KubeconfigPath is the kubeconfig written by Create (the chosen context only); "" before.
func (p *Provider) KubeconfigPath() string { return p.kubeconfig }

// Server is the API server URL of the chosen context; "" before Create.
func (p *Provider) Server() string { return p.server }

// Client is the clientset Create built; nil before.
func (p *Provider) Client() kubernetes.Interface { return p.cs }

// Created lists the namespaces CreateNamespace created and Destroy has not deleted, sorted.
func (p *Provider) Created() []string {
	out := append([]string(nil), p.created...)
	sort.Strings(out)
	return out
}

// Create loads the kubeconfig, selects the context, writes the handed-out kubeconfig, and
// checks that the API server answers (its version) and that a node is Ready. Errors name the
// kubeconfig, the context and the server.
func (p *Provider) Create(ctx context.Context) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if p.opts.Kubeconfig != "" {
		rules.ExplicitPath = p.opts.Kubeconfig
	}
	where := p.opts.Kubeconfig
	if where == "" {
		where = strings.Join(rules.Precedence, string(os.PathListSeparator))
	}
	raw, err := rules.Load()
	if err != nil {
		return fmt.Errorf("existing: kubeconfig %s: %w", where, err)
	}
	name := p.opts.Context
	if name == "" {
		name = raw.CurrentContext
	}
	if name == "" {
		return fmt.Errorf("existing: kubeconfig %s has no current-context; pass a context (have %s)", where, contextNames(raw))
	}
	kctx, ok := raw.Contexts[name]
	if !ok {
		return fmt.Errorf("existing: kubeconfig %s has no context %q (have %s)", where, name, contextNames(raw))
	}
	if c, ok := raw.Clusters[kctx.Cluster]; ok {
		p.server = c.Server
	}
	raw.CurrentContext = name
	if err := clientcmdapi.MinifyConfig(raw); err != nil {
		return fmt.Errorf("existing: context %q: %w", name, err)
	}
	if err := clientcmdapi.FlattenConfig(raw); err != nil {
		return fmt.Errorf("existing: context %q: inline certificate files: %w", name, err)
	}
	dir := p.opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "eppkit-existing-"); err != nil {
			return fmt.Errorf("existing: %w", err)
		}
		p.removeDir = true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("existing: Dir: %w", err)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*raw, path); err != nil {
		return fmt.Errorf("existing: write kubeconfig: %w", err)
	}
	p.kubeconfig = path
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return fmt.Errorf("existing: context %q: %w", name, err)
	}
	cfg.Timeout = 15 * time.Second
	if p.cs, err = p.opts.NewClient(cfg); err != nil {
		return fmt.Errorf("existing: context %q: client: %w", name, err)
	}
	if _, err := p.cs.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("existing: context %q: API server %s does not answer: %w", name, p.server, err)
	}
	if err := cluster.WaitForReadyNode(ctx, p.cs, p.opts.ReadyTimeout); err != nil {
		return fmt.Errorf("existing: context %q (%s): %w", name, p.server, err)
	}
	return nil
}

func contextNames(c *clientcmdapi.Config) string {
	var out []string
	for n := range c.Contexts {
		out = append(out, n)
	}
	if len(out) == 0 {
		return "no contexts"
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// CreateNamespace creates namespace name labelled ManagedByLabel=eppkit (plus labels) and
// records it for Destroy. A namespace that already exists is an error: this provider never
// adopts, and so never deletes, a namespace it did not create.
func (p *Provider) CreateNamespace(ctx context.Context, name string, labels map[string]string) error {
	if p.cs == nil {
		return errors.New("existing: CreateNamespace before Create")
	}
	l := map[string]string{ManagedByLabel: "eppkit"}
	for k, v := range labels {
		l[k] = v
	}
	_, err := p.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("existing: namespace %s already exists and was not created by this run; choose another name", name)
	}
	if err != nil {
		return fmt.Errorf("existing: create namespace %s: %w", name, err)
	}
	p.created = append(p.created, name)
	return nil
}

// LoadImage cannot copy a local image to an arbitrary cluster: the error wraps
// cluster.ErrImageLoadUnsupported and says what to do instead.
func (p *Provider) LoadImage(_ context.Context, image string) error {
	return fmt.Errorf("existing: load %s: %w: push it to a registry the cluster pulls from and point the manifests at it", image, cluster.ErrImageLoadUnsupported)
}

// ExportLogs writes, for every namespace this run created, the pods (pods.yaml), the events
// (events.txt) and each container's log (<pod>_<container>.log) under dir/<namespace>/. It
// keeps going past a failing pod and returns the joined errors.
func (p *Provider) ExportLogs(ctx context.Context, dir string) error {
	if p.cs == nil {
		return errors.New("existing: ExportLogs before Create")
	}
	var errs []error
	for _, ns := range p.Created() {
		nsDir := filepath.Join(dir, ns)
		if err := os.MkdirAll(nsDir, 0o755); err != nil {
			return fmt.Errorf("existing: logs dir: %w", err)
		}
		pods, err := p.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("list pods of %s: %w", ns, err))
			continue
		}
		if b, err := yaml.Marshal(pods); err == nil {
			errs = append(errs, os.WriteFile(filepath.Join(nsDir, "pods.yaml"), b, 0o644))
		}
		if evs, err := p.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("list events of %s: %w", ns, err))
		} else {
			var sb strings.Builder
			for _, e := range evs.Items {
				fmt.Fprintf(&sb, "%s\t%s\t%s/%s\t%s\t%s\n", e.LastTimestamp.UTC().Format(time.RFC3339), e.Type,
					e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
			errs = append(errs, os.WriteFile(filepath.Join(nsDir, "events.txt"), []byte(sb.String()), 0o644))
		}
		for _, pod := range pods.Items {
			for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				errs = append(errs, p.containerLog(ctx, ns, pod.Name, c.Name, filepath.Join(nsDir, pod.Name+"_"+c.Name+".log")))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("existing: export logs: %w", err)
	}
	return nil
}

func (p *Provider) containerLog(ctx context.Context, ns, pod, container, path string) error {
	rc, err := p.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).Stream(ctx)
	if err != nil {
		return fmt.Errorf("log of %s/%s %s: %w", ns, pod, container, err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("log of %s/%s %s: %w", ns, pod, container, err)
	}
	return f.Close()
}

// Destroy deletes the namespaces CreateNamespace created (foreground propagation; one already
// gone is fine) and nothing else; with DeleteTimeout > 0 it waits until they are gone. The
// temporary kubeconfig directory is removed. The cluster itself is never touched.
func (p *Provider) Destroy(ctx context.Context) error {
	var errs []error
	if p.cs != nil {
		fg := metav1.DeletePropagationForeground
		var deleted []string
		for _, ns := range p.Created() {
			err := p.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{PropagationPolicy: &fg})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete namespace %s: %w", ns, err))
				continue
			}
			deleted = append(deleted, ns)
		}
		if p.opts.DeleteTimeout > 0 && len(deleted) > 0 {
			errs = append(errs, p.waitGone(ctx, deleted))
		}
		remaining := p.created[:0]
		for _, ns := range p.created {
			if !slices.Contains(deleted, ns) {
				remaining = append(remaining, ns)
			}
		}
		p.created = remaining
	}
	if p.removeDir && p.kubeconfig != "" {
		errs = append(errs, os.RemoveAll(filepath.Dir(p.kubeconfig)))
		p.kubeconfig, p.removeDir = "", false
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("existing: destroy: %w", err)
	}
	return nil
}

func (p *Provider) waitGone(ctx context.Context, names []string) error {
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, p.opts.DeleteTimeout, true, func(ctx context.Context) (bool, error) {
		left = left[:0]
		for _, ns := range names {
			_, err := p.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err == nil || !apierrors.IsNotFound(err) {
				left = append(left, ns)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("namespaces still terminating after %s: %s: %w", p.opts.DeleteTimeout, strings.Join(left, ", "), err)
	}
	return nil
}
