package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // served only when EPPKIT_PPROF_ADDR is set
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/vllm"
)

func init() { subcommands = append(subcommands, newFakeVLLMCommand) }

// shutdownGrace is how long SIGINT/SIGTERM waits for open requests before closing them.
const shutdownGrace = 5 * time.Second

func newFakeVLLMCommand() *cobra.Command {
	cfg := vllm.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "fake-vllm --model NAME [llm-d-inference-sim flags]",
		Short: "Run a fake vLLM server compatible with llm-d-inference-sim v0.10.2's flags",
		Long: `Run a fake vLLM GPU server: OpenAI completions (prompt as a string, strings, token ids or lists of
token ids) and chat completions, /v1/embeddings, /v1/messages (Anthropic) and /v1/responses (OpenAI
Responses), each as JSON or SSE with its own events, usage and error shape; /v1/models, LoRA
load/unload, /health, /metrics (vllm:* names of --metrics-names current|legacy|both), /admin/config,
failure injection. LoRA is off unless --enable-lora, --max-loras N or --lora-modules (as vLLM:
no vllm:lora_requests_info without it); --data-parallel-mode internal serves N engines behind one
port with engine-labelled series.

Flags are llm-d-inference-sim v0.10.2's (durations as Go strings such as 10ms; a bare integer is
taken as milliseconds, as older simulator releases did). Multi-value flags take space-separated
values as the simulator does: --lora-modules '{"name": "a"}' '{"name": "b"}'. Simulator flags this
fake does not model are accepted and ignored with a warning. SIGINT/SIGTERM shut down cleanly.

Deterministic errors, per request, with the simulator's X-Return-Error header:
  X-Return-Error: 503       status 503 and the simulator's JSON error before any byte (streams too)
  X-Return-Error: 500@3     [eppkit] a stream sends 3 tokens, then the API's in-stream error event
                            (OpenAI: data: {"error":{...,"code":500}} then data: [DONE]); not
                            streamed: 500 before any byte
  X-Return-Error: KIND      one of --failure-types' kinds (rate_limit, invalid_api_key,
                            context_length, server_error, invalid_request, model_not_found, abort,
                            reset, slow-first-byte), injected exactly
Statuses outside 400-599 and other values are refused with 400 naming the header.

Streams are shaped like vLLM's: finish_reason on the last token chunk (--stream-finish openai:
a separate chunk with an empty delta, as OpenAI); a chat request with tools is answered with a
tool call (tool_choice none: text), streamed as tool_calls deltas.

KV-cache events as vLLM publishes them (with --enable-kvcache): --kv-events-config
'{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558"}'
(vLLM's KVEventsConfig JSON; "*" binds --host; rank i on port+i), msgpack KVEventBatch on ZMQ PUB
with sequence numbers and the replay socket; block hashes are vLLM's sha256_cbor seeded by
--hash-seed (default PYTHONHASHSEED, else --seed); POST /reset_prefix_cache clears the cache
(docs/fake-vllm.md).`,
		DisableFlagParsing: true,
		SilenceUsage:       true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if wantsHelp(args) {
				return cmd.Help()
			}
			return runFakeVLLM(cmd, args)
		},
	}
	vllm.BindFlags(cmd.Flags(), &cfg)
	cmd.AddCommand(newFakeVLLMFleetCommand(), newFakeVLLMLoadtestCommand())
	return cmd
}

func wantsHelp(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == "--help" || a == "-h" || a == "--help=true" })
}

// parseServerFlags parses args (simulator style) into a validated Config, printing warnings.
func parseServerFlags(args []string, extra func(fs *pflag.FlagSet), stderr io.Writer) (vllm.Config, error) {
	cfg, warnings, err := vllm.ParseArgs(args, extra)
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	return cfg, err
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// serveUntilDone serves srv on ln until ctx is done, then shuts it down within shutdownGrace
// (requests still running after that are cut). It returns Serve's error if serving stops first,
// and Shutdown's error other than the grace deadline.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func runFakeVLLM(cmd *cobra.Command, args []string) error {
	cfg, err := parseServerFlags(args, nil, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	if addr := os.Getenv("EPPKIT_PPROF_ADDR"); addr != "" {
		// Diagnostics: net/http/pprof on a separate listener, e.g. EPPKIT_PPROF_ADDR=127.0.0.1:6060.
		go func() { logger.Warn("pprof server stopped", "err", http.ListenAndServe(addr, nil)) }()
	}
	inst, err := vllm.Start(cfg, vllm.Options{Logger: logger})
	if err != nil {
		return err
	}
	for _, r := range inst.Ranks {
		logger.Info("fake vLLM serving", "model", cfg.Model, "rank", r.Rank(), "addr", r.Addr(), "pod", cfg.PodName, "seed", cfg.Seed)
	}
	ctx, stop := signalContext()
	defer stop()
	select {
	case <-ctx.Done():
	case <-inst.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := inst.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func newFakeVLLMFleetCommand() *cobra.Command {
	cfg := vllm.DefaultConfig()
	var count int
	var prefix string
	var distinct bool
	addFleetFlags := func(fs *pflag.FlagSet) {
		fs.IntVar(&count, "count", 4, "Number of servers")
		fs.StringVar(&prefix, "ip-prefix", fleet.DefaultIPPrefix, "Loopback prefix: server i listens on <prefix><i+1>")
		fs.BoolVar(&distinct, "distinct-ports", false, "Use distinct ports on 127.0.0.1 instead of loopback aliases")
	}
	cmd := &cobra.Command{
		Use:   "fleet --count N --model NAME [llm-d-inference-sim flags]",
		Short: "Run N fake vLLM servers, one per loopback address (127.0.10.1, .2, …) on the same port",
		Long: `Run N fake vLLM servers like the pods of an InferencePool: server i on 127.0.10.(i+1) at --port
(default 8000 on every address; 0 picks a free port), pod name fake-vllm-i. Where loopback aliases do not bind, servers use distinct
ports on 127.0.0.1. Takes every fake-vllm flag. SIGINT/SIGTERM shut down cleanly.`,
		DisableFlagParsing: true,
		SilenceUsage:       true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if wantsHelp(args) {
				return cmd.Help()
			}
			base, err := parseServerFlags(args, addFleetFlags, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := fleet.ValidateIPPrefix(prefix); err != nil {
				return fmt.Errorf("--ip-prefix: %w", err)
			}
			// The logger also carries the fleet's warning when aliases do not bind and it falls
			// back to distinct ports (ignoring --port).
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			f, err := fleet.Start(fleet.Options{Count: count, Base: base, Port: base.Port, IPPrefix: prefix,
				DistinctPorts: distinct, Namespace: base.PodNamespace, Logger: logger})
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			if err := f.WaitHealthy(ctx); err != nil {
				f.Close()
				return err
			}
			for _, m := range f.Members() {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", m.Name, strings.Join(m.RankURLs(), " "))
			}
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			defer cancel()
			if err := f.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return nil
		},
	}
	vllm.BindFlags(cmd.Flags(), &cfg)
	addFleetFlags(cmd.Flags())
	return cmd
}
