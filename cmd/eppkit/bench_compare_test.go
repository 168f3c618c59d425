package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/internal/cancelonwrite"
)

// TestBenchCompareInterruptedWritesFinished: `eppkit bench compare` interrupted (its context
// cancelled, as Ctrl-C does) when its second policy starts still prints the table and writes
// results.json, the plots and comparison.json for the finished baseline, says the second policy
// did not run, and exits 2.
func TestBenchCompareInterruptedWritesFinished(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stderr := &cancelonwrite.Writer{Marker: "== command:", Cancel: cancel}
	var stdout bytes.Buffer
	root := newRootCommand()
	root.SetOut(&stdout)
	root.SetErr(stderr)
	// The command policy would be interrupted before it runs; `sleep` stands in for an EPP.
	root.SetArgs([]string{"bench", "compare", "--policies", "round-robin,command", "--command", "exec sleep 30",
		"--workload", "shared-prefix", "--groups", "2", "--prompts-per-group", "2", "--system-prompt-len", "64",
		"--question-len", "8", "--output-len", "4", "--rate", "4", "--duration", "3s", "--fleet-size", "2",
		"--kv-cache-size", "1024", "--max-model-len", "1024", "--seed", "21", "--output-dir", out})
	err := root.ExecuteContext(ctx)
	var coded interface{ ExitCode() int }
	if !errors.As(err, &coded) || coded.ExitCode() != 2 || !strings.Contains(err.Error(), "interrupted") ||
		!strings.Contains(err.Error(), "not run: command") {
		t.Fatalf("seed 21: err = %v, want exit 2 saying interrupted and not run: command\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr)
	}
	for _, want := range []string{"##### round-robin", "Comparison at step 0",
		"INTERRUPTED (Ctrl-C or SIGTERM) during command: not run: command", "comparison.json"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("seed 21: stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "comparison.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cmp struct {
		Interrupted       bool     `json:"interrupted"`
		InterruptedDuring string   `json:"interrupted_during"`
		NotRun            []string `json:"not_run"`
		Rows              []struct {
			Target string `json:"target"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &cmp); err != nil {
		t.Fatal(err)
	}
	if !cmp.Interrupted || cmp.InterruptedDuring != "command" || !slices.Equal(cmp.NotRun, []string{"command"}) ||
		len(cmp.Rows) != 1 || cmp.Rows[0].Target != "round-robin" {
		t.Errorf("seed 21: comparison.json = %+v, want interrupted during command, one round-robin row", cmp)
	}
	var results []struct {
		Target string `json:"target"`
	}
	if b, err = os.ReadFile(filepath.Join(out, "results.json")); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &results); err != nil || len(results) != 1 || results[0].Target != "round-robin" {
		t.Errorf("seed 21: results.json = %+v (%v), want the round-robin result", results, err)
	}
	if pngs, _ := filepath.Glob(filepath.Join(out, "*.png")); len(pngs) == 0 {
		t.Errorf("seed 21: no plots written under %s", out)
	}
}
