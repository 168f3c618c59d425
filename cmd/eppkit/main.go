// Command eppkit is the single eppkit CLI: the conformance runner, the reference EPP, the fakes
// (vLLM server and fleet, gateway, predictor), benchmarks and cluster tooling, as subcommands.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "eppkit",
		Short:         "Conformance suite and reference harness for Gateway API Inference Extension endpoint pickers",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, add := range subcommands {
		root.AddCommand(add())
	}
	return root
}

// subcommands are registered by the files of this package, one per subcommand, in init().
var subcommands []func() *cobra.Command

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "eppkit:", err)
		// A subcommand may choose its exit code (conformance: 1 failed, 2 harness, 3 flags).
		var coded interface{ ExitCode() int }
		if errors.As(err, &coded) {
			os.Exit(coded.ExitCode())
		}
		os.Exit(1)
	}
}
