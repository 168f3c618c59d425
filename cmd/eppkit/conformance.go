package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		return &cobra.Command{
			Use:   "conformance",
			Short: "Run the conformance suite against an EPP (not built yet)",
			RunE: func(*cobra.Command, []string) error {
				return errors.New("the conformance runner is not built yet (issue: the main job end to end); " +
					"`make test` runs what exists today")
			},
		}
	})
}
