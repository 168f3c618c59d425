package toolcache

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSelectArtifacts(t *testing.T) {
	k8s := Tools["k8s"]
	tests := []struct {
		name    string
		opts    BuildOptions
		want    []string
		wantErr string
	}{
		{name: "default skips optional", want: []string{"kube-apiserver", "etcd"}},
		{name: "all", opts: BuildOptions{All: true}, want: []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kubelet", "kubeadm", "kubectl", "kube-proxy"}},
		{name: "only", opts: BuildOptions{Only: []string{"etcd", "kube-scheduler"}}, want: []string{"etcd", "kube-scheduler"}},
		{name: "only unknown", opts: BuildOptions{Only: []string{"cloud-controller-manager"}}, wantErr: `--only: tool k8s has no artifact "cloud-controller-manager"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := selectArtifacts(k8s, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, a := range got {
				names = append(names, a.Name)
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("artifacts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCacheRootAndPath(t *testing.T) {
	t.Setenv("EPPKIT_TOOLS_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if root, err := CacheRoot(); err != nil || root != "/xdg/eppkit" {
		t.Fatalf("CacheRoot with XDG_CACHE_HOME = %q, %v; want /xdg/eppkit", root, err)
	}
	dir := t.TempDir()
	t.Setenv("EPPKIT_TOOLS_CACHE", dir)

	_, err := Path("k8s", "kube-apiserver")
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "eppkit tools build k8s --only kube-apiserver") {
		t.Fatalf("Path of a missing binary: err = %v, want ErrNotBuilt naming the build command", err)
	}
	want := filepath.Join(dir, "k8s-v1.37.2", "kube-apiserver")
	if err := os.MkdirAll(filepath.Dir(want), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(want, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Path("k8s", "kube-apiserver"); err != nil || got != want {
		t.Fatalf("Path = %q, %v; want %q", got, err, want)
	}
	for _, tc := range []struct{ tool, artifact, wantErr string }{
		{"nope", "x", `unknown tool "nope" (have gie, gie-v1.6.0, gie-v1.6.2, k8s, kind-node, llmd-router, sim)`},
		{"k8s", "cloud-controller-manager", `tool k8s has no artifact "cloud-controller-manager"`},
		{"gie-v1.6.0", "epp", `tool gie-v1.6.0 has no artifact "epp"`},
	} {
		if _, err := Path(tc.tool, tc.artifact); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Path(%q, %q) error = %v, want %q", tc.tool, tc.artifact, err, tc.wantErr)
		}
	}
}

func TestFindRepoRoot(t *testing.T) {
	root, err := FindRepoRoot(".")
	if err != nil {
		t.Fatalf("FindRepoRoot from the package dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "tools", "k8s-v1.37.2", "go.mod")); err != nil {
		t.Fatalf("root %s has no tools/k8s-v1.37.2/go.mod: %v", root, err)
	}
	if _, err := FindRepoRoot(t.TempDir()); err == nil || !strings.Contains(err.Error(), "--repo-root") {
		t.Fatalf("FindRepoRoot outside a checkout: err = %v, want one naming --repo-root", err)
	}
}

// TestBuildExtractsCRDs runs the real CRD extraction (go mod download of the pinned GIE module,
// from the module cache or the proxy) into a temporary cache, then checks the skip path.
func TestBuildExtractsCRDs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs the go command and the GIE module")
	}
	t.Setenv("EPPKIT_TOOLS_CACHE", t.TempDir())
	root, err := FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Build(t.Context(), "gie", BuildOptions{RepoRoot: root, Only: []string{CRDsArtifact}})
	if err != nil {
		t.Fatalf("Build gie crds: %v", err)
	}
	if len(res) != 1 || res[0].Skipped {
		t.Fatalf("results = %+v, want one fresh extraction", res)
	}
	for _, f := range []string{InferencePoolCRD, InferenceObjectiveCRD, InferenceModelRewriteCRD, InferencePoolImportCRD} {
		b, err := os.ReadFile(filepath.Join(res[0].Path, f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "kind: CustomResourceDefinition") || !strings.Contains(string(b), "bundle-version: v1.5.0") {
			t.Errorf("%s does not look like the v1.5.0 CRD", f)
		}
	}
	res, err = Build(t.Context(), "gie", BuildOptions{RepoRoot: root, Only: []string{CRDsArtifact}})
	if err != nil || len(res) != 1 || !res[0].Skipped {
		t.Fatalf("second Build = %+v, %v; want skipped", res, err)
	}
	// A cache missing one of the listed files (extracted before it was listed) is incomplete:
	// Path says so and Build extracts again.
	if err := os.Remove(filepath.Join(res[0].Path, InferenceModelRewriteCRD)); err != nil {
		t.Fatal(err)
	}
	if _, err := Path("gie", CRDsArtifact); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Path of an incomplete CRD directory: %v, want ErrNotBuilt", err)
	}
	res, err = Build(t.Context(), "gie", BuildOptions{RepoRoot: root, Only: []string{CRDsArtifact}})
	if err != nil || len(res) != 1 || res[0].Skipped {
		t.Fatalf("Build of an incomplete cache = %+v, %v; want a fresh extraction", res, err)
	}
	if _, err := os.Stat(filepath.Join(res[0].Path, InferenceModelRewriteCRD)); err != nil {
		t.Fatal(err)
	}
}

// TestSecondVersionOfOneModule: gie-v1.6.0 is keyed apart from gie but is still the module
// tools/gie-v1.6.0 cached under gie-v1.6.0/, and a missing artifact names the key to build.
func TestSecondVersionOfOneModule(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("EPPKIT_TOOLS_CACHE", dir)
	for key, tool := range Tools {
		if key != tool.Name && key != tool.Name+"-"+tool.Version {
			t.Errorf("Tools[%q] is %s %s: the key must be the name or name-version", key, tool.Name, tool.Version)
		}
	}
	lw, err := Lookup(GIE160Tool)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lw.Dir(), filepath.Join("tools", "gie-v1.6.0"); got != want {
		t.Errorf("Dir = %q, want %q", got, want)
	}
	p, err := Path(GIE160Tool, "lwepp")
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "eppkit tools build gie-v1.6.0 --only lwepp") {
		t.Fatalf("Path of a missing lwepp: err = %v, want ErrNotBuilt naming `eppkit tools build gie-v1.6.0 --only lwepp`", err)
	}
	if want := filepath.Join(dir, "gie-v1.6.0", "lwepp"); p != want {
		t.Errorf("Path = %q, want %q", p, want)
	}
}

// TestBuildPassesArtifactEnv: an artifact's Env reaches the go command (CGO_ENABLED=0, as the
// pure-Go builds of upstream EPPs need), after the caller's environment so it wins, and GOWORK
// stays off. The go command here is a script that writes its environment and arguments to the -o
// file; the tool is gie-v1.6.2's lwepp with an Env added for the test.
func TestBuildPassesArtifactEnv(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("EPPKIT_TOOLS_CACHE", cache)
	t.Setenv("CGO_ENABLED", "1")
	root, err := FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	orig := Tools[GIE162Tool]
	withEnv := orig
	withEnv.Artifacts = []Artifact{{Name: "lwepp", Package: GIEModule + "/cmd/lwepp", Env: []string{"CGO_ENABLED=0"}}}
	Tools[GIE162Tool] = withEnv
	t.Cleanup(func() { Tools[GIE162Tool] = orig })
	fakeGo := filepath.Join(t.TempDir(), "go")
	script := "#!/bin/sh\nout=\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\nenv > \"$out\"\necho \"pwd=$(pwd)\" >> \"$out\"\n"
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := Build(t.Context(), GIE162Tool, BuildOptions{RepoRoot: root, GoCommand: fakeGo})
	if err != nil {
		t.Fatalf("Build gie-v1.6.2 with a fake go: %v", err)
	}
	if len(res) != 1 || res[0].Path != filepath.Join(cache, "gie-v1.6.2", "lwepp") {
		t.Fatalf("results = %+v, want one artifact at gie-v1.6.2/lwepp", res)
	}
	b, err := os.ReadFile(res[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	last := map[string]string{}
	for _, l := range lines {
		if k, v, ok := strings.Cut(l, "="); ok {
			last[k] = v
		}
	}
	for k, want := range map[string]string{"CGO_ENABLED": "0", "GOWORK": "off", "pwd": filepath.Join(root, "tools", "gie-v1.6.2")} {
		if last[k] != want {
			t.Errorf("go build saw %s=%q, want %q", k, last[k], want)
		}
	}
}
