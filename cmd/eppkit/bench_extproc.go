package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/bench/extproc"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchExtprocCommand) }

func newBenchExtprocCommand() *cobra.Command {
	o := extproc.Options{}
	var asJSON bool
	var reportFormat, reportDir string
	mf := &matrixFlags{}
	var e2e bool
	cmd := &cobra.Command{
		Use:   "extproc (--epp ADDR | --targets null,reference,upstream [--command-target NAME=TEMPLATE] [--e2e]) (--rate R | --concurrency N) [--duration 10s]",
		Short: "Measure an EPP's decision latency over ext_proc (request headers + body → pick)",
		Long: `Drive an EPP's ext_proc service directly (no gateway, no model servers needed beyond what the
EPP scrapes): each decision sends request headers and a completions body in chunks and waits for
the pick (the request_headers response and the streamed body ending with end_of_stream).

Open loop: --rate decisions/s with Poisson (default) or fixed arrivals; latency is measured from
the scheduled arrival, so a stalled EPP is not hidden (no coordinated omission). Closed loop:
--concurrency N workers back to back (--rate 0). --streams N reuses N long-lived streams (several
requests per stream, which upstream EPPs do not support); 0 opens one stream per decision as Envoy
does. Latency percentiles interpolate linearly between the sorted samples, as vLLM's benchmark does. Decisions in --warmup are not counted.
--epp-pid PID adds the EPP process's CPU time per decision (from /proc/PID/stat).

Picker-overhead matrix: --targets reference,upstream (instead of --epp) starts each EPP itself
for every --endpoint-counts value (default 10,100,1000) and measures every --prompt-sizes value
(default 2048,32768 bytes) against it, with the load flags above per cell, and prints one table
with decisions/s, latency percentiles and the EPP's CPU per decision, plus reference ÷ upstream
ratios. The endpoints are metrics-only servers on loopback addresses 127.1.x.y sharing one port,
scraped every --refresh-metrics-interval, serving --metrics-pages: minimal, a fake vLLM's
gauge-only /metrics page (pinned: queue i%5, running i%7, KV (i%10)/10), and/or realistic, a page
shaped like a real vLLM v1 server's (about 300 KB) that changes on every scrape; the matrix runs
once per page kind. Before its decisions each EPP only scrapes for a few seconds, and the table
reports the CPU that cost (µs per endpoint per second). The reference EPP gets the list with --endpoints; the
upstream EPP v1.5.0 (--upstream-epp, default: eppkit tools path gie epp) discovers it from an
InferencePool with one Ready Pod per endpoint on a local kube-apiserver (eppkit tools build k8s).
The null target (eppkit bench null-epp) answers the protocol correctly and decides nothing
(round-robin, no scraping, body unparsed): its row is the floor that gRPC, the loopback, this
driver and the machine's scheduler set, and the table then shows every other target against it.

--profile-dir DIR (with --rates): after each target's ladder, its highest sustained rate per pool
and prompt size is re-run for --profile-window while the EPP's CPU profile is taken
(/debug/pprof/profile; only the reference serves it, the others are said to have none), written
to DIR/<target>_<pages>_<n>ep_<bytes>B.pprof, and go tool pprof's top 15 cumulative entries printed.

End-to-end added latency: --e2e --targets reference,... runs the null EPP first and then each
target, each on a fresh pool of --e2e-endpoints fake vLLM servers with no model time behind the
gateway stand-in, and sends the same load through the gateway to each: --e2e-streams concurrent
streams (default 150) of --e2e-body-bytes bodies (default 225280), closed loop, or --rate R open
loop with at most --e2e-streams in flight. It prints end-to-end P50/P95/P99 (send → last byte of
the response) per target and each target ÷ null (issue 34's goal: reference P99 ≤ 1.5);
--output writes the JSON.

Your own EPP: --command-target 'NAME=TEMPLATE' (repeatable; matrix and --e2e) starts it on each
pool from a command template with the conformance command target's fields ({{.Endpoints}} the
pool as ip:port,…; {{.GRPCPort}}, required, {{.HealthPort}}, {{.MetricsPort}} free ports;
{{.Eppkit}}, {{.Seed}}, {{.LogDir}}; {{.Kubeconfig}}, {{.PoolName}}, {{.PoolNamespace}} for an
InferencePool on a local kube-apiserver when there is no {{.Endpoints}}), waits for its gRPC health
and an answered probe, and names its rows NAME (list NAME in --targets to place them), e.g.
  --targets null,reference --command-target 'mine=/path/to/epp --endpoints {{.Endpoints}} --grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}}'
An EPP already running: --address-target 'NAME=HOST:PORT[,HEALTH_HOST:PORT]' (repeatable) starts
nothing; before each of its rows the bench prints the pool (ip:port,…), writes it to
<log-dir>/<NAME>-<pages>-<n>.endpoints (--e2e: e2e-<NAME>-<n>.endpoints) and waits up to
--address-wait for the EPP to answer health and pick in that pool: start or repoint it meanwhile.
Its CPU and RSS are not measured. docs/bench.md has the details.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			formats, err := bench.ParseReportFormats(reportFormat)
			if err != nil {
				return badFlags("%v", err)
			}
			if slices.Contains(formats, bench.ReportInferencePerf) {
				o.Record = true
				mf.m.InferencePerfDir = reportDir
			}
			if e2e {
				return runBenchE2E(ctx, cmd, o, mf)
			}
			if mf.matrix() {
				if o.EPP != "" {
					return badFlags("%v", errMatrixAndEPP)
				}
				m, err := mf.options(o)
				if err != nil {
					return badFlags("%v", err)
				}
				if err := m.Validate(); err != nil {
					return badFlags("%v", err)
				}
				// Validate the per-cell load once up front (a placeholder address stands in for
				// the EPPs the matrix starts).
				probe := o
				probe.EPP = "matrix"
				if err := probe.Validate(); err != nil {
					return badFlags("%v", err)
				}
				m.Bench.Seed = probe.Seed
				_, err = extproc.RunMatrix(ctx, cmd.OutOrStdout(), m)
				return err
			}
			for _, name := range []string{"profile-dir", "profile-window", "e2e-streams", "e2e-body-bytes", "e2e-endpoints"} {
				if cmd.Flags().Changed(name) {
					return badFlags("--%s needs --targets (matrix mode)", name)
				}
			}
			if err := o.Validate(); err != nil {
				return badFlags("%v", err) // before dialling: a flag error, not a failed run
			}
			if _, err := extprocclient.ParseTLSSpec("--epp-tls", o.TLS); err != nil {
				return badFlags("%v", err)
			}
			rep, err := extproc.Run(ctx, o)
			if err != nil {
				return err
			}
			if o.Record && len(rep.Records) > 0 {
				files, err := extproc.WriteInferencePerf(reportDir, rep)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote inference-perf report: %s\n", strings.Join(files, ", "))
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
				return extproc.ErrNoDecision(rep)
			}
			extproc.Print(cmd.OutOrStdout(), rep)
			return extproc.ErrNoDecision(rep)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.EPP, "epp", "", "EPP ext_proc address host:port (required)")
	fl.StringVar(&o.TLS, "epp-tls", "plaintext", "TLS to the EPP: plaintext, insecure or ca:<file>")
	fl.Float64Var(&o.Rate, "rate", 0, "Open loop: decisions per second (0 = closed loop)")
	fl.StringVar(&o.Arrival, "arrival", "poisson", "Open-loop arrivals: poisson or fixed")
	fl.IntVar(&o.Concurrency, "concurrency", 8, "Closed loop: concurrent workers")
	fl.DurationVar(&o.Duration, "duration", 10*time.Second, "Measured duration")
	fl.DurationVar(&o.Warmup, "warmup", time.Second, "Unmeasured warm-up before --duration")
	fl.IntVar(&o.PromptBytes, "prompt-bytes", 2048, "Prompt length in bytes (unique per decision)")
	fl.IntVar(&o.Streams, "streams", 0, "Long-lived streams to reuse (0 = one stream per decision)")
	fl.StringVar(&o.Model, "model", "meta-llama/Llama-3.1-8B-Instruct", "Model name in the request body")
	fl.StringVar(&o.Path, "path", "/v1/completions", "Request :path")
	fl.IntVar(&o.ChunkSize, "body-chunk-size", extprocclient.DefaultChunkSize, "Bytes per request_body chunk")
	fl.DurationVar(&o.Timeout, "message-timeout", 5*time.Second, "Bound on each wait for an EPP response")
	fl.IntVar(&o.MaxInflight, "max-inflight", 4096, "Open loop: arrivals beyond this many in flight are dropped and counted")
	fl.BoolVar(&o.Response, "response-phase", false, "After each pick, also send a small JSON response through the response phases (not timed)")
	fl.Uint64Var(&o.Seed, "seed", 0, "Seed for prompts and arrivals (0 = from the clock; printed)")
	fl.IntVar(&o.PID, "epp-pid", 0, "Process id of the EPP on this machine: report its CPU time per decision (from /proc/<pid>/stat)")
	fl.BoolVar(&asJSON, "json", false, "Print the report as JSON")
	fl.StringVar(&reportFormat, "report-format", bench.ReportEppkit, "Reports: eppkit (the table or --json, always), inference-perf (also inference-perf's lifecycle JSON in --report-dir; a request is a decision)")
	fl.StringVar(&reportDir, "report-dir", filepath.Join("out", "bench", "extproc", bench.InferencePerfDir), "Where --report-format inference-perf writes (matrix mode: one folder per cell)")
	fl.StringVar(&mf.targets, "targets", "", "Matrix mode: EPPs to start and measure, comma-separated: reference, upstream (GIE v1.5.0), llmd-router (llm-d-router v0.10.0, its default config), null (the do-nothing floor), or a --command-target or --address-target name to place its rows (excludes --epp)")
	// A repeatable NAME=TEMPLATE flag beside --targets rather than templates inside it: a
	// template has spaces and commas of its own, and --targets stays the one ordered list of rows
	// (a defined name it does not list is appended).
	fl.StringArrayVar(&mf.commands, "command-target", nil, "Matrix and --e2e: your own EPP as a target, NAME=TEMPLATE (repeatable): the bench starts it on each pool from the command template, with the conformance command target's fields ({{.Eppkit}}, {{.Endpoints}} (the pool, ip:port,…), {{.GRPCPort}}, {{.HealthPort}}, {{.MetricsPort}}, {{.Seed}}, {{.LogDir}}; {{.Kubeconfig}}, {{.PoolName}}, {{.PoolNamespace}} for an InferencePool on a local kube-apiserver when the template has no {{.Endpoints}}), and names its rows NAME; NAME may also be listed in --targets to place it")
	// The same NAME=VALUE shape as --command-target, for the same reasons.
	fl.StringArrayVar(&mf.addresses, "address-target", nil, "Matrix and --e2e: your EPP already running, NAME=HOST:PORT[,HEALTH_HOST:PORT] (repeatable; health defaults to the ext_proc address): before each of its rows the bench prints the pool's endpoints (ip:port,…), writes them to <log-dir>/<NAME>-<pages>-<n>.endpoints and waits up to --address-wait for the EPP to answer health and pick in that pool; start or repoint it meanwhile. Its CPU and RSS are not measured")
	fl.DurationVar(&mf.m.AddressWait, "address-wait", extproc.DefaultAddressWait, "With --address-target: how long to wait for the EPP to pick in each pool")
	fl.StringVar(&mf.counts, "endpoint-counts", "10,100,1000", "Matrix mode: pool sizes, comma-separated")
	fl.StringVar(&mf.pages, "metrics-pages", extproc.PagesMinimal, "Matrix mode: the endpoints' /metrics pages, comma-separated: minimal (a fake vLLM's gauge-only page, the same every scrape), realistic (a real vLLM v1 page: every family and histogram bucket, 2 engines, 4 LoRA adapters, about 300 KB, values changing every scrape)")
	fl.StringVar(&mf.sizes, "prompt-sizes", "2048,32768", "Matrix mode: prompt lengths in bytes, comma-separated (overrides --prompt-bytes)")
	fl.DurationVar(&mf.m.RefreshInterval, "refresh-metrics-interval", time.Second, "Matrix mode: the EPPs' metrics scrape interval (both EPPs default to 50ms; 1,000 endpoints at 50ms is 20,000 scrapes/s)")
	fl.StringVar(&mf.rates, "rates", "", "Matrix mode: an open-loop ladder of rates (decisions/s), comma-separated, each run for --duration per cell (replaces --rate); the table then gives each target's highest sustained rate (no failed or dropped decision, ≥ 90% of the rate decided, P95 ≤ --p95-bound), the reference against llm-d-router, and P95-against-rate plots in --plot-dir")
	fl.Float64Var(&mf.m.P95BoundMs, "p95-bound", extproc.DefaultP95BoundMs, "Matrix mode with --rates: the decision-latency P95 (ms) a sustained rate must stay within")
	fl.StringVar(&mf.m.PlotDir, "plot-dir", filepath.Join("out", "bench", "extproc"), "Matrix mode with --rates: where the P95-against-rate plots go")
	fl.StringVar(&mf.m.LLMDRouterEPP, "llmd-router-epp", "", "Matrix mode: llm-d-router v0.10.0's EPP binary (default: the tools cache's llmd-router epp)")
	fl.StringVar(&mf.m.UpstreamEPP, "upstream-epp", "", "Matrix mode: upstream EPP binary (default: the tools cache's gie epp)")
	fl.StringVar(&mf.m.LogDir, "log-dir", "", "Matrix mode: directory for the EPP and control-plane logs (default: a new temporary directory)")
	fl.StringVar(&mf.m.Output, "output", "", "Matrix mode: also write the report as JSON to this file")
	fl.BoolVar(&e2e, "e2e", false, "End-to-end added latency (needs --targets): through the gateway stand-in and a fresh pool of --e2e-endpoints fake vLLM servers that answer at once, the same load once with the null EPP and once with each other target; prints end-to-end P50/P95/P99 (send → last response byte) and each target ÷ null. Closed loop with --e2e-streams clients, or open loop at --rate with at most --e2e-streams in flight")
	fl.IntVar(&mf.m.E2E.Streams, "e2e-streams", extproc.DefaultE2EStreams, "With --e2e: concurrent streams (closed loop: clients back to back; open loop: the most in flight)")
	fl.IntVar(&mf.m.E2E.BodyBytes, "e2e-body-bytes", extproc.DefaultE2EBodyBytes, "With --e2e: every request body's exact size in bytes (a completions body, unique prompt)")
	fl.IntVar(&mf.m.E2E.Endpoints, "e2e-endpoints", extproc.DefaultE2EEndpoints, "With --e2e: fake vLLM servers in the pool (1–250)")
	fl.StringVar(&mf.m.ProfileDir, "profile-dir", "", "Matrix mode with --rates: after each target's ladder, re-run its highest sustained rate per pool and prompt size while taking a CPU profile of the EPP (the reference only: the others serve no pprof), write <target>_<pages>_<n>ep_<bytes>B.pprof here and print go tool pprof's top 15 cumulative entries")
	fl.DurationVar(&mf.m.ProfileWindow, "profile-window", extproc.DefaultProfileWindow, "With --profile-dir: the CPU profile's length (whole seconds, ≥ 1s)")
	fl.DurationVar(&mf.m.Settle, "settle", 2*time.Second, "Matrix mode: wait after an EPP reports every endpoint ready (plus two refresh intervals)")
	return cmd
}

// e2eIgnored are the matrix flags the end-to-end mode does not read: setting one with --e2e is a
// flag error rather than a silent no-op.
var e2eIgnored = []string{"epp", "endpoint-counts", "metrics-pages", "prompt-sizes", "prompt-bytes", "rates", "p95-bound",
	"plot-dir", "profile-dir", "profile-window", "streams", "concurrency", "report-format", "response-phase", "epp-pid", "json", "max-inflight"}

// runBenchE2E is `bench extproc --e2e`.
func runBenchE2E(ctx context.Context, cmd *cobra.Command, o extproc.Options, mf *matrixFlags) error {
	for _, name := range e2eIgnored {
		if cmd.Flags().Changed(name) {
			return badFlags("--%s does not apply with --e2e", name)
		}
	}
	if !mf.matrix() {
		return badFlags("--e2e needs --targets, --command-target or --address-target (null is added when missing)")
	}
	m, err := mf.options(o)
	if err != nil {
		return badFlags("%v", err)
	}
	probe := o
	probe.EPP = "e2e"
	if err := probe.Validate(); err != nil {
		return badFlags("%v", err)
	}
	m.Bench = probe
	if err := m.ValidateE2E(); err != nil {
		return badFlags("%v", err)
	}
	rep, err := extproc.RunE2E(ctx, cmd.OutOrStdout(), m)
	if err != nil {
		return err
	}
	return extproc.ErrE2E(rep)
}

var errMatrixAndEPP = errors.New("--epp and --targets (or --command-target, --address-target) cannot both be set: --epp measures a running EPP, --targets starts its own")

// matrixFlags holds the raw flag values of the matrix mode.
type matrixFlags struct {
	targets, counts, sizes, pages, rates string
	// commands are the --command-target values, NAME=TEMPLATE each; addresses the
	// --address-target values, NAME=HOST:PORT[,HEALTH_HOST:PORT] each.
	commands, addresses []string
	m                   extproc.MatrixOptions
}

// matrix reports whether the flags ask for the matrix (or --e2e) mode: --targets, a
// --command-target or an --address-target.
func (f *matrixFlags) matrix() bool {
	return f.targets != "" || len(f.commands) > 0 || len(f.addresses) > 0
}

// parseAddressTarget splits an --address-target value NAME=HOST:PORT[,HEALTH_HOST:PORT].
func parseAddressTarget(v string) (extproc.AddressTarget, error) {
	name, addrs, ok := strings.Cut(v, "=")
	if !ok {
		return extproc.AddressTarget{}, fmt.Errorf("--address-target: %q is not NAME=HOST:PORT[,HEALTH_HOST:PORT]", v)
	}
	addr, health, _ := strings.Cut(addrs, ",")
	return extproc.AddressTarget{Name: strings.TrimSpace(name), Address: strings.TrimSpace(addr), Health: strings.TrimSpace(health)}, nil
}

// parseCommandTarget splits a --command-target value NAME=TEMPLATE at its first '='.
func parseCommandTarget(v string) (extproc.CommandTarget, error) {
	name, tmpl, ok := strings.Cut(v, "=")
	if !ok {
		return extproc.CommandTarget{}, fmt.Errorf("--command-target: %q is not NAME=TEMPLATE", v)
	}
	return extproc.CommandTarget{Name: strings.TrimSpace(name), Command: tmpl}, nil
}

func (f *matrixFlags) options(bench extproc.Options) (extproc.MatrixOptions, error) {
	m := f.m
	m.Bench = bench
	m.CommandTargets = nil
	for _, v := range f.commands {
		c, err := parseCommandTarget(v)
		if err != nil {
			return m, err
		}
		m.CommandTargets = append(m.CommandTargets, c)
	}
	m.AddressTargets = nil
	for _, v := range f.addresses {
		a, err := parseAddressTarget(v)
		if err != nil {
			return m, err
		}
		m.AddressTargets = append(m.AddressTargets, a)
	}
	for _, t := range strings.Split(f.targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			m.Targets = append(m.Targets, t)
		}
	}
	for _, k := range strings.Split(f.pages, ",") {
		if k = strings.TrimSpace(k); k != "" {
			m.Pages = append(m.Pages, k)
		}
	}
	var err error
	if m.EndpointCounts, err = extproc.ParseIntList("--endpoint-counts", f.counts, 1); err != nil {
		return m, err
	}
	if m.PromptSizes, err = extproc.ParseIntList("--prompt-sizes", f.sizes, 1); err != nil {
		return m, err
	}
	for _, r := range strings.Split(f.rates, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		v, err := strconv.ParseFloat(r, 64)
		if err != nil || !(v > 0) {
			return m, fmt.Errorf("--rates: %q is not a positive rate", r)
		}
		m.Rates = append(m.Rates, v)
	}
	if len(m.Rates) > 0 {
		if err := os.MkdirAll(m.PlotDir, 0o755); err != nil {
			return m, fmt.Errorf("--plot-dir: %w", err)
		}
	}
	return m, nil
}
