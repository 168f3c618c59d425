// Package flakecheck runs the same `eppkit conformance` command several times, each with its own
// seed, and writes a Markdown report: every run's verdict and wall time, and per test how often
// it passed, failed and was skipped, with its wall time (min, median, max). `make flake-check`
// runs the whole registry 20 times against the reference (reports/flake-check.md). Each run is a
// process of its own (a leak or a hung test of one run cannot touch the next) and is read from
// the results file it writes (conformance.Results), never from its console. Flaky is broken: a
// run that failed a test fails the check.
package flakecheck

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/internal/percentile"
	"github.com/eppkit/eppkit/internal/supervisor"
	"github.com/eppkit/eppkit/internal/version"
)

// Options configure Run; each field names the `eppkit flake-check` flag it mirrors.
type Options struct {
	// Runs is the number of runs (--runs, ≥ 1); run i uses seed Seed + i (--seed; 0 = from the
	// clock).
	Runs int
	Seed int64
	// Output is the Markdown report (--output); LogDir receives each run's console, results file
	// and target log under run-NN/ (--log-dir).
	Output, LogDir string
	// FailFast stops after the first run that did not pass (--fail-fast).
	FailFast bool
	// Eppkit is the eppkit binary that runs `eppkit conformance` ("" = this executable).
	Eppkit string
	// ConformanceArgs are the flags of every `eppkit conformance` run; they must not set
	// --seed, --log-dir or --results-file (each run gets its own).
	ConformanceArgs []string
	// Out receives one line per run and the verdict (nil discards).
	Out io.Writer
}

// run is one conformance run as its results file recorded it.
type run struct {
	seed     int64
	exit     int
	wall     time.Duration
	summary  []string // one "profile EPP success: 7 passed, 0 failed, 0 skipped, 0 not supported" per profile
	failures []string // "ShortName: message"
	problem  string   // why the run has no results file, "" when it has one
}

// testStats is one test across runs.
type testStats struct {
	pass, fail, skip       int
	durations              []time.Duration // runs where it ran (pass or fail)
	failSeeds, skipReasons []string
}

// Run runs the check and writes the report. Its error is a *conformance.ExitError:
// ExitTestFailed when a run failed a test, ExitHarness when a run could not run or wrote no
// results, ExitBadOptions for invalid options.
func Run(ctx context.Context, o Options) error {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	if o.Runs < 1 {
		return &conformance.ExitError{Code: conformance.ExitBadOptions, Err: fmt.Errorf("--runs: must be ≥ 1, got %d", o.Runs)}
	}
	for _, a := range o.ConformanceArgs {
		for _, own := range []string{"--seed", "--log-dir", "--results-file"} {
			if a == own || strings.HasPrefix(a, own+"=") {
				return &conformance.ExitError{Code: conformance.ExitBadOptions,
					Err: fmt.Errorf("%s: flake-check sets --seed, --log-dir and --results-file of each run itself", a)}
			}
		}
	}
	seed := o.Seed
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	self := o.Eppkit
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return &conformance.ExitError{Code: conformance.ExitHarness, Err: err}
		}
		self = exe
	}
	if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
		return &conformance.ExitError{Code: conformance.ExitHarness, Err: err}
	}
	start := time.Now()
	args := strings.Join(o.ConformanceArgs, " ")
	fmt.Fprintf(out, "eppkit flake-check: %d runs of eppkit conformance %s, seeds %d..%d\n", o.Runs, args, seed, seed+int64(o.Runs)-1)
	tests := map[string]*testStats{}
	var order []string
	var runs []run
	failedRuns, brokenRuns := 0, 0
	for i := 0; i < o.Runs && ctx.Err() == nil; i++ {
		r := runOnce(ctx, self, o, seed+int64(i), filepath.Join(o.LogDir, fmt.Sprintf("run-%02d", i+1)), tests, &order)
		switch {
		case r.problem != "" || r.exit >= 2 || r.exit < 0:
			brokenRuns++
		case r.exit == 1 || len(r.failures) > 0:
			failedRuns++
		}
		runs = append(runs, r)
		verdict := "PASS"
		if r.exit != 0 {
			verdict = fmt.Sprintf("exit %d", r.exit)
		}
		if r.problem != "" {
			verdict += " (" + r.problem + ")"
		}
		fmt.Fprintf(out, "run %2d/%d seed %d: %s in %s; %s\n", i+1, o.Runs, r.seed, verdict, r.wall.Round(time.Second), strings.Join(r.summary, "; "))
		for _, fl := range r.failures {
			fmt.Fprintf(out, "    FAIL %s\n", fl)
		}
		if o.FailFast && r.exit != 0 {
			break
		}
	}
	if len(runs) == 0 {
		return &conformance.ExitError{Code: conformance.ExitHarness, Err: fmt.Errorf("interrupted before the first run: %w", ctx.Err())}
	}
	if err := os.WriteFile(o.Output, []byte(report(args, runs, tests, order, start)), 0o644); err != nil {
		return &conformance.ExitError{Code: conformance.ExitHarness, Err: err}
	}
	green := len(runs) - failedRuns - brokenRuns
	fmt.Fprintf(out, "flake-check: %d/%d runs green, %d failed, %d could not run (%s); report %s\n", green, len(runs), failedRuns, brokenRuns,
		time.Since(start).Round(time.Second), o.Output)
	switch {
	case brokenRuns > 0:
		return &conformance.ExitError{Code: conformance.ExitHarness, Err: fmt.Errorf("%d run(s) could not run", brokenRuns)}
	case failedRuns > 0:
		return &conformance.ExitError{Code: conformance.ExitTestFailed, Err: fmt.Errorf("%d of %d runs failed a test", failedRuns, len(runs))}
	case ctx.Err() != nil:
		return &conformance.ExitError{Code: conformance.ExitHarness, Err: fmt.Errorf("interrupted after %d of %d runs", len(runs), o.Runs)}
	}
	return nil
}

// runOnce runs `eppkit conformance` once with seed and dir, keeps its console in
// dir/conformance.log and reads its results file into tests.
func runOnce(ctx context.Context, self string, o Options, seed int64, dir string, tests map[string]*testStats, order *[]string) run {
	r := run{seed: seed}
	resultsPath := filepath.Join(dir, conformance.ResultsFileName)
	_ = os.MkdirAll(dir, 0o755)
	_ = os.Remove(resultsPath)
	args := append([]string{"conformance"}, o.ConformanceArgs...)
	args = append(args, "--seed", fmt.Sprint(seed), "--log-dir", dir, "--results-file", resultsPath)
	c := exec.CommandContext(ctx, self, args...)
	c.Env = supervisor.WithoutEnv(os.Environ(), "EPPKIT_SEED")
	t0 := time.Now()
	b, err := c.CombinedOutput()
	r.wall = time.Since(t0)
	r.exit = supervisor.ExitCode(err)
	_ = os.WriteFile(filepath.Join(dir, "conformance.log"), b, 0o644)
	res, rerr := conformance.ReadResultsFile(resultsPath)
	if rerr != nil {
		r.problem = "no results file: " + rerr.Error()
		return r
	}
	for _, p := range res.Profiles {
		r.summary = append(r.summary, fmt.Sprintf("profile %s %s: %s", p.Name, p.Verdict, p.Counts.Line()))
	}
	for _, tr := range res.Tests {
		key := string(tr.Profile) + "/" + tr.ShortName
		ts := tests[key]
		if ts == nil {
			ts = &testStats{}
			tests[key] = ts
			*order = append(*order, key)
		}
		d := time.Duration(tr.DurationSeconds * float64(time.Second))
		switch tr.Outcome {
		case conformance.Passed:
			ts.pass++
			ts.durations = append(ts.durations, d)
		case conformance.Failed:
			ts.fail++
			ts.durations = append(ts.durations, d)
			ts.failSeeds = append(ts.failSeeds, fmt.Sprint(seed))
			r.failures = append(r.failures, tr.ShortName+": "+firstLine(tr.Message))
		case conformance.Skipped:
			ts.skip++
			if len(ts.skipReasons) == 0 {
				ts.skipReasons = append(ts.skipReasons, tr.Message)
			}
		}
	}
	return r
}

func report(args string, runs []run, tests map[string]*testStats, order []string, start time.Time) string {
	var b strings.Builder
	b.WriteString("# Flake check\n\n")
	b.WriteString("Generated by `make flake-check` (`eppkit flake-check`); do not edit by hand.\n\n")
	fmt.Fprintf(&b, "%d runs of `eppkit conformance %s`, run i with seed %d + i, started %s, eppkit %s, %s in all.\n\n",
		len(runs), args, runs[0].seed, start.UTC().Format(time.RFC3339), version.Version(), time.Since(start).Round(time.Second))
	green := 0
	for _, r := range runs {
		if r.exit == 0 && r.problem == "" && len(r.failures) == 0 {
			green++
		}
	}
	fmt.Fprintf(&b, "**%d/%d runs green.**\n\n", green, len(runs))
	b.WriteString("## Tests\n\nWall time of the runs where the test ran (pass or fail); the median is internal/percentile's (linear interpolation).\n\n")
	b.WriteString("| Test | Passed | Failed | Skipped | Min | Median | Max | Failing seeds / skip reason |\n|---|---|---|---|---|---|---|---|\n")
	for _, k := range order {
		ts := tests[k]
		mn, med, mx := durationStats(ts.durations)
		note := strings.Join(ts.failSeeds, ", ")
		if note == "" && len(ts.skipReasons) > 0 {
			note = ts.skipReasons[0]
		}
		if note == "" {
			note = "—"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s | %s | %s |\n", k, ts.pass, ts.fail, ts.skip, mn, med, mx, conformance.MarkdownCell(note))
	}
	b.WriteString("\n## Runs\n\n| Run | Seed | Exit | Wall time | Profiles |\n|---|---|---|---|---|\n")
	for i, r := range runs {
		profiles := strings.Join(r.summary, "; ")
		if r.problem != "" {
			profiles = r.problem
		}
		fmt.Fprintf(&b, "| %d | %d | %d | %s | %s |\n", i+1, r.seed, r.exit, r.wall.Round(100*time.Millisecond), conformance.MarkdownCell(profiles))
	}
	b.WriteString("\nReproduce a run: `EPPKIT_SEED=<seed> eppkit conformance " + args + "`.\n")
	return b.String()
}

// durationStats is the minimum, median and maximum of ds, rounded to the millisecond ("—" each
// for no samples).
func durationStats(ds []time.Duration) (string, string, string) {
	if len(ds) == 0 {
		return "—", "—", "—"
	}
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return r(slices.Min(ds)), r(percentile.Durations(ds, 50)), r(slices.Max(ds))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
