package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/bench"
)

type compareFlags struct {
	serveFlags
	policies, command, commandSource, configsDir string
}

func newBenchCompareCommand() *cobra.Command {
	var f compareFlags
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "Run one workload against several routing policies, each on a fresh fleet, and compare them",
		Long: `Run the same workload and arrivals against several policies in turn, each on a fresh fake vLLM
fleet with the frozen latency profile (SPEC §7; --fleet-profiles mixes in the slow one), and print
one table with ratios against round-robin (the gateway stand-in without an EPP) at the highest ladder step round-robin sustains
(0 failed requests, median queue ≤ 2, machine CPU < 80%), plus each policy's mean TTFT against the
oracle bound.

Policies (--policies, default all): round-robin; random (reference + random-picker.yaml);
reference (the reference default profile); load-only (reference + load-only.yaml: queue + KV
scorers); predicted-latency (reference + predicted-latency.yaml, when that file exists);
token-load (reference + optimized-baseline-token-aware.yaml: llm-d-router v0.10.0's
prefix-cache-affinity-filter + token-load-scorer); active-request (the same filter +
active-request-scorer); upstream-v1.5.0 (when 'eppkit tools path gie epp' finds it; discovers
through a local kube-apiserver, so 'eppkit tools build k8s' must have run); llmd-router-v0.10.0
(llm-d-router's EPP with its optimized-baseline config, when 'eppkit tools build llmd-router'
has run; also through the kube-apiserver); command (--command, any EPP). The blog's five arms
plus llm-d-router: --policies ` + strings.Join(bench.BlogPolicies, ",") + `.

Writes results.json, comparison.json and the plots under --output-dir (default out/bench/compare-<workload>).
Ctrl-C (or SIGTERM) stops the comparison: the policies that finished are still printed and written,
comparison.json says "interrupted": true with the policies not run, and the exit code is 2.`,
		Example: `  eppkit bench compare --workload shared-prefix --duration 60s
  eppkit bench compare --shape prefill-bound --policies ` + strings.Join(bench.BlogPolicies, ",") + ` --rate 2,4,6,8 --duration 120s
  eppkit bench compare --policies round-robin,reference --rate 4,8,12,16 --duration 80s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchCompare(cmd, &f) },
	}
	fl := cmd.Flags()
	f.register(fl, "8,16,24,32")
	fl.StringVar(&f.policies, "policies", strings.Join(bench.AllPolicies, ","), "policies to run, in order (round-robin first: it is the baseline)")
	fl.StringVar(&f.command, "command", "", "the command policy: an EPP command template, as eppkit conformance --target command")
	fl.StringVar(&f.commandSource, "command-endpoint-source", "static", "endpoint source of the command policy: static or apiserver")
	fl.StringVar(&f.configsDir, "configs-dir", filepath.Join("manifests", "epp-configs"), "where the EndpointPickerConfig files are")
	return cmd
}

func runBenchCompare(cmd *cobra.Command, f *compareFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	rc, err := f.RunConfig(stderr)
	if err != nil {
		return badFlags("%v", err)
	}
	if rc.Env.Eppkit, err = os.Executable(); err != nil {
		return err
	}
	outDir := f.outputDir
	if outDir == "" {
		outDir = filepath.Join("out", "bench", "compare-"+f.Name())
	}
	rc.Env.LogDir = f.logDir
	if rc.Env.LogDir == "" {
		rc.Env.LogDir = filepath.Join(outDir, "logs")
	}
	targets, notes, err := bench.Policies(f.policies, bench.PolicyOptions{Command: f.command, CommandSource: f.commandSource, ConfigsDir: f.configsDir, WorkDir: outDir})
	if err != nil {
		return badFlags("%v", err)
	}
	for _, n := range notes {
		fmt.Fprintln(stderr, n)
	}
	if len(targets) == 0 || targets[0].Target != nil {
		return badFlags("--policies must start with %s (the baseline of the ratios)", bench.TargetRoundRobin)
	}
	// Ctrl-C or SIGTERM (or the command's context ending) stops the comparison; the policies that
	// finished are still printed and written.
	ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	fmt.Fprintf(stderr, "eppkit bench compare: %d policies, workload %s, rate %s req/s over %v each, seed %d, load average %s\n",
		len(targets), f.Workload, f.Rate, f.Duration, f.Seed, bench.LoadAverage())
	stop, err := f.startProfile()
	if err != nil {
		return err
	}
	c, err := bench.Compare(ctx, rc, targets, stderr)
	stop()
	if err != nil && (c == nil || !c.Interrupted) {
		return &exitError{code: 2, err: err}
	}
	cancel() // from here a second Ctrl-C ends the process at once
	for n, why := range bench.NotesSkipped(notes) {
		c.Skipped[n] = why
	}
	if len(c.Results) == 0 {
		if c.Interrupted {
			return &exitError{code: 2, err: fmt.Errorf("interrupted before any policy finished (%s): nothing to write", c.InterruptionLine())}
		}
		return &exitError{code: 2, err: errors.New("no policy ran")}
	}
	if err := bench.WriteComparison(stdout, outDir, c, rc); err != nil {
		return err
	}
	if err := f.writeInferencePerf(stdout, outDir, rc, c.Results); err != nil {
		return err
	}
	if c.Interrupted {
		return &exitError{code: 2, err: fmt.Errorf("interrupted: wrote the %d policies that finished; not run: %s",
			len(c.Results), strings.Join(c.NotRun, ", "))}
	}
	return nil
}
