package main

import (
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/bench/sim"
	"github.com/eppkit/eppkit/bench/simepp"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchSimulateCommand) }

// simFlags: the bench's serve flags and the simulation's own.
type simFlags struct {
	serveFlags
	o sim.Options
}

func (f *simFlags) register(fl *pflag.FlagSet, defaultRate string, hidden ...string) {
	f.serveFlags.register(fl, defaultRate)
	fl.StringVar(&f.o.ConfigsDir, "configs-dir", filepath.Join("manifests", "epp-configs"), "where the EndpointPickerConfig files of the reference policies are")
	fl.DurationVar(&f.o.RefreshInterval, "refresh-metrics-interval", sim.DefaultRefreshInterval, "virtual time between two scrapes of an endpoint's metrics (the reference's default)")
	fl.DurationVar(&f.o.StaleThreshold, "stale-threshold", sim.DefaultStaleThreshold, "metrics older than this are stale for the picker (the reference's default)")
	for _, name := range append(hidden, "max-concurrency", "log-dir", "cpuprofile") {
		_ = fl.MarkHidden(name)
	}
}

func (f *simFlags) options() sim.Options {
	o := f.o
	o.ServeOptions, o.OutputDir, o.NewReference = f.ServeOptions, f.outputDir, simepp.NewPicker
	return o
}

func newBenchSimulateCommand() *cobra.Command {
	var f simFlags
	var policy, configFile, validatePolicies string
	var validate bool
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Simulate routing on a fleet of fake vLLM engines in virtual time (2 to thousands of endpoints)",
		Long: `Simulate one policy (` + strings.Join(sim.Policies, ", ") + `) on --fleet-size fake vLLM engines
in virtual time with eppkit bench's workloads and print eppkit bench's layout marked SIMULATED;
--validate runs the workload in real time too and prints the simulation's errors (docs/bench.md).`,
		Example: `  eppkit bench simulate --policy reference --fleet-size 128 --rate 1280 --duration 20s
  eppkit bench simulate --validate --duration 60s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			if !validate {
				return sim.Simulate(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), sim.SimulateOptions{Options: f.options(), Policy: policy, ConfigFile: configFile})
			}
			return sim.RunValidation(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), sim.ValidateOptions{Options: f.options(), Policies: validatePolicies})
		},
	}
	fl := cmd.Flags()
	f.register(fl, "16")
	fl.StringVar(&policy, "policy", bench.PolicyReference, "the policy: "+strings.Join(sim.Policies, ", "))
	fl.StringVar(&configFile, "config-file", "", "EndpointPickerConfig for a reference policy (replaces its own)")
	fl.BoolVar(&validate, "validate", false, "run the workload in real time and in simulation and print the simulation's errors")
	fl.StringVar(&validatePolicies, "validate-policies", sim.DefaultValidatePolicies, "policies of --validate")
	cmd.AddCommand(newBenchSimulateCompareCommand())
	return cmd
}

func newBenchSimulateCompareCommand() *cobra.Command {
	var f simFlags
	var o sim.CompareOptions
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "Simulate several policies on fleets of several sizes at a fixed load per endpoint",
		Long: `Simulate every --policies policy on every --endpoints fleet size at --rate-per-endpoint req/s per
endpoint (--warmup, then --duration measured, virtual time), print one table and plot p90 TTFT,
throughput, goodput and CPU per decision against fleet size (docs/bench.md).`,
		Example: `  eppkit bench simulate compare --endpoints 2,8,32,128,512,1024 --policies round-robin,reference,predicted-latency,load-only`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			o.Options = f.options()
			return sim.RunCompare(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	fl := cmd.Flags()
	f.register(fl, "1", "rate", "fleet-size")
	fl.Lookup("duration").Usage = "measured virtual time per run (after --warmup)"
	for name, v := range map[string]string{"duration": sim.DefaultSweepDuration.String(), "goodput": "ttft:500 tpot:20"} {
		_ = fl.Set(name, v)
		fl.Lookup(name).DefValue = v
	}
	fl.StringVar(&o.Endpoints, "endpoints", "2,8,32,128,512,1024", "fleet sizes")
	fl.StringVar(&o.Policies, "policies", sim.DefaultComparePolicies, "policies, in table order: "+strings.Join(sim.Policies, ", "))
	fl.Float64Var(&o.RatePerEndpoint, "rate-per-endpoint", sim.DefaultRatePerEndpoint, "offered load per endpoint, req/s")
	fl.DurationVar(&o.Warmup, "warmup", sim.DefaultSweepWarmup, "unmeasured virtual time before the measured step")
	fl.IntVar(&o.GroupsPerEndpoint, "groups-per-endpoint", sim.DefaultGroupsPerEndpoint, "shared-prefix: system prompts per endpoint (0: --groups at every size)")
	fl.IntVar(&o.MinRequests, "min-requests", sim.DefaultMinRequests, "least measured requests per cell; smaller fleets run replicas")
	return cmd
}
