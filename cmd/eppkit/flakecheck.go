package main

import (
	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/selfcheck/flakecheck"
)

func init() { subcommands = append(subcommands, newFlakeCheckCommand) }

func newFlakeCheckCommand() *cobra.Command {
	var o flakecheck.Options
	cmd := &cobra.Command{
		Use:   "flake-check [flags] -- <eppkit conformance flags>",
		Short: "Run eppkit conformance N times with different seeds and report failures and per-test wall time",
		Long: `Run "eppkit conformance <flags after -->" --runs times; run i uses seed --seed + i (so every run
draws different prompts, endpoints and fake jitter), its own log directory and its own results
file, which is what the report is built from. Writes --output (Markdown): each run's seed, verdict
and wall time, and per test the pass/fail/skip counts and wall time (min, median, max). Exit 1 when
any run failed a test, 2 when a run could not start or wrote no results.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ConformanceArgs, o.Out = args, cmd.OutOrStdout()
			return flakecheck.Run(cmd.Context(), o)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&o.Runs, "runs", 20, "number of runs")
	fl.Int64Var(&o.Seed, "seed", 0, "seed of the first run (0 = from the clock); run i uses seed+i")
	fl.StringVar(&o.Output, "output", "reports/flake-check.md", "Markdown report to write")
	fl.StringVar(&o.LogDir, "log-dir", "out/flake-check", "directory for each run's output, results file and target log")
	fl.BoolVar(&o.FailFast, "fail-fast", false, "stop after the first run that fails")
	return cmd
}
