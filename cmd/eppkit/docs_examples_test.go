package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/conformance/harness"
)

// documentedCommandTimeout bounds one documented run (about 10 s on an idle 2-core machine).
const documentedCommandTimeout = 10 * time.Minute

// TestDocumentedReferenceCommands runs the commands README.md and docs/implementers.md give for
// trying the suite with the reference EPP as "your own" (every `bin/eppkit conformance` command
// of a ```sh block whose --command starts `{{.Eppkit}} reference-epp`), read from the files
// themselves, and requires each to exit 0. They run from the repository root as a reader would
// after `make build`: only the leading bin/eppkit is replaced by a binary built for this test, so
// a stale bin/eppkit cannot hide a change.
func TestDocumentedReferenceCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds eppkit and runs full conformance runs")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []documentedCommand
	for _, doc := range []string{"README.md", "docs/implementers.md"} {
		found, err := referenceCommands(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		if len(found) == 0 {
			t.Fatalf("%s: no `bin/eppkit conformance` command running {{.Eppkit}} reference-epp found; the test would pass on nothing", doc)
		}
		cmds = append(cmds, found...)
	}
	bin := filepath.Join(t.TempDir(), "eppkit")
	build := exec.Command("go", "build", "-o", bin, "./cmd/eppkit")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/eppkit: %v\n%s", err, out)
	}
	for _, c := range cmds {
		t.Run(c.name(), func(t *testing.T) {
			line := bin + strings.TrimPrefix(c.text, "bin/eppkit")
			ctx, cancel := context.WithTimeout(context.Background(), documentedCommandTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
			cmd.Dir = root
			// The reader's shell has no EPPKIT_SEED; the run picks and prints its own seed.
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "EPPKIT_SEED=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s:%d exits with %v, want 0 (a reader copying it gets this):\n%s\n--- output ---\n%s", c.doc, c.line, err, c.text, tail(string(out), 60))
			}
			t.Logf("%s:%d exits 0:\n%s", c.doc, c.line, tail(string(out), 8))
		})
	}
}

// documentedCommand is one shell command of a Markdown file, continuation lines joined.
type documentedCommand struct {
	doc  string // file, relative to the repository root
	line int    // first line of the command
	text string
}

func (c documentedCommand) name() string {
	return strings.NewReplacer("/", "_", ".md", "").Replace(c.doc) + "_line" + strconv.Itoa(c.line)
}

// referenceCommands returns the `bin/eppkit conformance` commands of path's ```sh blocks whose
// --command runs {{.Eppkit}} reference-epp.
func referenceCommands(path string) ([]documentedCommand, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc := filepath.Base(filepath.Dir(path)) + "/" + filepath.Base(path)
	if filepath.Base(filepath.Dir(path)) != "docs" {
		doc = filepath.Base(path)
	}
	var out []documentedCommand
	var cur *documentedCommand
	inSh := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			inSh = !inSh && trimmed == "```sh"
			cur = nil
			continue
		case !inSh:
			continue
		}
		if cur == nil {
			if !strings.HasPrefix(trimmed, "bin/eppkit conformance ") {
				continue
			}
			cur = &documentedCommand{doc: doc, line: n}
		}
		cont := strings.HasSuffix(trimmed, `\`)
		cur.text += strings.TrimSuffix(trimmed, `\`)
		if cont {
			cur.text += " "
			continue
		}
		if strings.Contains(cur.text, "{{.Eppkit}} reference-epp") {
			out = append(out, *cur)
		}
		cur = nil
	}
	return out, sc.Err()
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestCommandFieldsDocumented: docs/implementers.md's table of --command fields is
// harness.TargetEnvFields, row for row, and README.md points to it instead of keeping a list.
func TestCommandFieldsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/implementers.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "| `{{.") {
			rows = append(rows, l)
		}
	}
	var want []string
	for _, f := range harness.TargetEnvFields {
		want = append(want, "| `{{."+f.Name+"}}` | "+strings.ReplaceAll(f.Doc, "|", `\|`)+" |")
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("docs/implementers.md's --command field table differs from harness.TargetEnvFields (-want +got):\n%s", diff)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "docs/implementers.md#step-1-the-command-target-eppkit-starts-your-epp") {
		t.Error("README.md does not point to the --command field table")
	}
}
