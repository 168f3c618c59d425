// Command kind-node assembles the kind node image for Kubernetes v1.37.2 without a registry:
// `eppkit tools build kind-node` runs it (internal/toolcache) once the binaries it takes are
// built, and docs/tools.md ("kind-node") says what goes in and why. It does what kind's own
// `kind build node-image` does, minus the pulls that build cannot do offline:
//
//  1. a Debian rootfs by debootstrap (cached as a tarball per suite and package list) with
//     kind's base files from the pinned sigs.k8s.io/kind module (images/base/files) and the
//     clean-up of kind's images/base/Dockerfile;
//  2. the node binaries: containerd, ctr, containerd-shim-runc-v2, runc, crictl, kubelet,
//     kubeadm, kubectl, Debian's CNI plugins, and containerd's cri-base.json from `ctr oci spec`;
//  3. one image per control-plane component, named as `kubeadm config images list` asks
//     (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, etcd, coredns, pause),
//     written with go-containerregistry and imported into the node's containerd store by a
//     containerd run on this host against the node's /var/lib/containerd;
//  4. a check that every component is present (an absent one fails here, naming it);
//  5. the node image itself, written with go-containerregistry (entrypoint, env, stop signal as
//     kind's base image) and loaded into the engine with `<engine> load`.
//
// It prints the stamp (JSON, Stamp) on stdout.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Options are the assembler's inputs (flags).
type Options struct {
	// Bins maps a component name (kubelet, containerd, ...) to its built binary.
	Bins map[string]string
	// KindDir is the sigs.k8s.io/kind module directory (its images/base/files are read).
	KindDir string
	// PauseSource is pause.c of the Kubernetes module (build/pause/linux/pause.c).
	PauseSource string
	// KubernetesVersion is the version kubeadm is asked for images of ("v1.37.2").
	KubernetesVersion string
	// Cache holds the rootfs tarballs and the work directory.
	Cache string
	// Tag is the node image's local name.
	Tag string
	// Engine is the container engine CLI that loads the image.
	Engine string
	// Suite is the Debian suite debootstrap installs.
	Suite string
	// Mirror is the Debian mirror ("" = the first deb URI of this host's apt sources).
	Mirror string
	// RestrictOOMScoreAdj sets containerd's restrict_oom_score_adj (a host without
	// CAP_SYS_RESOURCE: runc cannot lower oom_score_adj there).
	RestrictOOMScoreAdj bool
	// Labels are added to the node image's config.
	Labels map[string]string
}

// Stamp is what the assembler printed for the image it loaded; internal/toolcache stores it.
type Stamp struct {
	Tag     string   `json:"tag"`
	ImageID string   `json:"imageID"`
	Images  []string `json:"images"`
	// KubeadmPatches are kind kubeadmConfigPatches a cluster of this image needs: where the
	// image holds a component at another version than kubeadm's default (etcd), the patch names
	// the one it holds instead of mislabelling it.
	KubeadmPatches []string          `json:"kubeadmPatches,omitempty"`
	Labels         map[string]string `json:"labels"`
	Built          time.Time         `json:"built"`
}

type kv map[string]string

func (m kv) String() string { return fmt.Sprint(map[string]string(m)) }
func (m kv) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("%q: want NAME=VALUE", s)
	}
	m[k] = v
	return nil
}

func main() {
	o := Options{Bins: map[string]string{}, Labels: map[string]string{}}
	flag.Var(kv(o.Bins), "bin", "NAME=PATH of a component binary (repeatable)")
	flag.Var(kv(o.Labels), "label", "KEY=VALUE label of the node image (repeatable)")
	flag.StringVar(&o.KindDir, "kind-dir", "", "the sigs.k8s.io/kind module directory")
	flag.StringVar(&o.PauseSource, "pause-c", "", "the Kubernetes module's build/pause/linux/pause.c")
	flag.StringVar(&o.KubernetesVersion, "kubernetes-version", "", "Kubernetes version, e.g. v1.37.2")
	flag.StringVar(&o.Cache, "cache", "", "cache directory (rootfs tarballs, work tree)")
	flag.StringVar(&o.Tag, "tag", "", "the node image's local name")
	flag.StringVar(&o.Engine, "engine", "docker", "container engine CLI (docker, podman or nerdctl)")
	flag.StringVar(&o.Suite, "suite", "bookworm", "Debian suite of the rootfs")
	flag.StringVar(&o.Mirror, "mirror", "", "Debian mirror (default: this host's apt sources)")
	flag.BoolVar(&o.RestrictOOMScoreAdj, "restrict-oom-score-adj", false, "set containerd's restrict_oom_score_adj")
	rootfsOnly := flag.Bool("rootfs-only", false, "only make (or find) the cached Debian rootfs tarball")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *rootfsOnly {
		p, err := cachedRootfs(ctx, o)
		if err != nil {
			log.Fatalf("kind-node: %v", err)
		}
		fmt.Println(p)
		return
	}
	st, err := Assemble(ctx, o)
	if err != nil {
		log.Fatalf("kind-node: %v", err)
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	fmt.Println(string(b))
}

// Assemble builds and loads the node image; see the package comment for the steps.
func Assemble(ctx context.Context, o Options) (*Stamp, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	work := filepath.Join(o.Cache, "work")
	_ = os.RemoveAll(work)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "rootfs")

	logf("kubeadm %s: the images it asks for", o.KubernetesVersion)
	want, err := kubeadmImages(ctx, o.Bins["kubeadm"], o.KubernetesVersion)
	if err != nil {
		return nil, err
	}
	etcdOut, err := run(ctx, "", o.Bins["etcd"], "--version")
	if err != nil {
		return nil, fmt.Errorf("missing component: etcd: %w", err)
	}
	var patches []string
	if want, patches, err = EtcdImage(want, etcdOut); err != nil {
		return nil, err
	}
	logf("rootfs: Debian %s", o.Suite)
	if err := makeRootfs(ctx, o, root); err != nil {
		return nil, fmt.Errorf("rootfs: %w", err)
	}
	logf("node files: kind base files, binaries, containerd config")
	if err := installNode(ctx, o, root, want); err != nil {
		return nil, fmt.Errorf("node files: %w", err)
	}
	logf("control-plane images: %s", strings.Join(want.all(), ", "))
	tars, err := writeComponentImages(ctx, o, root, filepath.Join(work, "images"), want)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	if err := importImages(ctx, o.Bins["containerd"], o.Bins["ctr"], root, filepath.Join(work, "containerd"), tars); err != nil {
		return nil, fmt.Errorf("import images into the node's containerd: %w", err)
	}
	logf("checking the components")
	if err := CheckNode(ctx, root, want, o.Bins["ctr"], filepath.Join(work, "containerd")); err != nil {
		return nil, err
	}
	logf("node image %s: writing and loading into %s", o.Tag, o.Engine)
	id, err := writeNodeImage(ctx, o, root, filepath.Join(work, "layers"))
	if err != nil {
		return nil, fmt.Errorf("node image: %w", err)
	}
	return &Stamp{Tag: o.Tag, ImageID: id, Images: want.all(), KubeadmPatches: patches, Labels: o.Labels, Built: time.Now().UTC()}, nil
}

func (o *Options) validate() error {
	var missing []string
	for _, n := range requiredBins {
		p := o.Bins[n]
		if p == "" {
			missing = append(missing, n+" (no -bin "+n+"=PATH)")
			continue
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() {
			missing = append(missing, n+" ("+p+" not found)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing component(s): %s", strings.Join(missing, "; "))
	}
	for name, v := range map[string]string{"-kind-dir": o.KindDir, "-pause-c": o.PauseSource, "-kubernetes-version": o.KubernetesVersion, "-cache": o.Cache, "-tag": o.Tag} {
		if v == "" {
			return errors.New(name + " is required")
		}
	}
	if _, err := os.Stat(filepath.Join(o.KindDir, "images", "base", "files")); err != nil {
		return fmt.Errorf("-kind-dir %s: no images/base/files: %w", o.KindDir, err)
	}
	if _, err := os.Stat(o.PauseSource); err != nil {
		return fmt.Errorf("missing component: pause (-pause-c): %w", err)
	}
	return nil
}

// requiredBins are the -bin components every node image needs.
var requiredBins = []string{
	"kubelet", "kubeadm", "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
	"kube-proxy", "etcd", "coredns", "containerd", "ctr", "containerd-shim-runc-v2", "runc", "crictl",
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "kind-node: "+format+"\n", a...)
}
