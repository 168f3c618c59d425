package toolcache

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tarEntry is one entry of a test tarball: a file (Body), a directory (Dir) or a symlink (Link).
type tarEntry struct {
	Name, Body, Link string
	Dir              bool
}

// writeSnapshot writes a gzipped tarball of entries (with git archive's pax global header naming
// commit, when set) as dir/name, and dir/name.sha256 holding sum ("" = the tarball's own sum, in
// sha256sum's format). It returns the tarball's real sum.
func writeSnapshot(t *testing.T, dir, name, commit, sum string, entries []tarEntry) string {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if commit != "" {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header",
			PAXRecords: map[string]string{"comment": commit}, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.Body))}
		switch {
		case e.Dir:
			h = &tar.Header{Name: e.Name, Mode: 0o755, Typeflag: tar.TypeDir}
		case e.Link != "":
			h = &tar.Header{Name: e.Name, Mode: 0o777, Typeflag: tar.TypeSymlink, Linkname: e.Link}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(buf.Bytes())
	real := hex.EncodeToString(h[:])
	if sum == "" {
		sum = real + "  " + name
	}
	if err := os.WriteFile(p+".sha256", []byte(sum+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return real
}

// routerEntries is a minimal llm-d-router tree under the snapshot's prefix.
func routerEntries() []tarEntry {
	pre := "llm-d-router-" + LLMDRouterVersion + "/"
	return []tarEntry{
		{Name: pre, Dir: true},
		{Name: pre + "go.mod", Body: "module " + LLMDRouterModule + "\n"},
		{Name: pre + "AGENTS.md", Body: "agents\n"},
		{Name: pre + "CLAUDE.md", Link: "AGENTS.md"},
		{Name: pre + "cmd/epp/main.go", Body: "package main\n"},
		{Name: pre + "deploy/config/epp-config.yaml", Body: "kind: EndpointPickerConfig\n"},
		{Name: pre + "deploy/config/pd-epp-config.yaml", Body: "kind: EndpointPickerConfig\n"},
		{Name: pre + "config/crd/bases/llm-d.ai_inferenceobjectives.yaml", Body: "kind: CustomResourceDefinition\n"},
	}
}

// fakeGoCommand is a go command that writes its arguments and working directory to its -o file.
func fakeGoCommand(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "go")
	script := "#!/bin/sh\nout=\nargs=\"$*\"\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n" +
		"echo \"args=$args\" > \"$out\"\necho \"pwd=$(pwd)\" >> \"$out\"\necho \"CGO_ENABLED=$CGO_ENABLED\" >> \"$out\"\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestThirdPartyDir(t *testing.T) {
	t.Setenv(ThirdPartyEnv, "")
	if got, want := ThirdPartyDir("/work/main"), "/work/shared/thirdparty"; got != want {
		t.Errorf("ThirdPartyDir(/work/main) = %q, want %q (<repo root>/../shared/thirdparty)", got, want)
	}
	t.Setenv(ThirdPartyEnv, "/elsewhere")
	if got := ThirdPartyDir("/work/main"); got != "/elsewhere" {
		t.Errorf("ThirdPartyDir with $%s = %q, want /elsewhere", ThirdPartyEnv, got)
	}
}

// TestSnapshotChecksumMismatchRefused: a tarball whose sum differs from its .sha256 is refused
// before anything is extracted, and the error names the file and both sums.
func TestSnapshotChecksumMismatchRefused(t *testing.T) {
	snap := t.TempDir()
	cache := t.TempDir()
	t.Setenv(ThirdPartyEnv, snap)
	t.Setenv("EPPKIT_TOOLS_CACHE", cache)
	wrong := strings.Repeat("ab", 32)
	real := writeSnapshot(t, snap, LLMDRouterSnapshot, LLMDRouterCommit, wrong+"  "+LLMDRouterSnapshot, routerEntries())

	_, err := Build(t.Context(), LLMDRouterTool, BuildOptions{RepoRoot: t.TempDir(), GoCommand: fakeGoCommand(t)})
	if err == nil {
		t.Fatal("Build with a mismatched checksum succeeded")
	}
	file := filepath.Join(snap, LLMDRouterSnapshot)
	for _, want := range []string{file, wrong, real, "mismatch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if errors.Is(err, ErrSnapshotMissing) {
		t.Errorf("a mismatch is not a missing snapshot: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(cache, "llmd-router-"+LLMDRouterVersion))
	if len(entries) != 0 {
		t.Errorf("the cache holds %d entries after a refused snapshot, want none (verify before extracting)", len(entries))
	}
}

// TestSnapshotMissing: without the tarball the build fails with ErrSnapshotMissing naming the
// file and the variable that moves it; an artifact already cached needs no snapshot.
func TestSnapshotMissing(t *testing.T) {
	snap := t.TempDir()
	cache := t.TempDir()
	t.Setenv(ThirdPartyEnv, snap)
	t.Setenv("EPPKIT_TOOLS_CACHE", cache)
	_, err := Build(t.Context(), LLMDRouterTool, BuildOptions{RepoRoot: t.TempDir(), GoCommand: fakeGoCommand(t)})
	if !errors.Is(err, ErrSnapshotMissing) {
		t.Fatalf("Build without the snapshot: err = %v, want ErrSnapshotMissing", err)
	}
	for _, want := range []string{filepath.Join(snap, LLMDRouterSnapshot), ThirdPartyEnv} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	bin := filepath.Join(cache, "llmd-router-"+LLMDRouterVersion, LLMDRouterBinary)
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := Build(t.Context(), LLMDRouterTool, BuildOptions{RepoRoot: t.TempDir(), Only: []string{LLMDRouterBinary}})
	if err != nil || len(res) != 1 || !res[0].Skipped {
		t.Fatalf("Build of a cached binary without the snapshot = %+v, %v; want skipped", res, err)
	}
}

// TestSnapshotBuild: a verified tarball is extracted into src/ (prefix stripped, symlinks kept),
// the binary is built inside it without cgo with its version variables, the configs and CRDs
// are copied out, and a second build skips everything without reading the snapshot again.
func TestSnapshotBuild(t *testing.T) {
	snap := t.TempDir()
	cache := t.TempDir()
	t.Setenv(ThirdPartyEnv, snap)
	t.Setenv("EPPKIT_TOOLS_CACHE", cache)
	t.Setenv("CGO_ENABLED", "1")
	writeSnapshot(t, snap, LLMDRouterSnapshot, LLMDRouterCommit, "", routerEntries())
	goCmd := fakeGoCommand(t)

	res, err := Build(t.Context(), LLMDRouterTool, BuildOptions{RepoRoot: t.TempDir(), GoCommand: goCmd})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	dir := filepath.Join(cache, "llmd-router-"+LLMDRouterVersion)
	var got []string
	for _, r := range res {
		if r.Skipped {
			t.Errorf("%s skipped on a cold cache", r.Artifact)
		}
		got = append(got, r.Artifact)
	}
	if diff := cmp.Diff([]string{SourceArtifact, LLMDRouterBinary, LLMDConfigsArtifact, CRDsArtifact}, got); diff != "" {
		t.Errorf("artifacts (-want +got):\n%s", diff)
	}
	src := filepath.Join(dir, SourceArtifact)
	if b, err := os.ReadFile(filepath.Join(src, "go.mod")); err != nil || !strings.Contains(string(b), LLMDRouterModule) {
		t.Errorf("src/go.mod = %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(src, "CLAUDE.md")); err != nil || l != "AGENTS.md" {
		t.Errorf("src/CLAUDE.md link = %q, %v; want AGENTS.md", l, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, LLMDRouterBinary))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pwd=" + src, "CGO_ENABLED=0", "-trimpath", "./cmd/epp",
		LLMDRouterModule + "/version.CommitSHA=" + LLMDRouterCommit, LLMDRouterModule + "/version.BuildRef=" + LLMDRouterVersion} {
		if !strings.Contains(string(b), want) {
			t.Errorf("go build saw %q, want %q in it", b, want)
		}
	}
	for art, files := range map[string][]string{
		LLMDConfigsArtifact: {"epp-config.yaml", "pd-epp-config.yaml"},
		CRDsArtifact:        {"llm-d.ai_inferenceobjectives.yaml"},
	} {
		entries, err := os.ReadDir(filepath.Join(dir, art))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if diff := cmp.Diff(files, names); diff != "" {
			t.Errorf("%s (-want +got):\n%s", art, diff)
		}
	}
	if p, err := Path(LLMDRouterTool, LLMDRouterBinary); err != nil || p != filepath.Join(dir, LLMDRouterBinary) {
		t.Errorf("Path = %q, %v", p, err)
	}

	// Cached: nothing is verified or built again, even with the snapshot gone.
	if err := os.Remove(filepath.Join(snap, LLMDRouterSnapshot)); err != nil {
		t.Fatal(err)
	}
	res, err = Build(t.Context(), LLMDRouterTool, BuildOptions{RepoRoot: t.TempDir(), GoCommand: goCmd})
	if err != nil {
		t.Fatalf("second Build: %v", err)
	}
	for _, r := range res {
		if !r.Skipped {
			t.Errorf("second Build: %s not skipped", r.Artifact)
		}
	}
}

// TestSnapshotExtractRefusals: entries outside the prefix or the tree, and a tarball made from
// another commit, are refused.
func TestSnapshotExtractRefusals(t *testing.T) {
	pre := "llm-d-router-" + LLMDRouterVersion + "/"
	for _, tc := range []struct {
		name, commit string
		entries      []tarEntry
		wantErr      string
	}{
		{"outside the prefix", LLMDRouterCommit, []tarEntry{{Name: "other/go.mod", Body: "x"}}, "is not under"},
		{"dot-dot", LLMDRouterCommit, []tarEntry{{Name: pre + "../evil", Body: "x"}}, "leaves the tree"},
		{"link out", LLMDRouterCommit, []tarEntry{{Name: pre + "a", Body: "x"}, {Name: pre + "l", Link: "../../etc/passwd"}}, "leaves the tree"},
		{"absolute link", LLMDRouterCommit, []tarEntry{{Name: pre + "a", Body: "x"}, {Name: pre + "l", Link: "/etc/passwd"}}, "leaves the tree"},
		{"another commit", strings.Repeat("0", 40), routerEntries(), "made from commit"},
		{"empty", LLMDRouterCommit, []tarEntry{{Name: pre, Dir: true}}, "no files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeSnapshot(t, dir, "s.tar.gz", tc.commit, "", tc.entries)
			err := extractTarGz(filepath.Join(dir, "s.tar.gz"), pre, LLMDRouterCommit, filepath.Join(dir, "out"))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("extract: err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestRealSnapshotVerifies checks the snapshot beside this checkout (when it is there) against
// its .sha256, as a build would.
func TestRealSnapshotVerifies(t *testing.T) {
	root, err := FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(ThirdPartyDir(root), LLMDRouterSnapshot)
	if _, err := os.Stat(file); err != nil {
		t.Skipf("no snapshot at %s (set %s): %v", file, ThirdPartyEnv, err)
	}
	if _, err := VerifySnapshot(file); err != nil {
		t.Fatal(err)
	}
}
