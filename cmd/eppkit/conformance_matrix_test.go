package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommittedInteropMatrixIsCurrent runs `eppkit conformance matrix reports/interop --check
// reports/interop/README.md` on the committed reports: the table of who passes what on that page
// must be what the committed results.json files say, every failure must be in its run's
// expected-failures list, and every run with failures must have its explanation heading. After a
// `make interop`, `make interop-matrix` rewrites the table.
func TestCommittedInteropMatrixIsCurrent(t *testing.T) {
	dir := filepath.Join("..", "..", "reports", "interop")
	runs, err := filepath.Glob(filepath.Join(dir, "*", "results.json"))
	if err != nil || len(runs) == 0 {
		t.Fatalf("no committed interop results under %s (%v): `make interop` writes them", dir, err)
	}
	code, out := runCLI(t, "conformance", "matrix", dir, "--check", filepath.Join(dir, "README.md"))
	if code != 0 {
		t.Fatalf("eppkit conformance matrix --check: exit %d:\n%s", code, out)
	}
}

// TestMatrixCheckFailsOnAStaleTable proves the check above can fail: a copy of the committed
// reports whose page has one cell changed is refused, naming the page and the make target.
func TestMatrixCheckFailsOnAStaleTable(t *testing.T) {
	src := filepath.Join("..", "..", "reports", "interop")
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dst, "README.md")
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	begin := strings.Index(string(doc), "<!-- BEGIN matrix")
	end := strings.Index(string(doc), "<!-- END matrix -->")
	if begin < 0 || end < begin {
		t.Fatalf("%s has no matrix markers", page)
	}
	block := string(doc[begin:end])
	stale := strings.Replace(block, "| ✅", "| ❌", 1)
	if stale == block {
		stale = strings.Replace(block, "|", "| stale", 1)
	}
	if err := os.WriteFile(page, []byte(string(doc[:begin])+stale+string(doc[end:])), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runCLI(t, "conformance", "matrix", dst, "--check", page)
	if code == 0 || !strings.Contains(out, "make interop-matrix") {
		t.Fatalf("a stale matrix passed the check (exit %d):\n%s", code, out)
	}
}
