package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/bench"
	"github.com/eppkit/eppkit/internal/toolcache"
)

// Policy names of `eppkit bench compare`, in table order.
const (
	policyRandom    = "random"
	policyReference = "reference"
	policyLoadOnly  = "load-only"
	policyPredicted = "predicted-latency"
	policyUpstream  = "upstream-v1.5.0"
	policyCommand   = "command"
)

var allPolicies = []string{bench.TargetRoundRobin, policyRandom, policyReference, policyLoadOnly, policyPredicted, policyUpstream, policyCommand}

// upstreamEPPCommand runs the upstream EPP v1.5.0 against the apiserver source (as make
// conformance-upstream does: v1.5.0 has no --kubeconfig flag and reads $KUBECONFIG).
const upstreamEPPCommand = `KUBECONFIG={{.Kubeconfig}} exec %s --pool-name {{.PoolName}} --pool-namespace {{.PoolNamespace}}` +
	` --secure-serving=false --metrics-endpoint-auth=false --tracing=false --grpc-port {{.GRPCPort}}` +
	` --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}`

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
fleet with the frozen latency profile (SPEC §7), and print one table with ratios against
round-robin (the gateway stand-in without an EPP) at the highest ladder step round-robin sustains
(0 failed requests, median queue ≤ 2, machine CPU < 80%), plus each policy's mean TTFT against the
oracle bound.

Policies (--policies, default all): round-robin; random (reference + random-picker.yaml);
reference (the reference default profile); load-only (reference + load-only.yaml: queue + KV
scorers); predicted-latency (reference + predicted-latency.yaml, when that file exists);
upstream-v1.5.0 (when 'eppkit tools path gie epp' finds it; discovers through a local
kube-apiserver, so 'eppkit tools build k8s' must have run); command (--command, any EPP).

Writes results.json, comparison.json and the plots under --output-dir (default out/bench/compare-<workload>).
Ctrl-C (or SIGTERM) stops the comparison: the policies that finished are still printed and written,
comparison.json says "interrupted": true with the policies not run, and the exit code is 2.`,
		Example: `  eppkit bench compare --workload shared-prefix --duration 60s
  eppkit bench compare --policies round-robin,reference --rate 4,8,12,16 --duration 80s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchCompare(cmd, &f) },
	}
	fl := cmd.Flags()
	f.register(fl, "8,16,24,32")
	fl.StringVar(&f.policies, "policies", strings.Join(allPolicies, ","), "policies to run, in order (round-robin first: it is the baseline)")
	fl.StringVar(&f.command, "command", "", "the command policy: an EPP command template, as eppkit conformance --target command")
	fl.StringVar(&f.commandSource, "command-endpoint-source", "static", "endpoint source of the command policy: static or apiserver")
	fl.StringVar(&f.configsDir, "configs-dir", filepath.Join("manifests", "epp-configs"), "where the EndpointPickerConfig files are")
	return cmd
}

func runBenchCompare(cmd *cobra.Command, f *compareFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	rc, err := f.runConfig(stderr)
	if err != nil {
		return err
	}
	if rc.Env.Eppkit, err = os.Executable(); err != nil {
		return err
	}
	outDir := f.outputDir
	if outDir == "" {
		outDir = filepath.Join("out", "bench", "compare-"+f.workload)
	}
	rc.Env.LogDir = f.logDir
	if rc.Env.LogDir == "" {
		rc.Env.LogDir = filepath.Join(outDir, "logs")
	}
	targets, notes, err := f.targets()
	if err != nil {
		return err
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
		len(targets), f.workload, f.rate, f.duration, f.seed, bench.LoadAverage())
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
	for n, why := range notesSkipped(notes) {
		c.Skipped[n] = why
	}
	if len(c.Results) == 0 {
		if c.Interrupted {
			return &exitError{code: 2, err: fmt.Errorf("interrupted before any policy finished (%s): nothing to write", c.InterruptionLine())}
		}
		return &exitError{code: 2, err: errors.New("no policy ran")}
	}
	if err := writeComparison(stdout, outDir, c, rc); err != nil {
		return err
	}
	if c.Interrupted {
		return &exitError{code: 2, err: fmt.Errorf("interrupted: wrote the %d policies that finished; not run: %s",
			len(c.Results), strings.Join(c.NotRun, ", "))}
	}
	return nil
}

// writeComparison prints the per-policy blocks and the comparison table of c and writes
// results.json, the vllm_*.json files, the plots and comparison.json under outDir. An
// interrupted comparison (c.Interrupted) covers only the policies that finished, and
// comparison.json says which did not run.
func writeComparison(stdout io.Writer, outDir string, c *bench.Comparison, rc bench.RunConfig) error {
	for _, r := range c.Results {
		fmt.Fprintf(stdout, "\n##### %s\n", r.Target)
		bench.PrintSteps(stdout, r)
		bench.PrintEndpoints(stdout, r)
	}
	fmt.Fprintln(stdout)
	bench.PrintComparison(stdout, c)
	o := c.Results[0].Oracle
	fmt.Fprintf(stdout, "oracle bound over the whole run: mean TTFT ≥ %.1f ms, p90 ≥ %.1f ms, %.0f%% of prompt tokens cached\n",
		o.MeanTTFTMs, o.P90TTFTMs, 100*o.CachedTokenFraction)
	fmt.Fprintf(stdout, "load average at the end: %s\n", bench.LoadAverage())
	files, err := bench.WriteOutputs(outDir, c.Results, c.Step)
	if err != nil {
		return err
	}
	cmpPath := filepath.Join(outDir, "comparison.json")
	if err := writeJSON(cmpPath, struct {
		Step              int                `json:"step"`
		StepReason        string             `json:"step_reason"`
		Rows              []bench.CompareRow `json:"rows"`
		Skipped           map[string]string  `json:"skipped,omitempty"`
		Interrupted       bool               `json:"interrupted,omitempty"`
		InterruptedDuring string             `json:"interrupted_during,omitempty"`
		NotRun            []string           `json:"not_run,omitempty"`
		Oracle            *bench.Oracle      `json:"oracle"`
		Steps             []bench.Step       `json:"steps"`
		Workload          bench.Spec         `json:"workload"`
	}{c.Step, c.StepReason, c.Rows, c.Skipped, c.Interrupted, c.InterruptedDuring, c.NotRun, o, rc.Steps, rc.Spec}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", strings.Join(append(files, cmpPath), ", "))
	return nil
}

// skippedPrefix marks a note that says a policy was skipped before running.
const skippedPrefix = "skipping policy "

func notesSkipped(notes []string) map[string]string {
	out := map[string]string{}
	for _, n := range notes {
		if rest, ok := strings.CutPrefix(n, skippedPrefix); ok {
			name, why, _ := strings.Cut(rest, ": ")
			out[name] = why
		}
	}
	return out
}

// targets resolves --policies. Policies whose prerequisites are missing are skipped with a note.
func (f *compareFlags) targets() ([]bench.CompareTarget, []string, error) {
	var out []bench.CompareTarget
	var notes []string
	skip := func(name, why string) { notes = append(notes, skippedPrefix+name+": "+why) }
	ref := func(name, config string) error {
		t, err := conformance.NewTarget("reference", conformance.TargetOptions{})
		if err != nil {
			return err
		}
		src, err := conformance.NewEndpointSource("static")
		if err != nil {
			return err
		}
		ct := bench.CompareTarget{Name: name, Target: t, Source: src}
		if config != "" {
			ct.ConfigFile = filepath.Join(f.configsDir, config)
		}
		out = append(out, ct)
		return nil
	}
	seen := map[string]bool{}
	for _, p := range splitList(f.policies) {
		if seen[p] {
			return nil, nil, badFlags("--policies: %s listed twice", p)
		}
		seen[p] = true
		var err error
		switch p {
		case bench.TargetRoundRobin:
			out = append(out, bench.CompareTarget{Name: p})
		case policyRandom:
			err = ref(p, "random-picker.yaml")
		case policyReference:
			err = ref(p, "")
		case policyLoadOnly:
			err = ref(p, "load-only.yaml")
		case policyPredicted:
			if _, serr := os.Stat(filepath.Join(f.configsDir, "predicted-latency.yaml")); serr != nil {
				skip(p, fmt.Sprintf("%s not found (%v)", filepath.Join(f.configsDir, "predicted-latency.yaml"), serr))
				continue
			}
			err = ref(p, "predicted-latency.yaml")
		case policyUpstream:
			bin, perr := toolcache.Path("gie", "epp")
			if perr != nil {
				skip(p, fmt.Sprintf("the upstream EPP binary is not built (eppkit tools build gie): %v", perr))
				continue
			}
			if _, kerr := toolcache.Path("k8s", "kube-apiserver"); kerr != nil {
				skip(p, fmt.Sprintf("it discovers through a kube-apiserver, which is not built (eppkit tools build k8s): %v", kerr))
				continue
			}
			t, terr := conformance.NewCommandTarget(p, fmt.Sprintf(upstreamEPPCommand, bin))
			if terr != nil {
				return nil, nil, terr
			}
			src, serr := conformance.NewEndpointSource("apiserver")
			if serr != nil {
				return nil, nil, serr
			}
			out = append(out, bench.CompareTarget{Name: p, Target: t, Source: src})
		case policyCommand:
			if f.command == "" {
				if f.policies != strings.Join(allPolicies, ",") {
					return nil, nil, badFlags("--policies command needs --command")
				}
				continue // not asked for explicitly and no --command: nothing to run
			}
			t, terr := conformance.NewCommandTarget(p, f.command)
			if terr != nil {
				return nil, nil, badFlags("%v", terr)
			}
			src, serr := conformance.NewEndpointSource(f.commandSource)
			if serr != nil {
				return nil, nil, badFlags("%v", serr)
			}
			out = append(out, bench.CompareTarget{Name: p, Target: t, Source: src})
		default:
			return nil, nil, badFlags("--policies: unknown policy %q (have %s)", p, strings.Join(allPolicies, ", "))
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return out, notes, nil
}
