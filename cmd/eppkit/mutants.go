//go:build eppkit_mutants

package main

// `eppkit mutants` exists only in binaries built with -tags eppkit_mutants (`make mutants` builds
// bin/eppkit-mutants). It runs the mutant matrix: the whole conformance registry against the
// reference EPP with each black-box mutant of internal/mutant active (EPPKIT_MUTANT, inherited by
// the reference-epp process the harness starts from this same binary), and the white-box Ginkgo
// suites (built with the tag) for each white-box mutant, after a baseline run with no mutant. It
// writes a Markdown report: mutant → the tests that failed, and whether the test that targets the
// mutant's rule caught it. Exit status 1 when a judged mutant escaped its targeted test.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/internal/mutant"
)

func init() { subcommands = append(subcommands, newMutantsCommand) }

type mutantsFlags struct {
	only, source, configFile, output, logDir, conformanceArgs string
	seed                                                      int64
	skipWhiteBox, skipBlackBox                                bool
}

func newMutantsCommand() *cobra.Command {
	var f mutantsFlags
	cmd := &cobra.Command{
		Use:   "mutants",
		Short: "Run the mutant matrix (tagged builds only) and write reports/mutants.md",
		Long: `Run the mutant matrix: every mutant of internal/mutant breaks one rule of the reference EPP; the
conformance registry (black-box mutants) or the white-box suite (white-box mutants) runs against it,
and the test that targets the rule must fail. A baseline with no mutant runs first: a mutant is judged
only when its targeted test passed on the baseline. Run from the repository root (white-box suites
are run with the ginkgo CLI through the go toolchain).

Endpoint source: auto (the default) uses apiserver for the baseline and for mutants whose targeted
test needs a pool that changes (not-ready-picked, removed-endpoint-kept), static for the others.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMutants(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.only, "only", "", "comma list of mutants to run (default all): "+strings.Join(mutant.Names(), ", "))
	fl.StringVar(&f.source, "endpoint-source", "auto", "auto, static or apiserver")
	fl.StringVar(&f.configFile, "config-file", "manifests/epp-configs/conformance.yaml", "EndpointPickerConfig of the reference (as make conformance)")
	fl.StringVar(&f.output, "output", "reports/mutants.md", "Markdown report to write")
	fl.StringVar(&f.logDir, "log-dir", "out/mutants", "directory for each run's log")
	fl.StringVar(&f.conformanceArgs, "conformance-args", "", "extra arguments for every eppkit conformance run (space separated)")
	fl.Int64Var(&f.seed, "seed", 0, "seed of every run (0 = from the clock; EPPKIT_SEED overrides)")
	fl.BoolVar(&f.skipWhiteBox, "skip-white-box", false, "do not run the white-box mutants")
	fl.BoolVar(&f.skipBlackBox, "skip-black-box", false, "do not run the black-box mutants")
	return cmd
}

// matrixRun is one run of the registry or of a suite.
type matrixRun struct {
	mutant   mutant.Mutant // zero Name = baseline
	source   string        // endpoint source or "suites/<name>"
	passed   []string
	failed   []string
	skipped  []string
	exitCode int
	problem  string // the run itself did not work (exit ≥ 2, no results)
	duration time.Duration
	log      string
}

func runMutants(cmd *cobra.Command, f mutantsFlags) error {
	out := cmd.OutOrStdout()
	if !mutant.Enabled {
		return errors.New("this binary was built without -tags eppkit_mutants")
	}
	selected := mutant.Catalogue()
	if f.only != "" {
		var err error
		if selected, err = mutant.Parse(f.only); err != nil {
			return badFlags("--only: %v", err)
		}
	}
	switch f.source {
	case "auto", "static", "apiserver":
	default:
		return badFlags("--endpoint-source: want auto, static or apiserver, got %q", f.source)
	}
	seed := f.seed
	if env := os.Getenv("EPPKIT_SEED"); env != "" {
		if _, err := fmt.Sscan(env, &seed); err != nil {
			return badFlags("EPPKIT_SEED %q: not an integer", env)
		}
	}
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.logDir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	fmt.Fprintf(out, "eppkit mutants: %d mutants, seed %d, endpoint source %s, logs in %s\n", len(selected), seed, f.source, f.logDir)

	registered := map[string]bool{}
	for _, ct := range conformance.All() {
		registered[ct.ShortName] = true
	}
	var runs []matrixRun
	baseline := map[string]matrixRun{} // by source / suite
	needSources := map[string]bool{}
	needSuites := map[string]bool{}
	for _, m := range selected {
		if m.Kind == mutant.BlackBox && !f.skipBlackBox {
			needSources[sourceFor(f.source, m)] = true
		}
		if m.Kind == mutant.WhiteBox && !f.skipWhiteBox {
			needSuites[m.Suite] = true
		}
	}
	for _, src := range sortedKeys(needSources) {
		r := blackBoxRun(out, self, f, seed, mutant.Mutant{}, src)
		baseline[src] = r
		runs = append(runs, r)
	}
	for _, suite := range sortedKeys(needSuites) {
		r := whiteBoxRun(out, f, seed, mutant.Mutant{}, suite)
		baseline["suites/"+suite] = r
		runs = append(runs, r)
	}
	for _, m := range selected {
		switch {
		case m.Kind == mutant.BlackBox && !f.skipBlackBox:
			runs = append(runs, blackBoxRun(out, self, f, seed, m, sourceFor(f.source, m)))
		case m.Kind == mutant.WhiteBox && !f.skipWhiteBox:
			runs = append(runs, whiteBoxRun(out, f, seed, m, m.Suite))
		}
	}
	md, escaped := mutantsReport(runs, baseline, registered, seed, f, start)
	if err := os.WriteFile(f.output, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nreport: %s (%s)\n", f.output, time.Since(start).Round(time.Second))
	if escaped > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d mutant(s) escaped the test that targets their rule", escaped)}
	}
	return nil
}

func sourceFor(flag string, m mutant.Mutant) string {
	if flag != "auto" {
		return flag
	}
	if m.Name == "" || m.NeedsAPIServer {
		return "apiserver"
	}
	return "static"
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func runName(m mutant.Mutant) string {
	if m.Name == "" {
		return "baseline"
	}
	return string(m.Name)
}

var progressRE = regexp.MustCompile(`^(PASS|FAIL|SKIP)\s+([^/\s]+)/(\S+) \(`)

// blackBoxRun runs `eppkit conformance` (this binary) against the reference with m active.
func blackBoxRun(out io.Writer, self string, f mutantsFlags, seed int64, m mutant.Mutant, source string) matrixRun {
	name := runName(m)
	if m.Name == "" {
		name += "-" + source
	}
	logDir := filepath.Join(f.logDir, name)
	args := []string{"conformance", "--target", "reference", "--endpoint-source", source, "--profiles", "all", "--all-features",
		"--seed", fmt.Sprint(seed), "--log-dir", logDir}
	if f.configFile != "" {
		args = append(args, "--config-file", f.configFile)
	}
	args = append(args, strings.Fields(f.conformanceArgs)...)
	c := exec.Command(self, args...)
	c.Env = append(withoutEnv(os.Environ(), mutant.Env, "EPPKIT_SEED"), mutant.Env+"="+orNone(m.Name))
	r := matrixRun{mutant: m, source: source, log: filepath.Join(f.logDir, name+".log")}
	fmt.Fprintf(out, "%-28s conformance (%s) ... ", name, source)
	t0 := time.Now()
	b, err := c.CombinedOutput()
	r.duration = time.Since(t0)
	_ = os.WriteFile(r.log, b, 0o644)
	r.exitCode = exitCodeOf(err)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		mm := progressRE.FindStringSubmatch(sc.Text())
		if mm == nil {
			continue
		}
		switch mm[1] {
		case "PASS":
			r.passed = append(r.passed, mm[3])
		case "FAIL":
			r.failed = append(r.failed, mm[3])
		case "SKIP":
			r.skipped = append(r.skipped, mm[3])
		}
	}
	if r.exitCode >= 2 || len(r.passed)+len(r.failed) == 0 {
		r.problem = fmt.Sprintf("eppkit conformance exited %d with %d results: %s", r.exitCode, len(r.passed)+len(r.failed), lastLine(b))
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped (%s)%s\n", len(r.passed), len(r.failed), len(r.skipped),
		r.duration.Round(time.Second), problemSuffix(r))
	return r
}

// whiteBoxRun runs suites/<suite> with the ginkgo CLI, built with the tag, with m active.
func whiteBoxRun(out io.Writer, f mutantsFlags, seed int64, m mutant.Mutant, suite string) matrixRun {
	name := runName(m)
	dir, _ := filepath.Abs(filepath.Join(f.logDir, name+"-"+suite))
	_ = os.MkdirAll(dir, 0o755)
	args := []string{"run", "github.com/onsi/ginkgo/v2/ginkgo", "--tags", "eppkit_mutants", "--seed", fmt.Sprint(seed),
		"--output-dir", dir, "--json-report", "report.json", "./suites/" + suite}
	c := exec.Command("go", args...)
	c.Env = append(withoutEnv(os.Environ(), mutant.Env, "EPPKIT_SEED"), mutant.Env+"="+orNone(m.Name), "EPPKIT_SEED="+fmt.Sprint(seed))
	r := matrixRun{mutant: m, source: "suites/" + suite, log: filepath.Join(f.logDir, name+"-"+suite+".log")}
	fmt.Fprintf(out, "%-28s suites/%s ... ", name, suite)
	t0 := time.Now()
	b, err := c.CombinedOutput()
	r.duration = time.Since(t0)
	_ = os.WriteFile(r.log, b, 0o644)
	r.exitCode = exitCodeOf(err)
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
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped (%s)%s\n", len(r.passed), len(r.failed), len(r.skipped),
		r.duration.Round(time.Second), problemSuffix(r))
	return r
}

func problemSuffix(r matrixRun) string {
	if r.problem == "" {
		return ""
	}
	return " — " + r.problem
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

// targetMatches returns the failed (or passed) entries that match the mutant's Target: the
// ShortName exactly (black-box) or a substring of the spec text (white-box).
func targetMatches(m mutant.Mutant, names []string) []string {
	var out []string
	for _, n := range names {
		if (m.Kind == mutant.BlackBox && n == m.Target) || (m.Kind == mutant.WhiteBox && strings.Contains(n, m.Target)) {
			out = append(out, n)
		}
	}
	return out
}

// verdict judges one mutant run against the baseline of the same source.
func verdict(r matrixRun, base matrixRun, registered map[string]bool) (caught string, escaped bool) {
	m := r.mutant
	switch {
	case m.Kind == mutant.BlackBox && !registered[m.Target]:
		return "pending: " + m.Target + " is not in the registry yet", false
	case base.problem != "":
		return "not judged: the baseline run failed (" + base.problem + ")", false
	case r.problem != "":
		return "not judged: " + r.problem, false
	case len(targetMatches(m, base.passed)) == 0:
		return "not judged: the targeted test did not pass on the baseline", false
	case len(targetMatches(m, r.failed)) > 0:
		return "**yes**", false
	}
	return "**NO** (escaped)", true
}

func mutantsReport(runs []matrixRun, baseline map[string]matrixRun, registered map[string]bool, seed int64, f mutantsFlags, start time.Time) (string, int) {
	var b strings.Builder
	b.WriteString("# Mutant matrix\n\n")
	b.WriteString("Generated by `make mutants` (`bin/eppkit-mutants mutants`); do not edit by hand.\n\n")
	b.WriteString("Each mutant is the reference EPP (or a reference package under a white-box suite) with exactly one rule broken, ")
	b.WriteString("selected by `EPPKIT_MUTANT` in a binary built with `-tags eppkit_mutants` (internal/mutant; normal builds cannot select one). ")
	b.WriteString("A mutant is **caught** when the test that targets its rule fails against it and passed on the baseline run (no mutant) of the same endpoint source or suite.\n\n")
	fmt.Fprintf(&b, "Run %s, seed %d, eppkit %s, endpoint source %s, config %s", start.UTC().Format(time.RFC3339), seed, version, f.source, f.configFile)
	if f.conformanceArgs != "" {
		fmt.Fprintf(&b, ", extra conformance arguments `%s`", f.conformanceArgs)
	}
	fmt.Fprintf(&b, "; the whole matrix took %s.\n\n", time.Since(start).Round(time.Second))

	b.WriteString("## Baselines\n\n| Run | Passed | Failed | Skipped | Time |\n|---|---|---|---|---|\n")
	for _, k := range sortedKeysRuns(baseline) {
		r := baseline[k]
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", k, len(r.passed), listOrDash(r.failed), listOrDash(r.skipped), r.duration.Round(time.Second))
	}

	b.WriteString("\n## Mutants\n\n| Mutant | Breaks | Hooked at | Run | Targeted test | Caught by it | Failing tests | Time |\n|---|---|---|---|---|---|---|---|\n")
	escaped, caught, judged := 0, 0, 0
	for _, r := range runs {
		if r.mutant.Name == "" {
			continue
		}
		c, esc := verdict(r, baseline[r.source], registered)
		if esc {
			escaped++
		}
		if c == "**yes**" {
			caught++
		}
		if !strings.HasPrefix(c, "pending") && !strings.HasPrefix(c, "not judged") {
			judged++
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", r.mutant.Name, cellMD(r.mutant.Breaks), cellMD(r.mutant.Where),
			r.source, cellMD(r.mutant.Target), cellMD(c), cellMD(shortList(r.failed, 6)), r.duration.Round(time.Second))
	}
	fmt.Fprintf(&b, "\n**%d of %d judged mutants caught by their targeted test; %d escaped.**\n", caught, judged, escaped)
	b.WriteString("\nReproduce one mutant: `make mutants MUTANTS_FLAGS=\"--only <name>\"`, or by hand `go build -tags eppkit_mutants -o bin/eppkit-mutants ./cmd/eppkit && EPPKIT_MUTANT=<name> bin/eppkit-mutants conformance --target reference --endpoint-source static --all-features --config-file manifests/epp-configs/conformance.yaml --run-test <Target>`.\n")
	return b.String(), escaped
}

func sortedKeysRuns(m map[string]matrixRun) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func listOrDash(l []string) string {
	if len(l) == 0 {
		return "—"
	}
	return strings.Join(l, ", ")
}

// shortList is listOrDash of the first max entries, with the count of the rest.
func shortList(l []string, max int) string {
	if len(l) <= max {
		return listOrDash(l)
	}
	return fmt.Sprintf("%s … and %d more (%d in all)", strings.Join(l[:max], ", "), len(l)-max, len(l))
}
