package toolcache

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBinary writes an executable shell script at dir/name that prints out for --version.
func fakeBinary(t *testing.T, dir, name, out string) {
	t.Helper()
	script := "#!/bin/sh\nprintf '%s\\n' '" + out + "'\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestEnvtestAssets(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name            string
		apiserver, etcd string // --version output; "" = the binary is missing
		wantErr         []string
		wantAPI         string
	}{
		{name: "supported", apiserver: "Kubernetes v1.34.1", etcd: "etcd Version: 3.5.21", wantAPI: "v1.34.1"},
		{name: "pinned versions", apiserver: "Kubernetes v1.37.2", etcd: "etcd Version: 3.6.11", wantAPI: "v1.37.2"},
		{name: "lowest supported", apiserver: "Kubernetes v1.29.0", etcd: "etcd Version: 3.5.0", wantAPI: "v1.29.0"},
		{name: "apiserver too old", apiserver: "Kubernetes v1.28.3", etcd: "etcd Version: 3.5.9",
			wantErr: []string{"kube-apiserver v1.28.3 is not supported (supported: v1.29 to v1.37)"}},
		{name: "apiserver too new", apiserver: "Kubernetes v1.38.0", etcd: "etcd Version: 3.6.11",
			wantErr: []string{"kube-apiserver v1.38.0 is not supported"}},
		{name: "etcd too new", apiserver: "Kubernetes v1.33.0", etcd: "etcd Version: 3.7.0",
			wantErr: []string{"etcd v3.7.0 is not supported (supported: v3.5 to v3.6)"}},
		{name: "etcd missing", apiserver: "Kubernetes v1.33.0",
			wantErr: []string{"etcd: not found"}},
		{name: "no version printed", apiserver: "kube-apiserver (devel)", etcd: "etcd Version: 3.6.11",
			wantErr: []string{"printed no version", `"kube-apiserver (devel)"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.apiserver != "" {
				fakeBinary(t, dir, "kube-apiserver", tc.apiserver)
			}
			if tc.etcd != "" {
				fakeBinary(t, dir, "etcd", tc.etcd)
			}
			t.Setenv(EnvtestAssetsEnv, dir)
			b, set, err := EnvtestAssets(ctx)
			if !set {
				t.Fatal("set = false with KUBEBUILDER_ASSETS set")
			}
			if len(tc.wantErr) > 0 {
				if !errors.Is(err, ErrEnvtestUnsupported) {
					t.Fatalf("err = %v, want ErrEnvtestUnsupported", err)
				}
				for _, w := range append(tc.wantErr, EnvtestAssetsEnv+"="+dir) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.APIServerVersion != tc.wantAPI || b.APIServer != filepath.Join(dir, "kube-apiserver") || b.Etcd != filepath.Join(dir, "etcd") {
				t.Errorf("binaries = %+v, want kube-apiserver %s in %s", b, tc.wantAPI, dir)
			}
		})
	}
	t.Run("unset", func(t *testing.T) {
		t.Setenv(EnvtestAssetsEnv, "")
		if _, set, err := EnvtestAssets(ctx); set || err != nil {
			t.Fatalf("set, err = %v, %v; want false, nil", set, err)
		}
	})
}

func TestControlPlaneChoosesEnvtestThenCache(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	t.Setenv("EPPKIT_TOOLS_CACHE", cache)
	assets := t.TempDir()
	fakeBinary(t, assets, "kube-apiserver", "Kubernetes v1.33.4")
	fakeBinary(t, assets, "etcd", "etcd Version: 3.5.17")

	// Supported assets win, even with nothing in the cache.
	t.Setenv(EnvtestAssetsEnv, assets)
	b, note, err := ControlPlane(ctx)
	if err != nil || note != "" || b.From != EnvtestAssetsEnv+"="+assets || b.APIServerVersion != "v1.33.4" || b.EtcdVersion != "v3.5.17" {
		t.Fatalf("ControlPlane = %+v, %q, %v; want the KUBEBUILDER_ASSETS binaries", b, note, err)
	}

	// Unsupported assets and an empty cache: the error names both causes.
	fakeBinary(t, assets, "kube-apiserver", "Kubernetes v1.26.0")
	if _, _, err := ControlPlane(ctx); err == nil || !strings.Contains(err.Error(), "kube-apiserver v1.26.0 is not supported") ||
		!errors.Is(err, ErrNotBuilt) {
		t.Fatalf("ControlPlane with unsupported assets and no build: err = %v, want both causes", err)
	}

	// Unsupported assets and a cached build: the cache is used, with a note saying why.
	k8sDir := filepath.Join(cache, "k8s-"+Tools["k8s"].Version)
	if err := os.MkdirAll(k8sDir, 0o755); err != nil {
		t.Fatal(err)
	}
	fakeBinary(t, k8sDir, "kube-apiserver", "Kubernetes v1.37.2")
	fakeBinary(t, k8sDir, "etcd", "etcd Version: 3.6.11")
	b, note, err = ControlPlane(ctx)
	if err != nil || b.From != "the tools cache" || b.APIServerVersion != "v1.37.2" ||
		!strings.Contains(note, "kube-apiserver v1.26.0 is not supported") || !strings.Contains(note, "using the pinned build instead") {
		t.Fatalf("ControlPlane = %+v, %q, %v; want the cached build with a note", b, note, err)
	}
	if s := b.String(); !strings.Contains(s, "kube-apiserver v1.37.2") || !strings.Contains(s, "from the tools cache") {
		t.Errorf("String() = %q", s)
	}

	// Unset: the cache.
	t.Setenv(EnvtestAssetsEnv, "")
	if b, note, err := ControlPlane(ctx); err != nil || note != "" || b.From != "the tools cache" {
		t.Fatalf("ControlPlane without KUBEBUILDER_ASSETS = %+v, %q, %v", b, note, err)
	}
}

// TestBuildK8sUsesEnvtestAssets: `eppkit tools build k8s` builds nothing when KUBEBUILDER_ASSETS
// holds a supported control plane (the go command given would fail if it ran), and builds (here:
// tries to, with a go command that fails at once) when the assets are unsupported, saying why.
func TestBuildK8sUsesEnvtestAssets(t *testing.T) {
	ctx := context.Background()
	t.Setenv("EPPKIT_TOOLS_CACHE", t.TempDir())
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, Tools["k8s"].Dir()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, Tools["k8s"].Dir(), "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	assets := t.TempDir()
	fakeBinary(t, assets, "kube-apiserver", "Kubernetes v1.35.0")
	fakeBinary(t, assets, "etcd", "etcd Version: 3.6.5")
	t.Setenv(EnvtestAssetsEnv, assets)

	res, err := Build(ctx, "k8s", BuildOptions{RepoRoot: repo, GoCommand: "/bin/false"})
	if err != nil {
		t.Fatalf("Build with supported KUBEBUILDER_ASSETS: %v", err)
	}
	if len(res) != 2 || res[0].Path != filepath.Join(assets, "kube-apiserver") || !res[0].Skipped ||
		!strings.Contains(res[0].Note, "v1.35.0") || res[1].Path != filepath.Join(assets, "etcd") {
		t.Fatalf("results = %+v, want both binaries from %s", res, assets)
	}

	// --only (what the kind node image asks for) always builds the pinned binaries.
	if _, err := Build(ctx, "k8s", BuildOptions{RepoRoot: repo, GoCommand: "/bin/false", Only: []string{"kube-apiserver"}}); err == nil {
		t.Fatal("Build --only kube-apiserver used KUBEBUILDER_ASSETS; want a build of the pinned binary")
	}

	fakeBinary(t, assets, "kube-apiserver", "Kubernetes v1.20.0")
	var log bytes.Buffer
	if _, err := Build(ctx, "k8s", BuildOptions{RepoRoot: repo, GoCommand: "/bin/false", Log: &log}); err == nil {
		t.Fatal("Build with unsupported KUBEBUILDER_ASSETS did not try to build")
	}
	if !strings.Contains(log.String(), "kube-apiserver v1.20.0 is not supported") || !strings.Contains(log.String(), "building the pinned v1.37.2 instead") {
		t.Errorf("log = %q, want why the pinned version is built", log.String())
	}
}
