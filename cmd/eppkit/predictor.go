package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	fakepredictor "github.com/eppkit/eppkit/fakes/predictor"
	"github.com/eppkit/eppkit/reference/predictor"
)

func init() { subcommands = append(subcommands, newPredictorCommand) }

type predictorFlags struct {
	host                     string
	port                     int
	objective, features      string
	quantileMethod           string
	quantile                 float64
	minSamples, retrainEvery int
	maxPerBucket             int
	retrainInterval          time.Duration
	priorTTFT, priorTPOT     float64
	fake                     bool
}

func newPredictorCommand() *cobra.Command {
	f := predictorFlags{}
	cmd := &cobra.Command{
		Use:   "predictor --port N",
		Short: "Serve the latency predictor over the upstream sidecar HTTP API",
		Long: `Serve eppkit's online TTFT/TPOT predictor (Bayesian ridge over upstream's engineered features)
with the HTTP API of the upstream latency predictor sidecars (gateway-api-inference-extension
latencypredictor/): one process plays both the training server and the prediction server, so an
upstream EPP can set TRAINING_SERVER_URL and PREDICTION_SERVER_URL to it.

  POST /predict, /predict/bulk, /predict/bulk/strict    predictions (ttft_ms, tpot_ms)
  POST /add_training_data_bulk                          training entries (202)
  GET  /status, /model/download/info, /healthz, /readyz
  GET  /metrics                                         model_type, ttft_coef{feature}, ... (linear)

It serves the prior (--prior-ttft-ms/--prior-tpot-ms) and reports not ready until each target has
--min-samples samples. With --fake it serves the scriptable fake instead (fixed answers from the
prior flags, scripted at runtime with POST /admin/behavior). SIGINT/SIGTERM shut down cleanly.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPredictor(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.host, "host", "127.0.0.1", "Listen host")
	fl.IntVar(&f.port, "port", 8000, "Listen port (0 picks a free one; the URL is printed)")
	fl.StringVar(&f.objective, "objective", predictor.ObjectiveQuantile, "quantile or mean")
	fl.Float64Var(&f.quantile, "quantile", predictor.DefaultQuantile, "Predicted quantile in (0,1) for --objective quantile")
	fl.StringVar(&f.quantileMethod, "quantile-method", predictor.QuantileRelative, "relative (mean × quantile of actual/mean) or additive (mean + quantile of residuals)")
	fl.StringVar(&f.features, "features", string(predictor.FeaturesFull), "Feature set: full (upstream training server's) or client (what upstream's Go client reads back from /metrics)")
	fl.IntVar(&f.minSamples, "min-samples", predictor.DefaultMinSamples, "Samples per target before the first fit (not ready until then)")
	fl.IntVar(&f.retrainEvery, "retrain-every", predictor.DefaultRetrainEvery, "Refit after this many new samples")
	fl.DurationVar(&f.retrainInterval, "retrain-interval", predictor.DefaultRetrainInterval, "Refit when new samples arrived and this long passed")
	fl.IntVar(&f.maxPerBucket, "max-per-bucket", predictor.DefaultMaxPerBucket, "Samples kept per bucket (5 queue × 20 KV × 4 prefix), newest wins")
	fl.Float64Var(&f.priorTTFT, "prior-ttft-ms", predictor.DefaultPriorTTFTms, "TTFT (ms) served before the first fit")
	fl.Float64Var(&f.priorTPOT, "prior-tpot-ms", predictor.DefaultPriorTPOTms, "TPOT (ms) served before the first fit")
	fl.BoolVar(&f.fake, "fake", false, "Serve the scriptable fake predictor (fakes/predictor) instead of the model")
	return cmd
}

func runPredictor(cmd *cobra.Command, f predictorFlags) error {
	if f.port < 0 || f.port > 65535 {
		return fmt.Errorf("--port must be in 0–65535, got %d", f.port)
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	var handler http.Handler
	if f.fake {
		fk, err := fakepredictor.New(fakepredictor.Behavior{TTFTms: f.priorTTFT, TPOTms: f.priorTPOT, Quantile: f.quantile})
		if err != nil {
			return fmt.Errorf("--fake: %w", err)
		}
		handler = fk.Handler()
	} else {
		m, err := predictor.NewModel(predictor.Config{
			Objective: f.objective, Quantile: f.quantile, QuantileMethod: f.quantileMethod, Features: predictor.FeatureSet(f.features),
			MinSamples: f.minSamples, RetrainEvery: f.retrainEvery, RetrainInterval: f.retrainInterval,
			MaxPerBucket: f.maxPerBucket, PriorTTFTms: f.priorTTFT, PriorTPOTms: f.priorTPOT,
		})
		if err != nil {
			return fmt.Errorf("--%s", flagOfConfigError(err))
		}
		handler = predictor.NewHandler(m, predictor.ServerOptions{Logger: logger})
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(f.host, strconv.Itoa(f.port)))
	if err != nil {
		return fmt.Errorf("--host/--port: %w", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	logger.Info("predictor serving", "addr", ln.Addr().String(), "fake", f.fake, "objective", f.objective, "quantile", f.quantile, "features", f.features)
	fmt.Fprintf(cmd.OutOrStdout(), "http://%s\n", ln.Addr())
	// The command's context (a test's) or a signal ends the server.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveUntilDone(ctx, srv, ln)
}

// flagOfConfigError maps a predictor.Config error ("minSamples: ...") to the flag spelling
// ("min-samples: ...").
func flagOfConfigError(err error) string {
	msg := err.Error()
	for field, flag := range map[string]string{
		"objective:": "objective:", "quantile:": "quantile:", "quantileMethod:": "quantile-method:", "features:": "features:",
		"maxPerBucket:": "max-per-bucket:", "minSamples:": "min-samples:", "retrainInterval:": "retrain-interval:",
		"retrainEvery:": "retrain-every:", "priorTTFTms/priorTPOTms:": "prior-ttft-ms/--prior-tpot-ms:",
	} {
		if len(msg) >= len(field) && msg[:len(field)] == field {
			return flag + msg[len(field):]
		}
	}
	return msg
}
