package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() { subcommands = append(subcommands, newFakeGatewayCommand) }

type fakeGatewayFlags struct {
	listen, epp, eppTLS, mode, failureMode, endpoints string
	chunk, statusOnError                              int
	messageTimeout                                    time.Duration
}

func newFakeGatewayCommand() *cobra.Command {
	f := fakeGatewayFlags{}
	cmd := &cobra.Command{
		Use:   "fake-gateway --epp ADDR [--endpoints ip:port,...]",
		Short: "Run an Envoy stand-in that routes HTTP requests where an EPP says over ext_proc",
		Long: `Run the eppkit gateway: an HTTP data plane that asks an endpoint picker over Envoy ext_proc
(FULL_DUPLEX_STREAMED bodies) where each request goes, forwards it there and streams the response
back through the EPP's response phases.

Modes: strict (the pick's first address only, like Envoy's ORIGINAL_DST), lenient (next address on
a connection failure), round-robin (no EPP; over --endpoints; the benchmark baseline).
Failure modes: close (local reply 500, or 504 on a message timeout, as Envoy with
failure_mode_allow=false) or open (round-robin over --endpoints).

Request header x-eppkit-subset-hint: ip:port,... is sent as the subset hint and stripped; the
response carries x-eppkit-routed-to: ip:port. SIGINT/SIGTERM shut down cleanly.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runFakeGateway(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8081", "HTTP listen address")
	fl.StringVar(&f.epp, "epp", "", "EPP ext_proc address host:port (required unless --mode round-robin)")
	fl.StringVar(&f.eppTLS, "epp-tls", "plaintext", "TLS to the EPP: plaintext, insecure (any certificate) or ca:<file>")
	fl.StringVar(&f.mode, "mode", "strict", "strict, lenient or round-robin")
	fl.StringVar(&f.failureMode, "failure-mode", "close", "close (local reply 500/504) or open (round-robin over --endpoints)")
	fl.StringVar(&f.endpoints, "endpoints", "", "Pool addresses ip:port,... for fail-open and round-robin")
	fl.IntVar(&f.chunk, "body-chunk-size", gateway.DefaultBodyChunkSize, "Bytes per ext_proc body chunk")
	fl.DurationVar(&f.messageTimeout, "message-timeout", gateway.DefaultMessageTimeout, "Bound on each wait for an EPP response")
	fl.IntVar(&f.statusOnError, "status-on-error", gateway.DefaultStatusOnError, "Local-reply status when the EPP fails (fail-close)")
	return cmd
}

// splitAddrs splits a comma list of addresses, dropping blanks.
func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func runFakeGateway(cmd *cobra.Command, f fakeGatewayFlags) error {
	mode, err := gateway.ParseMode(f.mode)
	if err != nil {
		return fmt.Errorf("--mode: %w", err)
	}
	fm, err := gateway.ParseFailureMode(f.failureMode)
	if err != nil {
		return fmt.Errorf("--failure-mode: %w", err)
	}
	tlsCfg, err := extprocclient.ParseTLSSpec("--epp-tls", f.eppTLS)
	if err != nil {
		return err
	}
	if f.chunk <= 0 || f.chunk > gateway.MaxBodyChunkSize {
		return fmt.Errorf("--body-chunk-size must be in 1–%d bytes (below gRPC's 4 MiB message limit), got %d", gateway.MaxBodyChunkSize, f.chunk)
	}
	if f.statusOnError < 400 || f.statusOnError > 599 {
		return fmt.Errorf("--status-on-error must be an HTTP error status in 400–599, got %d", f.statusOnError)
	}
	endpoints := splitAddrs(f.endpoints)
	if err := gateway.ValidateEndpoints(endpoints); err != nil {
		return fmt.Errorf("--endpoints: %w", err)
	}
	if fm == gateway.FailOpen && mode != gateway.ModeRoundRobin && len(endpoints) == 0 {
		return errors.New("--failure-mode open needs --endpoints (the pool to fail open to)")
	}
	if mode != gateway.ModeRoundRobin && f.epp != "" {
		if _, port, err := net.SplitHostPort(f.epp); err != nil || port == "" {
			return fmt.Errorf("--epp %q: want host:port", f.epp)
		}
	}
	if f.messageTimeout <= 0 {
		return fmt.Errorf("--message-timeout must be positive, got %v", f.messageTimeout)
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	g, err := gateway.New(gateway.Config{
		EPPAddress: f.epp, EPPTLS: tlsCfg, Mode: mode, FailureMode: fm, Endpoints: endpoints,
		BodyChunkSize: f.chunk, MessageTimeout: f.messageTimeout, StatusOnError: f.statusOnError, Logger: logger,
	})
	if err != nil {
		return err
	}
	defer func() { _ = g.Close() }()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	logger.Info("fake gateway serving", "addr", ln.Addr().String(), "epp", f.epp, "mode", mode, "failure-mode", fm)
	fmt.Fprintf(cmd.OutOrStdout(), "http://%s\n", ln.Addr())
	ctx, stop := signalContext()
	defer stop()
	return serveUntilDone(ctx, srv, ln)
}
