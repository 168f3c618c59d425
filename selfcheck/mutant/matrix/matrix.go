// Package matrix runs the mutant matrix (`make mutants`, reports/mutants.md): every mutant of the
// selfcheck/mutant catalogue against the conformance registry or the white-box suite that targets
// its rule, after a baseline run without it, and a Markdown report of which test caught which
// mutant. A mutant is caught when its targeted test passed on the baseline of the same lane and
// fails against the mutant.
//
// Lanes (what the registry runs against):
//   - reference: this mutant build's reference EPP with EPPKIT_MUTANT set (wrapper plugins,
//     decorated sources and the hooks left in reference/, selfcheck/mutant/wrap);
//   - interceptor → reference: the reference behind the mutant interceptor (selfcheck/mutant/interceptor),
//     for the protocol mutants;
//   - interceptor → upstream: another EPP (the upstream EPP v1.5.0 in `make mutants`) behind the
//     interceptor: the protocol mutants are judged there on the tests that EPP passes on its own
//     baseline through the transparent interceptor.
//
// Each conformance run is a child process of the mutant build (`eppkit-mutants conformance`), each
// suite run `go run ginkgo --tags eppkit_mutants`, so a mutant never leaks into another run.
// Conformance results are read from the results file each run writes (--results-file,
// conformance.Results), the white-box results from Ginkgo's JSON report: never from console text.
package matrix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/internal/supervisor"
	"github.com/eppkit/eppkit/selfcheck/mutant"
)

// Options configure a matrix run. Eppkit and Output are required.
type Options struct {
	// Eppkit is the path of the mutant build of eppkit (built with -tags eppkit_mutants); every
	// conformance run is `Eppkit conformance ...`.
	Eppkit string
	// Mutants are the mutants to run; nil means the whole catalogue.
	Mutants []mutant.Mutant
	// Source is the endpoint source of the reference lanes: "auto" (default: apiserver for the
	// mutants that need a pool that changes, static for the others), "static" or "apiserver".
	Source string
	// ConfigFile is the reference's EndpointPickerConfig ("" = its default).
	ConfigFile string
	// Output is the Markdown report to write.
	Output string
	// LogDir holds each run's log and reports; default out/mutants.
	LogDir string
	// ConformanceArgs are extra arguments of every conformance run.
	ConformanceArgs []string
	// Seed is the seed of every run (0 = from the clock).
	Seed int64
	// SkipWhiteBox and SkipBlackBox leave out the white-box or the conformance mutants.
	SkipWhiteBox, SkipBlackBox bool
	// WholeRegistry runs every conformance mutant run over the whole registry, as the baselines
	// are, to list every test that also fails against the mutant. By default a mutant run selects
	// only its targeted test (`--run-test`): the verdict depends on that test alone, and the
	// matrix takes about a third of the time (each run of the whole registry is 40 s to 4 min).
	WholeRegistry bool
	// Upstream, when set, also runs every protocol mutant in front of that EPP.
	Upstream *Upstream
	// Version is the eppkit version printed in the report.
	Version string
	// Log receives one progress line per run; nil means io.Discard.
	Log io.Writer
}

// Upstream is an EPP other than the reference that the protocol mutants run in front of.
type Upstream struct {
	// Name names it in the report, e.g. "upstream EPP v1.5.0".
	Name string
	// Command is its command template (conformance command target; it must discover from the
	// apiserver source).
	Command string
	// Args are its conformance flags (features it claims, tests to skip).
	Args []string
}

// Lanes.
const (
	laneReference   = "reference"
	laneIntercepted = "interceptor → reference"
	laneUpstream    = "interceptor → upstream"
)

// run is one run of the registry or of a suite.
type run struct {
	mutant   mutant.Mutant // zero Name = baseline
	lane     string        // a lane, or "suites/<name>"
	source   string        // endpoint source ("" for suites)
	passed   []string
	failed   []string
	skipped  []string
	exitCode int
	problem  string // the run itself did not work (exit ≥ 2, no results)
	verdict  string // set instead of running when the verdict is known beforehand
	duration time.Duration
}

// key is the baseline a run is judged against.
func (r run) key() string {
	if r.source == "" {
		return r.lane
	}
	return r.lane + " (" + r.source + ")"
}

// Run runs the matrix and writes the report. It returns the number of judged mutant runs whose
// targeted test did not catch the mutant, and an error when the options are wrong or the report
// cannot be written.
func Run(ctx context.Context, opts Options) (escaped int, err error) {
	if opts.Eppkit == "" || opts.Output == "" {
		return 0, errors.New("matrix: Options.Eppkit and Options.Output are required")
	}
	if opts.Source == "" {
		opts.Source = "auto"
	}
	switch opts.Source {
	case "auto", "static", "apiserver":
	default:
		return 0, fmt.Errorf("matrix: endpoint source %q: want auto, static or apiserver", opts.Source)
	}
	if opts.LogDir == "" {
		opts.LogDir = "out/mutants"
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Seed == 0 {
		opts.Seed = time.Now().UnixNano() % 1_000_000_000
	}
	if opts.Mutants == nil {
		opts.Mutants = mutant.Catalogue()
	}
	if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return 0, err
	}
	m := &matrix{opts: opts, start: time.Now(), baseline: map[string]run{}, registered: map[string]bool{}}
	for _, ct := range conformance.All() {
		m.registered[ct.ShortName] = true
	}
	fmt.Fprintf(opts.Log, "eppkit mutants: %d mutants, seed %d, endpoint source %s, logs in %s\n", len(opts.Mutants), opts.Seed, opts.Source, opts.LogDir)

	plan := m.plan()
	for _, r := range plan {
		if r.mutant.Name != "" {
			continue
		}
		if _, done := m.baseline[r.key()]; !done {
			m.baseline[r.key()] = m.do(ctx, r)
		}
	}
	for _, r := range plan {
		if r.mutant.Name == "" {
			continue
		}
		base := m.baseline[r.key()]
		if v, skip := m.prejudge(r, base); skip {
			r.verdict = v
			m.runs = append(m.runs, r)
			continue
		}
		m.runs = append(m.runs, m.do(ctx, r))
	}
	md, escaped := m.report()
	if err := os.WriteFile(opts.Output, []byte(md), 0o644); err != nil {
		return escaped, err
	}
	fmt.Fprintf(opts.Log, "\nreport: %s (%s)\n", opts.Output, time.Since(m.start).Round(time.Second))
	return escaped, nil
}

type matrix struct {
	opts       Options
	start      time.Time
	baseline   map[string]run
	runs       []run
	registered map[string]bool
}

// plan lists the baselines (first) and the mutant runs, in catalogue order.
func (m *matrix) plan() []run {
	var mutants []run
	for _, mu := range m.opts.Mutants {
		switch {
		case mu.Kind == mutant.WhiteBox:
			if !m.opts.SkipWhiteBox {
				mutants = append(mutants, run{mutant: mu, lane: "suites/" + mu.Suite})
			}
		case m.opts.SkipBlackBox:
		case mu.Via == mutant.Interceptor:
			mutants = append(mutants, run{mutant: mu, lane: laneIntercepted, source: m.sourceFor(mu)})
			if m.opts.Upstream != nil {
				mutants = append(mutants, run{mutant: mu, lane: laneUpstream, source: "apiserver"})
			}
		default:
			mutants = append(mutants, run{mutant: mu, lane: laneReference, source: m.sourceFor(mu)})
		}
	}
	var plan []run
	seen := map[string]bool{}
	for _, r := range mutants {
		if !seen[r.key()] {
			seen[r.key()] = true
			plan = append(plan, run{lane: r.lane, source: r.source})
		}
	}
	slices.SortStableFunc(plan, func(a, b run) int { return strings.Compare(a.key(), b.key()) })
	return append(plan, mutants...)
}

func (m *matrix) sourceFor(mu mutant.Mutant) string {
	if m.opts.Source != "auto" {
		return m.opts.Source
	}
	if mu.NeedsAPIServer {
		return "apiserver"
	}
	return "static"
}

// prejudge returns the verdict of a mutant run that need not run: its targeted test is not in
// the registry, or did not pass on the lane's baseline.
func (m *matrix) prejudge(r run, base run) (string, bool) {
	mu := r.mutant
	switch {
	case mu.Kind == mutant.BlackBox && !m.registered[mu.Target]:
		return "pending: " + mu.Target + " is not in the registry yet", true
	case base.problem != "":
		return "not judged: the baseline run failed (" + base.problem + ")", true
	case len(targetMatches(mu, base.passed)) == 0:
		how := "did not pass"
		if len(targetMatches(mu, base.failed)) > 0 {
			how = "failed"
		} else if len(targetMatches(mu, base.skipped)) > 0 {
			how = "was skipped"
		}
		return fmt.Sprintf("not judged: the targeted test %s on the %s baseline", how, r.key()), true
	}
	return "", false
}

// verdict judges a mutant run that ran.
func verdict(r run) (string, bool) {
	switch {
	case r.verdict != "":
		return r.verdict, false
	case r.problem != "":
		return "not judged: " + r.problem, false
	case len(targetMatches(r.mutant, r.failed)) > 0:
		return "**yes**", false
	}
	return "**NO** (escaped)", true
}

// targetMatches returns the entries of names that match the mutant's Target: the ShortName
// exactly (black-box) or a substring of the spec text (white-box).
func targetMatches(m mutant.Mutant, names []string) []string {
	var out []string
	for _, n := range names {
		if (m.Kind == mutant.BlackBox && n == m.Target) || (m.Kind == mutant.WhiteBox && strings.Contains(n, m.Target)) {
			out = append(out, n)
		}
	}
	return out
}

func (m *matrix) do(ctx context.Context, r run) run {
	if strings.HasPrefix(r.lane, "suites/") {
		return m.suite(ctx, r)
	}
	return m.conformance(ctx, r)
}

// runName names a run's log: the mutant (or baseline) and the lane.
func runName(r run) string {
	name := "baseline"
	if r.mutant.Name != "" {
		name = string(r.mutant.Name)
	}
	lane := map[string]string{laneReference: "reference", laneIntercepted: "intercepted", laneUpstream: "upstream"}[r.lane]
	if lane == "" {
		lane = strings.TrimPrefix(r.lane, "suites/")
	}
	name += "-" + lane
	if r.source != "" {
		name += "-" + r.source
	}
	return name
}

// conformance runs `eppkit conformance` of the mutant build for one lane and reads the results
// file it writes (<LogDir>/<run>/results.json).
func (m *matrix) conformance(ctx context.Context, r run) run {
	name := runName(r)
	logDir := filepath.Join(m.opts.LogDir, name)
	resultsPath := filepath.Join(logDir, conformance.ResultsFileName)
	_ = os.Remove(resultsPath)
	// Every run writes its reports too (<LogDir>/<run>/reports): a mutant the suite catches is
	// reported as a user would see it, ConformanceReport and junit.xml included.
	args := []string{"conformance", "--endpoint-source", r.source, "--profiles", "all", "--seed", fmt.Sprint(m.opts.Seed),
		"--log-dir", logDir, "--results-file", resultsPath, "--report-output", filepath.Join(logDir, "reports"),
		"--organization", "eppkit", "--project", "mutant-" + name, "--url", "https://github.com/eppkit/eppkit",
		"--version", orNone(r.mutant.Name), "--contact", "https://github.com/eppkit/eppkit/issues"}
	env := supervisor.WithoutEnv(os.Environ(), mutant.Env, "EPPKIT_SEED", InterceptedCommandEnv)
	env = append(env, mutant.Env+"="+orNone(r.mutant.Name))
	switch r.lane {
	case laneReference, laneIntercepted:
		target := "reference"
		if r.lane == laneIntercepted {
			target = InterceptedTargetName
		}
		args = append(args, "--target", target, "--all-features")
		if m.opts.ConfigFile != "" {
			args = append(args, "--config-file", m.opts.ConfigFile)
		}
	case laneUpstream:
		args = append(args, "--target", InterceptedTargetName)
		if r.mutant.Name != "" && !m.opts.WholeRegistry {
			// The run selects one test; its baseline passed it, so it is not among the skipped
			// ones, and eppkit refuses --skip-tests that name tests --run-test leaves out.
			args = append(args, withoutFlag(m.opts.Upstream.Args, "--skip-tests")...)
		} else {
			args = append(args, m.opts.Upstream.Args...)
		}
		env = append(env, InterceptedCommandEnv+"="+m.opts.Upstream.Command)
	}
	if r.mutant.Name != "" && !m.opts.WholeRegistry {
		args = append(args, "--run-test", r.mutant.Target)
	}
	args = append(args, m.opts.ConformanceArgs...)
	c := exec.CommandContext(ctx, m.opts.Eppkit, args...)
	c.Env = env
	b := m.exec(c, name, &r)
	res, rerr := conformance.ReadResultsFile(resultsPath)
	if rerr != nil {
		r.problem = fmt.Sprintf("no results file (%v); eppkit conformance exited %d: %s", rerr, r.exitCode, lastLine(b))
		m.progress(r)
		return r
	}
	for _, tr := range res.Tests {
		switch tr.Outcome {
		case conformance.Passed:
			r.passed = append(r.passed, tr.ShortName)
		case conformance.Failed:
			r.failed = append(r.failed, tr.ShortName)
		case conformance.Skipped:
			r.skipped = append(r.skipped, tr.ShortName)
		}
	}
	if r.exitCode >= 2 || r.exitCode < 0 || len(r.passed)+len(r.failed) == 0 {
		r.problem = fmt.Sprintf("eppkit conformance exited %d with %d results: %s", r.exitCode, len(r.passed)+len(r.failed), firstNonEmpty(res.Error, lastLine(b)))
	}
	m.progress(r)
	return r
}

// suite runs suites/<name> with the ginkgo CLI, built with the tag, with the mutant active.
func (m *matrix) suite(ctx context.Context, r run) run {
	name := runName(r)
	dir, _ := filepath.Abs(filepath.Join(m.opts.LogDir, name))
	_ = os.MkdirAll(dir, 0o755)
	args := []string{"run", "github.com/onsi/ginkgo/v2/ginkgo", "--tags", "eppkit_mutants", "--seed", fmt.Sprint(m.opts.Seed),
		"--output-dir", dir, "--json-report", "report.json", "./" + r.lane}
	c := exec.CommandContext(ctx, "go", args...)
	c.Env = append(supervisor.WithoutEnv(os.Environ(), mutant.Env, "EPPKIT_SEED"), mutant.Env+"="+orNone(r.mutant.Name), "EPPKIT_SEED="+fmt.Sprint(m.opts.Seed))
	b := m.exec(c, name, &r)
	rb, rerr := os.ReadFile(filepath.Join(dir, "report.json"))
	var reports []types.Report
	if rerr == nil {
		rerr = json.Unmarshal(rb, &reports)
	}
	if rerr != nil {
		r.problem = fmt.Sprintf("no Ginkgo JSON report (%v); ginkgo exited %d: %s", rerr, r.exitCode, lastLine(b))
	}
	for _, rep := range reports {
		for _, sr := range rep.SpecReports {
			if sr.LeafNodeType != types.NodeTypeIt {
				continue
			}
			text := sr.FullText()
			switch {
			case sr.State.Is(types.SpecStateFailureStates):
				r.failed = append(r.failed, text)
			case sr.State == types.SpecStatePassed:
				r.passed = append(r.passed, text)
			default:
				r.skipped = append(r.skipped, text)
			}
		}
	}
	m.progress(r)
	return r
}

// exec runs c, writes its output to <LogDir>/<name>.log and records the run's duration and exit
// code; it returns the output.
func (m *matrix) exec(c *exec.Cmd, name string, r *run) []byte {
	fmt.Fprintf(m.opts.Log, "%-28s %s ... ", name, r.key())
	t0 := time.Now()
	b, err := c.CombinedOutput()
	r.duration = time.Since(t0)
	_ = os.WriteFile(filepath.Join(m.opts.LogDir, name+".log"), b, 0o644)
	r.exitCode = supervisor.ExitCode(err)
	return b
}

func (m *matrix) progress(r run) {
	suffix := ""
	if r.problem != "" {
		suffix = " — " + r.problem
	}
	fmt.Fprintf(m.opts.Log, "%d passed, %d failed, %d skipped (%s)%s\n", len(r.passed), len(r.failed), len(r.skipped),
		r.duration.Round(time.Second), suffix)
}

// withoutFlag returns args without flag and its value ("--flag v" or "--flag=v").
func withoutFlag(args []string, flag string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == flag:
			i++
		case strings.HasPrefix(args[i], flag+"="):
		default:
			out = append(out, args[i])
		}
	}
	return out
}

func orNone(n mutant.Name) string {
	if n == "" {
		return "none"
	}
	return string(n)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
