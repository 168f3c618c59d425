package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/target"
	"github.com/eppkit/eppkit/internal/toolcache"
)

// Policy names of `eppkit bench compare`, in table order; TargetRoundRobin is the first.
const (
	PolicyRandom    = "random"
	PolicyReference = "reference"
	PolicyLoadOnly  = "load-only"
	PolicyPredicted = "predicted-latency"
	PolicyUpstream  = "upstream-v1.5.0"
	// PolicyUpstreamPredicted is the upstream EPP v1.5.0 with its own predicted-latency plugins
	// (manifests/epp-configs/upstream-v1.5.0-predicted-latency.yaml) and `eppkit predictor` as
	// its prediction and training sidecars (the harness's {{.PredictorURL}}).
	PolicyUpstreamPredicted = "upstream-v1.5.0-predicted-latency"
	// PolicyTokenLoad is llm-d-router v0.10.0's token-aware routing in the reference
	// (optimized-baseline-token-aware.yaml: prefix-cache-affinity-filter + token-load-scorer);
	// PolicyActiveRequest the same filter with active-request-scorer (active-request.yaml).
	PolicyTokenLoad     = "token-load"
	PolicyActiveRequest = "active-request"
	// PolicyLLMDRouter is llm-d-router v0.10.0's EPP (eppkit tools build llmd-router) with its
	// optimized-baseline config (the EndpointPickerConfig of its test/perf helm values,
	// LLMDRouterOptimizedBaseline), discovering the pool through a local kube-apiserver.
	PolicyLLMDRouter = "llmd-router-v0.10.0"
	PolicyCommand    = "command"
)

// BlogPolicies are the five arms of llm-d's token-aware routing study (blog "Sticky until
// saturated", 2026-08-17) as eppkit runs them — round-robin, token-load, active-request, the
// reference's load + prefix blend (queue 2, kv-cache 2, prefix 3), predicted latency — and
// llm-d-router v0.10.0 with its own optimized-baseline config.
var BlogPolicies = []string{TargetRoundRobin, PolicyTokenLoad, PolicyActiveRequest, PolicyReference, PolicyPredicted, PolicyLLMDRouter}

// AllPolicies lists every policy of `eppkit bench compare`, in table order (round-robin first: the
// baseline of the ratios).
var AllPolicies = []string{TargetRoundRobin, PolicyRandom, PolicyReference, PolicyLoadOnly, PolicyPredicted, PolicyTokenLoad, PolicyActiveRequest,
	PolicyUpstream, PolicyUpstreamPredicted, PolicyLLMDRouter, PolicyCommand}

// PolicyConfig is the EndpointPickerConfig file (under PolicyOptions.ConfigsDir) of a policy that
// runs an EPP with a config of its own: default.yaml (PolicyReference: the default profile for
// every request, also those with SLO headers, which the reference target's own conformance
// config would send to the predicted-latency profile), random-picker.yaml, load-only.yaml,
// predicted-latency.yaml (the reference), upstream-v1.5.0-predicted-latency.yaml (the upstream
// EPP); "" for any other policy (PolicyUpstream runs its default profile).
// `eppkit bench compare` and `eppkit bench simulate` both read it.
func PolicyConfig(policy string) string {
	switch policy {
	case PolicyReference:
		return "default.yaml"
	case PolicyRandom:
		return "random-picker.yaml"
	case PolicyLoadOnly:
		return "load-only.yaml"
	case PolicyPredicted:
		return "predicted-latency.yaml"
	case PolicyUpstreamPredicted:
		return "upstream-v1.5.0-predicted-latency.yaml"
	case PolicyTokenLoad:
		return "optimized-baseline-token-aware.yaml"
	case PolicyActiveRequest:
		return "active-request.yaml"
	}
	return ""
}

// llmdRouterCommand runs llm-d-router v0.10.0's EPP against the apiserver source with a config
// file, as make interop-llmd-router-v0.10.0-optimized-baseline does (flags: its
// pkg/epp/server/options.go; kubeconfig from $KUBECONFIG; --tracing=false skips the OTLP
// exporter; --drain-timeout=0s stops it at once).
const llmdRouterCommand = `KUBECONFIG={{.Kubeconfig}} exec %s --pool-name {{.PoolName}} --pool-namespace {{.PoolNamespace}}` +
	` --secure-serving=false --metrics-endpoint-auth=false --tracing=false --drain-timeout=0s --grpc-port {{.GRPCPort}}` +
	` --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}} --config-file {{.ConfigFile}}`

// LLMDRouterOptimizedBaselinePath is where, in llm-d-router v0.10.0's source tree, the Helm values
// of its nightly perf job's optimized-baseline router live.
const LLMDRouterOptimizedBaselinePath = "test/perf/config/router-configs/optimized-baseline.yaml"

// LLMDRouterOptimizedBaseline returns the EndpointPickerConfig embedded in llm-d-router's
// optimized-baseline Helm values (router.epp.pluginsCustomConfig[router.epp.pluginsConfigFile]):
// the file its optimized-baseline guide and nightly perf job deploy.
func LLMDRouterOptimizedBaseline(helmValues []byte) ([]byte, error) {
	var v struct {
		Router struct {
			EPP struct {
				PluginsConfigFile   string            `json:"pluginsConfigFile"`
				PluginsCustomConfig map[string]string `json:"pluginsCustomConfig"`
			} `json:"epp"`
		} `json:"router"`
	}
	if err := yaml.Unmarshal(helmValues, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", LLMDRouterOptimizedBaselinePath, err)
	}
	cfg := v.Router.EPP.PluginsCustomConfig[v.Router.EPP.PluginsConfigFile]
	if !strings.Contains(cfg, "kind: EndpointPickerConfig") {
		return nil, fmt.Errorf("%s: no EndpointPickerConfig under router.epp.pluginsCustomConfig[%q]", LLMDRouterOptimizedBaselinePath, v.Router.EPP.PluginsConfigFile)
	}
	return []byte(cfg), nil
}

// upstreamEPPCommand runs the upstream EPP v1.5.0 against the apiserver source (as make
// conformance-upstream does: v1.5.0 has no --kubeconfig flag and reads $KUBECONFIG).
const upstreamEPPCommand = `KUBECONFIG={{.Kubeconfig}} exec %s --pool-name {{.PoolName}} --pool-namespace {{.PoolNamespace}}` +
	` --secure-serving=false --metrics-endpoint-auth=false --tracing=false --grpc-port {{.GRPCPort}}` +
	` --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}`

// upstreamPredictedEPPCommand is upstreamEPPCommand with the predicted-latency config and the
// harness's predictor sidecar as both of upstream's latency predictor servers
// (PREDICTION_SERVER_URL, TRAINING_SERVER_URL: GIE v1.5.0 sidecars/latencypredictorasync); its
// client flushes training entries and refreshes the servers' status every second
// (LATENCY_FLUSH_INTERVAL_SEC, LATENCY_METRICS_INTERVAL_SEC), as the predictor parity run does.
const upstreamPredictedEPPCommand = `PREDICTION_SERVER_URL={{.PredictorURL}} TRAINING_SERVER_URL={{.PredictorURL}}` +
	` LATENCY_FLUSH_INTERVAL_SEC=1 LATENCY_METRICS_INTERVAL_SEC=1 ` + upstreamEPPCommand + ` --config-file {{.ConfigFile}}`

// WriteComparison prints the per-policy blocks and the comparison table of c and writes
// results.json, the vllm_*.json files, the plots and comparison.json under outDir. An
// interrupted comparison (c.Interrupted) covers only the policies that finished, and
// comparison.json says which did not run.
func WriteComparison(stdout io.Writer, outDir string, c *Comparison, rc RunConfig) error {
	for _, r := range c.Results {
		fmt.Fprintf(stdout, "\n##### %s\n", r.Target)
		PrintSteps(stdout, r)
		PrintEndpoints(stdout, r)
	}
	fmt.Fprintln(stdout)
	PrintComparison(stdout, c)
	o := c.Results[0].Oracle
	fmt.Fprintf(stdout, "oracle bound over the whole run: mean TTFT ≥ %.1f ms, p90 ≥ %.1f ms, %.0f%% of prompt tokens cached\n",
		o.MeanTTFTMs, o.P90TTFTMs, 100*o.CachedTokenFraction)
	fmt.Fprintf(stdout, "load average at the end: %s\n", LoadAverage())
	files, err := WriteOutputs(outDir, c.Results, c.Step)
	if err != nil {
		return err
	}
	cmpPath := filepath.Join(outDir, "comparison.json")
	if err := WriteJSONFile(cmpPath, struct {
		Step              int               `json:"step"`
		StepReason        string            `json:"step_reason"`
		Rows              []CompareRow      `json:"rows"`
		Skipped           map[string]string `json:"skipped,omitempty"`
		Interrupted       bool              `json:"interrupted,omitempty"`
		InterruptedDuring string            `json:"interrupted_during,omitempty"`
		NotRun            []string          `json:"not_run,omitempty"`
		Oracle            *Oracle           `json:"oracle"`
		Steps             []Step            `json:"steps"`
		Workload          Spec              `json:"workload"`
	}{c.Step, c.StepReason, c.Rows, c.Skipped, c.Interrupted, c.InterruptedDuring, c.NotRun, o, rc.Steps, rc.Spec}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", strings.Join(append(files, cmpPath), ", "))
	return nil
}

// WriteJSONFile writes v as indented JSON, with a final newline, to path (mode 0644).
func WriteJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// skippedPrefix marks a note that says a policy was skipped before running.
const skippedPrefix = "skipping policy "

// NotesSkipped maps each policy a note of Policies says was skipped to the reason.
func NotesSkipped(notes []string) map[string]string {
	out := map[string]string{}
	for _, n := range notes {
		if rest, ok := strings.CutPrefix(n, skippedPrefix); ok {
			name, why, _ := strings.Cut(rest, ": ")
			out[name] = why
		}
	}
	return out
}

// PolicyOptions are the choices Policies needs besides the names.
type PolicyOptions struct {
	// Command is the command policy's EPP command template (--command); CommandSource its
	// endpoint source (--command-endpoint-source: static or apiserver).
	Command, CommandSource string
	// ConfigsDir holds the EndpointPickerConfig files of the reference policies (--configs-dir).
	ConfigsDir string
	// WorkDir receives configs extracted for a policy (llm-d-router's optimized-baseline); ""
	// is a new temporary directory.
	WorkDir string
}

// Policies resolves policy names (AllPolicies' names, comma-separated: --policies) to compare
// targets. A policy whose prerequisites are missing (a config file, the upstream EPP binary, the
// kube-apiserver) is skipped with a note (NotesSkipped reads them back); the command policy
// without a Command is skipped silently when the list is AllPolicies, an error otherwise. The
// "reference" target must be registered (conformance/wiring). Errors name the flag.
func Policies(names string, o PolicyOptions) ([]CompareTarget, []string, error) {
	var out []CompareTarget
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
		ct := CompareTarget{Name: name, Target: t, Source: src}
		if config != "" {
			ct.ConfigFile = filepath.Join(o.ConfigsDir, config)
		}
		out = append(out, ct)
		return nil
	}
	seen := map[string]bool{}
	for _, p := range conformance.SplitList(names) {
		if seen[p] {
			return nil, nil, fmt.Errorf("--policies: %s listed twice", p)
		}
		seen[p] = true
		var err error
		switch p {
		case TargetRoundRobin:
			out = append(out, CompareTarget{Name: p})
		case PolicyRandom, PolicyReference, PolicyLoadOnly:
			err = ref(p, PolicyConfig(p))
		case PolicyPredicted, PolicyTokenLoad, PolicyActiveRequest:
			path := filepath.Join(o.ConfigsDir, PolicyConfig(p))
			if _, serr := os.Stat(path); serr != nil {
				skip(p, fmt.Sprintf("%s not found (%v)", path, serr))
				continue
			}
			err = ref(p, PolicyConfig(p))
		case PolicyUpstream, PolicyUpstreamPredicted:
			var config string
			if p == PolicyUpstreamPredicted {
				config = filepath.Join(o.ConfigsDir, PolicyConfig(p))
				if _, serr := os.Stat(config); serr != nil {
					skip(p, fmt.Sprintf("%s not found (%v)", config, serr))
					continue
				}
			}
			bin, perr := toolcache.Path("gie", "epp")
			if perr != nil {
				skip(p, fmt.Sprintf("the upstream EPP binary is not built (eppkit tools build gie): %v", perr))
				continue
			}
			if _, kerr := toolcache.Path("k8s", "kube-apiserver"); kerr != nil {
				skip(p, fmt.Sprintf("it discovers through a kube-apiserver, which is not built (eppkit tools build k8s): %v", kerr))
				continue
			}
			tmpl := upstreamEPPCommand
			if p == PolicyUpstreamPredicted {
				tmpl = upstreamPredictedEPPCommand
			}
			t, terr := target.NewCommandTarget(p, fmt.Sprintf(tmpl, conformance.ShellQuote(bin)))
			if terr != nil {
				return nil, nil, terr
			}
			src, serr := conformance.NewEndpointSource("apiserver")
			if serr != nil {
				return nil, nil, serr
			}
			out = append(out, CompareTarget{Name: p, Target: t, Source: src, ConfigFile: config})
		case PolicyLLMDRouter:
			ct, why, lerr := llmdRouterTarget(o)
			if lerr != nil {
				return nil, nil, lerr
			}
			if why != "" {
				skip(p, why)
				continue
			}
			out = append(out, ct)
		case PolicyCommand:
			if o.Command == "" {
				if names != strings.Join(AllPolicies, ",") {
					return nil, nil, fmt.Errorf("--policies command needs --command")
				}
				continue // not asked for explicitly and no --command: nothing to run
			}
			t, terr := target.NewCommandTarget(p, o.Command)
			if terr != nil {
				return nil, nil, terr
			}
			src, serr := conformance.NewEndpointSource(o.CommandSource)
			if serr != nil {
				return nil, nil, serr
			}
			out = append(out, CompareTarget{Name: p, Target: t, Source: src})
		default:
			return nil, nil, fmt.Errorf("--policies: unknown policy %q (have %s)", p, strings.Join(AllPolicies, ", "))
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return out, notes, nil
}

// llmdRouterTarget is the PolicyLLMDRouter target, its optimized-baseline config extracted into
// o.WorkDir; why says why it cannot run (a missing build), err is a failure to set it up.
func llmdRouterTarget(o PolicyOptions) (ct CompareTarget, why string, err error) {
	bin, perr := toolcache.Path("llmd-router", "epp")
	if perr != nil {
		return ct, fmt.Sprintf("llm-d-router v0.10.0 is not built (eppkit tools build llmd-router): %v", perr), nil
	}
	src, perr := toolcache.Path("llmd-router", "src")
	if perr != nil {
		return ct, fmt.Sprintf("llm-d-router v0.10.0's source tree is not in the tools cache: %v", perr), nil
	}
	if _, kerr := toolcache.Path("k8s", "kube-apiserver"); kerr != nil {
		return ct, fmt.Sprintf("it discovers through a kube-apiserver, which is not built (eppkit tools build k8s): %v", kerr), nil
	}
	values, rerr := os.ReadFile(filepath.Join(src, LLMDRouterOptimizedBaselinePath))
	if rerr != nil {
		return ct, fmt.Sprintf("its optimized-baseline config: %v", rerr), nil
	}
	cfg, err := LLMDRouterOptimizedBaseline(values)
	if err != nil {
		return ct, "", err
	}
	dir := o.WorkDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "eppkit-bench-"); err != nil {
			return ct, "", err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return ct, "", err
	}
	path := filepath.Join(dir, PolicyLLMDRouter+"-optimized-baseline.yaml")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		return ct, "", err
	}
	t, err := target.NewCommandTarget(PolicyLLMDRouter, fmt.Sprintf(llmdRouterCommand, conformance.ShellQuote(bin)))
	if err != nil {
		return ct, "", err
	}
	srcOf, err := conformance.NewEndpointSource("apiserver")
	if err != nil {
		return ct, "", err
	}
	return CompareTarget{Name: PolicyLLMDRouter, Target: t, Source: srcOf, ConfigFile: path}, "", nil
}

// WriteRun prints the result of one target in the layout of vllm bench serve (block options o),
// the rate-ladder table, the per-endpoint table, the oracle bound, the share of the TTFT spent
// outside the fakes and the load average, and writes results.json, the vllm_*.json file and the
// plots under outDir.
func WriteRun(stdout io.Writer, outDir string, res *Result, o BlockOptions) error {
	if res.Goodput != nil {
		g := res.Goodput.PerSecond
		o.Goodput = &g
	}
	PrintServingBlock(stdout, res.Overall, o)
	PrintGoodput(stdout, res)
	fmt.Fprintln(stdout)
	PrintSteps(stdout, res)
	fmt.Fprintln(stdout)
	PrintEndpoints(stdout, res)
	fmt.Fprintf(stdout, "\noracle bound: mean TTFT ≥ %.1f ms (cached %.0f%% of prompt tokens); measured mean %.1f ms = %.2fx the bound\n",
		res.Oracle.MeanTTFTMs, 100*res.Oracle.CachedTokenFraction, res.Overall.TTFT.Mean, res.OracleRatio)
	if res.EngineTTFTMs >= 0 {
		fmt.Fprintf(stdout, "the fakes' own mean TTFT %.1f ms (queue wait %.1f ms): %.1f ms of the mean TTFT is spent outside them (client, gateway, EPP, scheduling)\n",
			res.EngineTTFTMs, res.EngineQueueMs, res.Overall.TTFT.Mean-res.EngineTTFTMs)
	}
	fmt.Fprintf(stdout, "load average: %s before, %s after\n", res.LoadAvgStart, res.LoadAvgEnd)
	files, err := WriteOutputs(outDir, []*Result{res}, -1)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", strings.Join(files, ", "))
	return nil
}
