package flakecheck

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/conformance"
)

func TestDurationStats(t *testing.T) {
	mn, med, mx := durationStats([]time.Duration{3 * time.Second, time.Second, 2 * time.Second})
	if mn != "1s" || med != "2s" || mx != "3s" {
		t.Errorf("durationStats = %s %s %s, want 1s 2s 3s", mn, med, mx)
	}
	if mn, _, _ := durationStats(nil); mn != "—" {
		t.Errorf("durationStats(nil) min = %q, want —", mn)
	}
}

// fakeEppkit is a stand-in for `eppkit conformance`: it writes the results file it is given,
// failing QueueAwareness when the seed is odd, and exits as eppkit would; seed 13 writes nothing.
const fakeEppkit = `#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed=$2; shift ;;
    --results-file) out=$2; shift ;;
  esac
  shift
done
[ "$seed" = 13 ] && { echo "broken before the harness" >&2; exit 2; }
if [ $((seed % 2)) = 1 ]; then outcome=failed; code=1; failed=1; passed=0; else outcome=passed; code=0; failed=0; passed=1; fi
cat > "$out" <<JSON
{"apiVersion":"eppkit.dev/v1alpha1","kind":"ConformanceResults","seed":$seed,"exitCode":$code,
 "profiles":[{"name":"EPP-Routing","verdict":"failure","passed":$passed,"failed":$failed,"skipped":1,"interrupted":0}],
 "tests":[{"profile":"EPP-Routing","shortName":"QueueAwareness","outcome":"$outcome","durationSeconds":1.5,"message":"n=40, observed 0.30"},
          {"profile":"EPP-Routing","shortName":"EndpointChurn","outcome":"skipped","durationSeconds":0,"message":"needs apiserver"}]}
JSON
exit $code
`

// TestRunReadsTheResultsFiles: the report comes from each run's results file (counts, failing
// seeds, the first skip reason, wall times), a run without one is a run that could not run, and
// the exit code says which.
func TestRunReadsTheResultsFiles(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "eppkit")
	if err := os.WriteFile(bin, []byte(fakeEppkit), 0o755); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	report := filepath.Join(dir, "flake.md")
	err := Run(context.Background(), Options{Runs: 3, Seed: 10, Output: report, LogDir: filepath.Join(dir, "logs"), Eppkit: bin,
		ConformanceArgs: []string{"--profiles", "EPP-Routing"}, Out: &out})
	var ee *conformance.ExitError
	if !errors.As(err, &ee) || ee.Code != conformance.ExitTestFailed {
		t.Fatalf("Run = %v, want a test failure (seed 11 failed)", err)
	}
	b, _ := os.ReadFile(report)
	md := string(b)
	for _, want := range []string{"**2/3 runs green.**", "| EPP-Routing/QueueAwareness | 2 | 1 | 0 | 1.5s | 1.5s | 1.5s | 11 |",
		"| EPP-Routing/EndpointChurn | 0 | 0 | 3 | — | — | — | needs apiserver |", "profile EPP-Routing failure: 0 passed, 1 failed, 1 skipped, 0 not supported"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(out.String(), "FAIL QueueAwareness: n=40, observed 0.30") {
		t.Errorf("console lacks the failure:\n%s", out.String())
	}
	err = Run(context.Background(), Options{Runs: 2, Seed: 12, Output: report, LogDir: filepath.Join(dir, "logs2"), Eppkit: bin})
	if !errors.As(err, &ee) || ee.Code != conformance.ExitHarness {
		t.Fatalf("Run with seed 13 broken = %v, want a harness error", err)
	}
	if err := Run(context.Background(), Options{Runs: 1, Eppkit: bin, ConformanceArgs: []string{"--seed=4"}}); !errors.As(err, &ee) || ee.Code != conformance.ExitBadOptions {
		t.Fatalf("--seed in the conformance flags = %v, want bad options", err)
	}
}
