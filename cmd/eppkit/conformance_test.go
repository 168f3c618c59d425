package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/conformance"
)

// runCLI runs `eppkit <args>` in process and returns the exit code main would use and the output.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0, out.String()
	}
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode(), out.String() + err.Error()
	}
	return 1, out.String() + err.Error()
}

func TestConformanceFlagErrorsExit3(t *testing.T) {
	dir := t.TempDir()
	badTimeouts := filepath.Join(dir, "t.yaml")
	if err := os.WriteFile(badTimeouts, []byte("pol: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unknownExpected := filepath.Join(dir, "expected.txt")
	if err := os.WriteFile(unknownExpected, []byte("EPPHealth # fine\nNoSuchTest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	meta := []string{"--organization", "o", "--project", "p", "--url", "u", "--version", "v", "--contact", "c"}
	for _, tc := range []struct {
		name string
		args []string
		want string // substring of the message
	}{
		{"unknown flag", []string{"--bogus"}, "unknown flag"},
		{"unknown profile", []string{"--profiles", "Gateway"}, "--profiles"},
		{"unknown feature", []string{"--supported-features", "Teleport"}, "--supported-features"},
		{"unknown exempt", []string{"--exempt-features", "x"}, "--exempt-features"},
		{"unknown run-test", []string{"--run-test", "NoSuchTest"}, "--run-test"},
		{"unknown skip", []string{"--skip-tests", "NoSuchTest"}, "--skip-tests"},
		{"unknown target", []string{"--target", "nope"}, "--target"},
		{"command without template", []string{"--target", "command"}, "--command"},
		{"bad template", []string{"--target", "command", "--command", "{{.Nope}}"}, "--command"},
		{"command with reference", []string{"--command", "x"}, "--command"},
		{"address missing", []string{"--target", "address"}, "--address"},
		{"address with reference", []string{"--address", "1.2.3.4:9002"}, "--address"},
		{"unknown source", []string{"--endpoint-source", "dns"}, "--endpoint-source"},
		{"bad tls", []string{"--target-tls", "maybe"}, "--target-tls"},
		{"missing ca", []string{"--target-tls", "ca:" + filepath.Join(dir, "none.pem")}, "--target-tls"},
		{"missing config file", []string{"--config-file", filepath.Join(dir, "none.yaml")}, "--config-file"},
		{"bad timeout config", []string{"--timeout-config", badTimeouts}, "--timeout-config"},
		{"report without metadata", []string{"--report-output", dir}, "--report-output"},
		{"report with partial metadata", append([]string{"--report-output", dir}, meta[:6]...), "version"},
		{"bad health tls", []string{"--target-health-tls", "maybe"}, "--target-health-tls"},
		{"bad readiness probe", []string{"--readiness-probe", "ping"}, "--readiness-probe"},
		{"publish without metadata", []string{"--publish-dir", dir}, "--publish-dir"},
		{"missing expected failures", []string{"--expect-failures", filepath.Join(dir, "none.txt")}, "--expect-failures"},
		{"unknown expected failure", []string{"--expect-failures", unknownExpected}, "no test named \"NoSuchTest\""},
		{"fleet size", []string{"--fleet-size", "0"}, "--fleet-size"},
		{"fleet port", []string{"--fleet-port", "70000"}, "--fleet-port"},
		{"positional arg", []string{"extra"}, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runCLI(t, append([]string{"conformance"}, tc.args...)...)
			if code != exitBadFlags {
				t.Fatalf("exit %d, want %d; output:\n%s", code, exitBadFlags, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

func TestConformanceTargetCannotStartExit2(t *testing.T) {
	if len(conformance.All()) == 0 {
		t.Skip("no conformance tests registered")
	}
	dir := t.TempDir()
	t.Setenv("EPPKIT_SEED", "7")
	tc := filepath.Join(dir, "timeouts.yaml")
	os.WriteFile(tc, []byte("targetReady: 5s\n"), 0o644)
	code, out := runCLI(t, "conformance", "--target", "command", "--command", "echo no EPP here >&2; exit 3",
		"--profiles", "EPP", "--log-dir", dir, "--timeout-config", tc, "--fleet-size", "2")
	if code != exitHarness {
		t.Fatalf("exit %d, want %d:\n%s", code, exitHarness, out)
	}
	for _, want := range []string{"the harness could not start", "exited", "no EPP here"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCatalogueCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "CATALOGUE.md")
	if code, msg := runCLI(t, "conformance", "catalogue", "-o", out); code != 0 {
		t.Fatalf("exit %d: %s", code, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != conformance.Catalogue(conformance.All()) {
		t.Fatal("catalogue file differs from conformance.Catalogue(All())")
	}
}

// TestCatalogueUpToDate keeps the committed catalogue equal to the registry: after adding or
// changing a test, run `make catalogue`.
func TestCatalogueUpToDate(t *testing.T) {
	b, err := os.ReadFile("../../reports/CATALOGUE.md")
	if err != nil {
		t.Fatalf("read reports/CATALOGUE.md: %v (run make catalogue)", err)
	}
	if string(b) != conformance.Catalogue(conformance.All()) {
		t.Fatal("reports/CATALOGUE.md is out of date with the conformance registry: run `make catalogue` and commit it")
	}
}

// TestConformanceInterruptedWhileStarting: Ctrl-C (here: the command's context cancelled) while the
// harness waits for a target that is not ready yet is reported as an interruption, exit 2, not as
// the target failing to become ready.
func TestConformanceInterruptedWhileStarting(t *testing.T) {
	if len(conformance.All()) == 0 {
		t.Skip("no conformance tests registered")
	}
	dir := t.TempDir()
	t.Setenv("EPPKIT_SEED", "7")
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"conformance", "--target", "command", "--command", "exec sleep 60",
		"--profiles", "EPP", "--log-dir", dir, "--fleet-size", "2"})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(2*time.Second, cancel)
	err := root.ExecuteContext(ctx)
	var coded interface{ ExitCode() int }
	if !errors.As(err, &coded) || coded.ExitCode() != exitHarness {
		t.Fatalf("error %v, want exit %d:\n%s", err, exitHarness, out.String())
	}
	if msg := err.Error(); !strings.Contains(msg, "interrupted (Ctrl-C or SIGTERM) while the harness was starting") || strings.Contains(msg, "not ready") {
		t.Errorf("error %q, want the interruption named and no readiness failure", msg)
	}
}

// TestConformanceResultsFile: --results-file is written when the harness cannot start (exit 2,
// the error, every selected test reported not run: the target was started) and when every test
// is skipped (exit 0, one record per test).
func TestConformanceResultsFile(t *testing.T) {
	if len(conformance.All()) == 0 {
		t.Skip("no conformance tests registered")
	}
	dir := t.TempDir()
	t.Setenv("EPPKIT_SEED", "7")
	// The command exits at once: the harness sees the exit, not a readiness timeout.
	broken := filepath.Join(dir, "broken.json")
	code, out := runCLI(t, "conformance", "--target", "command", "--command", "echo no EPP here >&2; exit 3",
		"--profiles", "EPP", "--log-dir", dir, "--fleet-size", "2", "--results-file", broken)
	if code != exitHarness {
		t.Fatalf("exit %d, want %d:\n%s", code, exitHarness, out)
	}
	r, err := conformance.ReadResultsFile(broken)
	if err != nil {
		t.Fatal(err)
	}
	notRun := len(r.Tests) > 0
	for _, tr := range r.Tests {
		notRun = notRun && tr.Outcome == conformance.Skipped && tr.Message == conformance.HarnessNotStartedMessage
	}
	if r.ExitCode != exitHarness || !strings.Contains(r.Error, "the harness could not start") || !notRun || r.Seed != 7 ||
		r.Target != "command" || r.EndpointSource != "static" {
		t.Errorf("results of a harness failure: %+v", r)
	}

	// A selection that runs nothing is refused before anything runs: exit 3, no results file.
	skipped := filepath.Join(dir, "skipped.json")
	code, out = runCLI(t, "conformance", "--target", "command", "--command", "exit 3", "--profiles", "EPP",
		"--exempt-features", "", "--run-test", "EPPHealth", "--skip-tests", "EPPHealth", "--results-file", skipped)
	if code != 3 || !strings.Contains(out, "nothing would run") {
		t.Fatalf("exit %d, want 3 saying nothing would run:\n%s", code, out)
	}
	if _, err := os.Stat(skipped); !os.IsNotExist(err) {
		t.Errorf("results file of a refused run: %v", err)
	}
}
