package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const kubeadmList = `registry.k8s.io/kube-apiserver:v1.37.2
registry.k8s.io/kube-controller-manager:v1.37.2
registry.k8s.io/kube-scheduler:v1.37.2
registry.k8s.io/kube-proxy:v1.37.2
registry.k8s.io/coredns/coredns:v1.14.6
registry.k8s.io/pause:3.10.2
registry.k8s.io/etcd:3.7.0-0
`

func TestParseImageList(t *testing.T) {
	w, err := ParseImageList(kubeadmList)
	if err != nil {
		t.Fatal(err)
	}
	want := Images{APIServer: "registry.k8s.io/kube-apiserver:v1.37.2", ControllerManager: "registry.k8s.io/kube-controller-manager:v1.37.2",
		Scheduler: "registry.k8s.io/kube-scheduler:v1.37.2", Proxy: "registry.k8s.io/kube-proxy:v1.37.2", Etcd: "registry.k8s.io/etcd:3.7.0-0",
		CoreDNS: "registry.k8s.io/coredns/coredns:v1.14.6", Pause: "registry.k8s.io/pause:3.10.2"}
	if d := cmp.Diff(want, w); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	for _, bad := range []struct{ in, msg string }{
		{strings.Replace(kubeadmList, "registry.k8s.io/pause:3.10.2\n", "", 1), "no pause image"},
		{kubeadmList + "registry.k8s.io/pause:3.9\n", "lists pause twice"},
		{kubeadmList + "registry.k8s.io/nginx:1\n", "unknown component"},
	} {
		if _, err := ParseImageList(bad.in); err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("want an error containing %q, got %v", bad.msg, err)
		}
	}
}

func TestEtcdImage(t *testing.T) {
	w, _ := ParseImageList(kubeadmList)
	got, patches, err := EtcdImage(w, "etcd Version: 3.6.11\nGit SHA: x\n")
	if err != nil {
		t.Fatal(err)
	}
	if got.Etcd != "registry.k8s.io/etcd:3.6.11-0" {
		t.Errorf("etcd image %s, want registry.k8s.io/etcd:3.6.11-0", got.Etcd)
	}
	if want := []string{"kind: ClusterConfiguration\netcd:\n  local:\n    imageTag: 3.6.11-0\n"}; !cmp.Equal(patches, want) {
		t.Errorf("patches %q, want %q", patches, want)
	}
	same, patches, err := EtcdImage(w, "etcd Version: 3.7.0\n")
	if err != nil || same.Etcd != w.Etcd || patches != nil {
		t.Errorf("kubeadm's own etcd: %v %q %v, want it unchanged and no patch", same.Etcd, patches, err)
	}
	if _, _, err := EtcdImage(w, "something else"); err == nil {
		t.Error("unparsable etcd --version: want an error")
	}
}

const kindConfig = `version = 2
[plugins."io.containerd.grpc.v1.cri"]
  # use fixed sandbox image
  sandbox_image = "registry.k8s.io/pause:3.10"
  tolerate_missing_hugepages_controller = true
  restrict_oom_score_adj = false
`

func TestContainerdConfig(t *testing.T) {
	out, err := ContainerdConfig([]byte(kindConfig), "registry.k8s.io/pause:3.10.2", true)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer(`pause:3.10"`, `pause:3.10.2"`, "restrict_oom_score_adj = false", "restrict_oom_score_adj = true").Replace(kindConfig)
	if d := cmp.Diff(want, string(out)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	out, _ = ContainerdConfig([]byte(kindConfig), "p:1", false)
	if !strings.Contains(string(out), "restrict_oom_score_adj = false") {
		t.Errorf("restrict false: %s", out)
	}
	if _, err := ContainerdConfig([]byte("version = 2\n"), "p:1", true); err == nil {
		t.Error("a config without the keys: want an error")
	}
}

func TestCRIBaseSpec(t *testing.T) {
	in := `{"ociVersion":"1.2.1","process":{"args":["sh"],"rlimits":[{"type":"RLIMIT_NOFILE","hard":1024,"soft":1024}]},"hooks":{"createContainer":[{"path":"/a"}]}}`
	out, err := CRIBaseSpec([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"ociVersion": "1.2.1", "process": map[string]any{"args": []any{"sh"}},
		"hooks": map[string]any{"createContainer": []any{map[string]any{"path": "/a"}, map[string]any{"path": "/kind/bin/mount-product-files.sh"}}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestFirstMirror(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n", "http://mirror.example/debian"},
		{"deb http://security.example/debian-security bookworm-security main\ndeb [arch=amd64] http://m.example/debian bookworm main\n", "http://m.example/debian"},
		{"# deb http://x/debian bookworm main\n", ""},
	} {
		if got := FirstMirror(tc.in); got != tc.want {
			t.Errorf("FirstMirror(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestMissingFilesAndImages(t *testing.T) {
	root := t.TempDir()
	for _, f := range nodeFiles {
		p := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if f.path == "/opt/cni/bin/ptp" {
			continue // written below behind the /opt/cni/bin symlink
		}
		if strings.HasPrefix(f.path, "/opt/cni/bin/") {
			continue
		}
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// /opt/cni/bin → /usr/lib/cni, as the image has it.
	_ = os.RemoveAll(filepath.Join(root, "opt/cni/bin"))
	if err := os.Symlink("/usr/lib/cni", filepath.Join(root, "opt/cni/bin")); err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll(filepath.Join(root, "usr/lib/cni"), 0o755)
	for _, p := range []string{"ptp", "host-local", "loopback", "portmap"} {
		_ = os.WriteFile(filepath.Join(root, "usr/lib/cni", p), []byte("x"), 0o755)
	}
	if m := MissingFiles(root); len(m) != 0 {
		t.Fatalf("complete rootfs: missing %v", m)
	}
	_ = os.Remove(filepath.Join(root, "usr/local/bin/crictl"))
	_ = os.Remove(filepath.Join(root, "usr/lib/cni/portmap"))
	if got, want := MissingFiles(root), []string{"crictl (/usr/local/bin/crictl)", "CNI plugins (/opt/cni/bin/portmap)"}; !cmp.Equal(got, want) {
		t.Errorf("MissingFiles = %v, want %v", got, want)
	}
	w, _ := ParseImageList(kubeadmList)
	listing := strings.Replace(kubeadmList, "registry.k8s.io/coredns/coredns:v1.14.6\n", "", 1) + "sha256:abc\n"
	if got := MissingImages(w, listing); !cmp.Equal(got, []string{"registry.k8s.io/coredns/coredns:v1.14.6"}) {
		t.Errorf("MissingImages = %v", got)
	}
	if got := MissingImages(w, kubeadmList); got != nil {
		t.Errorf("all present: MissingImages = %v", got)
	}
}

func TestValidateNamesMissingBinaries(t *testing.T) {
	o := Options{Bins: map[string]string{}}
	for _, n := range requiredBins {
		o.Bins[n] = "/bin/sh"
	}
	delete(o.Bins, "crictl")
	o.Bins["coredns"] = "/nonexistent/coredns"
	err := o.validate()
	if err == nil || !strings.Contains(err.Error(), "crictl (no -bin crictl=PATH)") || !strings.Contains(err.Error(), "coredns (/nonexistent/coredns not found)") {
		t.Fatalf("validate = %v, want both components named", err)
	}
}

func TestELFClosure(t *testing.T) {
	// The host's own /bin/sh resolved against the host as the rootfs: libc and the loader.
	libs := map[string]bool{}
	if err := elfClosure("/", "/bin/sh", libs); err != nil {
		t.Skipf("no dynamic /bin/sh here: %v", err)
	}
	var haveLibc, haveLoader bool
	for l := range libs {
		haveLibc = haveLibc || strings.HasSuffix(l, "/libc.so.6")
		haveLoader = haveLoader || strings.Contains(l, "ld-linux")
	}
	if !haveLibc || !haveLoader {
		t.Errorf("closure of /bin/sh = %v, want libc.so.6 and the ld-linux loader", libs)
	}
	if err := elfClosure(t.TempDir(), "/bin/sh", map[string]bool{}); err == nil || !strings.Contains(err.Error(), "not in the rootfs") {
		t.Errorf("an empty rootfs: %v, want a missing-library error", err)
	}
}
