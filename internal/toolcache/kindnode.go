package toolcache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/eppkit/eppkit/internal/hostinfo"
)

// The kind node image tool (tools/kind-node-v1.37.2): the node image for Kubernetes v1.37.2,
// assembled offline from the pinned modules of that tool module and of tools/k8s-v1.37.2.
const (
	// KindNodeTool is its Tools key.
	KindNodeTool = "kind-node"
	// KindNodeImageArtifact is the artifact whose file is the image's stamp (NodeImageStamp).
	KindNodeImageArtifact = "image"
	// KindNodeImageTag is the local name the image is loaded under.
	KindNodeImageTag = "eppkit.local/kind-node:v1.37.2"
	// kindNodeK8sVersion is the Kubernetes version of the node (that of the k8s tool).
	kindNodeK8sVersion = "v1.37.2"
)

// kindNodeK8sArtifacts are the k8s tool's binaries the node image holds.
var kindNodeK8sArtifacts = []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kubelet", "kubeadm", "kubectl", "kube-proxy"}

// NodeImageStamp is what `tools build kind-node` records for the image it loaded.
type NodeImageStamp struct {
	// Tag is the image's local name (KindNodeImageTag) and ImageID the engine's ID for it.
	Tag     string `json:"tag"`
	ImageID string `json:"imageID"`
	// Engine is the container engine it was loaded into.
	Engine string `json:"engine"`
	// Images are the control-plane images in the node's containerd store.
	Images []string `json:"images"`
	// KubeadmPatches are the kind kubeadmConfigPatches a cluster of this image needs (the
	// etcd it holds when that is not kubeadm's default version); the kind provider adds them.
	KubeadmPatches []string `json:"kubeadmPatches,omitempty"`
	// RestrictOOMScoreAdj says containerd's restrict_oom_score_adj was set (a host without
	// CAP_SYS_RESOURCE).
	RestrictOOMScoreAdj bool `json:"restrictOOMScoreAdj"`
	// Labels are the image's labels (component versions).
	Labels map[string]string `json:"labels"`
	Built  time.Time         `json:"built"`
}

// ReadNodeImageStamp reads the kind node image's stamp; the error wraps ErrNotBuilt when there
// is none.
func ReadNodeImageStamp() (*NodeImageStamp, error) {
	p, err := Path(KindNodeTool, KindNodeImageArtifact)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var st NodeImageStamp
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("kind node image stamp %s: %w", p, err)
	}
	return &st, nil
}

// NodeImageLoaded reports whether the engine still holds the stamp's image under its tag (an
// engine whose storage was wiped has lost it even though the stamp remains).
func NodeImageLoaded(ctx context.Context, st *NodeImageStamp, engine string) bool {
	if st == nil || st.ImageID == "" {
		return false
	}
	out, err := exec.CommandContext(ctx, engine, "image", "inspect", "--format", "{{.Id}}", st.Tag).Output()
	return err == nil && strings.TrimSpace(string(out)) == st.ImageID
}

// hostPrereqs are the host programs the node image build runs, each with the Debian package
// that has it.
var hostPrereqs = [][2]string{
	{"debootstrap", "debootstrap"}, {"gcc", "gcc"}, {"tar", "tar"}, {"chroot", "coreutils"}, {"pkg-config", "pkg-config"},
}

// checkKindNodeHost fails naming every missing prerequisite of the node image build.
func checkKindNodeHost(engine string) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (debootstrap and the rootfs's file owners need it)")
	}
	for _, p := range hostPrereqs {
		if _, err := exec.LookPath(p[0]); err != nil {
			missing = append(missing, fmt.Sprintf("%s (apt-get install %s)", p[0], p[1]))
		}
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libc.a"); err != nil {
		missing = append(missing, "static libc for pause (apt-get install libc6-dev)")
	}
	if out, err := exec.Command("pkg-config", "--exists", "libseccomp").CombinedOutput(); err != nil {
		missing = append(missing, fmt.Sprintf("libseccomp headers for runc's seccomp support (apt-get install libseccomp-dev) %s", strings.TrimSpace(string(out))))
	}
	if out, err := exec.Command(engine, "info").CombinedOutput(); err != nil {
		missing = append(missing, fmt.Sprintf("a container engine to load the image into (`%s info`: %v %s; run hack/container-engine.sh)", engine, err, firstLine(string(out))))
	}
	if len(missing) > 0 {
		return fmt.Errorf("kind node image: missing on this host: %s", strings.Join(missing, "; "))
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// buildKindNodeImage builds the k8s tool's node binaries and this tool's binaries (both
// skipped when cached), then runs the assembler (the tool module's main package) and writes
// its stamp to dst. A stamp whose image the engine still holds, built for this host's
// capabilities, is kept unless opts.Force.
func buildKindNodeImage(ctx context.Context, t Tool, opts BuildOptions, dst string, logw io.Writer) (skipped bool, err error) {
	engine := opts.Engine
	if engine == "" {
		engine = "docker"
	}
	lacksSysResource, err := hostinfo.LacksCap(hostinfo.CapSysResource)
	if err != nil {
		return false, fmt.Errorf("read the capability bounding set: %w", err)
	}
	if !opts.Force {
		if b, err := os.ReadFile(dst); err == nil {
			var st NodeImageStamp
			if json.Unmarshal(b, &st) == nil && st.RestrictOOMScoreAdj == lacksSysResource && NodeImageLoaded(ctx, &st, engine) {
				return true, nil
			}
			fmt.Fprintf(logw, "kind node image: the stamp %s does not match %s's images or this host; rebuilding\n", dst, engine)
		}
	}
	if err := checkKindNodeHost(engine); err != nil {
		return false, err
	}
	k8sRes, err := Build(ctx, "k8s", BuildOptions{RepoRoot: opts.RepoRoot, Only: kindNodeK8sArtifacts, GoCommand: opts.GoCommand, Parallelism: opts.Parallelism, Log: opts.Log})
	if err != nil {
		return false, fmt.Errorf("the node's Kubernetes binaries: %w", err)
	}
	var own []string
	for _, a := range t.Artifacts {
		if a.Kind == KindBinary {
			own = append(own, a.Name)
		}
	}
	ownRes, err := Build(ctx, KindNodeTool, BuildOptions{RepoRoot: opts.RepoRoot, Only: own, GoCommand: opts.GoCommand, Parallelism: opts.Parallelism, Log: opts.Log})
	if err != nil {
		return false, err
	}
	goCmd := opts.GoCommand
	if goCmd == "" {
		goCmd = "go"
	}
	modDir := filepath.Join(opts.RepoRoot, t.Dir())
	kindDir, err := moduleDir(ctx, goCmd, modDir, "sigs.k8s.io/kind")
	if err != nil {
		return false, err
	}
	k8sDir, err := moduleDir(ctx, goCmd, filepath.Join(opts.RepoRoot, Tools["k8s"].Dir()), "k8s.io/kubernetes")
	if err != nil {
		return false, err
	}
	dir := filepath.Dir(dst)
	asm := filepath.Join(dir, ".assembler")
	fmt.Fprintf(logw, "building the kind node assembler (%s) ...\n", t.Dir())
	if err := buildBinary(ctx, goCmd, modDir, Artifact{Name: ".assembler", Package: "."}, asm, opts.Parallelism, logw); err != nil {
		return false, fmt.Errorf("assembler: %w", err)
	}
	args := []string{"-kind-dir", kindDir, "-pause-c", filepath.Join(k8sDir, "build/pause/linux/pause.c"),
		"-kubernetes-version", kindNodeK8sVersion, "-cache", dir, "-tag", KindNodeImageTag, "-engine", engine,
		fmt.Sprintf("-restrict-oom-score-adj=%t", lacksSysResource)}
	labels := map[string]string{"io.eppkit.kind-node.kubernetes": kindNodeK8sVersion}
	for _, r := range append(k8sRes, ownRes...) {
		args = append(args, "-bin", r.Artifact+"="+r.Path)
	}
	for _, m := range []string{"github.com/containerd/containerd/v2", "github.com/opencontainers/runc", "sigs.k8s.io/cri-tools", "github.com/coredns/coredns", "sigs.k8s.io/kind"} {
		v, err := moduleVersion(ctx, goCmd, modDir, m)
		if err != nil {
			return false, err
		}
		labels["io.eppkit.kind-node."+filepath.Base(strings.TrimSuffix(m, "/v2"))] = v
	}
	labels["io.eppkit.kind-node.restrict-oom-score-adj"] = fmt.Sprint(lacksSysResource)
	for k, v := range labels {
		args = append(args, "-label", k+"="+v)
	}
	cmd := exec.CommandContext(ctx, asm, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, logw
	if err := cmd.Run(); err != nil {
		return false, fmt.Errorf("assemble the node image: %w", err)
	}
	var asmStamp struct {
		Tag, ImageID   string
		Images         []string
		KubeadmPatches []string
	}
	if err := json.Unmarshal(out.Bytes(), &asmStamp); err != nil {
		return false, fmt.Errorf("assembler output: %w: %s", err, out.String())
	}
	st := NodeImageStamp{Tag: asmStamp.Tag, ImageID: asmStamp.ImageID, Engine: engine, Images: asmStamp.Images, KubeadmPatches: asmStamp.KubeadmPatches,
		RestrictOOMScoreAdj: lacksSysResource, Labels: labels, Built: time.Now().UTC()}
	b, _ := json.MarshalIndent(st, "", "  ")
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return false, err
	}
	return false, os.Rename(tmp, dst)
}

// moduleDir downloads mod at the version modDir's go.mod pins and returns its directory in the
// module cache.
func moduleDir(ctx context.Context, goCmd, modDir, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, goCmd, "mod", "download", "-json", mod)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s (in %s): %w", mod, modDir, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s", mod, err, info.Error)
	}
	return info.Dir, nil
}

// moduleVersion is the version of mod in modDir's module graph.
func moduleVersion(ctx context.Context, goCmd, modDir, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, goCmd, "list", "-m", "-f", "{{.Version}}", mod)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go list -m %s (in %s): %w: %s", mod, modDir, err, ee.Stderr)
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}
