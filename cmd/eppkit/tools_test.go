package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eppkit/eppkit/internal/toolcache"
)

// TestToolsBuildSnapshotExitCodes: `eppkit tools build llmd-router` exits 4 (the make targets'
// "SKIPPED") when the source snapshot is missing, naming the file, and 1 when its checksum does
// not match, naming both sums; `tools path` of the unbuilt binary names the build command.
func TestToolsBuildSnapshotExitCodes(t *testing.T) {
	snap := t.TempDir()
	t.Setenv(toolcache.ThirdPartyEnv, snap)
	t.Setenv("EPPKIT_TOOLS_CACHE", t.TempDir())
	repo := t.TempDir()
	file := filepath.Join(snap, toolcache.LLMDRouterSnapshot)

	code, out := runCLI(t, "tools", "build", toolcache.LLMDRouterTool, "--repo-root", repo)
	if code != exitSnapshotMissing || !strings.Contains(out, file) || !strings.Contains(out, "does not exist") {
		t.Errorf("missing snapshot: exit %d, output %q; want exit %d naming %s", code, out, exitSnapshotMissing, file)
	}

	if err := os.WriteFile(file, []byte("not the snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("0", 64)
	if err := os.WriteFile(file+".sha256", []byte(want+"  "+toolcache.LLMDRouterSnapshot+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("not the snapshot"))
	got := hex.EncodeToString(sum[:])
	code, out = runCLI(t, "tools", "build", toolcache.LLMDRouterTool, "--repo-root", repo)
	if code != 1 || !strings.Contains(out, file) || !strings.Contains(out, want) || !strings.Contains(out, got) {
		t.Errorf("checksum mismatch: exit %d, output %q; want exit 1 naming the file and both sums (%s, %s)", code, out, want, got)
	}

	code, out = runCLI(t, "tools", "path", toolcache.LLMDRouterTool, toolcache.LLMDRouterBinary)
	if code != 1 || !strings.Contains(out, "eppkit tools build llmd-router --only epp") {
		t.Errorf("tools path of an unbuilt binary: exit %d, output %q", code, out)
	}
}
