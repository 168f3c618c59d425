package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/conformance"
)

// TestConformanceAddressNothingListening: --target address at an address where nothing listens
// exits 2 after the refusal grace (DefaultRefusedGrace), not after targetReady (60 s), and the
// message names the address and says nothing is listening.
func TestConformanceAddressNothingListening(t *testing.T) {
	if len(conformance.All()) == 0 {
		t.Skip("no conformance tests registered")
	}
	ports, err := conformance.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	t.Setenv("EPPKIT_SEED", "7")
	start := time.Now()
	code, out := runCLI(t, "conformance", "--target", "address", "--address", addr, "--profiles", "EPP",
		"--log-dir", filepath.Join(t.TempDir(), "logs"), "--fleet-size", "2")
	took := time.Since(start)
	if code != exitHarness {
		t.Fatalf("exit %d, want %d:\n%s", code, exitHarness, out)
	}
	for _, want := range []string{"nothing is listening at " + addr, "connection refused", "start yours first", "--address"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The fleet starts first (about a second); 30 s is half the 60 s targetReady it used to wait.
	if took > 30*time.Second {
		t.Errorf("failed after %s, want about %s after the fleet started", took, conformance.DefaultRefusedGrace)
	}
	t.Logf("failed after %s", took.Round(time.Millisecond))
}
