package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

// TestConformanceAddressNothingListening: --target address at an address where nothing listens
// exits 2 after the refusal grace (--timeout-config targetRefused, here 1s), not after
// targetReady (60 s), and the message names the address and says nothing is listening.
func TestConformanceAddressNothingListening(t *testing.T) {
	if len(conformance.All()) == 0 {
		t.Skip("no conformance tests registered")
	}
	ports, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	t.Setenv("EPPKIT_SEED", "7")
	tc := filepath.Join(t.TempDir(), "timeouts.yaml")
	if err := os.WriteFile(tc, []byte("targetRefused: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, out := runCLI(t, "conformance", "--target", "address", "--address", addr, "--profiles", "EPP",
		"--log-dir", filepath.Join(t.TempDir(), "logs"), "--fleet-size", "2", "--timeout-config", tc)
	took := time.Since(start)
	if code != exitHarness {
		t.Fatalf("exit %d, want %d:\n%s", code, exitHarness, out)
	}
	for _, want := range []string{"nothing is listening at " + addr, "every connection was refused for 1", "connection refused",
		"start yours first", "--address"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The fleet starts first (about a second); 30 s is half the 60 s targetReady it used to wait.
	if took > 30*time.Second {
		t.Errorf("failed after %s, want about 1s after the fleet started", took)
	}
	t.Logf("failed after %s", took.Round(time.Millisecond))
}

// TestConformanceCommandWithoutHealthPort: a --command template without {{.HealthPort}} is
// accepted (an EPP may serve health on its ext_proc port) with a warning at start-up, and a
// readiness failure then says what to add.
func TestConformanceCommandWithoutHealthPort(t *testing.T) {
	if len(conformance.All()) == 0 {
		t.Skip("no conformance tests registered")
	}
	dir := t.TempDir()
	t.Setenv("EPPKIT_SEED", "7")
	tc := filepath.Join(dir, "timeouts.yaml")
	if err := os.WriteFile(tc, []byte("targetReady: 2s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runCLI(t, "conformance", "--target", "command", "--command", "echo serving health on 9003 only; exec sleep 30",
		"--profiles", "EPP", "--log-dir", dir, "--timeout-config", tc, "--fleet-size", "2")
	if code != exitHarness {
		t.Fatalf("exit %d, want %d:\n%s", code, exitHarness, out)
	}
	for _, want := range []string{
		"warning: the --command template has no {{.HealthPort}}",
		"not ready within 2s",
		"hint: the --command template has no {{.HealthPort}}", "--grpc-health-port {{.HealthPort}}",
		"serving health on 9003 only",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
