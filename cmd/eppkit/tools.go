package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/internal/toolcache"
)

func init() {
	subcommands = append(subcommands, newToolsCommand)
}

// exitSnapshotMissing is `eppkit tools build`'s exit code when a tool built from a source
// snapshot (llmd-router) has something to build and its tarball is not in the snapshot directory
// ($EPPKIT_THIRDPARTY_DIR, default ../shared/thirdparty): the make targets that need it print
// "SKIPPED" for it and succeed. Every other failure (a checksum mismatch included) is exit 1.
const exitSnapshotMissing = 4

// newToolsCommand is `eppkit tools`: build and locate the pinned upstream binaries of tools/
// (kube-apiserver, etcd, the upstream EPP, the GIE CRDs) and of the source snapshots in
// ../shared/thirdparty (llm-d-router). See docs/tools.md.
func newToolsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "Build and locate the pinned upstream binaries of tools/ (cached by version)",
		Long: "Each tool is a Go module under tools/<name>-<version>/ pinned to an upstream release, or a source " +
			"snapshot in $" + toolcache.ThirdPartyEnv + " (default: ../shared/thirdparty beside the checkout) verified " +
			"against its .sha256; its artifacts are cached under ${XDG_CACHE_HOME:-~/.cache}/eppkit/<name>-<version>/.\n\nTools:\n" +
			toolList(),
	}
	cmd.AddCommand(newToolsBuildCommand(), newToolsPathCommand(), newToolsListCommand())
	return cmd
}

func toolList() string {
	var b strings.Builder
	for _, n := range toolcache.Names() {
		t := toolcache.Tools[n]
		fmt.Fprintf(&b, "  %s (%s): %s\n", n, t.Version, t.Description)
	}
	return b.String()
}

func newToolsBuildCommand() *cobra.Command {
	var (
		opts     toolcache.BuildOptions
		repoRoot string
	)
	cmd := &cobra.Command{
		Use:   "build <name>...",
		Short: "Build the named tools into the cache (skips artifacts already there); prints their paths",
		Long: "Build the named tools into the cache, skipping artifacts already there, and print their paths.\n\n" +
			"The k8s tool's kube-apiserver and etcd (the apiserver endpoint source's control plane) are not built\n" +
			"when " + toolcache.EnvtestAssetsEnv + " names a directory holding a kube-apiserver " + toolcache.SupportedAPIServer.String() +
			"\nand an etcd " + toolcache.SupportedEtcd.String() + " (as setup-envtest installs them); the runs then use those.\n\n" +
			"Exit codes: 0 built or cached; 4 a tool built from a source snapshot (llmd-router) has something to build " +
			"and its tarball is missing (set $" + toolcache.ThirdPartyEnv + "); 1 any other failure, a snapshot whose " +
			"sha256 does not match its .sha256 file included.",
		Example: "  eppkit tools build k8s                 # kube-apiserver + etcd\n" +
			"  eppkit tools build k8s --all           # also kube-controller-manager and kube-scheduler\n" +
			"  eppkit tools build gie --only crds     # only extract the InferencePool/InferenceObjective CRDs\n" +
			"  eppkit tools build llmd-router         # llm-d-router v0.10.0 from ../shared/thirdparty",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if repoRoot == "" {
				wd, err := os.Getwd()
				if err != nil {
					return err
				}
				if repoRoot, err = toolcache.FindRepoRoot(wd); err != nil {
					return fmt.Errorf("--repo-root: %w", err)
				}
			}
			opts.RepoRoot = repoRoot
			opts.Log = cmd.ErrOrStderr()
			for _, name := range args {
				if _, err := toolcache.Lookup(name); err != nil {
					return err
				}
			}
			for _, name := range args {
				res, err := toolcache.Build(cmd.Context(), name, opts)
				for _, r := range res {
					how := fmt.Sprintf("built in %.0fs", r.Duration.Seconds())
					if r.Skipped {
						how = "cached"
					}
					if r.Note != "" {
						how = r.Note + "; not built"
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s (%s)\n", name, r.Artifact, r.Path, how)
				}
				if errors.Is(err, toolcache.ErrSnapshotMissing) {
					return &exitError{code: exitSnapshotMissing, err: err}
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&repoRoot, "repo-root", "", "the eppkit checkout holding tools/ (default: found upward from the working directory)")
	f.StringSliceVar(&opts.Only, "only", nil, "build only these artifacts (comma-separated), e.g. kube-apiserver,etcd")
	f.BoolVar(&opts.All, "all", false, "also build the optional artifacts (kube-controller-manager, kube-scheduler)")
	f.BoolVar(&opts.Force, "force", false, "rebuild artifacts that are already cached")
	f.IntVar(&opts.Parallelism, "p", 0, "go build -p: packages built in parallel (0 = go's default; 1 lowers peak memory)")
	f.StringVar(&opts.GoCommand, "go", "go", "the go command used to build")
	return cmd
}

func newToolsPathCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "path <name> <artifact>",
		Short:   "Print the cached path of a tool's artifact; fails if it is not built",
		Example: "  eppkit tools path k8s kube-apiserver\n  eppkit tools path gie epp\n  eppkit tools path llmd-router epp",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := toolcache.Path(args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), p)
			return nil
		},
	}
}

func newToolsListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the tools, their artifacts and whether each is cached",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, n := range toolcache.Names() {
				t := toolcache.Tools[n]
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s)\n", n, t.Version, t.Source())
				for _, a := range t.Artifacts {
					p, err := toolcache.Path(n, a.Name)
					state := p
					if err != nil {
						state = "not built"
					}
					opt := ""
					if a.Optional {
						opt = " (optional)"
					}
					fmt.Fprintf(cmd.OutOrStdout(), "  %-24s %s%s\n", a.Name, state, opt)
				}
			}
			return nil
		},
	}
}
