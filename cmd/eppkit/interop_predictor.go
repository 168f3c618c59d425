package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/selfcheck/predictorparity"
)

func init() { subcommands = append(subcommands, newInteropCommand) }

// newInteropCommand is `eppkit interop`: checks against upstream binaries that are not
// conformance tests (make interop; reports/interop/README.md).
func newInteropCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "interop",
		Short: "Interop checks against upstream binaries that are not conformance tests (make interop)",
	}
	cmd.AddCommand(newPredictorParityCommand(), newPrefixParityCommand(), newTokenLoadParityCommand(), newSimPreflightCommand())
	return cmd
}

func newPredictorParityCommand() *cobra.Command {
	var f predictorparity.Options
	cmd := &cobra.Command{
		Use:   "predictor-parity",
		Short: "The upstream EPP v1.5.0 with its predicted-latency plugins against `eppkit predictor`",
		Long: `Starts ` + "`eppkit predictor`" + `, a logging proxy in front of it, the harness (fake fleet, local
kube-apiserver with the InferencePool, fake gateway) and the upstream EPP v1.5.0 with its
predicted-latency plugins (--config-file) and PREDICTION_SERVER_URL / TRAINING_SERVER_URL pointing at
the proxy. It sends requests with x-slo-ttft-ms / x-slo-tpot-ms until the predictor has trained on
the EPP's training entries and answers from a fitted model (its /readyz), then sends --requests
more and checks that every one got a prediction from the trained model: the proxy's request log
shows the EPP's /predict/bulk/strict calls answered 200 after the fit (at least one a request), and
the EPP's own ` + predictorparity.UpstreamPredictedTTFT + ` grew (v1.5.0 records only responses whose first token came before the end of the stream) with a
mean away from the predictor's untrained prior.

Exit codes: 0 parity holds, 1 it does not, 2 the predictor, harness or EPP could not start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.Out = cmd.OutOrStdout()
			f.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return predictorparity.Run(ctx, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.EPP, "epp", "", "the upstream EPP v1.5.0 binary (default: `eppkit tools path gie epp`)")
	fl.StringVar(&f.ConfigFile, "config-file", "manifests/epp-configs/upstream-v1.5.0-predicted-latency.yaml", "the EPP's EndpointPickerConfig")
	fl.StringVar(&f.LogDir, "log-dir", "out/interop/predictor-parity", "directory for the EPP's, the predictor's and the proxy's logs")
	fl.StringVar(&f.Report, "report", "", "write a Markdown summary to this file")
	fl.IntVar(&f.MinSamples, "min-samples", 20, "the predictor's --min-samples (training entries before its first fit)")
	fl.IntVar(&f.MaxWarmup, "max-warmup", 5000, "at most this many requests while waiting for the predictor's fit")
	fl.DurationVar(&f.WarmupTimeout, "warmup-timeout", 2*time.Minute, "at most this long while waiting for the predictor's fit (requests are paced 20 ms apart)")
	fl.IntVar(&f.Requests, "requests", 40, "requests sent after the fit, each of which must get a trained prediction")
	fl.DurationVar(&f.Timeout, "timeout", 4*time.Minute, "overall bound")
	fl.Int64Var(&f.Seed, "seed", 0, "seed for the fakes (0 = from the clock)")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return badFlags("%v", err) })
	return cmd
}
