package main

import (
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/reference/datalayer"
	"github.com/eppkit/eppkit/reference/discovery"
	"github.com/eppkit/eppkit/reference/eppserver"
)

func init() { subcommands = append(subcommands, newReferenceEPPCommand) }

// mutateReference is set only in mutant builds (mutants.go, tag eppkit_mutants): it applies the
// active mutant's wrapper plugins and decorated sources to the reference's options
// (selfcheck/mutant/wrap.Reference). pool is the InferencePool discovery config, nil for --endpoints;
// metrics is the configuration opts.Collector was built from.
var mutateReference func(opts *eppserver.Options, pool *discovery.PoolConfig, metrics datalayer.Config) error

// newReferenceEPPCommand is `eppkit reference-epp`: its flags are eppserver.Flags.
func newReferenceEPPCommand() *cobra.Command {
	f := &eppserver.Flags{}
	cmd := &cobra.Command{
		Use:   "reference-epp (--endpoints IP:PORT,... | --pool-name NAME [--kubeconfig PATH])",
		Short: "Run eppkit's reference endpoint picker (an Envoy ext_proc server)",
		Long: `Run the reference EPP: an Envoy ext_proc v3 server (FULL_DUPLEX_STREAMED bodies) that picks an
endpoint of the pool for every request with the plugin framework and the config given by
--config-file or --config-text (default: queue-scorer 2, kv-cache-utilization-scorer 2,
prefix-cache-scorer 3, max-score-picker).

The pool comes from --endpoints (a static list; InferenceObjective priorities from --objectives
name=priority,...) or from an InferencePool watched through --kubeconfig (or the in-cluster
config). Endpoint metrics are scraped from http://IP:PORT/metrics every
--refresh-metrics-interval.

Serves gRPC health (standard grpc.health.v1; "", inference-extension, liveness, readiness and
envoy.service.ext_proc.v3.ExternalProcessor; readiness once discovery has synced and, with
--ha-enable-leader-election, only on the replica holding the Lease epp-<namespace>-<pool>.llm-d.ai;
liveness always) on --grpc-health-port and on --grpc-port, and Prometheus metrics on
--metrics-port (0 disables; --metrics-endpoint-auth checks every scrape with the API server).

SIGINT/SIGTERM drain: readiness turns NOT_SERVING and the lease is released at once; new
requests are served for --drain-handover, then refused with 503 and
x-llm-d-request-dropped-reason: rejected-shutting-down; the EPP exits once no request is in
flight, or after --drain-timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runReferenceEPP(cmd, f) },
	}
	f.AddFlags(cmd.Flags())
	return cmd
}

func runReferenceEPP(cmd *cobra.Command, f *eppserver.Flags) error {
	logger, err := f.Logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	opts, pool, err := f.Options(logger)
	if err != nil {
		return err
	}
	if mutateReference != nil {
		if err := mutateReference(&opts, pool, f.MetricsConfig(logger)); err != nil {
			return err
		}
	}
	if pa := os.Getenv("EPPKIT_PPROF_ADDR"); pa != "" {
		// Diagnostics: net/http/pprof (registered by fakevllm.go's import) on a separate
		// listener, e.g. EPPKIT_PPROF_ADDR=127.0.0.1:6061.
		go func() { logger.Warn("pprof server stopped", "err", http.ListenAndServe(pa, nil)) }()
	}
	// SIGINT/SIGTERM, or the command's context (tests, embedding), end the server gracefully.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := eppserver.Start(ctx, opts)
	if err != nil {
		return f.StartError(err)
	}
	<-srv.Done()
	return srv.Wait()
}
