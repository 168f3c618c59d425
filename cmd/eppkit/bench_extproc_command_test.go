package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/bench/extproc"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/internal/toolcache"
)

// benchCommandTemplate is the user's-own-EPP template of the tests: eppkit's reference EPP,
// started the way a user starts theirs, through /bin/sh -c and the template's fields.
const benchCommandTemplate = `mine={{.Eppkit}} reference-epp --endpoints {{.Endpoints}} --grpc-port {{.GRPCPort}} ` +
	`--grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}} --bind-address 127.0.0.1 --refresh-metrics-interval 100ms --log-level warn`

// TestBenchExtprocCommandTarget runs the matrix at a tiny size (2 endpoints, 1 KB, a second at
// 20/s) with the null EPP and a --command-target that launches the built eppkit's reference-epp
// through the template: the command's row must be measured without errors, with the EPP's own
// CPU and RSS (not the shell's), and read against the null floor.
func TestBenchExtprocCommandTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds eppkit and starts EPPs")
	}
	out := filepath.Join(t.TempDir(), "matrix.json")
	logs := t.TempDir()
	text := runBuiltEppkit(t, "bench", "extproc", "--targets", "null", "--command-target", benchCommandTemplate,
		"--endpoint-counts", "2", "--prompt-sizes", "1024", "--rate", "20", "--arrival", "fixed", "--duration", "1s", "--warmup", "200ms",
		"--settle", "0s", "--refresh-metrics-interval", "100ms", "--seed", "3", "--log-dir", logs, "--output", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep extproc.MatrixReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Cells) != 2 || rep.Cells[0].Target != "null" || rep.Cells[1].Target != "mine" {
		t.Fatalf("cells %+v, want null then mine\n%s", rep.Cells, text)
	}
	c := rep.Cells[1]
	if c.Error != "" || c.Report == nil || c.Report.Decisions == 0 || c.Report.Errors != 0 {
		t.Fatalf("mine: %+v; want decisions and no error\n%s", c, text)
	}
	// A shell is a few MiB; the reference EPP is tens.
	if c.Report.EPPRSSBytes < 16<<20 || !(c.Report.EPPCPUPerDecisionMs > 0) {
		t.Errorf("mine: RSS %d B, CPU %v ms/decision; want the EPP's, not the shell's\n%s", c.Report.EPPRSSBytes, c.Report.EPPCPUPerDecisionMs, text)
	}
	if len(rep.OverNullFloor) != 1 || rep.OverNullFloor[0].Target != "mine" {
		t.Errorf("over null %+v, want mine's row\n%s", rep.OverNullFloor, text)
	}
	if _, err := os.Stat(filepath.Join(logs, "mine-minimal-2", "target.log")); err != nil {
		t.Errorf("the command's log: %v", err)
	}
	if !strings.Contains(text, "starting mine: "+eppkitBinary(t)+" reference-epp --endpoints 127.") {
		t.Errorf("output lacks the rendered command line:\n%s", text)
	}
}

// TestBenchExtprocE2ECommandTarget runs --e2e at a tiny size with only a --command-target (the
// null EPP is added first): the command's result must complete requests on both endpoints and
// have a finite ratio to null.
func TestBenchExtprocE2ECommandTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds eppkit and starts EPPs")
	}
	out := filepath.Join(t.TempDir(), "e2e.json")
	text := runBuiltEppkit(t, "bench", "extproc", "--e2e", "--command-target", benchCommandTemplate, "--e2e-streams", "4",
		"--e2e-body-bytes", "2048", "--e2e-endpoints", "2", "--duration", "1s", "--warmup", "200ms", "--settle", "0s",
		"--refresh-metrics-interval", "100ms", "--seed", "3", "--log-dir", t.TempDir(), "--output", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep extproc.E2EReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Target != "null" || rep.Results[1].Target != "mine" {
		t.Fatalf("results %+v, want null then mine\n%s", rep.Results, text)
	}
	r := rep.Results[1]
	if r.Error != "" || r.Requests == 0 || r.Errors != 0 || r.EndpointsUsed != 2 {
		t.Errorf("mine: %+v; want requests on both endpoints, no error\n%s", r, text)
	}
	if len(rep.RatiosOverNull) != 1 || rep.RatiosOverNull[0].Target != "mine" || !(rep.RatiosOverNull[0].P99 > 0) {
		t.Errorf("ratios %+v, want mine's\n%s", rep.RatiosOverNull, text)
	}
}

// TestBenchExtprocCommandTargetFlagErrors: bad --command-target values fail at start, before any
// process starts, naming the flag (and the target).
func TestBenchExtprocCommandTargetFlagErrors(t *testing.T) {
	ok := `{{.Eppkit}} reference-epp --endpoints {{.Endpoints}} --grpc-port {{.GRPCPort}}`
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--command-target", "mine="}, "--command-target mine: required"},
		{[]string{"--command-target", "mine=   "}, "--command-target mine: required"},
		{[]string{"--command-target", "mine=" + ok + " --x {{.NoSuchField}}"}, "--command-target mine: template"},
		{[]string{"--command-target", "mine=" + ok, "--command-target", "mine=" + ok}, `--command-target: "mine" defined twice`},
		{[]string{"--command-target", "reference=" + ok}, `--command-target: "reference" is a built-in target`},
		{[]string{"--command-target", "My EPP=" + ok}, "--command-target: name"},
		{[]string{"--command-target", "=" + ok}, "--command-target: name"},
		{[]string{"--command-target", "no-equals-sign"}, "is not NAME=TEMPLATE"},
		{[]string{"--command-target", "mine={{.Eppkit}} reference-epp --endpoints {{.Endpoints}}"}, "--command-target mine: the template has no {{.GRPCPort}}"},
		{[]string{"--command-target", "mine={{.Eppkit}} reference-epp --grpc-port {{.GRPCPort}}"}, "--command-target mine: the template has neither"},
		{[]string{"--targets", "null,theirs", "--command-target", "mine=" + ok}, `--targets: "theirs"`},
		{[]string{"--e2e", "--command-target", "mine=" + ok, "--command-target", "mine=" + ok}, `--command-target: "mine" defined twice`},
		{[]string{"--e2e", "--command-target", "mine="}, "--command-target mine: required"},
		{[]string{"--epp", "127.0.0.1:1", "--command-target", "mine=" + ok}, "--epp and --targets (or --command-target"},
		{[]string{"--address-target", "theirs=localhost"}, `--address-target theirs: "localhost" is not host:port`},
		{[]string{"--address-target", "theirs=127.0.0.1:1,nope"}, `--address-target theirs: health address "nope"`},
		{[]string{"--address-target", "theirs"}, "is not NAME=HOST:PORT"},
		{[]string{"--address-target", "mine=127.0.0.1:1", "--command-target", "mine=" + ok}, `--command-target: "mine" defined twice`},
		{[]string{"--address-target", "null=127.0.0.1:1"}, `--address-target: "null" is a built-in target`},
		{[]string{"--address-target", "theirs=127.0.0.1:1", "--address-wait", "-1s"}, "--address-wait"},
		{[]string{"--e2e", "--address-target", "theirs=:1:2"}, "--address-target theirs"},
	} {
		cmd := newBenchExtprocCommand()
		cmd.SetArgs(append(tc.args, "--endpoint-counts", "2", "--log-dir", t.TempDir()))
		if tc.args[0] == "--e2e" {
			cmd.SetArgs(append(tc.args, "--log-dir", t.TempDir()))
		}
		var sb strings.Builder
		cmd.SetOut(&sb)
		cmd.SetErr(&sb)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

// runWithAddressTarget runs the built eppkit with args plus an --address-target "theirs" on two
// free ports and plays the user: once the bench writes the pool to endpointsFile, it starts
// eppkit's reference-epp on those ports with that pool, a real process the bench did not start.
// It returns the bench's output.
func runWithAddressTarget(t *testing.T, endpointsFile string, args ...string) string {
	t.Helper()
	ports, err := harness.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	grpc, health := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	bench := exec.CommandContext(ctx, eppkitBinary(t), append(args, "--address-target", "theirs="+grpc+","+health, "--address-wait", "2m")...)
	bench.Stdout, bench.Stderr = &out, &out
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	var pool []byte
	for ctx.Err() == nil {
		if pool, err = os.ReadFile(endpointsFile); err == nil && len(pool) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	epp := exec.CommandContext(ctx, eppkitBinary(t), "reference-epp", "--endpoints", strings.TrimSpace(string(pool)),
		"--grpc-port", strconv.Itoa(ports[0]), "--grpc-health-port", strconv.Itoa(ports[1]), "--metrics-port", strconv.Itoa(ports[2]),
		"--bind-address", "127.0.0.1", "--refresh-metrics-interval", "100ms", "--log-level", "warn")
	if err := epp.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = epp.Process.Kill(); _ = epp.Wait() }()
	if err := bench.Wait(); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	return out.String()
}

// TestBenchExtprocAddressTarget runs the matrix and --e2e at a tiny size with an
// --address-target whose EPP the test starts on the pool the bench printed: its rows must be
// measured without errors, its CPU marked as not measured.
func TestBenchExtprocAddressTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds eppkit and starts EPPs")
	}
	logs := t.TempDir()
	out := filepath.Join(t.TempDir(), "matrix.json")
	text := runWithAddressTarget(t, filepath.Join(logs, "theirs-minimal-2.endpoints"), "bench", "extproc", "--targets", "null",
		"--endpoint-counts", "2", "--prompt-sizes", "1024", "--rate", "20", "--arrival", "fixed", "--duration", "1s", "--warmup", "200ms",
		"--settle", "0s", "--refresh-metrics-interval", "100ms", "--seed", "3", "--log-dir", logs, "--output", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep extproc.MatrixReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Cells) != 2 || rep.Cells[1].Target != "theirs" {
		t.Fatalf("cells %+v, want null then theirs\n%s", rep.Cells, text)
	}
	if c := rep.Cells[1]; c.Error != "" || c.Report == nil || c.Report.Decisions == 0 || c.Report.Errors != 0 || !c.NoProcess {
		t.Fatalf("theirs: %+v; want decisions, no error, no process\n%s", c, text)
	}
	if !strings.Contains(text, "pool for theirs (2 endpoints") {
		t.Errorf("output does not print the pool:\n%s", text)
	}

	logs = t.TempDir()
	out = filepath.Join(t.TempDir(), "e2e.json")
	text = runWithAddressTarget(t, filepath.Join(logs, "e2e-theirs-2.endpoints"), "bench", "extproc", "--e2e", "--e2e-streams", "4",
		"--e2e-body-bytes", "2048", "--e2e-endpoints", "2", "--duration", "1s", "--warmup", "200ms", "--settle", "0s",
		"--refresh-metrics-interval", "100ms", "--seed", "3", "--log-dir", logs, "--output", out)
	if b, err = os.ReadFile(out); err != nil {
		t.Fatal(err)
	}
	var e2e extproc.E2EReport
	if err := json.Unmarshal(b, &e2e); err != nil {
		t.Fatal(err)
	}
	if len(e2e.Results) != 2 || e2e.Results[1].Target != "theirs" || e2e.Results[1].Error != "" || e2e.Results[1].Requests == 0 ||
		e2e.Results[1].Errors != 0 || e2e.Results[1].EndpointsUsed != 2 {
		t.Fatalf("results %+v, want null then theirs with requests on both endpoints\n%s", e2e.Results, text)
	}
}

// TestBenchExtprocCommandTargetInferencePool: a --command-target whose template takes
// {{.Kubeconfig}} and no {{.Endpoints}} discovers the pool from an InferencePool on the bench's
// kube-apiserver (skipped without `eppkit tools build k8s`).
func TestBenchExtprocCommandTargetInferencePool(t *testing.T) {
	if testing.Short() {
		t.Skip("builds eppkit and starts a kube-apiserver and an EPP")
	}
	if _, err := toolcache.Path("k8s", "kube-apiserver"); err != nil {
		t.Skip(err)
	}
	out := filepath.Join(t.TempDir(), "matrix.json")
	text := runBuiltEppkit(t, "bench", "extproc", "--command-target", `kube={{.Eppkit}} reference-epp --kubeconfig {{.Kubeconfig}} `+
		`--pool-name {{.PoolName}} --pool-namespace {{.PoolNamespace}} --grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}} `+
		`--metrics-port {{.MetricsPort}} --bind-address 127.0.0.1 --refresh-metrics-interval 100ms --log-level warn`,
		"--endpoint-counts", "2", "--prompt-sizes", "1024", "--rate", "20", "--arrival", "fixed", "--duration", "1s", "--warmup", "200ms",
		"--settle", "1s", "--refresh-metrics-interval", "100ms", "--seed", "3", "--log-dir", t.TempDir(), "--output", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep extproc.MatrixReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Cells) != 1 || rep.Cells[0].Target != "kube" || rep.Cells[0].Error != "" || rep.Cells[0].Report == nil ||
		rep.Cells[0].Report.Decisions == 0 || rep.Cells[0].Report.Errors != 0 {
		t.Fatalf("cells %+v, want kube's measured\n%s", rep.Cells, text)
	}
	if !strings.Contains(text, "creating InferencePool bench-kube-minimal-2 with 2 Pods") {
		t.Errorf("output does not show the InferencePool:\n%s", text)
	}
}
