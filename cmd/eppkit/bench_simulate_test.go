package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// smallSimWorkload keeps the command tests fast: a tiny shared-prefix workload.
var smallSimWorkload = []string{"--workload", "shared-prefix", "--groups", "4", "--prompts-per-group", "4", "--system-prompt-len", "128",
	"--question-len", "16", "--output-len", "4", "--kv-cache-size", "512", "--max-model-len", "512", "--no-progress",
	"--configs-dir", filepath.Join("..", "..", "manifests", "epp-configs")}

func runEppkit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	root := newRootCommand()
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// TestBenchSimulatePrintsTheBenchLayoutMarkedSimulated: one simulated policy prints the vllm bench
// serve block (with goodput), the ladder and per-endpoint tables and the decision cost, marked
// SIMULATED, and writes results.json (simulated: true) and the plots.
func TestBenchSimulatePrintsTheBenchLayoutMarkedSimulated(t *testing.T) {
	out := t.TempDir()
	stdout, err := runEppkit(t, append([]string{"bench", "simulate", "--policy", "predicted-latency", "--fleet-size", "3", "--rate", "12",
		"--duration", "5s", "--seed", "23", "--goodput", "ttft:300", "--output-dir", out}, smallSimWorkload...)...)
	if err != nil {
		t.Fatalf("seed 23: %v\n%s", err, stdout)
	}
	for _, want := range []string{"SIMULATED (virtual time, not a real run): policy predicted-latency, 3 endpoints (default ×3)",
		"============ Serving Benchmark Result ============", "Request goodput (req/s):", "goodput (SLOs ttft:300):",
		"median queue", "conformance-2", "scheduling decisions (real time on this machine):", "peak RSS of this process:"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("seed 23: stdout lacks %q:\n%s", want, stdout)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res []struct {
		Simulated bool `json:"simulated"`
		FleetSize int  `json:"fleet_size"`
		Outcomes  []any
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res) != 1 || !res[0].Simulated || res[0].FleetSize != 3 || len(res[0].Outcomes) < 30 {
		t.Errorf("results.json: %v, %+v", err, res)
	}
	for _, f := range []string{"ttft_cdf.png", "endpoints_predicted-latency--simulated-.png", "vllm_predicted-latency--simulated-.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestBenchSimulateCompareWritesTheFleetPlots: a sweep over two fleet sizes prints one row per
// cell and writes sweep.json and the plots against fleet size.
func TestBenchSimulateCompareWritesTheFleetPlots(t *testing.T) {
	out := t.TempDir()
	stdout, err := runEppkit(t, append([]string{"bench", "simulate", "compare", "--endpoints", "1,4", "--policies", "round-robin,reference",
		"--rate-per-endpoint", "4", "--warmup", "1s", "--duration", "3s", "--min-requests", "20", "--groups-per-endpoint", "2",
		"--seed", "29", "--output-dir", out}, smallSimWorkload...)...)
	if err != nil {
		t.Fatalf("seed 29: %v\n%s", err, stdout)
	}
	if !strings.Contains(stdout, "SIMULATED sweep (virtual time): 4.0 req/s per endpoint, 1 s warm-up then 3 s measured") ||
		strings.Count(stdout, "round-robin") < 2 || !strings.Contains(stdout, `"ttft:500 tpot:20"`) {
		t.Errorf("seed 29: stdout:\n%s", stdout)
	}
	b, err := os.ReadFile(filepath.Join(out, "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sw struct {
		Rows []struct {
			Policy    string `json:"policy"`
			FleetSize int    `json:"fleet_size"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &sw); err != nil || len(sw.Rows) != 4 {
		t.Errorf("sweep.json: %v, %+v", err, sw)
	}
	for _, f := range []string{"fleet.png", "fleet_p90_ttft.png", "fleet_throughput.png", "fleet_goodput.png", "fleet_decision_cpu.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestBenchSimulateRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "simulate", "--policy", "nope"}, `unknown policy "nope"`},
		{[]string{"bench", "simulate", "--max-concurrency", "4"}, "--max-concurrency is not simulated"},
		{[]string{"bench", "simulate", "--fleet-size", "-1"}, "--fleet-size must be in"},
		{[]string{"bench", "simulate", "--fleet-profiles", "fast"}, `unknown profile "fast"`},
		{[]string{"bench", "simulate", "--goodput", "ttft"}, "--goodput"},
		{[]string{"bench", "simulate", "--validate", "--fleet-profiles", "slow:251"}, "at most 250 endpoints (--fleet-size, --fleet-profiles), got 251"},
		{[]string{"bench", "simulate", "--validate", "--validate-policies", "oracle"}, "no real-time counterpart"},
		{[]string{"bench", "simulate", "compare", "--endpoints", "2,x"}, `"x" is not an integer`},
		{[]string{"bench", "simulate", "compare", "--policies", "round-robin,nope"}, `unknown policy "nope"`},
		{[]string{"bench", "simulate", "--slo", "ttft:300"}, `--slo "ttft:300" needs --slo-fraction`},
		// The serving benchmark itself: flags without a target are a mistake, not a request for help.
		{[]string{"bench", "simulate", "--burstiness", "-1"}, "--burstiness must be a finite number > 0"},
		{[]string{"bench", "simulate", "--burstiness", "NaN"}, "--burstiness must be a finite number > 0"},
		{[]string{"bench", "simulate", "--refresh-metrics-interval", "-1s"}, "--refresh-metrics-interval must be > 0"},
		{[]string{"bench", "simulate", "--refresh-metrics-interval", "0"}, "--refresh-metrics-interval must be > 0"},
		{[]string{"bench", "--rate", "5"}, "--target is required"},
		// bench extproc: flag errors are exit 3 before anything is dialled or started.
		{[]string{"bench", "extproc"}, "--epp is required"},
		{[]string{"bench", "extproc", "--epp", "127.0.0.1:1", "--epp-tls", "bogus"}, "--epp-tls"},
		{[]string{"bench", "extproc", "--epp", "127.0.0.1:1", "--targets", "null"}, "cannot both be set"},
		{[]string{"bench", "extproc", "--targets", "nope"}, `--targets: "nope" is not`},
		{[]string{"bench", "extproc", "--targets", "null", "--metrics-pages", "x"}, `--metrics-pages: "x" is not`},
		{[]string{"bench", "--target", "nope"}, `unknown target "nope" (have round-robin, `},
	} {
		out, err := runEppkit(t, tc.args...)
		var coded interface{ ExitCode() int }
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &coded) || coded.ExitCode() != exitBadFlags {
			t.Errorf("%v: err = %v, want a bad-flags error containing %q\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestBenchSimulateValidateRunsBothSides: --validate runs the real-time bench (a fresh fleet) and
// the simulation of the same workload and prints the error table. Only the layout is checked:
// the errors themselves depend on the machine's load.
func TestBenchSimulateValidateRunsBothSides(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	out := t.TempDir()
	stdout, err := runEppkit(t, append([]string{"bench", "simulate", "--validate", "--validate-policies", "round-robin", "--rate", "6",
		"--duration", "3s", "--seed", "31", "--output-dir", out}, smallSimWorkload...)...)
	if err != nil {
		t.Fatalf("seed 31: %v\n%s", err, stdout)
	}
	for _, want := range []string{"Simulation vs real time: 2 endpoints", "round-robin", "mean TTFT (ms)",
		"cached share of prompt tokens (%)", "comparisons within 15%"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("seed 31: stdout lacks %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "validation.json")); err != nil {
		t.Error(err)
	}
}
