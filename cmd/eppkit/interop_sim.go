package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/conformance/simfleet"
)

// exitNoPrivileges is `eppkit interop sim-preflight`'s exit code when this machine cannot create
// network namespaces (make interop-sim then skips its run).
const exitNoPrivileges = 4

// newSimPreflightCommand is `eppkit interop sim-preflight`: can this process give each
// llm-d-inference-sim its own network namespace (conformance/simfleet)?
func newSimPreflightCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "sim-preflight",
		Short: "Check that network namespaces and veth pairs can be created for --fleet sim (exit 4 when not)",
		Long: `Creates and removes one network namespace with a veth pair, as ` + "`eppkit conformance --fleet sim`" + `
does for each llm-d-inference-sim (which listens on every address, so each needs its own namespace),
and removes the namespaces of earlier runs that were killed before they could clean up.
Exit codes: 0 it works, 4 it needs privileges this process lacks (root / CAP_NET_ADMIN, iproute2's
ip), 2 another error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			simfleet.ReapStale(ctx, "", nil)
			err := simfleet.Preflight(ctx, "")
			switch {
			case err == nil:
				fmt.Fprintln(cmd.OutOrStdout(), "sim-preflight: network namespaces and veth pairs can be created")
				return nil
			case errors.Is(err, simfleet.ErrNoPrivileges):
				return &exitError{code: exitNoPrivileges, err: fmt.Errorf("sim-preflight: %w", err)}
			default:
				return &exitError{code: exitHarness, err: fmt.Errorf("sim-preflight: %w", err)}
			}
		},
	}
}
