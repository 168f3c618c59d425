package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// Packages are what debootstrap installs: kind's images/base/Dockerfile list (systemd,
// conntrack, iptables, nftables, iproute2, ethtool, util-linux, mount, kmod, libseccomp2, pigz,
// fuse-overlayfs, e2fsprogs, bash, ca-certificates, curl, jq, procps) without nfs-common and
// open-iscsi (storage drivers no eppkit test mounts), plus systemd-sysv (/sbin/init), dbus, and
// Debian's containernetworking-plugins (host-local, loopback, ptp, portmap: the CNI plugins kind
// builds itself; the same component, packaged).
var Packages = []string{
	"systemd", "systemd-sysv", "dbus", "conntrack", "iptables", "nftables", "iproute2", "ethtool",
	"util-linux", "mount", "kmod", "libseccomp2", "pigz", "fuse-overlayfs", "e2fsprogs", "bash",
	"ca-certificates", "curl", "jq", "procps", "containernetworking-plugins",
}

// makeRootfs extracts the cached debootstrap tarball of the suite and package list into root,
// running debootstrap first when there is none.
func makeRootfs(ctx context.Context, o Options, root string) error {
	cached, err := cachedRootfs(ctx, o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	_, err = run(ctx, "", "tar", "--numeric-owner", "--xattrs", "--xattrs-include=security.capability", "-C", root, "-xf", cached)
	return err
}

// cachedRootfs returns the debootstrap tarball of the suite and package list in the cache,
// making it first when there is none.
func cachedRootfs(ctx context.Context, o Options) (string, error) {
	h := sha256.Sum256([]byte(o.Suite + "\n" + strings.Join(Packages, ",")))
	cached := filepath.Join(o.Cache, fmt.Sprintf("rootfs-%s-%s.tar", o.Suite, hex.EncodeToString(h[:])[:12]))
	if _, err := os.Stat(cached); err == nil {
		logf("rootfs: reusing %s", cached)
		return cached, nil
	}
	if err := os.MkdirAll(o.Cache, 0o755); err != nil {
		return "", err
	}
	return cached, debootstrap(ctx, o, cached)
}

func debootstrap(ctx context.Context, o Options, out string) error {
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return errors.New("missing component: debootstrap (apt-get install debootstrap)")
	}
	mirror := o.Mirror
	if mirror == "" {
		var err error
		if mirror, err = aptMirror(); err != nil {
			return err
		}
	}
	dir := out + ".d"
	_ = os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	logf("rootfs: debootstrap %s from %s (a few minutes, once)", o.Suite, mirror)
	if _, err := run(ctx, "", "debootstrap", "--variant=minbase", "--include="+strings.Join(Packages, ","), o.Suite, dir, mirror); err != nil {
		return fmt.Errorf("debootstrap: %w", err)
	}
	// kind's clean-install: no apt lists, caches, logs, docs or man pages in the image.
	for _, g := range []string{"var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb", "var/cache/debconf/*-old",
		"var/log/*", "tmp/*", "var/tmp/*", "usr/share/doc/*", "usr/share/man/*", "usr/share/locale/*"} {
		ms, _ := filepath.Glob(filepath.Join(dir, g))
		for _, m := range ms {
			_ = os.RemoveAll(m)
		}
	}
	tmp := out + ".tmp"
	if _, err := run(ctx, "", "tar", "--numeric-owner", "--xattrs", "--xattrs-include=security.capability", "-C", dir, "-cf", tmp, "."); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

var debURI = regexp.MustCompile(`^\s*(?:deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+\S+\s+main|URIs:\s*(\S+))`)

// aptMirror returns the first Debian main mirror of this host's apt sources (sources.list and
// deb822 .sources files), skipping security archives.
func aptMirror() (string, error) {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	files = append([]string{"/etc/apt/sources.list"}, append(files, must(filepath.Glob("/etc/apt/sources.list.d/*.list"))...)...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if u := FirstMirror(string(b)); u != "" {
			return u, nil
		}
	}
	return "", errors.New("no Debian mirror in /etc/apt/sources.list*; pass -mirror")
}

// FirstMirror returns the first non-security deb URI of an apt sources text ("" if none).
func FirstMirror(text string) string {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		m := debURI.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		u := m[1] + m[2]
		if strings.Contains(u, "security") {
			continue
		}
		return u
	}
	return ""
}

func must(s []string, _ error) []string { return s }

// installNode turns the Debian rootfs into a kind node: kind's base files and Dockerfile
// clean-up, the binaries, containerd's configuration and kind's /kind files.
func installNode(ctx context.Context, o Options, root string, want Images) error {
	base := filepath.Join(o.KindDir, "images", "base", "files")
	// COPY --chmod as in kind's Dockerfile: executables 0755, everything else 0644.
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		dst := filepath.Join(root, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		mode := fs.FileMode(0o644)
		if strings.HasPrefix(rel, "usr/local/bin/") || strings.HasPrefix(rel, "kind/bin/") {
			mode = 0o755
		}
		return copyFile(p, dst, mode)
	})
	if err != nil {
		return fmt.Errorf("kind base files: %w", err)
	}
	// The Dockerfile's clean-up: no units started but the ones kind enables.
	for _, g := range []string{"lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
		"lib/systemd/system/multi-user.target.wants/*", "etc/systemd/system/*.wants/*", "lib/systemd/system/local-fs.target.wants/*",
		"lib/systemd/system/sockets.target.wants/*udev*", "lib/systemd/system/sockets.target.wants/*initctl*", "lib/systemd/system/basic.target.wants/*"} {
		ms, _ := filepath.Glob(filepath.Join(root, g))
		for _, m := range ms {
			_ = os.Remove(m)
		}
	}
	if err := appendFile(filepath.Join(root, "etc/systemd/journald.conf"), "ReadKMsg=no\n"); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(root, "sbin/init"))
	if err := os.Symlink("/usr/lib/systemd/systemd", filepath.Join(root, "sbin/init")); err != nil {
		return err
	}
	// The rootfs's own systemctl, in a chroot (offline mode: it only writes the unit links).
	if _, err := run(ctx, "", "chroot", root, "/usr/bin/systemctl", "enable", "kubelet.service", "containerd.service", "undo-mount-hacks.service"); err != nil {
		return err
	}
	if _, err := run(ctx, "", "chroot", root, "/usr/bin/systemctl", "mask", "systemd-binfmt.service"); err != nil {
		return err
	}
	for _, d := range []string{"etc/kubernetes/manifests", "opt/cni", "etc/cni/net.d", "kind/manifests", "var/lib/containerd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	// Binaries where kind's base and node images put them.
	for name, dst := range map[string]string{
		"containerd": "usr/local/bin/containerd", "ctr": "usr/local/bin/ctr", "containerd-shim-runc-v2": "usr/local/bin/containerd-shim-runc-v2",
		"runc": "usr/local/sbin/runc", "crictl": "usr/local/bin/crictl",
		"kubelet": "usr/bin/kubelet", "kubeadm": "usr/bin/kubeadm", "kubectl": "usr/bin/kubectl",
	} {
		if err := copyFile(o.Bins[name], filepath.Join(root, dst), 0o755); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	// Debian's CNI plugins live in /usr/lib/cni; containerd's CRI looks in /opt/cni/bin.
	if err := os.Symlink("/usr/lib/cni", filepath.Join(root, "opt/cni/bin")); err != nil && !os.IsExist(err) {
		return err
	}
	spec, err := run(ctx, "", o.Bins["ctr"], "oci", "spec")
	if err != nil {
		return err
	}
	cri, err := CRIBaseSpec([]byte(spec))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc/containerd/cri-base.json"), cri, 0o644); err != nil {
		return err
	}
	cfgPath := filepath.Join(root, "etc/containerd/config.toml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		return err
	}
	cfg, err = ContainerdConfig(cfg, want.Pause, o.RestrictOOMScoreAdj)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return err
	}
	for p, body := range map[string]string{
		"kind/version":                     o.KubernetesVersion,
		"etc/cni/net.d/10-eppkit.conflist": StaticCNI,
		"kind/manifests/default-cni.yaml":  DefaultCNIManifest,
	} {
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// CRIBaseSpec is containerd's default OCI spec (`ctr oci spec`) as kind's base image keeps it
// for the CRI's base_runtime_spec: kind's mount-product-files.sh appended to the
// createContainer hooks, and no rlimits (images/base/Dockerfile).
func CRIBaseSpec(spec []byte) ([]byte, error) {
	var s map[string]any
	if err := json.Unmarshal(spec, &s); err != nil {
		return nil, fmt.Errorf("ctr oci spec: %w", err)
	}
	hooks, _ := s["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	cc, _ := hooks["createContainer"].([]any)
	hooks["createContainer"] = append(cc, map[string]any{"path": "/kind/bin/mount-product-files.sh"})
	s["hooks"] = hooks
	if p, ok := s["process"].(map[string]any); ok {
		delete(p, "rlimits")
	}
	return json.MarshalIndent(s, "", "    ")
}

var (
	sandboxLine  = regexp.MustCompile(`(?m)^(\s*sandbox_image\s*=\s*)"[^"\n]*"`)
	restrictLine = regexp.MustCompile(`(?m)^(\s*restrict_oom_score_adj\s*=\s*)(true|false)`)
)

// ContainerdConfig edits kind's containerd config.toml: the CRI's sandbox image becomes the
// pause image kubeadm asks for (kind's node-image build does the same), and
// restrict_oom_score_adj is set as asked. Both keys must be present.
func ContainerdConfig(cfg []byte, pause string, restrictOOM bool) ([]byte, error) {
	if !sandboxLine.Match(cfg) {
		return nil, errors.New("containerd config.toml: no sandbox_image line")
	}
	if !restrictLine.Match(cfg) {
		return nil, errors.New("containerd config.toml: no restrict_oom_score_adj line")
	}
	cfg = sandboxLine.ReplaceAll(cfg, []byte(`${1}"`+pause+`"`))
	cfg = restrictLine.ReplaceAll(cfg, []byte(fmt.Sprintf("${1}%t", restrictOOM)))
	return cfg, nil
}

// StaticCNI is the node's pod network: kindnetd, kind's CNI daemon, is not on the Go module
// proxy, so a single-node ptp + host-local configuration (the range kind gives the first node
// of its default pod subnet 10.244.0.0/16) stands in; portmap serves hostPort.
const StaticCNI = `{
  "cniVersion": "0.4.0",
  "name": "eppkit-static",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": true,
      "mtu": 1500,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni-ipam-state",
        "routes": [{"dst": "0.0.0.0/0"}],
        "ranges": [[{"subnet": "10.244.0.0/24"}]]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

// DefaultCNIManifest replaces kindnetd's manifest at /kind/manifests/default-cni.yaml, which kind
// applies after kubeadm init: the network is the static configuration above, so it only records
// that (kind needs at least one object in the file).
const DefaultCNIManifest = `# eppkit's offline kind node: pod networking is the static CNI configuration
# /etc/cni/net.d/10-eppkit.conflist (single node, 10.244.0.0/24); kindnetd is not available offline.
apiVersion: v1
kind: ConfigMap
metadata:
  name: eppkit-static-cni
  namespace: kube-system
data:
  conflist: /etc/cni/net.d/10-eppkit.conflist
`

func copyFile(src, dst string, mode fs.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	_ = os.Remove(dst)
	return os.WriteFile(dst, b, mode)
}

func appendFile(p, s string) error {
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(s)
	return err
}

// run runs a command and returns its stdout; the error carries the command line and stderr.
func run(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if len(msg) > 2000 {
			msg = "..." + msg[len(msg)-2000:]
		}
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return out.String(), nil
}
