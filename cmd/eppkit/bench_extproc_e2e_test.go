package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eppkit/eppkit/bench/extproc"
)

var (
	benchBinOnce sync.Once
	benchBin     string
	benchBinErr  error
)

// eppkitBinary builds ./cmd/eppkit once per test binary: the bench starts its EPPs (null,
// reference) as subcommands of its own executable, which a test binary is not.
func eppkitBinary(t *testing.T) string {
	t.Helper()
	benchBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "eppkit-bench-test-")
		if err != nil {
			benchBinErr = err
			return
		}
		benchBin = filepath.Join(dir, "eppkit")
		build := exec.Command("go", "build", "-o", benchBin, ".")
		if out, err := build.CombinedOutput(); err != nil {
			benchBinErr = err
			t.Logf("go build: %s", out)
		}
	})
	if benchBinErr != nil {
		t.Fatalf("building eppkit: %v", benchBinErr)
	}
	return benchBin
}

func runBuiltEppkit(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, eppkitBinary(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("eppkit %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestBenchExtprocE2E runs --e2e at a tiny size (4 streams, 2 KB bodies, 2 endpoints, a second)
// against the null EPP and the reference, real processes and sockets throughout: both must
// complete requests without errors, on both endpoints, and every ratio must be finite and positive.
func TestBenchExtprocE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds eppkit and starts EPPs")
	}
	out := filepath.Join(t.TempDir(), "e2e.json")
	text := runBuiltEppkit(t, "bench", "extproc", "--e2e", "--targets", "reference", "--e2e-streams", "4", "--e2e-body-bytes", "2048",
		"--e2e-endpoints", "2", "--duration", "1s", "--warmup", "200ms", "--settle", "0s", "--refresh-metrics-interval", "100ms",
		"--seed", "3", "--log-dir", t.TempDir(), "--output", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep extproc.E2EReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Target != "null" || rep.Results[1].Target != "reference" {
		t.Fatalf("results %+v, want null then reference\n%s", rep.Results, text)
	}
	for _, r := range rep.Results {
		if r.Error != "" || r.Requests == 0 || r.Errors != 0 || r.EndpointsUsed != 2 || !(r.LatencyMs.P99 > 0) {
			t.Errorf("%s: %+v; want requests on both endpoints, no error\n%s", r.Target, r, text)
		}
	}
	if len(rep.RatiosOverNull) != 1 {
		t.Fatalf("ratios %+v, want the reference's\n%s", rep.RatiosOverNull, text)
	}
	r := rep.RatiosOverNull[0]
	for _, v := range []float64{r.P50, r.P95, r.P99} {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("ratio %+v is not finite and positive", r)
		}
	}
	if !strings.Contains(text, "÷ null") || rep.BodyBytes != 2048 || rep.Streams != 4 {
		t.Errorf("table or report lacks the settings:\n%s", text)
	}
}

// TestBenchExtprocProfile runs a two-rate ladder with --profile-dir at a tiny size: the
// reference's profile file must be written and go tool pprof's top table printed, and the null
// target must be said to have none.
func TestBenchExtprocProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds eppkit and starts EPPs")
	}
	dir := t.TempDir()
	text := runBuiltEppkit(t, "bench", "extproc", "--targets", "null,reference", "--endpoint-counts", "2", "--prompt-sizes", "1024",
		"--rates", "20,40", "--arrival", "fixed", "--duration", "1s", "--warmup", "200ms", "--settle", "0s", "--refresh-metrics-interval", "100ms",
		"--p95-bound", "1000", "--seed", "3", "--log-dir", t.TempDir(), "--plot-dir", dir, "--profile-dir", dir, "--profile-window", "1s")
	path := filepath.Join(dir, extproc.ProfileFileName("reference", "minimal", 2, 1024))
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("profile %s: %v\n%s", path, err, text)
	}
	for _, s := range []string{"Type: cpu", "flat%", "profile null, minimal pages, 2 endpoints, 1024 B: no profile available"} {
		if !strings.Contains(text, s) {
			t.Errorf("output lacks %q:\n%s", s, text)
		}
	}
}

// TestBenchExtprocE2EFlagErrors: flags that do not apply fail at start, naming the flag.
func TestBenchExtprocE2EFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--e2e", "--targets", "reference", "--e2e-streams", "0"}, "--e2e-streams"},
		{[]string{"--e2e", "--targets", "reference", "--e2e-body-bytes", "100"}, "--e2e-body-bytes"},
		{[]string{"--e2e", "--targets", "reference", "--rates", "10"}, "--rates"},
		{[]string{"--e2e"}, "--targets"},
		{[]string{"--targets", "reference", "--profile-dir", t.TempDir()}, "--profile-dir needs a ladder"},
		{[]string{"--targets", "reference", "--rates", "10", "--profile-dir", t.TempDir(), "--profile-window", "10ms"}, "--profile-window"},
		{[]string{"--epp", "127.0.0.1:1", "--profile-dir", t.TempDir()}, "--profile-dir needs --targets"},
	} {
		cmd := newBenchExtprocCommand()
		cmd.SetArgs(tc.args)
		var sb strings.Builder
		cmd.SetOut(&sb)
		cmd.SetErr(&sb)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}
