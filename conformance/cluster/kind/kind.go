// Package kind is the "kind" cluster provider: a kind cluster (Kubernetes in containers) driven
// in process through sigs.k8s.io/kind/pkg/cluster v0.33.0, so no kind CLI is needed, only a
// container engine (Docker, Podman or nerdctl).
//
//   - Create reuses a running cluster of the same name (its kubeconfig is exported again), or
//     creates one from manifests/kind/cluster.yaml (typed v1alpha4 config) with the node image
//     pinned by digest — or, when that image can be neither found nor pulled, the offline node
//     image of `eppkit tools build kind-node` (ResolveNodeImage says which and why). A failed
//     create exports the cluster's logs, deletes it, and is retried once (logged).
//   - Host adaptation (HostPatches): on a cgroup v1 host kubelet v1.37 refuses to start unless
//     its KubeletConfiguration says failCgroupV1: false, so Create adds that kubeadm patch with a
//     warning; the offline image's own patches (its etcd version) are added when it is used.
//   - LoadImage saves a local image with the engine (`docker save -o`) and imports the archive
//     into containerd on every node (`ctr --namespace=k8s.io images import --digests
//     --snapshotter=S -`), without --all-platforms (see LoadImage).
//   - ExportLogs is kind's CollectLogs (node journals, kubelet and containerd logs, /var/log with
//     the pods' logs); Destroy deletes the cluster and its kubeconfig entry.
//
// The kind library and the host commands sit behind two small interfaces (Cluster, Runner) so
// the logic is unit-tested without an engine.
package kind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/yaml"

	"github.com/eppkit/eppkit/conformance/cluster"
	"github.com/eppkit/eppkit/internal/hostinfo"
	"github.com/eppkit/eppkit/internal/toolcache"
	"github.com/eppkit/eppkit/manifests"
)

// DefaultName is the cluster name when Options.Name is "".
const DefaultName = "eppkit"

// OfflineNodeImage is the Options.NodeImage (and EPPKIT_KIND_NODE_IMAGE) value that selects the
// node image `eppkit tools build kind-node` built (toolcache.KindNodeImageTag).
const OfflineNodeImage = "offline"

// NodeImageEnv is the environment variable the e2e suite and `eppkit conformance --target
// cluster --provider kind` read Options.NodeImage from.
const NodeImageEnv = "EPPKIT_KIND_NODE_IMAGE"

// CgroupV1Patch is the kubeadm patch Create adds on a cgroup v1 host: kubelet v1.37 refuses
// cgroup v1 unless failCgroupV1 is false (k8s.io/kubernetes@v1.37.2
// pkg/kubelet/apis/config/v1beta1/defaults.go defaults it to true; validation_linux.go refuses).
const CgroupV1Patch = "kind: KubeletConfiguration\nfailCgroupV1: false\n"

// DefaultNodeImage is kind v0.33.0's default node image, Kubernetes v1.37.0 pinned by digest
// (sigs.k8s.io/kind@v0.33.0 pkg/apis/config/defaults/image.go); manifests/kind/cluster.yaml names
// the same image and a unit test keeps the three equal.
const DefaultNodeImage = "kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"

// ErrNoContainerEngine is returned (wrapped) by Create when neither Docker, Podman nor nerdctl is
// installed, or the one found does not answer `<engine> info` (a CLI without its daemon);
// callers may tell it apart (errors.Is).
var ErrNoContainerEngine = errors.New("kind: no container engine found (docker, podman or nerdctl): install one (on Debian, `bash hack/container-engine.sh` installs and starts docker.io; docs/kubernetes.md), or use --provider existing with a kubeconfig")

// CreateParams are what Create passes to Cluster.Create besides the config.
type CreateParams struct {
	// Kubeconfig is the file the cluster's kubeconfig is written to.
	Kubeconfig string
	// WaitForReady is how long kind waits for the control plane to be Ready.
	WaitForReady time.Duration
	// Retain keeps the node containers when the create fails (so their logs can be exported).
	Retain bool
}

// Cluster is the part of sigs.k8s.io/kind/pkg/cluster.Provider this provider uses, with the
// create options made explicit so tests can inspect them. NewKindCluster adapts the real one.
type Cluster interface {
	// List returns the names of the existing kind clusters.
	List() ([]string, error)
	// Create creates the cluster name from cfg.
	Create(name string, cfg *v1alpha4.Cluster, p CreateParams) error
	// Delete deletes the cluster and removes its entry from kubeconfig.
	Delete(name, kubeconfig string) error
	// ExportKubeConfig writes the cluster's (external) kubeconfig to path.
	ExportKubeConfig(name, path string) error
	// Nodes lists the cluster's node containers (without an external load balancer).
	Nodes(name string) ([]nodes.Node, error)
	// CollectLogs writes the cluster's logs under dir.
	CollectLogs(name, dir string) error
}

// Runner runs a command on the host (the container engine's `save`).
type Runner interface {
	// Run runs name with args; the error includes the command's combined output.
	Run(ctx context.Context, name string, args ...string) error
}

// Options configure New. Zero values take the defaults noted per field.
type Options struct {
	// Name is the kind cluster name (default DefaultName). A running cluster of that name is
	// reused.
	Name string
	// Config is a kind.x-k8s.io/v1alpha4 Cluster in YAML (default manifests/kind/cluster.yaml).
	// Its name is replaced by Name; nodes without an image get NodeImage.
	Config []byte
	// NodeImage, when set, replaces the image of every node (default: each node's own image,
	// else DefaultNodeImage). Pin it by digest. OfflineNodeImage ("offline") selects the image
	// of `eppkit tools build kind-node`.
	NodeImage string
	// Engine is the container engine binary for `save` and for kind: "docker", "podman" or
	// "nerdctl" ("" = kind's detection: docker, then nerdctl, then podman).
	Engine string
	// Dir holds the kubeconfig ("" = <tools cache root>/kind-<Name>, so a later run reusing
	// the cluster finds the same path).
	Dir string
	// WaitForReady bounds kind's wait for the control plane and the wait for a Ready node
	// (default 5m).
	WaitForReady time.Duration
	// KeepOnFailure keeps the node containers of a failed create instead of deleting them.
	KeepOnFailure bool
	// FailureLogDir receives the logs of a failed create ("" = Dir/create-failure-logs).
	FailureLogDir string
	// Log receives kind's progress lines and the provider's warnings (nil = discarded).
	Log io.Writer
	// RecreateUnready deletes and recreates a cluster of this name that kind lists but that has
	// no Ready node within ReuseWait (a stale cluster of an earlier, interrupted run). Only for
	// names this run owns; by default such a cluster is an error and left alone.
	RecreateUnready bool
	// ReuseWait bounds the Ready-node wait of a reused cluster when RecreateUnready (default 1m).
	ReuseWait time.Duration
	// CreateAttempts is how many times a failed create is tried (default 2: one retry, logged;
	// 1 with KeepOnFailure).
	CreateAttempts int

	// Cluster, Runner and NodesReady replace the kind library, the host command runner and the
	// Ready-node wait (tests). nil = the real ones.
	Cluster    Cluster
	Runner     Runner
	NodesReady func(ctx context.Context, kubeconfig string, timeout time.Duration) error
	// Cgroups and OfflineImage replace the host's cgroup mode and the offline node image's stamp
	// (tests). nil = hostinfo.Cgroups and toolcache.ReadNodeImageStamp.
	Cgroups      func() (hostinfo.CgroupMode, error)
	OfflineImage func() (*toolcache.NodeImageStamp, error)
}

// Provider is the kind cluster provider (cluster.Provider).
type Provider struct {
	opts     Options
	noEngine bool
	reused   bool
	// nodeImage and nodeImageWhy are what the last Create chose and why.
	nodeImage, nodeImageWhy string
}

var _ cluster.Provider = (*Provider)(nil)

// New validates opts and returns the provider; nothing is started. It does not need a
// container engine (Create reports ErrNoContainerEngine).
func New(opts Options) (*Provider, error) {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if len(opts.Config) == 0 {
		opts.Config = manifests.KindConfig()
	}
	if opts.WaitForReady <= 0 {
		opts.WaitForReady = 5 * time.Minute
	}
	p := &Provider{}
	switch opts.Engine {
	case "", "docker", "podman", "nerdctl":
	default:
		return nil, fmt.Errorf("kind: Engine %q: want docker, podman or nerdctl", opts.Engine)
	}
	if opts.Dir == "" {
		root, err := toolcache.CacheRoot()
		if err != nil {
			return nil, fmt.Errorf("kind: Dir: %w", err)
		}
		opts.Dir = filepath.Join(root, "kind-"+opts.Name)
	}
	if abs, err := filepath.Abs(opts.Dir); err == nil {
		opts.Dir = abs
	}
	if opts.FailureLogDir == "" {
		opts.FailureLogDir = filepath.Join(opts.Dir, "create-failure-logs")
	}
	if opts.Cluster == nil {
		c, engine, ok := NewKindCluster(opts.Engine, opts.Log)
		opts.Cluster, p.noEngine = c, !ok
		if opts.Engine == "" {
			opts.Engine = engine
		}
	}
	if opts.Engine == "" {
		opts.Engine = "docker"
	}
	if opts.Runner == nil {
		opts.Runner = execRunner{}
	}
	if opts.NodesReady == nil {
		opts.NodesReady = waitReadyNode
	}
	if opts.Cgroups == nil {
		opts.Cgroups = hostinfo.Cgroups
	}
	if opts.OfflineImage == nil {
		opts.OfflineImage = toolcache.ReadNodeImageStamp
	}
	if opts.ReuseWait <= 0 {
		opts.ReuseWait = time.Minute
	}
	if opts.CreateAttempts <= 0 {
		opts.CreateAttempts = 2
		if opts.KeepOnFailure {
			opts.CreateAttempts = 1
		}
	}
	p.opts = opts
	// Fail now, not in Create, on a config that cannot be used.
	if _, err := p.ClusterConfig(); err != nil {
		return nil, err
	}
	return p, nil
}

// Name is "kind".
func (p *Provider) Name() string { return "kind" }

// ClusterName is the kind cluster's name.
func (p *Provider) ClusterName() string { return p.opts.Name }

// KubeconfigPath is Dir/kubeconfig.
func (p *Provider) KubeconfigPath() string { return filepath.Join(p.opts.Dir, "kubeconfig") }

// Reused reports whether the last Create found the cluster running instead of creating it.
func (p *Provider) Reused() bool { return p.reused }

// NodeImage is the node image the last Create created the cluster from and why it was chosen
// ("" for a reused cluster).
func (p *Provider) NodeImage() (image, why string) { return p.nodeImage, p.nodeImageWhy }

// HostPatches are the kubeadm config patches this host needs: CgroupV1Patch on cgroup v1. The
// warning says why ("" when none).
func (p *Provider) HostPatches() (patches []string, warning string, err error) {
	mode, err := p.opts.Cgroups()
	if err != nil {
		return nil, "", fmt.Errorf("kind: cgroup mode: %w", err)
	}
	if mode == hostinfo.CgroupV1 {
		return []string{CgroupV1Patch}, "this host mounts cgroup v1, which kubelet v1.37 refuses by default; adding the kubeadm patch failCgroupV1: false (cgroup v1 support is deprecated in Kubernetes and kind: docs/kubernetes.md)", nil
	}
	return nil, "", nil
}

func (p *Provider) warnf(format string, a ...any) {
	if p.opts.Log != nil {
		fmt.Fprintf(p.opts.Log, "kind: WARNING: "+format+"\n", a...)
	}
}

func (p *Provider) infof(format string, a ...any) {
	if p.opts.Log != nil {
		fmt.Fprintf(p.opts.Log, "kind: "+format+"\n", a...)
	}
}

// ResolveNodeImage chooses the image of a new cluster's nodes when the config leaves it at
// DefaultNodeImage and Options.NodeImage does not choose: the pinned image when the engine has
// it or can pull it, else the offline image of `eppkit tools build kind-node` when that is
// loaded. It returns the image, why, and the kubeadm patches that image needs. Options.NodeImage
// "offline" asks for the offline image outright.
func (p *Provider) ResolveNodeImage(ctx context.Context) (image, why string, patches []string, err error) {
	offline := func(reason string) (string, string, []string, error) {
		st, err := p.opts.OfflineImage()
		if err != nil {
			return "", "", nil, fmt.Errorf("kind: %s, and the offline node image is not built (%v): run `eppkit tools build kind-node` (docs/kubernetes.md)", reason, err)
		}
		if ierr := p.opts.Runner.Run(ctx, p.opts.Engine, "image", "inspect", st.Tag); ierr != nil {
			return "", "", nil, fmt.Errorf("kind: %s, and %s does not hold the offline node image %s (%v): run `eppkit tools build kind-node`", reason, p.opts.Engine, st.Tag, ierr)
		}
		return st.Tag, reason + "; using the offline node image " + st.Tag + " (eppkit tools build kind-node)", st.KubeadmPatches, nil
	}
	switch p.opts.NodeImage {
	case OfflineNodeImage:
		return offline("the offline node image was asked for (" + NodeImageEnv + "=" + OfflineNodeImage + " or --node-image " + OfflineNodeImage + ")")
	case "":
	default:
		why := "asked for (--node-image / " + NodeImageEnv + ")"
		if st, err := p.opts.OfflineImage(); err == nil && st.Tag == p.opts.NodeImage {
			return p.opts.NodeImage, why, st.KubeadmPatches, nil
		}
		return p.opts.NodeImage, why, nil, nil
	}
	cfg, err := p.ClusterConfig()
	if err != nil {
		return "", "", nil, err
	}
	img := cfg.Nodes[0].Image
	if img != DefaultNodeImage {
		return img, "named by the cluster config", nil, nil
	}
	if err := p.opts.Runner.Run(ctx, p.opts.Engine, "image", "inspect", img); err == nil {
		return img, "the pinned kindest/node image, present in " + p.opts.Engine, nil, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	perr := p.opts.Runner.Run(pctx, p.opts.Engine, "pull", img)
	cancel()
	if perr == nil {
		return img, "the pinned kindest/node image, pulled", nil, nil
	}
	return offline(fmt.Sprintf("the pinned node image %s cannot be had (%s pull: %s)", img, p.opts.Engine, firstLine(perr.Error())))
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s)-i < 300 {
		// the engine's own message is at the end of execRunner's error
		return s[i+2:]
	}
	return s
}

// ClusterConfig is the typed config Create uses: Options.Config parsed strictly as a
// kind.x-k8s.io/v1alpha4 Cluster, with the cluster's name and every node's image filled in. A
// config without nodes gets one control-plane node. Errors name the field.
func (p *Provider) ClusterConfig() (*v1alpha4.Cluster, error) {
	var c v1alpha4.Cluster
	if err := yaml.UnmarshalStrict(p.opts.Config, &c); err != nil {
		return nil, fmt.Errorf("kind: cluster config: %w", err)
	}
	if c.Kind != "Cluster" || c.APIVersion != "kind.x-k8s.io/v1alpha4" {
		return nil, fmt.Errorf("kind: cluster config: kind %q apiVersion %q, want Cluster kind.x-k8s.io/v1alpha4", c.Kind, c.APIVersion)
	}
	c.Name = p.opts.Name
	if len(c.Nodes) == 0 {
		c.Nodes = []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}}
	}
	for i := range c.Nodes {
		switch {
		case p.opts.NodeImage != "":
			c.Nodes[i].Image = p.opts.NodeImage
		case c.Nodes[i].Image == "":
			c.Nodes[i].Image = DefaultNodeImage
		}
		if c.Nodes[i].Role != v1alpha4.ControlPlaneRole && c.Nodes[i].Role != v1alpha4.WorkerRole {
			return nil, fmt.Errorf("kind: cluster config: nodes[%d].role %q, want control-plane or worker", i, c.Nodes[i].Role)
		}
	}
	return &c, nil
}

// Create reuses the cluster Name when kind lists it (exporting its kubeconfig again and waiting
// for a Ready node), else creates it from ClusterConfig and waits the same way. A failed create
// leaves its logs in FailureLogDir and deletes the cluster unless KeepOnFailure. A reused
// cluster that has no Ready node is an error, not a reason to recreate it.
func (p *Provider) Create(ctx context.Context) error {
	if p.noEngine {
		return ErrNoContainerEngine
	}
	if err := os.MkdirAll(p.opts.Dir, 0o755); err != nil {
		return fmt.Errorf("kind: Dir: %w", err)
	}
	names, err := p.opts.Cluster.List()
	if err != nil {
		// An engine CLI without its daemon (docker installed, no dockerd) is no engine either.
		if ierr := p.opts.Runner.Run(ctx, p.opts.Engine, "info"); ierr != nil {
			return fmt.Errorf("%w: %s is installed but does not answer (`%s info`: %v)", ErrNoContainerEngine, p.opts.Engine, p.opts.Engine, ierr)
		}
		return fmt.Errorf("kind: list clusters (%s): %w", p.opts.Engine, err)
	}
	p.reused = slices.Contains(names, p.opts.Name)
	p.nodeImage, p.nodeImageWhy = "", ""
	if p.reused {
		if err := p.opts.Cluster.ExportKubeConfig(p.opts.Name, p.KubeconfigPath()); err != nil {
			if !p.opts.RecreateUnready {
				return fmt.Errorf("kind: reuse cluster %s: export kubeconfig: %w", p.opts.Name, err)
			}
			p.warnf("cluster %s is listed but its kubeconfig cannot be exported (%v): deleting the stale cluster and creating it again", p.opts.Name, err)
			if derr := p.opts.Cluster.Delete(p.opts.Name, p.KubeconfigPath()); derr != nil {
				return fmt.Errorf("kind: delete stale cluster %s: %w", p.opts.Name, derr)
			}
			p.reused = false
		} else {
			wait := p.opts.WaitForReady
			if p.opts.RecreateUnready {
				wait = p.opts.ReuseWait
			}
			err := p.opts.NodesReady(ctx, p.KubeconfigPath(), wait)
			if err == nil {
				return nil
			}
			if !p.opts.RecreateUnready {
				return fmt.Errorf("kind: reuse cluster %s: %w (delete it with `kind delete cluster --name %s` or Destroy)", p.opts.Name, err, p.opts.Name)
			}
			p.warnf("cluster %s is listed but has no Ready node (%v): deleting the stale cluster and creating it again", p.opts.Name, err)
			if derr := p.opts.Cluster.Delete(p.opts.Name, p.KubeconfigPath()); derr != nil {
				return fmt.Errorf("kind: delete stale cluster %s: %w", p.opts.Name, derr)
			}
			p.reused = false
		}
	}
	cfg, err := p.ClusterConfig()
	if err != nil {
		return err
	}
	image, why, imagePatches, err := p.ResolveNodeImage(ctx)
	if err != nil {
		return err
	}
	for i := range cfg.Nodes {
		cfg.Nodes[i].Image = image
	}
	p.nodeImage, p.nodeImageWhy = image, why
	p.infof("node image %s: %s", image, why)
	hostPatches, warning, err := p.HostPatches()
	if err != nil {
		return err
	}
	if warning != "" {
		p.warnf("%s", warning)
	}
	cfg.KubeadmConfigPatches = append(cfg.KubeadmConfigPatches, hostPatches...)
	cfg.KubeadmConfigPatches = append(cfg.KubeadmConfigPatches, imagePatches...)
	for attempt := 1; ; attempt++ {
		err = p.createOnce(ctx, cfg)
		if err == nil || attempt >= p.opts.CreateAttempts || ctx.Err() != nil {
			return err
		}
		p.warnf("attempt %d of %d failed: %v; retrying once", attempt, p.opts.CreateAttempts, err)
	}
}

// createOnce creates the cluster from cfg and waits for a Ready node; on failure it exports the
// logs and, unless KeepOnFailure, deletes the cluster.
func (p *Provider) createOnce(ctx context.Context, cfg *v1alpha4.Cluster) error {
	err := p.opts.Cluster.Create(p.opts.Name, cfg, CreateParams{Kubeconfig: p.KubeconfigPath(), WaitForReady: p.opts.WaitForReady, Retain: true})
	if err == nil {
		err = p.opts.NodesReady(ctx, p.KubeconfigPath(), p.opts.WaitForReady)
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("kind: create cluster %s (node image %s): %w", p.opts.Name, cfg.Nodes[0].Image, err)
	if lerr := p.opts.Cluster.CollectLogs(p.opts.Name, p.opts.FailureLogDir); lerr != nil {
		err = fmt.Errorf("%w; exporting its logs also failed: %v", err, lerr)
	} else {
		err = fmt.Errorf("%w; logs in %s", err, p.opts.FailureLogDir)
	}
	if !p.opts.KeepOnFailure {
		if derr := p.opts.Cluster.Delete(p.opts.Name, p.KubeconfigPath()); derr != nil {
			err = fmt.Errorf("%w; deleting it also failed: %v", err, derr)
		}
	}
	return err
}

// LoadImage copies a local image of the engine into containerd on every node of the cluster:
// `<engine> save -o ARCHIVE IMAGE` once, then on each node `ctr --namespace=k8s.io images import
// --digests --snapshotter=S -` with the archive on stdin (S read from the node's containerd
// config, as kind does), then `crictl inspecti IMAGE` to check the kubelet can see it.
//
// kind's own loader passes --all-platforms, which fails with "content digest ... not found" when
// the engine saved an index listing platforms whose blobs it never had (Docker's containerd image
// store; kubernetes-sigs/kind issues #3795 and #4224). Importing only the node's platform works
// for an image built on the same machine.
func (p *Provider) LoadImage(ctx context.Context, image string) error {
	if image == "" {
		return errors.New("kind: LoadImage: empty image name")
	}
	ns, err := p.opts.Cluster.Nodes(p.opts.Name)
	if err != nil {
		return fmt.Errorf("kind: load %s: list nodes of %s: %w", image, p.opts.Name, err)
	}
	if len(ns) == 0 {
		return fmt.Errorf("kind: load %s: cluster %s has no nodes (Create it first)", image, p.opts.Name)
	}
	tmp, err := os.MkdirTemp("", "eppkit-kind-image-")
	if err != nil {
		return fmt.Errorf("kind: load %s: %w", image, err)
	}
	defer os.RemoveAll(tmp)
	archive := filepath.Join(tmp, "image.tar")
	if err := p.opts.Runner.Run(ctx, p.opts.Engine, "save", "-o", archive, image); err != nil {
		return fmt.Errorf("kind: load %s: %s save: %w (build it first, e.g. `make image`)", image, p.opts.Engine, err)
	}
	for _, n := range ns {
		if err := importImage(ctx, n, archive, image); err != nil {
			return fmt.Errorf("kind: load %s into node %s: %w", image, n.String(), err)
		}
	}
	return nil
}

// LoadImageArchive imports an image archive (`docker save` format, as LoadImage writes) into
// containerd on every node, as LoadImage does after its save.
func (p *Provider) LoadImageArchive(ctx context.Context, archive string) error {
	if _, err := os.Stat(archive); err != nil {
		return fmt.Errorf("kind: load archive: %w", err)
	}
	ns, err := p.opts.Cluster.Nodes(p.opts.Name)
	if err != nil {
		return fmt.Errorf("kind: load %s: list nodes of %s: %w", archive, p.opts.Name, err)
	}
	if len(ns) == 0 {
		return fmt.Errorf("kind: load %s: cluster %s has no nodes (Create it first)", archive, p.opts.Name)
	}
	for _, n := range ns {
		if err := importImage(ctx, n, archive, ""); err != nil {
			return fmt.Errorf("kind: load %s into node %s: %w", archive, n.String(), err)
		}
	}
	return nil
}

// ImportCommand is the command line LoadImage runs on a node whose containerd uses snapshotter.
func ImportCommand(snapshotter string) []string {
	return []string{"ctr", "--namespace=k8s.io", "images", "import", "--digests", "--snapshotter=" + snapshotter, "-"}
}

func importImage(ctx context.Context, n nodes.Node, archive, image string) error {
	var cfg, stderr bytes.Buffer
	if err := n.CommandContext(ctx, "containerd", "config", "dump").SetStdout(&cfg).SetStderr(&stderr).Run(); err != nil {
		return fmt.Errorf("containerd config dump: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	snap, err := Snapshotter(cfg.Bytes())
	if err != nil {
		return err
	}
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := ImportCommand(snap)
	stderr.Reset()
	if err := n.CommandContext(ctx, cmd[0], cmd[1:]...).SetStdin(f).SetStderr(&stderr).Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd, " "), err, strings.TrimSpace(stderr.String()))
	}
	if image == "" {
		return nil
	}
	stderr.Reset()
	if err := n.CommandContext(ctx, "crictl", "inspecti", image).SetStdout(io.Discard).SetStderr(&stderr).Run(); err != nil {
		return fmt.Errorf("imported, but crictl inspecti %s does not find it: %w: %s", image, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Snapshotter reads the CRI image snapshotter from `containerd config dump` output: config
// version 2 keeps it at plugins."io.containerd.grpc.v1.cri".containerd.snapshotter, versions 3
// and 4 (containerd 2.x) at plugins."io.containerd.cri.v1.images".snapshotter (the same paths
// kind v0.33.0 reads in pkg/cluster/nodeutils/util.go).
func Snapshotter(config []byte) (string, error) {
	var c struct {
		Version int64          `toml:"version"`
		Plugins map[string]any `toml:"plugins"`
	}
	if _, err := toml.Decode(string(config), &c); err != nil {
		return "", fmt.Errorf("containerd config: %w", err)
	}
	var path []string
	switch c.Version {
	case 2:
		path = []string{"io.containerd.grpc.v1.cri", "containerd", "snapshotter"}
	case 3, 4:
		path = []string{"io.containerd.cri.v1.images", "snapshotter"}
	case 0:
		return "", errors.New("containerd config: no version")
	default:
		return "", fmt.Errorf("containerd config: version %d not supported (2, 3 or 4)", c.Version)
	}
	var v any = c.Plugins
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			v = nil
			break
		}
		v = m[k]
	}
	s, ok := v.(string)
	if !ok || s == "" {
		return "", fmt.Errorf("containerd config (version %d): no plugins.%s", c.Version, strings.Join(path, "."))
	}
	return s, nil
}

// ExportLogs writes the cluster's logs (kind's CollectLogs) under dir.
func (p *Provider) ExportLogs(_ context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("kind: logs dir: %w", err)
	}
	if err := p.opts.Cluster.CollectLogs(p.opts.Name, dir); err != nil {
		return fmt.Errorf("kind: export logs of %s: %w", p.opts.Name, err)
	}
	return nil
}

// Destroy deletes the cluster when kind lists it and removes the kubeconfig file; a cluster
// that does not exist is not an error.
func (p *Provider) Destroy(_ context.Context) error {
	names, err := p.opts.Cluster.List()
	if err != nil {
		return fmt.Errorf("kind: list clusters: %w", err)
	}
	if slices.Contains(names, p.opts.Name) {
		if err := p.opts.Cluster.Delete(p.opts.Name, p.KubeconfigPath()); err != nil {
			return fmt.Errorf("kind: delete cluster %s: %w", p.opts.Name, err)
		}
	}
	if err := os.Remove(p.KubeconfigPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("kind: remove kubeconfig: %w", err)
	}
	return nil
}

// waitReadyNode is the default NodesReady: client-go against the kubeconfig.
func waitReadyNode(ctx context.Context, kubeconfig string, timeout time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return cluster.WaitForReadyNode(ctx, cs, timeout)
}

// execRunner runs host commands with os/exec.
type execRunner struct{}

func (execRunner) Run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// kindCluster adapts *kindcluster.Provider to Cluster.
type kindCluster struct{ p *kindcluster.Provider }

// NewKindCluster returns the real kind library for engine ("" = kind's detection), the engine
// chosen and whether it answered (kind's IsAvailable checks). With no engine found it still
// returns a Cluster (for docker) so that Destroy and List fail with kind's own error.
func NewKindCluster(engine string, logw io.Writer) (Cluster, string, bool) {
	opts := []kindcluster.ProviderOption{kindcluster.ProviderWithLogger(newLogger(logw))}
	available := true
	switch engine {
	case "docker":
		opts = append(opts, kindcluster.ProviderWithDocker())
		available = lookPath("docker")
	case "podman":
		opts = append(opts, kindcluster.ProviderWithPodman())
		available = lookPath("podman")
	case "nerdctl":
		opts = append(opts, kindcluster.ProviderWithNerdctl(""))
		available = lookPath("nerdctl")
	default:
		o, err := kindcluster.DetectNodeProvider()
		if err != nil {
			opts = append(opts, kindcluster.ProviderWithDocker())
			engine, available = "docker", false
		} else {
			opts = append(opts, o)
			engine = detectedEngine()
		}
	}
	return kindCluster{kindcluster.NewProvider(opts...)}, engine, available
}

func lookPath(bin string) bool {
	_, err := exec.LookPath(bin)
	return err == nil
}

// detectedEngine names the engine kind's DetectNodeProvider picked, in its order.
func detectedEngine() string {
	for _, e := range []string{"docker", "nerdctl", "podman"} {
		if lookPath(e) {
			return e
		}
	}
	return "docker"
}

func (k kindCluster) List() ([]string, error) { return k.p.List() }

func (k kindCluster) Create(name string, cfg *v1alpha4.Cluster, p CreateParams) error {
	return k.p.Create(name,
		kindcluster.CreateWithV1Alpha4Config(cfg),
		kindcluster.CreateWithKubeconfigPath(p.Kubeconfig),
		kindcluster.CreateWithWaitForReady(p.WaitForReady),
		kindcluster.CreateWithRetain(p.Retain),
		kindcluster.CreateWithDisplayUsage(false),
		kindcluster.CreateWithDisplaySalutation(false))
}

func (k kindCluster) Delete(name, kubeconfig string) error { return k.p.Delete(name, kubeconfig) }

func (k kindCluster) ExportKubeConfig(name, path string) error {
	return k.p.ExportKubeConfig(name, path, false)
}

func (k kindCluster) Nodes(name string) ([]nodes.Node, error) { return k.p.ListInternalNodes(name) }

func (k kindCluster) CollectLogs(name, dir string) error { return k.p.CollectLogs(name, dir) }
