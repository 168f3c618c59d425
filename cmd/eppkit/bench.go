package main

import "github.com/spf13/cobra"

func init() { subcommands = append(subcommands, newBenchCommand) }

// benchSubcommands are the `eppkit bench` subcommands, registered in init() by their files.
var benchSubcommands []func() *cobra.Command

// benchParent, when set (bench_serve.go), gives `eppkit bench` itself flags and a RunE: the
// serving benchmark of one target.
var benchParent func(cmd *cobra.Command)

func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks: serving quality of EPPs (vllm bench serve layout), policy comparisons, decision latency over ext_proc",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	if benchParent != nil {
		benchParent(cmd)
	}
	for _, add := range benchSubcommands {
		cmd.AddCommand(add())
	}
	return cmd
}
