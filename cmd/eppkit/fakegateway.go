package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/fakes/gateway"
)

func init() { subcommands = append(subcommands, newFakeGatewayCommand) }

func newFakeGatewayCommand() *cobra.Command {
	f := &gateway.Flags{}
	cmd := &cobra.Command{
		Use:   "fake-gateway --epp ADDR [--endpoints ip:port,...]",
		Short: "Run an Envoy stand-in that routes HTTP requests where an EPP says over ext_proc",
		Long: `Run the eppkit gateway: an HTTP data plane that asks an endpoint picker over Envoy ext_proc
(FULL_DUPLEX_STREAMED bodies) where each request goes, forwards it there and streams the response
back through the EPP's response phases.

Modes: strict (the pick's first address only, like Envoy's ORIGINAL_DST; a request the EPP's
header mutation would send with a duplicated header is refused with 502), lenient (next address on
a connection failure; duplicates forwarded), round-robin (no EPP; over --endpoints; the benchmark
baseline). The pick is what Envoy's router sees: the request_headers response, or the first
streamed body response after it; a later pick is a 503 (x-eppkit-gateway-error: late-pick).
Failure modes: close (local reply 500, or 504 on a message timeout, as Envoy with
failure_mode_allow=false) or open (round-robin over --endpoints).

Request header x-eppkit-subset-hint: ip:port,... is sent as the subset hint and stripped; the
response carries x-eppkit-routed-to: ip:port. SIGINT/SIGTERM shut down cleanly.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runFakeGateway(cmd, f)
		},
	}
	f.AddFlags(cmd.Flags())
	return cmd
}

func runFakeGateway(cmd *cobra.Command, f *gateway.Flags) error {
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	cfg, err := f.Config(logger)
	if err != nil {
		return err
	}
	g, err := gateway.New(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = g.Close() }()
	ln, err := net.Listen("tcp", f.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := gateway.NewServer(g)
	logger.Info("fake gateway serving", "addr", ln.Addr().String(), "epp", f.EPP, "mode", cfg.Mode, "failure-mode", cfg.FailureMode,
		"app-protocol", cmp.Or(cfg.AppProtocol, gateway.AppProtocolHTTP))
	fmt.Fprintf(cmd.OutOrStdout(), "http://%s\n", ln.Addr())
	ctx, stop := signalContext()
	defer stop()
	return serveUntilDone(ctx, srv, ln)
}
