package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/conformance/wiring"
)

func init() { subcommands = append(subcommands, newConformanceCommand) }

// conformanceFlags are the flags of `eppkit conformance` that are not Options fields as they are.
type conformanceFlags struct {
	profiles, supported, exempt, skip, timeoutConfig string
	org, project, url, implVersion                   string
	contact                                          []string
}

func newConformanceCommand() *cobra.Command {
	var o conformance.Options
	var f conformanceFlags
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Run the conformance suite against an EPP",
		Long:  conformance.UsageText,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return badFlags("%v", err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runConformance(cmd, o, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Target, "target", "reference", "target EPP: "+strings.Join(conformance.TargetNames(), ", "))
	fl.StringVar(&wiring.ClusterProvider, "provider", "", "cluster provider of --target cluster: kind (default) or existing (env EPPKIT_PROVIDER)")
	fl.StringVar(&o.EndpointSource, "endpoint-source", "static", "how the target learns the pool: static (addresses on its command line) or apiserver (InferencePool + Pods on a local kube-apiserver)")
	fl.StringVar(&f.profiles, "profiles", "all", "comma list of profiles to run and report (EPP, EPP-Routing, Reference) or all")
	fl.StringVar(&f.supported, "supported-features", "", "comma list of extended features the implementation claims, or all")
	fl.BoolVar(&o.AllFeatures, "all-features", false, "claim every feature that has tests (same as --supported-features all)")
	fl.StringVar(&f.exempt, "exempt-features", "", "comma list of features whose tests are skipped even when supported")
	fl.StringVar(&f.skip, "skip-tests", "", "comma list of test ShortNames to skip")
	fl.StringVar(&o.RunTest, "run-test", "", "run only the test with this ShortName")
	fl.StringVar(&o.ReportDir, "report-output", "", "directory for the per-profile ConformanceReport YAML, junit.xml and summary.md (requires the implementation flags)")
	fl.StringVar(&f.org, "organization", "", "implementation organization (report)")
	fl.StringVar(&f.project, "project", "", "implementation project (report)")
	fl.StringVar(&f.url, "url", "", "implementation URL (report)")
	fl.StringVar(&f.implVersion, "version", "", "implementation version (report)")
	fl.StringSliceVar(&f.contact, "contact", nil, "implementation contacts, comma list (report)")
	fl.StringVar(&f.timeoutConfig, "timeout-config", "", "YAML file of TimeoutConfig overrides")
	fl.StringVar(&o.Command, "command", "", "command template of the command target")
	fl.StringVar(&o.Address, "address", "", "ext_proc host:port of the address target")
	fl.StringVar(&o.HealthAddress, "health-address", "", "gRPC health host:port of the address target (default --address)")
	fl.StringVar(&o.TargetTLS, "target-tls", "plaintext", "TLS to the target: plaintext, insecure (any certificate) or ca:<file>")
	fl.StringVar(&o.TargetHealthTLS, "target-health-tls", "", "TLS to the target's gRPC health port, as --target-tls (default: the same as --target-tls; the upstream EPP serves health in plaintext even with TLS on)")
	fl.StringVar(&o.ExpectFailures, "expect-failures", "", "file of test ShortNames expected to fail (one a line, # comments): exit 0 only if exactly these fail")
	fl.StringVar(&o.ReadinessProbe, "readiness-probe", "body", "the request the readiness wait probes the EPP with: body (a chat completion) or headers-only (GET /v1/models); readiness needs only an answer")
	fl.StringVar(&o.PublishDir, "publish-dir", "", "also write the GIE publication layout under this directory (GIE's conformance/reports; requires the implementation flags)")
	fl.StringVar(&o.ResultsFile, "results-file", "", "also write the run's machine-readable results (JSON, conformance.Results) to this file, whatever the run's end")
	fl.StringVar(&o.ConfigFile, "config-file", "", "EndpointPickerConfig file given to the target as {{.ConfigFile}} (reference: --config-file)")
	fl.StringVar(&o.LeaderElectionArgs, "leader-election-args", "", "arguments that turn your EPP's leader election on, appended to the command of the replicas the high-availability tests start (e.g. --ha-enable-leader-election; the reference target knows its own); without them those tests do not apply")
	fl.StringVar(&o.LogDir, "log-dir", "out/conformance", "directory for the target's log")
	fl.Int64Var(&o.Seed, "seed", 0, "seed for the fakes and the tests (0 = from the clock; EPPKIT_SEED overrides)")
	fl.IntVar(&o.FleetSize, "fleet-size", harness.DefaultFleetSize, "number of fake vLLM servers in the pool")
	fl.IntVar(&o.FleetPort, "fleet-port", 0, "port every fake vLLM server listens on, on 127.0.10.1..N (0 = a free port); fix it to preconfigure an --address target")
	fl.StringVar(&o.Fleet, "fleet", "fake", "the pool's model servers: fake (in-process fake vLLM servers on 127.0.10.x) or sim (llm-d-inference-sim processes, one per network namespace; needs root and iproute2; eppkit tools build sim builds it)")
	fl.StringVar(&o.SimBinary, "sim-binary", "", "llm-d-inference-sim binary for --fleet sim (default: the one eppkit tools build sim cached)")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return badFlags("%v", err) })
	cmd.AddCommand(newCatalogueCommand(), newMatrixCommand())
	return cmd
}

// newMatrixCommand is `eppkit conformance matrix`: the table of who passes what across the runs
// of a directory (reports/interop), generated from each run's results.json.
func newMatrixCommand() *cobra.Command {
	var write, check string
	cmd := &cobra.Command{
		Use:   "matrix <runs-dir>",
		Short: "Print (or write into a page) the table of which test each run passed, from the runs' results.json",
		Long: "Reads every <runs-dir>/<run>/results.json (eppkit conformance --results-file) and\n" +
			"<runs-dir>/expected-failures/<run>.txt, and renders one table per profile: a row per test, a column per run.\n" +
			"A failed cell links to the heading \"### `<run>`\" of the page, titled with the expected-failures reason.\n" +
			"--write PAGE replaces the block between the page's matrix markers; --check PAGE exits 1 when that block is not\n" +
			"what the results say. Exit 1 also when a run failed a test its expected-failures list does not explain, or (with\n" +
			"a page) a run with failures has no explanation heading.",
		Example: "  eppkit conformance matrix reports/interop --write reports/interop/README.md\n" +
			"  eppkit conformance matrix reports/interop --check reports/interop/README.md",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if write != "" && check != "" {
				return badFlags("--write and --check: give one")
			}
			runs, err := conformance.LoadMatrixRuns(args[0], conformance.All())
			if err != nil {
				return err
			}
			table, merr := conformance.Matrix(runs, conformance.All())
			page := write + check
			if page == "" {
				_, err := io.WriteString(cmd.OutOrStdout(), table)
				return errors.Join(err, merr)
			}
			old, err := os.ReadFile(page)
			if err != nil {
				return err
			}
			doc, err := conformance.ReplaceMatrix(string(old), table)
			if err != nil {
				return fmt.Errorf("%s: %w", page, err)
			}
			if missing := conformance.MissingExplanations(doc, runs); len(missing) > 0 {
				merr = errors.Join(merr, fmt.Errorf("%s: runs with failures but no heading \"### `<run>`\" explaining them: %s", page, strings.Join(missing, ", ")))
			}
			if check != "" {
				if doc != string(old) {
					return errors.Join(fmt.Errorf("%s: the matrix is not what the runs' results say: run `make interop-matrix`", page), merr)
				}
				return merr
			}
			return errors.Join(os.WriteFile(page, []byte(doc), 0o644), merr)
		},
	}
	cmd.Flags().StringVar(&write, "write", "", "write the matrix into this Markdown page, between its matrix markers")
	cmd.Flags().StringVar(&check, "check", "", "compare this page's matrix with the results; exit 1 when it differs")
	return cmd
}

func newCatalogueCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "catalogue",
		Short: "Print (or write) the Markdown catalogue of every conformance test",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			md := conformance.Catalogue(conformance.All())
			if out == "" {
				_, err := io.WriteString(cmd.OutOrStdout(), md)
				return err
			}
			return os.WriteFile(out, []byte(md), 0o644)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
	return cmd
}

// options completes o from the flags that need parsing; errors name the flag (exit 3).
func (f conformanceFlags) options(o conformance.Options) (conformance.Options, error) {
	var err error
	if o.Profiles, err = conformance.ParseProfiles(f.profiles); err != nil {
		return o, badFlags("--profiles: %v", err)
	}
	if o.SupportedFeatures, err = conformance.ParseFeatures(f.supported); err != nil {
		return o, badFlags("--supported-features: %v", err)
	}
	if o.ExemptFeatures, err = conformance.ParseFeatures(f.exempt); err != nil {
		return o, badFlags("--exempt-features: %v", err)
	}
	for _, s := range strings.Split(f.skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.SkipTests = append(o.SkipTests, s)
		}
	}
	if o.FleetSize < 1 { // Options take 0 as the default; the flag's default is that value
		return o, badFlags("--fleet-size: must be in [1,250], got %d", o.FleetSize)
	}
	if o.Timeouts, err = harness.LoadTimeoutConfig(f.timeoutConfig); err != nil {
		return o, badFlags("--timeout-config: %v", err)
	}
	o.Implementation.Organization, o.Implementation.Project, o.Implementation.URL = f.org, f.project, f.url
	o.Implementation.Version, o.Implementation.Contact = f.implVersion, f.contact
	return o, nil
}

func runConformance(cmd *cobra.Command, o conformance.Options, f conformanceFlags) error {
	o, err := f.options(o)
	if err != nil {
		return err
	}
	o.Out, o.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
	o.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	o.Reproduce = reproduceLines(o)
	ctx, abort, stop := conformance.NotifyInterrupt(cmd.Context(), cmd.ErrOrStderr())
	defer stop()
	o.Abort = abort
	_, err = conformance.Run(ctx, o)
	return err
}

// reproduceLines are the Reproduce section of a publication README: build eppkit, build the
// pinned control plane when the apiserver source is used, and this run's command line.
func reproduceLines(o conformance.Options) []string {
	lines := []string{"make build"}
	if o.EndpointSource == "apiserver" {
		lines = append(lines, "./bin/eppkit tools build k8s && ./bin/eppkit tools build gie --only crds")
	}
	if o.Fleet == "sim" && o.SimBinary == "" {
		lines = append(lines, "./bin/eppkit tools build sim")
	}
	args := []string{"./bin/eppkit"}
	for _, a := range os.Args[1:] {
		args = append(args, conformance.ShellQuote(a))
	}
	return append(lines, strings.Join(args, " "))
}
