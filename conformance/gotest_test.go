package conformance

import (
	"strings"
	"testing"
)

// TestSubtestLogPrintsOnce: a failed RunTest subtest logs the test's own lines, not the failure
// message nor the reproduction line, which its Fatalf prints once.
func TestSubtestLogPrintsOnce(t *testing.T) {
	res := TestResult{Outcome: Failed, Message: "EPP picked 10.0.0.9:8000, not in the pool",
		Log: "seed 7; reproduce: EPPKIT_SEED=7 with --run-test X\nsent 3 requests\nEPP picked 10.0.0.9:8000, not in the pool\n"}
	if got := subtestLog(res); got != "sent 3 requests" {
		t.Errorf("subtestLog = %q, want only the test's own line", got)
	}
	if got := subtestLog(TestResult{Outcome: Passed, Log: "seed 7; reproduce: x\n"}); got != "" {
		t.Errorf("subtestLog of a passing test with only the seed line = %q, want empty", got)
	}
	repro := goTestRepro("TestEPP", "EPPSubsetHint", "./epp", 7)
	if repro != "EPPKIT_SEED=7 go test -count=1 -run '^TestEPP$/^EPPSubsetHint$' ./epp" {
		t.Errorf("goTestRepro = %q", repro)
	}
	if pkg := goTestPackage(); pkg != "./conformance" || strings.Contains(pkg, "\\") {
		t.Errorf("goTestPackage = %q from this package's directory, want ./conformance", pkg)
	}
}
