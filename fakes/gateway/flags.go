package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// Flags are the gateway stand-in's command-line flags (`eppkit fake-gateway`): AddFlags binds
// them with their defaults, Config turns them into a Config.
type Flags struct {
	// Listen is the HTTP listen address (--listen); the command opens it.
	Listen string
	// EPP is the EPP's ext_proc host:port (--epp), EPPTLS plaintext, insecure or ca:<file>
	// (--epp-tls).
	EPP, EPPTLS string
	// Mode is strict, lenient or round-robin (--mode); FailureMode close or open
	// (--failure-mode); HeaderSemantics envoy-ext-proc or append-action (--header-semantics).
	Mode, FailureMode, HeaderSemantics string
	// Endpoints are the pool's ip:port,... for fail-open and round-robin (--endpoints).
	Endpoints string
	// BodyChunkSize is bytes per ext_proc body chunk (--body-chunk-size); StatusOnError the
	// fail-close local-reply status (--status-on-error); MessageTimeout the bound on each wait for
	// an EPP response (--message-timeout).
	BodyChunkSize, StatusOnError int
	MessageTimeout               time.Duration
	// AppProtocol is the pool's appProtocol (--app-protocol): http or kubernetes.io/h2c.
	AppProtocol string
}

// AddFlags binds f to fs with the fake gateway's flag names and defaults.
func (f *Flags) AddFlags(fl *pflag.FlagSet) {
	fl.StringVar(&f.Listen, "listen", "127.0.0.1:8081", "HTTP listen address")
	fl.StringVar(&f.EPP, "epp", "", "EPP ext_proc address host:port (required unless --mode round-robin)")
	fl.StringVar(&f.EPPTLS, "epp-tls", "plaintext", "TLS to the EPP: plaintext, insecure (any certificate) or ca:<file>")
	fl.StringVar(&f.Mode, "mode", "strict", "strict, lenient or round-robin")
	fl.StringVar(&f.FailureMode, "failure-mode", "close", "close (local reply 500/504) or open (round-robin over --endpoints)")
	fl.StringVar(&f.Endpoints, "endpoints", "", "Pool addresses ip:port,... for fail-open and round-robin")
	fl.StringVar(&f.AppProtocol, "app-protocol", AppProtocolHTTP, "The InferencePool's appProtocol: http (HTTP/1.1 to the endpoints) or kubernetes.io/h2c (HTTP/2 prior knowledge, e.g. vLLM's gRPC API)")
	fl.IntVar(&f.BodyChunkSize, "body-chunk-size", DefaultBodyChunkSize, "Bytes per ext_proc body chunk")
	fl.DurationVar(&f.MessageTimeout, "message-timeout", DefaultMessageTimeout, "Bound on each wait for an EPP response")
	fl.IntVar(&f.StatusOnError, "status-on-error", DefaultStatusOnError, "Local-reply status when the EPP fails (fail-close)")
	fl.StringVar(&f.HeaderSemantics, "header-semantics", extprocclient.SemanticsEnvoyExtProc.String(),
		"How header mutations apply: envoy-ext-proc (Envoy's ext_proc filter as released: only the deprecated append, default overwrite) or append-action (HeaderValueOption as Envoy's API defines it and agentgateway applies it: the zero append_action appends)")
}

// Config validates f and returns the gateway's Config, logging to logger. Every error names the
// flag at fault (New checks the Config again and names its fields).
func (f *Flags) Config(logger *slog.Logger) (Config, error) {
	mode, err := ParseMode(f.Mode)
	if err != nil {
		return Config{}, fmt.Errorf("--mode: %w", err)
	}
	fm, err := ParseFailureMode(f.FailureMode)
	if err != nil {
		return Config{}, fmt.Errorf("--failure-mode: %w", err)
	}
	sem, err := extprocclient.ParseHeaderSemantics(f.HeaderSemantics)
	if err != nil {
		return Config{}, fmt.Errorf("--header-semantics: %w", err)
	}
	tlsCfg, err := extprocclient.ParseTLSSpec("--epp-tls", f.EPPTLS)
	if err != nil {
		return Config{}, err
	}
	if f.BodyChunkSize <= 0 || f.BodyChunkSize > MaxBodyChunkSize {
		return Config{}, fmt.Errorf("--body-chunk-size must be in 1–%d bytes (below gRPC's 4 MiB message limit), got %d", MaxBodyChunkSize, f.BodyChunkSize)
	}
	if f.StatusOnError < 400 || f.StatusOnError > 599 {
		return Config{}, fmt.Errorf("--status-on-error must be an HTTP error status in 400–599, got %d", f.StatusOnError)
	}
	var endpoints []string
	for _, a := range strings.Split(f.Endpoints, ",") {
		if a = strings.TrimSpace(a); a != "" {
			endpoints = append(endpoints, a)
		}
	}
	if err := ValidateEndpoints(endpoints); err != nil {
		return Config{}, fmt.Errorf("--endpoints: %w", err)
	}
	if fm == FailOpen && mode != ModeRoundRobin && len(endpoints) == 0 {
		return Config{}, errors.New("--failure-mode open needs --endpoints (the pool to fail open to)")
	}
	if mode != ModeRoundRobin && f.EPP != "" {
		if _, port, err := net.SplitHostPort(f.EPP); err != nil || port == "" {
			return Config{}, fmt.Errorf("--epp %q: want host:port", f.EPP)
		}
	}
	if f.AppProtocol != AppProtocolHTTP && f.AppProtocol != AppProtocolH2C {
		return Config{}, fmt.Errorf("--app-protocol must be %s or %s, got %q", AppProtocolHTTP, AppProtocolH2C, f.AppProtocol)
	}
	if f.MessageTimeout <= 0 {
		return Config{}, fmt.Errorf("--message-timeout must be positive, got %v", f.MessageTimeout)
	}
	return Config{
		EPPAddress: f.EPP, EPPTLS: tlsCfg, Mode: mode, FailureMode: fm, Endpoints: endpoints,
		BodyChunkSize: f.BodyChunkSize, MessageTimeout: f.MessageTimeout, StatusOnError: f.StatusOnError, HeaderSemantics: sem, Logger: logger,
		AppProtocol: f.AppProtocol,
	}, nil
}
