package extproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
	"github.com/eppkit/eppkit/conformance/harness"
	conftarget "github.com/eppkit/eppkit/conformance/target"
	"github.com/eppkit/eppkit/fakes/metricspage"
	"github.com/eppkit/eppkit/fakes/nullepp"
	"github.com/eppkit/eppkit/internal/procstat"
	"github.com/eppkit/eppkit/internal/promscrape"
	"github.com/eppkit/eppkit/internal/supervisor"
	"github.com/eppkit/eppkit/internal/toolcache"
)

// Targets of the picker-overhead matrix (`eppkit bench extproc --targets ...`).
const (
	TargetReference = "reference"
	TargetUpstream  = "upstream"
	// TargetNull is the floor: `eppkit bench null-epp`, which answers the protocol and
	// decides nothing (bench_extproc_null.go).
	TargetNull = "null"
	// TargetLLMDRouter is llm-d-router v0.10.0's EPP (eppkit tools build llmd-router) with its
	// default config, discovering the pool from an InferencePool as the upstream target does.
	TargetLLMDRouter = "llmd-router"
)

// Metrics page kinds of the matrix's endpoints (--metrics-pages).
const (
	// PagesMinimal is the gauge-only page of a fake vLLM with pinned metrics (a few KB, the same
	// on every scrape): what the EPP must read and little else.
	PagesMinimal = "minimal"
	// PagesRealistic is a page shaped like a real vLLM v1 server's (fakes/metricspage
	// RealisticOptions defaults: every family, histograms with all buckets, two engines and four
	// LoRA adapters, about 300 KB) whose values change on every scrape.
	PagesRealistic = "realistic"
)

// scrapeWindow is how long the matrix watches an EPP that is only scraping (no decisions) to
// measure its scrape cost; at least scrapeWindowIntervals refresh intervals.
const (
	scrapeWindow          = 3 * time.Second
	scrapeWindowIntervals = 20
)

// MatrixOptions configure a picker-overhead matrix: every target × endpoint count × prompt size,
// each cell one Options run against an EPP this command starts.
type MatrixOptions struct {
	Targets []string
	// Pages are the metrics page kinds to run the whole matrix with (PagesMinimal,
	// PagesRealistic; default minimal).
	Pages           []string
	EndpointCounts  []int
	PromptSizes     []int
	RefreshInterval time.Duration
	UpstreamEPP     string // path of the upstream EPP binary ("" = the tools cache's gie epp)
	LogDir          string // where the EPP logs go
	Output          string // JSON report file ("" = none)
	Settle          time.Duration
	Bench           Options // per-cell load (rate or concurrency, duration, warm-up, seed)
	// Eppkit is the eppkit binary that runs the reference and null targets ("" = this executable).
	Eppkit string
	// InferencePerfDir, when set, receives each cell's inference-perf report (CellReportDir).
	InferencePerfDir string
	// LLMDRouterEPP is llm-d-router's EPP binary ("" = the tools cache's llmd-router epp).
	LLMDRouterEPP string
	// Rates, when set, is the open-loop ladder (decisions/s) every cell runs in turn, replacing
	// Bench.Rate; P95BoundMs is the bound of a sustained rate (Sustained).
	Rates      []float64
	P95BoundMs float64
	// PlotDir, when set, receives the P95-against-rate plots of a ladder (WriteOverheadPlots).
	PlotDir string
	// ProfileDir, when set with Rates, receives a CPU profile of each target that serves
	// net/http/pprof (the reference) at each pool and prompt size's highest sustained rate
	// (ProfileSustained): <target>_<pages>_<n>ep_<bytes>B.pprof. ProfileWindow is the profile's
	// length (default DefaultProfileWindow).
	ProfileDir    string
	ProfileWindow time.Duration
	// E2E configures the end-to-end mode (RunE2E); the matrix itself does not read it.
	E2E E2EOptions
	// CommandTargets are the user's own EPPs (--command-target), measured in the matrix and in
	// the end-to-end mode like the built-in targets; Validate appends each name missing from
	// Targets to it.
	CommandTargets []CommandTarget
	// AddressTargets are the user's EPPs already running (--address-target), measured like the
	// others once they pick in the bench's pool; Validate appends each name missing from Targets.
	// AddressWait bounds the wait for each to do so (default DefaultAddressWait).
	AddressTargets []AddressTarget
	AddressWait    time.Duration

	commands  map[string]*conftarget.CommandTarget // CommandTargets parsed by Validate
	addresses map[string]AddressTarget             // AddressTargets by name, filled by Validate
}

// AddressTarget is a user's EPP that is already running (`bench extproc --address-target
// NAME=HOST:PORT[,HEALTH_HOST:PORT]`): the bench starts nothing. Before each row it builds the
// pool as usual, prints its endpoints (the {{.Endpoints}} form, ip:port,…) and writes them to
// <log-dir>/<NAME>-<pages>-<n>.endpoints (--e2e: e2e-<NAME>-<n>.endpoints), and waits up to
// AddressWait for the EPP at Address to answer gRPC health SERVING at Health and then to pick an
// endpoint of that pool; the user (or a script watching the file) starts or repoints the EPP
// meanwhile. Its CPU, scrape cost and RSS are not measured (no process id): those columns are 0
// or -1.
type AddressTarget struct {
	// Name names the target's rows, as CommandTarget.Name.
	Name string
	// Address is the EPP's ext_proc host:port; Health its gRPC health host:port ("" = Address).
	Address, Health string
}

// DefaultAddressWait is the default bound on the wait for an address target to pick in the pool.
const DefaultAddressWait = 5 * time.Minute

// CommandTarget is a user's own EPP (`bench extproc --command-target NAME=TEMPLATE`): the bench
// starts it for each pool from Command, a text/template command line run by /bin/sh -c with the
// fields the conformance command target gets (harness.TargetEnvFields; conformance/target does
// the expansion and the readiness wait), and names its rows Name. With {{.Endpoints}} in the
// template the EPP is given the pool as a static list (ip:port,…); with {{.Kubeconfig}} and no
// {{.Endpoints}} it discovers it from an InferencePool ({{.PoolName}} in {{.PoolNamespace}}) on
// the bench's local kube-apiserver, as the upstream target does. {{.Eppkit}} is the eppkit binary,
// {{.Seed}} the run's seed, {{.LogDir}} the folder of its log (target.log); {{.ConfigFile}},
// {{.ModelRewritesFile}} and {{.PredictorURL}} are empty (the bench runs no predictor), so
// conformance templates that guard them with {{if}} work unchanged. The EPP is ready when its gRPC
// health answers SERVING (on {{.HealthPort}}, or on {{.GRPCPort}} when the template has no
// {{.HealthPort}}) and an ext_proc probe is answered with anything but 503; the bench cannot read a
// user's ready-endpoints gauge, so --settle should cover its first scrapes. CPU and RSS are the
// command's process: the shell's only child when /bin/sh did not exec it (procstat.ExecutedPID),
// so a template that is one command (or starts with exec) is measured exactly.
type CommandTarget struct {
	// Name names the target's rows: lower-case letters, digits, '.', '_' and '-', not a built-in
	// target's name.
	Name string
	// Command is the command template.
	Command string
}

// builtinTargets are the targets the matrix knows how to start without a template.
var builtinTargets = []string{TargetReference, TargetUpstream, TargetLLMDRouter, TargetNull}

// validCommandTargetName is what a --command-target name may hold (it names log files too).
func validCommandTargetName(name string) bool {
	if name == "" || name[0] == '.' || name[0] == '-' {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// parseCommandTargets parses m.CommandTargets into m.commands and m.AddressTargets into
// m.addresses, and appends each name missing from m.Targets; errors name --command-target or
// --address-target and the target.
func (m *MatrixOptions) parseCommandTargets() error {
	m.commands = map[string]*conftarget.CommandTarget{}
	m.addresses = map[string]AddressTarget{}
	checkName := func(flag, name string) error {
		_, isAddr := m.addresses[name]
		switch {
		case !validCommandTargetName(name):
			return fmt.Errorf("%s: name %q must be lower-case letters, digits, '.', '_' or '-'", flag, name)
		case slices.Contains(builtinTargets, name):
			return fmt.Errorf("%s: %q is a built-in target; choose another name", flag, name)
		case m.commands[name] != nil || isAddr:
			return fmt.Errorf("%s: %q defined twice", flag, name)
		}
		return nil
	}
	for _, a := range m.AddressTargets {
		if err := checkName("--address-target", a.Name); err != nil {
			return err
		}
		if _, _, err := net.SplitHostPort(a.Address); err != nil {
			return fmt.Errorf("--address-target %s: %q is not host:port", a.Name, a.Address)
		}
		if _, _, err := net.SplitHostPort(a.Health); a.Health != "" && err != nil {
			return fmt.Errorf("--address-target %s: health address %q is not host:port", a.Name, a.Health)
		}
		m.addresses[a.Name] = a
		if !slices.Contains(m.Targets, a.Name) {
			m.Targets = append(m.Targets, a.Name)
		}
	}
	if m.AddressWait == 0 {
		m.AddressWait = DefaultAddressWait
	}
	if m.AddressWait < 0 {
		return fmt.Errorf("--address-wait must not be negative, got %v", m.AddressWait)
	}
	for _, c := range m.CommandTargets {
		if err := checkName("--command-target", c.Name); err != nil {
			return err
		}
		flag := "--command-target " + c.Name
		ct, err := conftarget.NewCommandTargetFlag(flag, c.Name, c.Command)
		if err != nil {
			return err
		}
		if !ct.UsesField("GRPCPort") {
			return fmt.Errorf("%s: the template has no {{.GRPCPort}}: the EPP must serve ext_proc on the port the bench picks", flag)
		}
		if !ct.UsesField("Endpoints") && !ct.UsesField("Kubeconfig") {
			return fmt.Errorf("%s: the template has neither {{.Endpoints}} nor {{.Kubeconfig}}: the EPP could not learn the bench's pool", flag)
		}
		m.commands[c.Name] = ct
		if !slices.Contains(m.Targets, c.Name) {
			m.Targets = append(m.Targets, c.Name)
		}
	}
	return nil
}

// needsControlPlane reports whether target discovers its pool from an InferencePool on the
// bench's kube-apiserver: upstream, llmd-router, and a command target with {{.Kubeconfig}} but no
// {{.Endpoints}}.
func (m *MatrixOptions) needsControlPlane(target string) bool {
	if ct := m.commands[target]; ct != nil {
		return ct.UsesField("Kubeconfig") && !ct.UsesField("Endpoints")
	}
	return target == TargetUpstream || target == TargetLLMDRouter
}

// MatrixCell is one measured cell.
type MatrixCell struct {
	Target      string `json:"target"`
	Pages       string `json:"pages"`
	Endpoints   int    `json:"endpoints"`
	PromptBytes int    `json:"prompt_bytes"`
	// Rate is the cell's open-loop rate (decisions/s; 0 = closed loop).
	Rate float64 `json:"rate,omitempty"`
	// ScrapeCPUUsPerEndpointSecond is the EPP's CPU time (µs) per endpoint per second while it
	// only scraped, before this row's decisions (the same for every cell of a row; -1 when it
	// could not be read): what keeping the pool's metrics costs at this page kind and interval.
	ScrapeCPUUsPerEndpointSecond float64 `json:"scrape_cpu_us_per_endpoint_second"`
	Report                       *Report `json:"report,omitempty"`
	Error                        string  `json:"error,omitempty"`
	// NoProcess is set when the bench does not know the EPP's process (an address target): its
	// CPU, RSS and scrape cost are not measured, and its CPU is not read against the null floor.
	NoProcess bool `json:"no_process,omitempty"`
}

// MatrixRatio compares the reference with the upstream EPP in one (endpoints, prompt) cell:
// reference ÷ upstream for each figure.
type MatrixRatio struct {
	Pages              string  `json:"pages"`
	Endpoints          int     `json:"endpoints"`
	PromptBytes        int     `json:"prompt_bytes"`
	DecisionsPerSecond float64 `json:"decisions_per_second"`
	P50                float64 `json:"latency_p50"`
	P99                float64 `json:"latency_p99"`
	CPUPerDecision     float64 `json:"epp_cpu_per_decision"`
}

// MatrixOverFloor is one EPP cell read against the null target's cell of the same size: the
// EPP's figure minus the floor's. The latency fields are differences of percentiles (p50 − p50),
// not percentiles of per-decision differences: a guide to what the decision adds, not a bound.
type MatrixOverFloor struct {
	Target string `json:"target"`
	Pages  string `json:"pages"`
	// DecisionsPerSecond is the EPP's decisions/s ÷ the floor's (a ratio, unlike the others).
	DecisionsPerSecond float64 `json:"decisions_per_second_over_null"`
	Endpoints          int     `json:"endpoints"`
	PromptBytes        int     `json:"prompt_bytes"`
	Rate               float64 `json:"rate,omitempty"`
	P50Ms              float64 `json:"latency_p50_ms"`
	P99Ms              float64 `json:"latency_p99_ms"`
	// CPUPerDecision is 0 for a target whose process is not known (MatrixCell.NoProcess).
	CPUPerDecision float64 `json:"epp_cpu_per_decision_ms"`
}

// MatrixReport is the JSON result of a matrix run.
type MatrixReport struct {
	Started                 time.Time         `json:"started"`
	Mode                    string            `json:"mode"`
	Concurrency             int               `json:"concurrency,omitempty"`
	TargetRate              float64           `json:"target_rate,omitempty"`
	DurationSeconds         float64           `json:"duration_seconds"`
	RefreshIntervalSeconds  float64           `json:"refresh_metrics_interval_seconds"`
	Cells                   []MatrixCell      `json:"cells"`
	RatiosReferenceUpstream []MatrixRatio     `json:"ratios_reference_over_upstream,omitempty"`
	OverNullFloor           []MatrixOverFloor `json:"over_null_floor,omitempty"`
	// P95BoundMs, Sustained and RatiosReferenceLLMDRouter are the rate ladder's results (with
	// Rates set): each target's highest sustained rate and the reference against llm-d-router.
	P95BoundMs                float64            `json:"p95_bound_ms,omitempty"`
	Sustained                 []SustainedRow     `json:"sustained,omitempty"`
	RatiosReferenceLLMDRouter []LLMDRouterRatios `json:"ratios_reference_over_llmd_router,omitempty"`
}

func ParseIntList(flag, s string, lo int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < lo {
			return nil, fmt.Errorf("%s: %q is not an integer ≥ %d", flag, f, lo)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: empty list", flag)
	}
	return out, nil
}

// Validate checks the matrix's own options (each error names its flag: --command-target (an
// empty template, an unknown template field, a duplicate or built-in name, a template without
// {{.GRPCPort}} or without a way to learn the pool), --address-target (a name as for
// --command-target, an address that is not host:port), --address-wait, --targets, --metrics-pages,
// --endpoint-counts, --refresh-metrics-interval, --settle, and --upstream-epp when upstream is a
// target) and fills the defaults: Pages (minimal), UpstreamEPP (the tools cache's gie epp) and
// AddressWait; it appends the command and address targets missing from Targets. The per-cell load (Bench) is checked by
// Options.Validate. RunMatrix calls it.
func (m *MatrixOptions) Validate() error {
	if err := m.parseCommandTargets(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, t := range m.Targets {
		if _, isAddr := m.addresses[t]; !slices.Contains(builtinTargets, t) && m.commands[t] == nil && !isAddr {
			return fmt.Errorf("--targets: %q is not %s, %s, %s, %s or a --command-target or --address-target name", t, TargetReference, TargetUpstream, TargetLLMDRouter, TargetNull)
		}
		if seen[t] {
			return fmt.Errorf("--targets: %q listed twice", t)
		}
		seen[t] = true
	}
	if len(m.Pages) == 0 {
		m.Pages = []string{PagesMinimal}
	}
	seenPages := map[string]bool{}
	for _, k := range m.Pages {
		if k != PagesMinimal && k != PagesRealistic {
			return fmt.Errorf("--metrics-pages: %q is not %s or %s", k, PagesMinimal, PagesRealistic)
		}
		if seenPages[k] {
			return fmt.Errorf("--metrics-pages: %q listed twice", k)
		}
		seenPages[k] = true
	}
	for _, n := range m.EndpointCounts {
		if n > metricspage.MaxEndpoints {
			return fmt.Errorf("--endpoint-counts: %d is more than %d", n, metricspage.MaxEndpoints)
		}
	}
	if m.RefreshInterval <= 0 {
		return fmt.Errorf("--refresh-metrics-interval must be positive, got %v", m.RefreshInterval)
	}
	if m.Settle < 0 {
		return fmt.Errorf("--settle must not be negative, got %v", m.Settle)
	}
	if seen[TargetUpstream] && m.UpstreamEPP == "" {
		p, err := toolcache.Path("gie", "epp")
		if err != nil {
			return fmt.Errorf("--targets upstream needs the upstream EPP binary (--upstream-epp, or `eppkit tools build gie`): %w", err)
		}
		m.UpstreamEPP = p
	}
	if seen[TargetLLMDRouter] && m.LLMDRouterEPP == "" {
		p, err := toolcache.Path("llmd-router", "epp")
		if err != nil {
			return fmt.Errorf("--targets llmd-router needs llm-d-router's EPP binary (--llmd-router-epp, or `eppkit tools build llmd-router`): %w", err)
		}
		m.LLMDRouterEPP = p
	}
	for _, r := range m.Rates {
		if !(r > 0) || math.IsInf(r, 0) {
			return fmt.Errorf("--rates: %v is not a positive rate", r)
		}
	}
	if len(m.Rates) > 0 && !(m.P95BoundMs > 0) {
		return fmt.Errorf("--p95-bound must be positive, got %v", m.P95BoundMs)
	}
	if m.ProfileDir != "" {
		if len(m.Rates) == 0 {
			return errors.New("--profile-dir needs a ladder (--rates): it profiles each target at its highest sustained rate")
		}
		if m.ProfileWindow == 0 {
			m.ProfileWindow = DefaultProfileWindow
		}
		if m.ProfileWindow < time.Second {
			return fmt.Errorf("--profile-window must be at least 1s (pprof profiles whole seconds), got %v", m.ProfileWindow)
		}
		if err := os.MkdirAll(m.ProfileDir, 0o755); err != nil {
			return fmt.Errorf("--profile-dir: %w", err)
		}
	}
	return nil
}

// eppRunner is a started EPP process: a *supervisor.Process (the built-in targets) or a
// *conformance/target.CommandTarget (a user's command).
type eppRunner interface {
	PID() int
	Exited() <-chan struct{}
	ExitErr() error
	Stop(timeout time.Duration) error
}

// eppProcess is one EPP started for a row of the matrix.
type eppProcess struct {
	proc        eppRunner
	grpcAddr    string
	metricsURL  string
	readyMetric string // the EPP's own gauge of ready endpoints
	pprofAddr   string // host:port of its net/http/pprof ("" = none)
}

func startEPPProcess(name string, args, env []string, logPath string) (*eppProcess, error) {
	spec := supervisor.Spec{Path: name, Args: args, LogPath: logPath}
	if env != nil {
		spec.Env = append(os.Environ(), env...)
	}
	proc, err := supervisor.Start(spec)
	if err != nil {
		return nil, err
	}
	return &eppProcess{proc: proc}, nil
}

func (p *eppProcess) stop() { _ = p.proc.Stop(15 * time.Second) }

// pid is the EPP's process id for its CPU and RSS: under a /bin/sh that did not exec the
// command, the shell's child (procstat.ExecutedPID).
func (p *eppProcess) pid() int { return procstat.ExecutedPID(p.proc.PID()) }

// waitReady waits until the EPP's own metrics report n ready endpoints.
func (p *eppProcess) waitReady(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-p.proc.Exited():
			return fmt.Errorf("the EPP exited: %v", p.proc.ExitErr())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		fams, err := promscrape.Get(ctx, nil, p.metricsURL)
		if err != nil {
			last = err.Error()
			continue
		}
		v, ok := fams.First(p.readyMetric)
		if !ok {
			last = p.readyMetric + " not in " + p.metricsURL
			continue
		}
		last = fmt.Sprintf("%s = %v", p.readyMetric, v)
		if int(v) == n {
			return nil
		}
	}
	return fmt.Errorf("not ready after %v: %s", timeout, last)
}

// writeOutput writes report as indented JSON to path (--output; nothing when path is "") and says
// so on w. A failed write is an error naming --output.
func writeOutput(w io.Writer, path string, report any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	fmt.Fprintf(w, "wrote %s\n", path)
	return nil
}

// prepareRun makes m.LogDir (a new temporary directory named prefix* when it is empty) and returns
// the eppkit binary that runs the null and reference EPPs: m.Eppkit, or this executable.
func (m *MatrixOptions) prepareRun(prefix string) (string, error) {
	if m.LogDir == "" {
		d, err := os.MkdirTemp("", prefix)
		if err != nil {
			return "", err
		}
		m.LogDir = d
	} else if err := os.MkdirAll(m.LogDir, 0o755); err != nil {
		return "", err
	}
	if m.Eppkit != "" {
		return m.Eppkit, nil
	}
	return os.Executable()
}

// RunMatrix runs every cell and prints one table; w gets progress lines and the table.
func RunMatrix(ctx context.Context, w io.Writer, m MatrixOptions) (*MatrixReport, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	self, err := m.prepareRun("eppkit-bench-extproc-")
	if err != nil {
		return nil, err
	}
	rep := &MatrixReport{Started: time.Now().UTC(), DurationSeconds: m.Bench.Duration.Seconds(),
		RefreshIntervalSeconds: m.RefreshInterval.Seconds()}
	if m.Bench.Rate > 0 {
		rep.Mode, rep.TargetRate = "open-"+m.Bench.Arrival, m.Bench.Rate
	} else {
		rep.Mode, rep.Concurrency = "closed", m.Bench.Concurrency
	}
	fmt.Fprintf(w, "picker overhead: targets %v, metrics pages %v, endpoints %v, prompts %v bytes, %s, %v per cell (+%v warm-up), metrics refresh %v; logs in %s\n",
		m.Targets, m.Pages, m.EndpointCounts, m.PromptSizes, loadDescription(m.Bench), m.Bench.Duration, m.Bench.Warmup, m.RefreshInterval, m.LogDir)

	var cp *apiserver.ControlPlane
	defer func() {
		if cp != nil {
			_ = cp.Stop()
		}
	}()
	for _, pages := range m.Pages {
		for _, n := range m.EndpointCounts {
			if err := runMatrixFleet(ctx, w, m, self, &cp, rep, pages, n); err != nil {
				return nil, err
			}
		}
	}
	rep.RatiosReferenceUpstream = matrixRatios(rep.Cells)
	rep.OverNullFloor = matrixOverNull(rep.Cells)
	if len(m.Rates) > 0 {
		rep.P95BoundMs = m.P95BoundMs
		rep.Sustained = SustainedRates(rep.Cells, m.P95BoundMs)
		rep.RatiosReferenceLLMDRouter = ReferenceOverLLMDRouter(rep.Cells, rep.Sustained)
	}
	PrintMatrix(w, rep)
	PrintOverhead(w, rep)
	if len(m.Rates) > 1 && m.PlotDir != "" {
		files, err := WriteOverheadPlots(m.PlotDir, rep)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "wrote %s\n", strings.Join(files, ", "))
	}
	if err := writeOutput(w, m.Output, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// runMatrixFleet starts n endpoints serving pages and runs every target's row against them; it
// starts the control plane (*cp) the first time the upstream target needs it.
func runMatrixFleet(ctx context.Context, w io.Writer, m MatrixOptions, self string, cp **apiserver.ControlPlane,
	rep *MatrixReport, pages string, n int) error {
	var fleet *metricspage.Fleet
	var err error
	switch pages {
	case PagesRealistic:
		fmt.Fprintf(w, "rendering %d realistic vLLM pages ×%d variants…\n", n, metricspage.DefaultRealisticVariants)
		fleet, err = metricspage.StartRealisticFleet(n, metricspage.RealisticOptions{})
	default:
		fleet, err = metricspage.StartFleet(n)
	}
	if err != nil {
		return err
	}
	defer fleet.Close()
	for _, target := range m.Targets {
		if m.needsControlPlane(target) && *cp == nil {
			fmt.Fprintf(w, "starting kube-apiserver + etcd for the upstream EPPs' InferencePool discovery…\n")
			*cp, err = apiserver.StartControlPlane(ctx, apiserver.ControlPlaneOptions{Dir: filepath.Join(m.LogDir, "apiserver"), KeepDir: true})
			if err != nil {
				return fmt.Errorf("upstream target: %w", err)
			}
		}
		cells, err := runMatrixRow(ctx, w, m, self, *cp, target, pages, fleet)
		rep.Cells = append(rep.Cells, cells...)
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func loadDescription(o Options) string {
	if o.Rate > 0 {
		return fmt.Sprintf("open loop %.0f/s (%s)", o.Rate, o.Arrival)
	}
	return fmt.Sprintf("closed loop, concurrency %d", o.Concurrency)
}

// runMatrixRow starts one target's EPP on the fleet and measures every prompt size against it.
// A start failure becomes an error cell per prompt size.
func runMatrixRow(ctx context.Context, w io.Writer, m MatrixOptions, self string, cp *apiserver.ControlPlane,
	target, pages string, fleet *metricspage.Fleet) ([]MatrixCell, error) {
	n := len(fleet.Addrs)
	fail := func(err error) ([]MatrixCell, error) {
		fmt.Fprintf(w, "  %s, %s pages, %d endpoints: %v\n", target, pages, n, err)
		var cells []MatrixCell
		for _, size := range m.PromptSizes {
			cells = append(cells, MatrixCell{Target: target, Pages: pages, Endpoints: n, PromptBytes: size, Error: err.Error()})
		}
		return cells, err
	}
	logPath := filepath.Join(m.LogDir, fmt.Sprintf("%s-%s-%d.log", target, pages, n))
	p, err := startTarget(ctx, w, m, self, cp, target, pages, fleet.Addrs, logPath)
	if err != nil {
		return fail(err)
	}
	defer p.stop()
	// Let every endpoint be scraped at least twice before measuring.
	if err := sleepCtx(ctx, m.Settle+2*m.RefreshInterval); err != nil {
		return fail(err)
	}
	scrapeCost, err := -1.0, error(nil)
	if p.proc.PID() > 0 {
		scrapeCost, err = scrapeCPU(ctx, p.pid(), n, max(scrapeWindow, scrapeWindowIntervals*m.RefreshInterval))
	}
	if err != nil {
		if ctx.Err() != nil {
			return fail(err)
		}
		fmt.Fprintf(w, "  %s: scrape cost not measured: %v\n", target, err)
		scrapeCost = -1
	} else if scrapeCost >= 0 {
		fmt.Fprintf(w, "  %-9s %-9s %5d endpoints  scraping only: %.1f µs CPU per endpoint per second\n", target, pages, n, scrapeCost)
	}
	var cells []MatrixCell
	rates := m.Rates
	if len(rates) == 0 {
		rates = []float64{m.Bench.Rate}
	}
	for _, size := range m.PromptSizes {
		for _, rate := range rates {
			o := m.Bench
			o.EPP, o.PromptBytes, o.PID, o.Rate = p.grpcAddr, size, p.pid(), rate
			o.Record = m.InferencePerfDir != ""
			r, err := Run(ctx, o)
			c := MatrixCell{Target: target, Pages: pages, Endpoints: n, PromptBytes: size, Rate: rate, Report: r, ScrapeCPUUsPerEndpointSecond: scrapeCost,
				NoProcess: p.proc.PID() == 0}
			if err == nil && r != nil {
				err = ErrNoDecision(r)
			}
			if err == nil && o.Record {
				_, err = WriteInferencePerf(CellReportDir(m.InferencePerfDir, c), r)
			}
			if err != nil {
				c.Error = err.Error()
			}
			cells = append(cells, c)
			fmt.Fprintf(w, "  %s\n", cellLine(c))
			if ctx.Err() != nil {
				return cells, ctx.Err()
			}
		}
	}
	if m.ProfileDir != "" && len(m.Rates) > 0 {
		if err := ProfileSustained(ctx, w, m, p, cells); err != nil && ctx.Err() != nil {
			return cells, ctx.Err()
		}
	}
	return cells, nil
}

// scrapeCPU is process pid's CPU time (µs) per endpoint per second over window, while nothing
// but its metrics scraping (and its own background work) runs: n endpoints.
func scrapeCPU(ctx context.Context, pid, n int, window time.Duration) (float64, error) {
	c0, err := processCPU(pid)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, window); err != nil {
		return 0, err
	}
	c1, err := processCPU(pid)
	if err != nil {
		return 0, err
	}
	return (c1 - c0) * 1e6 / time.Since(t0).Seconds() / float64(n), nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func cellLine(c MatrixCell) string {
	head := fmt.Sprintf("%-11s %-9s %5d endpoints %7d B", c.Target, c.Pages, c.Endpoints, c.PromptBytes)
	if c.Rate > 0 {
		head += fmt.Sprintf(" @ %.0f/s", c.Rate)
	}
	if c.Error != "" {
		return head + "  error: " + c.Error
	}
	r := c.Report
	return fmt.Sprintf("%s  %8.1f/s  p50 %7.3f  p95 %7.3f  p99 %7.3f  p99.9 %7.3f ms  errors %d  dropped %d  EPP CPU %.3f ms/decision  RSS %.0f MiB  load %.1f",
		head, r.DecisionsPerSec, r.LatencyMs.P50, r.LatencyMs.P95, r.LatencyMs.P99, r.LatencyMs.P999, r.Errors, r.Dropped, r.EPPCPUPerDecisionMs,
		float64(r.EPPRSSBytes)/(1<<20), r.LoadAverage)
}

// matrixRatios pairs reference and upstream cells of equal pages and size.
func matrixRatios(cells []MatrixCell) []MatrixRatio {
	type key struct {
		pages   string
		n, size int
		rate    float64
	}
	ref, up := map[key]*Report{}, map[key]*Report{}
	var order []key
	for _, c := range cells {
		if c.Report == nil || c.Error != "" {
			continue
		}
		k := key{c.Pages, c.Endpoints, c.PromptBytes, c.Rate}
		switch c.Target {
		case TargetReference:
			ref[k] = c.Report
			order = append(order, k)
		case TargetUpstream:
			up[k] = c.Report
		}
	}
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	var out []MatrixRatio
	for _, k := range order {
		r, u := ref[k], up[k]
		if u == nil {
			continue
		}
		out = append(out, MatrixRatio{Pages: k.pages, Endpoints: k.n, PromptBytes: k.size,
			DecisionsPerSecond: div(r.DecisionsPerSec, u.DecisionsPerSec),
			P50:                div(r.LatencyMs.P50, u.LatencyMs.P50), P99: div(r.LatencyMs.P99, u.LatencyMs.P99),
			CPUPerDecision: div(r.EPPCPUPerDecisionMs, u.EPPCPUPerDecisionMs)})
	}
	return out
}

// matrixOverNull reads every non-null cell against the null cell of equal pages and size, when
// there is one.
func matrixOverNull(cells []MatrixCell) []MatrixOverFloor {
	type key struct {
		pages   string
		n, size int
		rate    float64
	}
	floor := map[key]*Report{}
	for _, c := range cells {
		if c.Target == TargetNull && c.Report != nil && c.Error == "" {
			floor[key{c.Pages, c.Endpoints, c.PromptBytes, c.Rate}] = c.Report
		}
	}
	var out []MatrixOverFloor
	for _, c := range cells {
		f := floor[key{c.Pages, c.Endpoints, c.PromptBytes, c.Rate}]
		if c.Target == TargetNull || c.Report == nil || c.Error != "" || f == nil {
			continue
		}
		o := MatrixOverFloor{Target: c.Target, Pages: c.Pages, Endpoints: c.Endpoints, PromptBytes: c.PromptBytes, Rate: c.Rate,
			DecisionsPerSecond: ratioOf(c.Report.DecisionsPerSec, f.DecisionsPerSec),
			P50Ms:              c.Report.LatencyMs.P50 - f.LatencyMs.P50, P99Ms: c.Report.LatencyMs.P99 - f.LatencyMs.P99}
		if !c.NoProcess {
			o.CPUPerDecision = c.Report.EPPCPUPerDecisionMs - f.EPPCPUPerDecisionMs
		}
		out = append(out, o)
	}
	return out
}

// ratioOf is a ÷ b, 0 when b is 0.
func ratioOf(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// PrintMatrix writes the matrix: one line per cell (with the row's scrape cost: µs of EPP CPU per
// endpoint per second while only scraping), reference ÷ upstream per cell, each EPP ÷ the null
// floor's decisions/s, and each EPP minus the floor.
func PrintMatrix(w io.Writer, rep *MatrixReport) {
	fmt.Fprintf(w, "\n%-11s %-9s %9s %8s %7s %10s %9s %9s %9s %9s %7s %12s %12s %8s %14s %6s\n", "target", "pages", "endpoints", "prompt", "rate", "decisions/s",
		"p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "errors", "EPP CPU ms/d", "drv CPU ms/d", "RSS MiB", "scrape µs/ep/s", "load")
	for _, c := range rep.Cells {
		rate := "closed"
		if c.Rate > 0 {
			rate = fmt.Sprintf("%.0f", c.Rate)
		}
		if c.Error != "" || c.Report == nil {
			fmt.Fprintf(w, "%-11s %-9s %9d %8d %7s  error: %s\n", c.Target, c.Pages, c.Endpoints, c.PromptBytes, rate, c.Error)
			continue
		}
		r := c.Report
		fmt.Fprintf(w, "%-11s %-9s %9d %8d %7s %10.1f %9.3f %9.3f %9.3f %9.3f %7d %12.3f %12.3f %8.0f %14.1f %6.1f\n", c.Target, c.Pages, c.Endpoints, c.PromptBytes,
			rate, r.DecisionsPerSec, r.LatencyMs.P50, r.LatencyMs.P95, r.LatencyMs.P99, r.LatencyMs.P999, r.Errors, r.EPPCPUPerDecisionMs,
			r.ClientCPUPerDecisionMs, float64(r.EPPRSSBytes)/(1<<20), c.ScrapeCPUUsPerEndpointSecond, r.LoadAverage)
	}
	if len(rep.RatiosReferenceUpstream) > 0 {
		fmt.Fprintf(w, "\nreference ÷ upstream  %-9s %9s %8s %12s %9s %9s %14s\n", "pages", "endpoints", "prompt", "decisions/s", "p50", "p99", "CPU/decision")
		for _, r := range rep.RatiosReferenceUpstream {
			fmt.Fprintf(w, "%-20s  %-9s %9d %8d %12.2f %9.2f %9.2f %14.2f\n", "", r.Pages, r.Endpoints, r.PromptBytes, r.DecisionsPerSecond, r.P50, r.P99, r.CPUPerDecision)
		}
	}
	if len(rep.OverNullFloor) > 0 {
		fmt.Fprintf(w, "\nagainst the null floor (decisions/s as a ratio; latency and CPU as differences of percentiles and means)\n%-11s %-9s %9s %8s %7s %14s %9s %9s %14s\n",
			"target", "pages", "endpoints", "prompt", "rate", "÷ null dec/s", "p50 ms", "p99 ms", "EPP CPU ms/d")
		for _, r := range rep.OverNullFloor {
			rate := "closed"
			if r.Rate > 0 {
				rate = fmt.Sprintf("%.0f", r.Rate)
			}
			fmt.Fprintf(w, "%-11s %-9s %9d %8d %7s %14.2f %+9.3f %+9.3f %+14.3f\n", r.Target, r.Pages, r.Endpoints, r.PromptBytes, rate, r.DecisionsPerSecond, r.P50Ms, r.P99Ms, r.CPUPerDecision)
		}
	}
}

// startTarget starts target's EPP on the endpoints addrs (label names its InferencePool for the
// upstream EPPs, with cp their control plane) logging to logPath, and waits until it reports
// every endpoint ready; the caller stops it. With m.ProfileDir set, the reference serves
// net/http/pprof on a free loopback port (EPPKIT_PPROF_ADDR; eppProcess.pprofAddr).
func startTarget(ctx context.Context, w io.Writer, m MatrixOptions, self string, cp *apiserver.ControlPlane,
	target, label string, addrs []string, logPath string) (*eppProcess, error) {
	n := len(addrs)
	ports, err := harness.FreePorts(3)
	if err != nil {
		return nil, err
	}
	grpcPort, healthPort, metricsPort := ports[0], ports[1], ports[2]
	if ct := m.commands[target]; ct != nil {
		return startCommandTarget(ctx, w, m, self, cp, ct, label, addrs, logPath, ports)
	}
	if at, ok := m.addresses[target]; ok {
		return waitAddressTarget(ctx, w, m, at, addrs, logPath)
	}
	var p *eppProcess
	switch target {
	case TargetReference:
		var env []string
		var pprofAddr string
		if m.ProfileDir != "" {
			pp, err := harness.FreePorts(1)
			if err != nil {
				return nil, err
			}
			pprofAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(pp[0]))
			env = []string{"EPPKIT_PPROF_ADDR=" + pprofAddr}
		}
		stale := max(time.Second, 4*m.RefreshInterval)
		p, err = startEPPProcess(self, []string{"reference-epp", "--endpoints", strings.Join(addrs, ","),
			"--grpc-port", strconv.Itoa(grpcPort), "--grpc-health-port", strconv.Itoa(healthPort),
			"--metrics-port", strconv.Itoa(metricsPort), "--bind-address", "127.0.0.1",
			"--refresh-metrics-interval", m.RefreshInterval.String(), "--stale-threshold", stale.String(),
			"--log-level", "warn"}, env, logPath)
		if p != nil {
			p.readyMetric, p.pprofAddr = "eppkit_epp_pool_ready_endpoints", pprofAddr
		}
	case TargetLLMDRouter:
		pool := fmt.Sprintf("bench-llmd-%s-%d", label, n)
		fmt.Fprintf(w, "  creating InferencePool %s with %d Pods…\n", pool, n)
		if _, err := apiserver.NewPool(ctx, cp, apiserver.Options{PoolName: pool, Endpoints: addrs}); err != nil {
			return nil, fmt.Errorf("creating the InferencePool: %w", err)
		}
		// Flags as make interop-llmd-router-v0.10.0 (its pkg/epp/server/options.go; kubeconfig from
		// $KUBECONFIG); its default config (queue 2, kv-cache 2, prefix 3).
		stale := max(2*time.Second, 4*m.RefreshInterval)
		p, err = startEPPProcess(m.LLMDRouterEPP, []string{"--pool-name", pool, "--pool-namespace", apiserver.DefaultPoolNamespace,
			"--secure-serving=false", "--metrics-endpoint-auth=false", "--tracing=false", "--drain-timeout=0s",
			"--grpc-port", strconv.Itoa(grpcPort), "--grpc-health-port", strconv.Itoa(healthPort),
			"--metrics-port", strconv.Itoa(metricsPort), "--refresh-metrics-interval", m.RefreshInterval.String(),
			"--metrics-staleness-threshold", stale.String()}, []string{"KUBECONFIG=" + cp.KubeconfigPath}, logPath)
		if p != nil {
			p.readyMetric = "inference_pool_ready_pods"
		}
	case TargetUpstream:
		pool := fmt.Sprintf("bench-%s-%d", label, n) // one pool per page kind and size: the control plane serves the whole run
		fmt.Fprintf(w, "  creating InferencePool %s with %d Pods…\n", pool, n)
		if _, err := apiserver.NewPool(ctx, cp, apiserver.Options{PoolName: pool, Endpoints: addrs}); err != nil {
			return nil, fmt.Errorf("creating the InferencePool: %w", err)
		}
		// Flags as `make conformance-upstream`; the kubeconfig comes from $KUBECONFIG (v1.5.0 has
		// no --kubeconfig flag). The staleness threshold keeps its 2s default unless the refresh
		// interval needs more.
		stale := max(2*time.Second, 4*m.RefreshInterval)
		p, err = startEPPProcess(m.UpstreamEPP, []string{"--pool-name", pool, "--pool-namespace", apiserver.DefaultPoolNamespace,
			"--secure-serving=false", "--metrics-endpoint-auth=false", "--tracing=false",
			"--grpc-port", strconv.Itoa(grpcPort), "--grpc-health-port", strconv.Itoa(healthPort),
			"--metrics-port", strconv.Itoa(metricsPort), "--refresh-metrics-interval", m.RefreshInterval.String(),
			"--metrics-staleness-threshold", stale.String()}, []string{"KUBECONFIG=" + cp.KubeconfigPath}, logPath)
		if p != nil {
			p.readyMetric = "inference_pool_ready_pods"
		}
	case TargetNull:
		p, err = startEPPProcess(self, []string{"bench", "null-epp", "--endpoints", strings.Join(addrs, ","),
			"--grpc-port", strconv.Itoa(grpcPort), "--metrics-port", strconv.Itoa(metricsPort), "--bind-address", "127.0.0.1"}, nil, logPath)
		if p != nil {
			p.readyMetric = nullepp.ReadyMetric
		}
	}
	if err != nil {
		return nil, err
	}
	p.grpcAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort))
	p.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	if err := p.waitReady(ctx, n, 3*time.Minute); err != nil {
		p.stop()
		return nil, fmt.Errorf("%w (log: %s)", err, logPath)
	}
	return p, nil
}

// startCommandTarget starts a new instance of the user's command target ct on the pool addrs
// with the free ports ports (ext_proc, health, metrics): the pool as {{.Endpoints}}, or, for a
// template with {{.Kubeconfig}} and no {{.Endpoints}}, as an InferencePool created on cp (named
// for label and the pool size). Its log is target.log in the folder logPath without ".log"
// ({{.LogDir}}). It waits as the conformance command target is waited for
// (harness.WaitReady: gRPC health SERVING, then an ext_proc probe answered with anything but 503)
// for up to three minutes; a failure stops the EPP and names its log.
func startCommandTarget(ctx context.Context, w io.Writer, m MatrixOptions, self string, cp *apiserver.ControlPlane,
	ct *conftarget.CommandTarget, label string, addrs []string, logPath string, ports []int) (*eppProcess, error) {
	inst, ok := ct.NewInstance().(*conftarget.CommandTarget)
	if !ok {
		return nil, fmt.Errorf("target %s: not a command target", ct.Name())
	}
	abs, err := filepath.Abs(self)
	if err != nil {
		return nil, err
	}
	env := harness.TargetEnv{Eppkit: abs, GRPCPort: ports[0], HealthPort: ports[1], MetricsPort: ports[2],
		Seed: int64(m.Bench.Seed), LogDir: strings.TrimSuffix(logPath, ".log")}
	if m.needsControlPlane(ct.Name()) {
		pool := fmt.Sprintf("bench-%s-%s-%d", ct.Name(), label, len(addrs))
		fmt.Fprintf(w, "  creating InferencePool %s with %d Pods…\n", pool, len(addrs))
		if _, err := apiserver.NewPool(ctx, cp, apiserver.Options{PoolName: pool, Endpoints: addrs}); err != nil {
			return nil, fmt.Errorf("creating the InferencePool: %w", err)
		}
		env.Kubeconfig, env.PoolName, env.PoolNamespace = cp.KubeconfigPath, pool, apiserver.DefaultPoolNamespace
	} else {
		env.Endpoints = strings.Join(addrs, ",")
	}
	line, err := inst.Render(env)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "  starting %s: %s\n", ct.Name(), line)
	ta, err := inst.Start(ctx, env)
	if err != nil {
		return nil, err
	}
	if err := harness.WaitReady(ctx, inst, ta, harness.ReadyProbe{}, m.Bench.Model, addrs, 3*time.Minute, 250*time.Millisecond); err != nil {
		_ = inst.Stop(15 * time.Second)
		if h := inst.ReadinessHint(); h != "" {
			err = fmt.Errorf("%w; %s", err, h)
		}
		return nil, fmt.Errorf("%w (log: %s)", err, inst.LogPath())
	}
	p := &eppProcess{proc: inst, grpcAddr: ta.GRPC}
	if ta.Metrics != "" {
		p.metricsURL = "http://" + ta.Metrics + "/metrics"
	}
	return p, nil
}

// addressRunner is an address target as an eppRunner: no process id (0), never exits, Stop does
// nothing.
type addressRunner struct{ *conftarget.AddressTarget }

func (addressRunner) PID() int { return 0 }

// waitAddressTarget prints the pool addrs for the already running EPP at, writes them to
// logPath with ".endpoints" for ".log", and waits up to m.AddressWait for its gRPC health to
// answer SERVING and then for a probe (harness.ProbePick) to pick an endpoint of addrs.
func waitAddressTarget(ctx context.Context, w io.Writer, m MatrixOptions, at AddressTarget, addrs []string, logPath string) (*eppProcess, error) {
	t, err := conftarget.NewAddressTarget(at.Address, at.Health)
	if err != nil {
		return nil, fmt.Errorf("--address-target %s: %w", at.Name, err)
	}
	pool := strings.Join(addrs, ",")
	file := strings.TrimSuffix(logPath, ".log") + ".endpoints"
	if err := os.WriteFile(file, []byte(pool+"\n"), 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "  pool for %s (%d endpoints, also in %s): %s\n  waiting up to %v for the EPP at %s to pick in it…\n",
		at.Name, len(addrs), file, pool, m.AddressWait, at.Address)
	deadline := time.Now().Add(m.AddressWait)
	ta, _ := t.Start(ctx, harness.TargetEnv{})
	if err := harness.WaitReady(ctx, t, ta, harness.ReadyProbe{}, m.Bench.Model, addrs, m.AddressWait, 250*time.Millisecond); err != nil {
		return nil, fmt.Errorf("--address-target %s: %w", at.Name, err)
	}
	last := errors.New("no probe")
	for time.Now().Before(deadline) {
		if _, last = harness.ProbePick(ctx, at.Address, nil, m.Bench.Model, addrs, 2*time.Second, false); last == nil {
			return &eppProcess{proc: addressRunner{t}, grpcAddr: at.Address}, nil
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("--address-target %s: the EPP at %s did not pick in the pool within %v: %v", at.Name, at.Address, m.AddressWait, last)
}
