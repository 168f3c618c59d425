package main

import "github.com/spf13/cobra"

func init() { subcommands = append(subcommands, newBenchCommand) }

// benchSubcommands are the `eppkit bench` subcommands, registered in init() by their files.
var benchSubcommands []func() *cobra.Command

func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks: EPP decision latency over ext_proc, and more",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	for _, add := range benchSubcommands {
		cmd.AddCommand(add())
	}
	return cmd
}
