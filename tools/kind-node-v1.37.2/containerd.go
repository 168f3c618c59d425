package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// hostContainerdConfig runs containerd on this host against the node's content store only:
// root is the node's /var/lib/containerd, the sockets and state stay in dir, and the plugins
// that would touch the host (the CRI, NRI's socket in /var/run/nri, /opt/containerd) are off.
func hostContainerdConfig(root, dir string) string {
	return fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime",
  "io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt", "io.containerd.podsandbox.controller.v1.podsandbox"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(root, "var/lib/containerd"), filepath.Join(dir, "state"), filepath.Join(dir, "containerd.sock"), filepath.Join(dir, "containerd.sock.ttrpc"))
}

// withHostContainerd starts containerd for root, runs f with its socket, and stops it.
func withHostContainerd(ctx context.Context, containerd, root, dir string, f func(sock string) error) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(hostContainerdConfig(root, dir)), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "containerd.log")
	logf_, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf_.Close()
	cmd := exec.Command(containerd, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf_, logf_
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	sock := filepath.Join(dir, "containerd.sock")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case err := <-done:
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("containerd exited: %v: %s", err, tail(string(b), 1500))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd socket %s did not appear within 60s (log %s)", sock, logPath)
		}
	}
	return f(sock)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// importImages imports the image tarballs into the k8s.io namespace of the node's containerd
// store as kind's node-image build does (pinned, every platform, not unpacked, with digests).
func importImages(ctx context.Context, containerd, ctr, root, dir string, tars []string) error {
	return withHostContainerd(ctx, containerd, root, dir, func(sock string) error {
		for _, t := range tars {
			if _, err := run(ctx, "", ctr, "--address", sock, "--namespace=k8s.io", "images", "import",
				"--label=io.cri-containerd.pinned=pinned", "--all-platforms", "--no-unpack", "--digests", t); err != nil {
				return err
			}
		}
		return nil
	})
}

// nodeFiles are the node rootfs paths a kind node cannot start without, by component.
var nodeFiles = []struct{ component, path string }{
	{"systemd", "/sbin/init"},
	{"kind entrypoint", "/usr/local/bin/entrypoint"},
	{"containerd", "/usr/local/bin/containerd"},
	{"containerd", "/usr/local/bin/containerd-shim-runc-v2"},
	{"ctr", "/usr/local/bin/ctr"},
	{"runc", "/usr/local/sbin/runc"},
	{"crictl", "/usr/local/bin/crictl"},
	{"kubelet", "/usr/bin/kubelet"},
	{"kubeadm", "/usr/bin/kubeadm"},
	{"kubectl", "/usr/bin/kubectl"},
	{"CNI plugins", "/opt/cni/bin/ptp"},
	{"CNI plugins", "/opt/cni/bin/host-local"},
	{"CNI plugins", "/opt/cni/bin/loopback"},
	{"CNI plugins", "/opt/cni/bin/portmap"},
	{"CNI configuration", "/etc/cni/net.d/10-eppkit.conflist"},
	{"iptables", "/usr/sbin/iptables"},
	{"conntrack", "/usr/sbin/conntrack"},
	{"containerd configuration", "/etc/containerd/config.toml"},
	{"containerd CRI base spec", "/etc/containerd/cri-base.json"},
	{"kubelet unit", "/etc/systemd/system/kubelet.service"},
	{"kind version", "/kind/version"},
	{"kind CNI manifest", "/kind/manifests/default-cni.yaml"},
}

// MissingFiles returns "component (path)" for every nodeFiles entry absent under root
// (following symlinks inside root).
func MissingFiles(root string) []string {
	var out []string
	for _, f := range nodeFiles {
		p, err := resolveInRoot(root, f.path)
		if err == nil {
			if fi, err := os.Stat(filepath.Join(root, p)); err == nil && fi.Mode().IsRegular() {
				continue
			}
		}
		out = append(out, fmt.Sprintf("%s (%s)", f.component, f.path))
	}
	return out
}

// MissingImages returns the references of want that the store listing (`ctr images ls -q`
// output) lacks.
func MissingImages(want Images, listing string) []string {
	have := strings.Fields(listing)
	var out []string
	for _, ref := range want.all() {
		if !slices.Contains(have, ref) {
			out = append(out, ref)
		}
	}
	return out
}

// CheckNode fails naming every missing component: a node file, or a control-plane image absent
// from the node's containerd store.
func CheckNode(ctx context.Context, root string, want Images, ctr, dir string) error {
	missing := MissingFiles(root)
	var listing string
	err := withHostContainerd(ctx, filepath.Join(root, "usr/local/bin/containerd"), root, dir, func(sock string) error {
		var err error
		listing, err = run(ctx, "", ctr, "--address", sock, "--namespace=k8s.io", "images", "ls", "-q")
		return err
	})
	if err != nil {
		return fmt.Errorf("list the node's images: %w", err)
	}
	for _, ref := range MissingImages(want, listing) {
		missing = append(missing, "image "+ref)
	}
	if len(missing) > 0 {
		return fmt.Errorf("the node image lacks component(s): %s", strings.Join(missing, "; "))
	}
	return nil
}
