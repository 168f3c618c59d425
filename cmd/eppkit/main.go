// Command eppkit is the single eppkit CLI: the conformance runner, the reference EPP, the fakes
// (vLLM server and fleet, gateway, predictor), benchmarks and cluster tooling, as subcommands.
// Each subcommand turns its flags into a library's options; the work is done in the libraries.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/conformance"
	_ "github.com/eppkit/eppkit/conformance/wiring" // the tests, the reference and cluster targets
	buildversion "github.com/eppkit/eppkit/internal/version"
)

// Exit codes shared by the subcommands (conformance.Exit*: 1 a test failed, 2 the harness or
// target could not start, 3 bad flags).
const (
	exitTestFailed = conformance.ExitTestFailed
	exitHarness    = conformance.ExitHarness
	exitBadFlags   = conformance.ExitBadOptions
)

// version is the eppkit version `eppkit --version` and the reports of the CLI's own drivers show
// (internal/version: set at link time, else the module version in the build information).
var version = buildversion.Version()

// exitError carries a process exit code to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode is the process exit code main uses.
func (e *exitError) ExitCode() int { return e.code }

func badFlags(format string, args ...any) error {
	return &exitError{code: exitBadFlags, err: fmt.Errorf(format, args...)}
}

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
