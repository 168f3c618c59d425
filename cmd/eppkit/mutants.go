//go:build eppkit_mutants

package main

// Mutant builds only (-tags eppkit_mutants; `make mutants` builds bin/eppkit-mutants): the
// `mutants` subcommand (flags → selfcheck/mutant/matrix), the "intercepted" conformance target
// (an EPP behind the mutant interceptor, selfcheck/mutant/interceptor) and the reference EPP's mutant
// wrappers (selfcheck/mutant/wrap), all selected by EPPKIT_MUTANT.

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/reference/datalayer"
	"github.com/eppkit/eppkit/reference/discovery"
	"github.com/eppkit/eppkit/reference/eppserver"
	"github.com/eppkit/eppkit/selfcheck/mutant"
	"github.com/eppkit/eppkit/selfcheck/mutant/matrix"
	"github.com/eppkit/eppkit/selfcheck/mutant/wrap"
)

func init() {
	subcommands = append(subcommands, newMutantsCommand)
	matrix.RegisterInterceptedTarget()
	mutateReference = func(opts *eppserver.Options, pool *discovery.PoolConfig, metrics datalayer.Config) error {
		return wrap.Reference(opts, pool, metrics, mutant.Active())
	}
}

func newMutantsCommand() *cobra.Command {
	var (
		o                                                matrix.Options
		only, conformanceArgs, upstreamCmd, upstreamArgs string
		upstreamName                                     string
	)
	cmd := &cobra.Command{
		Use:   "mutants",
		Short: "Run the mutant matrix (mutant builds only) and write reports/mutants.md",
		Long: `Run the mutant matrix (selfcheck/mutant/matrix): every mutant of selfcheck/mutant breaks one rule; the
conformance registry (black-box mutants) or the white-box suite (white-box mutants) runs against it,
and the test that targets the rule must fail. A baseline with no mutant runs first in every lane:
the reference, the reference behind the transparent mutant interceptor, and (--upstream-command)
another EPP behind the interceptor, against which the protocol mutants are judged on the tests it
passes on its own baseline. Run from the repository root (white-box suites are run with the ginkgo
CLI through the go toolchain).

Endpoint source: auto (the default) uses apiserver for mutants whose targeted test needs a pool
that changes (not-ready-picked, removed-endpoint-kept, ranks-beyond-first-dropped), static for the
others; the upstream lane always uses apiserver.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if only != "" {
				sel, err := mutant.Parse(only)
				if err != nil {
					return badFlags("--only: %v", err)
				}
				o.Mutants = sel
			}
			switch o.Source {
			case "auto", "static", "apiserver":
			default:
				return badFlags("--endpoint-source: want auto, static or apiserver, got %q", o.Source)
			}
			if env := os.Getenv("EPPKIT_SEED"); env != "" {
				if _, err := fmt.Sscan(env, &o.Seed); err != nil {
					return badFlags("EPPKIT_SEED %q: not an integer", env)
				}
			}
			if upstreamCmd != "" {
				o.Upstream = &matrix.Upstream{Name: upstreamName, Command: upstreamCmd, Args: strings.Fields(upstreamArgs)}
			} else if upstreamArgs != "" {
				return badFlags("--upstream-args: only with --upstream-command")
			}
			o.ConformanceArgs = strings.Fields(conformanceArgs)
			self, err := os.Executable()
			if err != nil {
				return err
			}
			o.Eppkit, o.Version, o.Log = self, version, cmd.OutOrStdout()
			escaped, err := matrix.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if escaped > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d mutant run(s) escaped the test that targets their rule", escaped)}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&only, "only", "", "comma list of mutants to run (default all): "+strings.Join(mutant.Names(), ", "))
	fl.StringVar(&o.Source, "endpoint-source", "auto", "auto, static or apiserver (the reference lanes)")
	fl.StringVar(&o.ConfigFile, "config-file", "manifests/epp-configs/conformance.yaml", "EndpointPickerConfig of the reference (as make conformance)")
	fl.StringVar(&o.Output, "output", "reports/mutants.md", "Markdown report to write")
	fl.StringVar(&o.LogDir, "log-dir", "out/mutants", "directory for each run's log")
	fl.StringVar(&conformanceArgs, "conformance-args", "", "extra arguments for every eppkit conformance run (space separated)")
	fl.StringVar(&upstreamCmd, "upstream-command", "", "command template of another EPP to run the protocol mutants in front of (apiserver source; \"\" = none)")
	fl.StringVar(&upstreamArgs, "upstream-args", "", "its eppkit conformance flags (space separated: --supported-features, --skip-tests, ...)")
	fl.StringVar(&upstreamName, "upstream-name", "upstream EPP", "its name in the report")
	fl.Int64Var(&o.Seed, "seed", 0, "seed of every run (0 = from the clock; EPPKIT_SEED overrides)")
	fl.BoolVar(&o.SkipWhiteBox, "skip-white-box", false, "do not run the white-box mutants")
	fl.BoolVar(&o.SkipBlackBox, "skip-black-box", false, "do not run the black-box mutants")
	fl.BoolVar(&o.WholeRegistry, "whole-registry", false, "run the whole registry for every mutant (default: only its targeted test), to list every test it fails")
	return cmd
}
