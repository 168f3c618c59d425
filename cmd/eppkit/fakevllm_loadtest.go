package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/bench/streamload"
)

// newFakeVLLMLoadtestCommand is a hidden streaming load client used to measure the fake's
// timing accuracy and CPU cost from a separate process.
func newFakeVLLMLoadtestCommand() *cobra.Command {
	var o streamload.Options
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:    "loadtest --url URL --model NAME --concurrency N",
		Short:  "Streaming load client (chat, completions, messages or responses): inter-token gap percentiles and CPU of client and server",
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			res, err := streamload.Run(ctx, o)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), res)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.URL, "url", "http://127.0.0.1:8000", "Server base URL")
	f.StringVar(&o.Model, "model", "m", "Model name")
	f.IntVar(&o.Concurrency, "concurrency", 200, "Concurrent streams")
	f.IntVar(&o.Rounds, "rounds", 1, "Requests per stream worker, one after another")
	f.IntVar(&o.MaxTokens, "max-tokens", 100, "max_tokens of every request (random mode emits exactly this many)")
	f.IntVar(&o.ServerPID, "server-pid", 0, "PID of the server process, to report its CPU over the run")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "Overall timeout")
	f.DurationVar(&o.Ramp, "ramp", 0, "Spread the workers' first requests evenly over this span (0: all at once)")
	f.IntVar(&o.PromptTokens, "prompt-tokens", 0, "Unique prompts of this many tokens per request (0: one short prompt), so every request stores KV blocks")
	f.StringVar(&o.API, "api", "chat", "Streaming API to load: chat, completions, messages (Anthropic) or responses (OpenAI Responses)")
	return cmd
}
