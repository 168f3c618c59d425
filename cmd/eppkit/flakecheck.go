package main

// `eppkit flake-check` runs the same `eppkit conformance` command N times, each with its own seed,
// and writes a Markdown report: every run's verdict and wall time, and per test how often it
// passed, failed and was skipped, with its wall time (min, median, max). `make flake-check` runs
// the whole registry 20 times against the reference (reports/flake-check.md). Flaky is broken:
// the command exits 1 when any run failed a test.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func init() { subcommands = append(subcommands, newFlakeCheckCommand) }

type flakeFlags struct {
	runs     int
	seed     int64
	output   string
	logDir   string
	failFast bool
}

func newFlakeCheckCommand() *cobra.Command {
	var f flakeFlags
	cmd := &cobra.Command{
		Use:   "flake-check [flags] -- <eppkit conformance flags>",
		Short: "Run eppkit conformance N times with different seeds and report failures and per-test wall time",
		Long: `Run "eppkit conformance <flags after -->" --runs times; run i uses seed --seed + i (so every run
draws different prompts, endpoints and fake jitter) and its own log directory. Writes --output
(Markdown): each run's seed, verdict and wall time, and per test the pass/fail/skip counts and wall
time (min, median, max). Exit 1 when any run failed a test, 2 when a run could not start.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runFlakeCheck(cmd, f, args) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.runs, "runs", 20, "number of runs")
	fl.Int64Var(&f.seed, "seed", 0, "seed of the first run (0 = from the clock); run i uses seed+i")
	fl.StringVar(&f.output, "output", "reports/flake-check.md", "Markdown report to write")
	fl.StringVar(&f.logDir, "log-dir", "out/flake-check", "directory for each run's output and target log")
	fl.BoolVar(&f.failFast, "fail-fast", false, "stop after the first run that fails")
	return cmd
}

// flakeRun is one conformance run.
type flakeRun struct {
	seed     int64
	exit     int
	wall     time.Duration
	summary  []string // the "profile ..." lines
	failures []string // "ShortName: message"
}

// flakeTest is one test across runs.
type flakeTest struct {
	profile, name          string
	pass, fail, skip       int
	durations              []time.Duration // runs where it ran (pass or fail)
	failSeeds, skipReasons []string
}

var flakeLineRE = regexp.MustCompile(`^(PASS|FAIL|SKIP)\s+([^/\s]+)/(\S+) \(([^)]+)\)(?::\s*(.*))?$`)

func runFlakeCheck(cmd *cobra.Command, f flakeFlags, confArgs []string) error {
	out := cmd.OutOrStdout()
	if f.runs < 1 {
		return badFlags("--runs: must be ≥ 1, got %d", f.runs)
	}
	for _, a := range confArgs {
		if a == "--seed" || strings.HasPrefix(a, "--seed=") || a == "--log-dir" || strings.HasPrefix(a, "--log-dir=") {
			return badFlags("%s: flake-check sets --seed and --log-dir of each run itself", a)
		}
	}
	seed := f.seed
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
	fmt.Fprintf(out, "eppkit flake-check: %d runs of eppkit conformance %s, seeds %d..%d\n", f.runs, strings.Join(confArgs, " "), seed, seed+int64(f.runs)-1)
	tests := map[string]*flakeTest{}
	var order []string
	var runs []flakeRun
	failedRuns, brokenRuns := 0, 0
	for i := 0; i < f.runs; i++ {
		r := flakeRun{seed: seed + int64(i)}
		runDir := filepath.Join(f.logDir, fmt.Sprintf("run-%02d", i+1))
		args := append([]string{"conformance"}, confArgs...)
		args = append(args, "--seed", fmt.Sprint(r.seed), "--log-dir", runDir)
		c := exec.Command(self, args...)
		c.Env = withoutEnv(os.Environ(), "EPPKIT_SEED")
		t0 := time.Now()
		b, err := c.CombinedOutput()
		r.wall = time.Since(t0)
		r.exit = exitCodeOf(err)
		_ = os.MkdirAll(runDir, 0o755)
		_ = os.WriteFile(filepath.Join(runDir, "conformance.log"), b, 0o644)
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "profile ") {
				r.summary = append(r.summary, strings.Join(strings.Fields(line), " "))
				continue
			}
			m := flakeLineRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			key := m[2] + "/" + m[3]
			ft := tests[key]
			if ft == nil {
				ft = &flakeTest{profile: m[2], name: m[3]}
				tests[key] = ft
				order = append(order, key)
			}
			d, _ := time.ParseDuration(m[4])
			switch m[1] {
			case "PASS":
				ft.pass++
				ft.durations = append(ft.durations, d)
			case "FAIL":
				ft.fail++
				ft.durations = append(ft.durations, d)
				ft.failSeeds = append(ft.failSeeds, fmt.Sprint(r.seed))
				r.failures = append(r.failures, m[3]+": "+m[5])
			case "SKIP":
				ft.skip++
				if len(ft.skipReasons) == 0 {
					ft.skipReasons = append(ft.skipReasons, m[5])
				}
			}
		}
		switch {
		case r.exit >= 2 || r.exit < 0:
			brokenRuns++
		case r.exit == 1 || len(r.failures) > 0:
			failedRuns++
		}
		runs = append(runs, r)
		verdict := "PASS"
		if r.exit != 0 {
			verdict = fmt.Sprintf("exit %d", r.exit)
		}
		fmt.Fprintf(out, "run %2d/%d seed %d: %s in %s; %s\n", i+1, f.runs, r.seed, verdict, r.wall.Round(time.Second), strings.Join(r.summary, "; "))
		for _, fl := range r.failures {
			fmt.Fprintf(out, "    FAIL %s\n", fl)
		}
		if f.failFast && r.exit != 0 {
			break
		}
	}
	md := flakeReport(f, confArgs, runs, tests, order, start)
	if err := os.WriteFile(f.output, []byte(md), 0o644); err != nil {
		return err
	}
	green := len(runs) - failedRuns - brokenRuns
	fmt.Fprintf(out, "flake-check: %d/%d runs green, %d failed, %d could not run (%s); report %s\n", green, len(runs), failedRuns, brokenRuns,
		time.Since(start).Round(time.Second), f.output)
	switch {
	case brokenRuns > 0:
		return &exitError{code: exitHarness, err: fmt.Errorf("%d run(s) could not run", brokenRuns)}
	case failedRuns > 0:
		return &exitError{code: exitTestFailed, err: fmt.Errorf("%d of %d runs failed a test", failedRuns, len(runs))}
	}
	return nil
}

func flakeReport(f flakeFlags, confArgs []string, runs []flakeRun, tests map[string]*flakeTest, order []string, start time.Time) string {
	var b strings.Builder
	b.WriteString("# Flake check\n\n")
	b.WriteString("Generated by `make flake-check` (`eppkit flake-check`); do not edit by hand.\n\n")
	fmt.Fprintf(&b, "%d runs of `eppkit conformance %s`, run i with seed %d + i, started %s, eppkit %s, %s in all.\n\n",
		len(runs), strings.Join(confArgs, " "), runs[0].seed, start.UTC().Format(time.RFC3339), version, time.Since(start).Round(time.Second))
	green := 0
	for _, r := range runs {
		if r.exit == 0 && len(r.failures) == 0 {
			green++
		}
	}
	fmt.Fprintf(&b, "**%d/%d runs green.**\n\n", green, len(runs))
	b.WriteString("## Tests\n\nWall time of the runs where the test ran (pass or fail).\n\n")
	b.WriteString("| Test | Passed | Failed | Skipped | Min | Median | Max | Failing seeds / skip reason |\n|---|---|---|---|---|---|---|---|\n")
	for _, k := range order {
		ft := tests[k]
		mn, med, mx := durationStats(ft.durations)
		note := strings.Join(ft.failSeeds, ", ")
		if note == "" && len(ft.skipReasons) > 0 {
			note = ft.skipReasons[0]
		}
		if note == "" {
			note = "—"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s | %s | %s |\n", k, ft.pass, ft.fail, ft.skip, mn, med, mx, cellMD(note))
	}
	b.WriteString("\n## Runs\n\n| Run | Seed | Exit | Wall time | Profiles |\n|---|---|---|---|---|\n")
	for i, r := range runs {
		fmt.Fprintf(&b, "| %d | %d | %d | %s | %s |\n", i+1, r.seed, r.exit, r.wall.Round(100*time.Millisecond), cellMD(strings.Join(r.summary, "; ")))
	}
	b.WriteString("\nReproduce a run: `EPPKIT_SEED=<seed> eppkit conformance " + strings.Join(confArgs, " ") + "`.\n")
	return b.String()
}

func durationStats(ds []time.Duration) (string, string, string) {
	if len(ds) == 0 {
		return "—", "—", "—"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return r(s[0]), r(s[len(s)/2]), r(s[len(s)-1])
}

// withoutEnv returns env without the variables named.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		if !slices.Contains(names, k) {
			out = append(out, e)
		}
	}
	return out
}

// exitCodeOf returns the exit code of a finished command (0 for nil, -1 when it did not run).
func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// cellMD escapes a Markdown table cell.
func cellMD(s string) string { return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s) }
