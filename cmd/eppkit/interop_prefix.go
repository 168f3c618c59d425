package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/selfcheck/scoreparity"
)

// newScoreParityCommand is `eppkit interop <use>`: the studies of selfcheck/scoreparity, run one
// after the other.
func newScoreParityCommand(use, short, long, logDir string, studies ...*scoreparity.Study) *cobra.Command {
	var f scoreparity.Options
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: long + `

Exit codes: 0 every difference is explained, 1 a difference is not, 2 a harness or EPP could not
start or an EPP published no scores, 3 bad flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.Out = cmd.OutOrStdout()
			f.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return scoreparity.Run(ctx, f, studies...)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.LLMDRouter, "llmd-router", "", "llm-d-router v0.10.0's EPP binary (default: `eppkit tools path llmd-router epp`)")
	fl.StringVar(&f.LogDir, "log-dir", logDir, "directory for each EPP's harness log, EPP log and config")
	fl.StringVar(&f.Report, "report", "", "write the Markdown summary to this file")
	fl.IntVar(&f.Trials, "trials", 12, "trials per request kind")
	fl.Int64Var(&f.Seed, "seed", 0, "seed of the workload and the fakes (0 = from the clock)")
	fl.DurationVar(&f.Timeout, "timeout", 10*time.Minute, "overall bound")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return badFlags("%v", err) })
	return cmd
}

func newPrefixParityCommand() *cobra.Command {
	return newScoreParityCommand("prefix-parity",
		"The reference EPP's prefix-cache scores against llm-d-router v0.10.0's, request by request",
		`Runs the reference EPP and then llm-d-router v0.10.0, each with approximate prefix-cache scoring only
(approx-prefix-cache-producer with blockSizeTokens 64, prefix-cache-scorer, max-score-picker) and
--emit-endpoint-scores, on a fresh fake fleet of four endpoints (static source; llm-d-router through
its file-discovery plugin). Both see the same seeded trials: each endpoint is given a share of a
prompt (sent with its subset hint until it is indexed there), then the whole prompt is sent
unhinted and the two EPPs' published scores are compared endpoint by endpoint. Request kinds
whose scores must agree (ASCII completions, token ids, cache_salt) fail the check on any difference;
the others (prompt lists, chat, non-ASCII text) are expected to differ, each by a named rule.`,
		"out/interop/score-parity", scoreparity.Prefix)
}

func newTokenLoadParityCommand() *cobra.Command {
	return newScoreParityCommand("token-load-parity",
		"The reference EPP's token-load and active-request scores against llm-d-router v0.10.0's, request by request",
		`Runs the reference EPP and then llm-d-router v0.10.0 with inflight-load-producer and token-load-scorer
(queueThresholdTokens 16384), then both again with active-request-scorer, each on a fresh fake fleet
of four endpoints. Both see the same seeded trials: 0 to 3 requests are held in flight on each
endpoint (sent with its subset hint over an ext_proc stream left open), then a probe is sent
unhinted and the two EPPs' published scores are compared endpoint by endpoint. ASCII completions
(token-load) and every active-request trial must agree; chat and non-ASCII text are expected to
differ, by the block counts the prefix study names.`,
		"out/interop/score-parity", scoreparity.TokenLoad, scoreparity.ActiveRequest)
}
