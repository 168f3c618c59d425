// Package toolcache knows the pinned upstream builds under tools/ (one Go module each, never
// imported by the main module), how to build them, and where their artifacts are cached:
// ${XDG_CACHE_HOME:-~/.cache}/eppkit/<name>-<version>/<artifact>. `eppkit tools` and the
// apiserver endpoint source (conformance/endpointsource/apiserver) both use it. See docs/tools.md.
package toolcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Kind says how an artifact is produced.
type Kind int

const (
	// KindBinary is a `go build` of Package inside the tool's module (or its Subdir module).
	KindBinary Kind = iota
	// KindCRDs copies Files from the module Module@ModuleVersion (its module zip, as the Go
	// toolchain downloads it) into the artifact directory: GIE's CRDs, and llm-d's sample
	// EndpointPickerConfig.
	KindCRDs
	// KindNodeImage is the kind node image: the tool module's main package (the assembler)
	// builds it into the container engine; the artifact file is its stamp (NodeImageStamp).
	KindNodeImage
	// KindSnapshotSource is a snapshot tool's extracted source tree (SourceArtifact): the
	// tarball of Tool.Snapshot, verified against its .sha256 and extracted (snapshot.go).
	KindSnapshotSource
	// KindSnapshotFiles copies the files of the extracted source tree that match Files (globs
	// relative to the tree) into the artifact directory: llm-d-router's shipped configs and CRDs.
	KindSnapshotFiles
)

// Artifact is one cached output of a tool: a binary or a directory of extracted files.
type Artifact struct {
	// Name is the file (binary) or directory (CRDs) name under the tool's cache directory.
	Name string
	Kind Kind
	// Package is the Go package path built for KindBinary ("." for the Subdir module's own main).
	Package string
	// Subdir is a nested module directory under tools/<name>-<version>/ ("" = the tool module).
	Subdir string
	// LDFlags are passed to go build as -ldflags (version stamping).
	LDFlags string
	// Env adds KEY=value entries to the go build environment (e.g. CGO_ENABLED=0).
	Env []string
	// VersionVar, when set, is a -X variable given the version of the package's module as the
	// tool module pins it (so the version lives in go.mod only).
	VersionVar string
	// VersionTrimV drops the leading "v" of that version (runc prints "1.4.3").
	VersionTrimV bool
	// Tags are go build -tags.
	Tags []string
	// Module, ModuleVersion and Files (paths inside the module) describe a KindCRDs artifact;
	// a KindSnapshotFiles artifact has Files only (globs inside the source tree).
	Module, ModuleVersion string
	Files                 []string
	// Optional artifacts are built only when asked for (--all or by name).
	Optional bool
}

// Tool is one pinned upstream build: the module tools/<Name>-<Version>.
type Tool struct {
	Name, Version string
	// Description says what is built from which upstream module versions.
	Description string
	Artifacts   []Artifact
	// Snapshot, when set, is the source tarball the tool is built from instead of a module
	// under tools/ (snapshot.go): its binaries are built inside the extracted tree.
	Snapshot *Snapshot
}

// Dir is the tool's module directory relative to the repository root, e.g. "tools/k8s-v1.37.2"
// (none for a Snapshot tool: Source says where it comes from).
func (t Tool) Dir() string { return filepath.Join("tools", t.Name+"-"+t.Version) }

// Source says where the tool is built from: its module directory, or its source snapshot.
func (t Tool) Source() string {
	if t.Snapshot != nil {
		return "snapshot " + t.Snapshot.File + " in $" + ThirdPartyEnv + " or ../shared/thirdparty"
	}
	return t.Dir()
}

// Artifact returns the named artifact of t.
func (t Tool) Artifact(name string) (Artifact, bool) {
	for _, a := range t.Artifacts {
		if a.Name == name {
			return a, true
		}
	}
	return Artifact{}, false
}

// kubeLDFlags stamps the Kubernetes version the way hack/lib/version.sh does for a release build
// (kubernetes/kubernetes hack/lib/version.sh, kube::version::ldflags): both component-base and
// client-go carry the version variables. -s -w drop the symbol table to shorten the link.
func kubeLDFlags(gitVersion, major, minor string) string {
	parts := []string{"-s", "-w"}
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		parts = append(parts,
			"-X", p+".gitVersion="+gitVersion,
			"-X", p+".gitMajor="+major,
			"-X", p+".gitMinor="+minor,
			"-X", p+".gitTreeState=clean")
	}
	return strings.Join(parts, " ")
}

// GIEModule and GIEVersion are the pinned Gateway API Inference Extension module; its
// config/crd/bases CRDs are what the apiserver endpoint source installs.
const (
	GIEModule  = "sigs.k8s.io/gateway-api-inference-extension"
	GIEVersion = "v1.5.0"
)

// CRD file names inside the GIE module (config/crd/bases), and the artifact directory holding them.
const (
	CRDsArtifact             = "crds"
	InferencePoolCRD         = "inference.networking.k8s.io_inferencepools.yaml"
	InferenceObjectiveCRD    = "inference.networking.x-k8s.io_inferenceobjectives.yaml"
	InferenceModelRewriteCRD = "inference.networking.x-k8s.io_inferencemodelrewrites.yaml"
	InferencePoolImportCRD   = "inference.networking.x-k8s.io_inferencepoolimports.yaml"
)

// Tools are the pinned builds, by name (the name given to `eppkit tools build`). The key is the
// tool's Name except where one upstream module has several pinned versions (gie-v1.6.0).
var Tools = map[string]Tool{
	"k8s": {
		Name: "k8s", Version: "v1.37.2",
		Description: "kube-apiserver (and, on request, the kind node image's kube-controller-manager, kube-scheduler, kubelet, kubeadm, kubectl and kube-proxy) from " +
			"k8s.io/kubernetes v1.37.2 with the k8s.io staging modules at v0.37.2; etcd v3.6.11 from " +
			"go.etcd.io/etcd/server/v3 (nested module etcd/)",
		Artifacts: []Artifact{
			{Name: "kube-apiserver", Package: "k8s.io/kubernetes/cmd/kube-apiserver", LDFlags: kubeLDFlags("v1.37.2", "1", "37")},
			{Name: "etcd", Package: ".", Subdir: "etcd", LDFlags: "-s -w"},
			{Name: "kube-controller-manager", Package: "k8s.io/kubernetes/cmd/kube-controller-manager", LDFlags: kubeLDFlags("v1.37.2", "1", "37"), Optional: true},
			{Name: "kube-scheduler", Package: "k8s.io/kubernetes/cmd/kube-scheduler", LDFlags: kubeLDFlags("v1.37.2", "1", "37"), Optional: true},
			// The node components of the kind node image (tools build kind-node builds them here,
			// so they share this module's Go build cache with kube-apiserver).
			{Name: "kubelet", Package: "k8s.io/kubernetes/cmd/kubelet", LDFlags: kubeLDFlags("v1.37.2", "1", "37"), Optional: true},
			{Name: "kubeadm", Package: "k8s.io/kubernetes/cmd/kubeadm", LDFlags: kubeLDFlags("v1.37.2", "1", "37"), Optional: true},
			{Name: "kubectl", Package: "k8s.io/kubernetes/cmd/kubectl", LDFlags: kubeLDFlags("v1.37.2", "1", "37"), Optional: true},
			{Name: "kube-proxy", Package: "k8s.io/kubernetes/cmd/kube-proxy", LDFlags: kubeLDFlags("v1.37.2", "1", "37"), Optional: true},
		},
	},
	// The kind node image for Kubernetes v1.37.2, assembled offline (docs/tools.md,
	// "kind-node"): the Go components below at the versions tools/kind-node-v1.37.2/go.mod pins,
	// the k8s tool's binaries, Debian's userland and CNI plugins, kind's base files.
	KindNodeTool: {
		Name: KindNodeTool, Version: "v1.37.2",
		Description: "the kind node image " + KindNodeImageTag + " (offline): containerd, runc, crictl and coredns " +
			"at the versions of tools/kind-node-v1.37.2/go.mod, kubelet, kubeadm, kubectl and the control-plane " +
			"images from the k8s tool, a Debian bookworm rootfs with kind's base files (sigs.k8s.io/kind)",
		Artifacts: []Artifact{
			// containerd's Makefile tags: no aufs, zfs, btrfs or devmapper snapshotters.
			{Name: "containerd", Package: "github.com/containerd/containerd/v2/cmd/containerd", LDFlags: "-s -w",
				VersionVar: "github.com/containerd/containerd/v2/version.Version", Tags: []string{"no_aufs", "no_zfs", "no_btrfs", "no_devmapper"}},
			{Name: "ctr", Package: "github.com/containerd/containerd/v2/cmd/ctr", LDFlags: "-s -w",
				VersionVar: "github.com/containerd/containerd/v2/version.Version", Tags: []string{"no_aufs", "no_zfs", "no_btrfs", "no_devmapper"}},
			{Name: "containerd-shim-runc-v2", Package: "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2", LDFlags: "-s -w",
				VersionVar: "github.com/containerd/containerd/v2/version.Version"},
			// runc with seccomp (cgo, libseccomp-dev), as its Makefile builds it.
			{Name: "runc", Package: "github.com/opencontainers/runc", LDFlags: "-s -w", VersionVar: "main.version", VersionTrimV: true,
				Tags: []string{"seccomp", "urfave_cli_no_docs"}},
			{Name: "crictl", Package: "sigs.k8s.io/cri-tools/cmd/crictl", LDFlags: "-s -w", VersionVar: "sigs.k8s.io/cri-tools/pkg/version.Version"},
			{Name: "coredns", Package: "github.com/coredns/coredns", LDFlags: "-s -w"},
			{Name: KindNodeImageArtifact, Kind: KindNodeImage},
		},
	},
	"gie": {
		Name: "gie", Version: GIEVersion,
		Description: "the upstream endpoint picker (cmd/epp) and the InferencePool, InferenceObjective, " +
			"InferenceModelRewrite and InferencePoolImport CRDs " +
			"of " + GIEModule + " " + GIEVersion,
		Artifacts: []Artifact{
			{Name: CRDsArtifact, Kind: KindCRDs, Module: GIEModule, ModuleVersion: GIEVersion, Files: []string{
				"config/crd/bases/" + InferencePoolCRD,
				"config/crd/bases/" + InferenceObjectiveCRD,
				"config/crd/bases/" + InferenceModelRewriteCRD,
				"config/crd/bases/" + InferencePoolImportCRD,
			}},
			{Name: "epp", Package: GIEModule + "/cmd/epp", LDFlags: "-s -w"},
		},
	},
	// One module holds one GIE version, so v1.6.0 is a tool of its own (key "gie-v1.6.0", module
	// tools/gie-v1.6.0, cache gie-v1.6.0/). v1.6.0 no longer ships cmd/epp; its cmd/lwepp is the
	// lightweight round-robin endpoint picker (pkg/lwepp) used by the interop runs (make interop).
	GIE160Tool: {
		Name: "gie", Version: GIE160Version,
		Description: "the upstream lightweight endpoint picker (cmd/lwepp, round-robin, no body parsing) of " +
			GIEModule + " " + GIE160Version,
		Artifacts: []Artifact{
			{Name: "lwepp", Package: GIEModule + "/cmd/lwepp", LDFlags: "-s -w"},
		},
	},
	// lwepp v1.6.2: v1.6.0's with its ext_proc body answers fixed for FULL_DUPLEX_STREAMED
	// (streamed_response body mutations, GIE #3028; body chunks held back until the deferred
	// request_headers response, GIE #3033), for `make interop-lwepp-v1.6.2`.
	GIE162Tool: {
		Name: "gie", Version: GIE162Version,
		Description: "the upstream lightweight endpoint picker (cmd/lwepp, round-robin, no body parsing) of " +
			GIEModule + " " + GIE162Version,
		Artifacts: []Artifact{
			{Name: "lwepp", Package: GIEModule + "/cmd/lwepp", LDFlags: "-s -w"},
		},
	},
	// llm-d-router v0.10.0, llm-d's endpoint picker since GIE v1.6.0 moved its EPP there. The
	// module proxy refuses github.com/llm-d/llm-d-router at every tag, so it is built from the
	// source snapshot in ../shared/thirdparty (its README; $EPPKIT_THIRDPARTY_DIR overrides the
	// directory): the tarball is checked against its .sha256 before it is extracted into the
	// cache (src/), and ./cmd/epp is built there without cgo, as its Dockerfile.epp does, with
	// the version variables that Dockerfile sets. Its shipped EndpointPickerConfigs
	// (deploy/config) and llm-d.ai CRDs (config/crd/bases) are extracted beside it.
	LLMDRouterTool: {
		Name: LLMDRouterTool, Version: LLMDRouterVersion,
		Description: "llm-d's endpoint picker (cmd/epp) of " + LLMDRouterModule + " " + LLMDRouterVersion +
			", built from the source snapshot " + LLMDRouterSnapshot + " (not served by the module proxy), with its shipped configs and CRDs",
		Snapshot: &Snapshot{
			File: LLMDRouterSnapshot, Prefix: "llm-d-router-" + LLMDRouterVersion + "/",
			Module: LLMDRouterModule, Commit: LLMDRouterCommit,
		},
		Artifacts: []Artifact{
			{Name: SourceArtifact, Kind: KindSnapshotSource},
			{Name: LLMDRouterBinary, Package: "./cmd/epp", Env: []string{"CGO_ENABLED=0"},
				LDFlags: "-s -w -X " + LLMDRouterModule + "/version.CommitSHA=" + LLMDRouterCommit +
					" -X " + LLMDRouterModule + "/version.BuildRef=" + LLMDRouterVersion},
			{Name: LLMDConfigsArtifact, Kind: KindSnapshotFiles, Files: []string{"deploy/config/*.yaml"}},
			{Name: CRDsArtifact, Kind: KindSnapshotFiles, Files: []string{"config/crd/bases/*.yaml"}},
		},
	},
	// llm-d-inference-sim, the vLLM simulator of the llm-d project: the model servers of the
	// `make interop-sim` run (conformance/simfleet starts one per network namespace). It has no cgo
	// of its own; its tokenizer calls huggingface.co only for a model name that exists there,
	// which --force-dummy-tokenizer turns off (pkg/tokenizer/tokenizer.go, New).
	SimTool: {
		Name: SimTool, Version: SimVersion,
		Description: "the vLLM simulator (cmd/llm-d-inference-sim) of " + SimModule + " " + SimVersion,
		Artifacts: []Artifact{
			{Name: SimBinary, Package: SimModule + "/cmd/llm-d-inference-sim", LDFlags: "-s -w"},
		},
	},
}

// LLMDRouterTool is the Tools key of llm-d-router (llm-d's EPP since GIE v1.6.0), built from
// the source snapshot LLMDRouterSnapshot (the module proxy refuses the module at every tag);
// cache llmd-router-v0.10.0/.
const (
	LLMDRouterTool     = "llmd-router"
	LLMDRouterModule   = "github.com/llm-d/llm-d-router"
	LLMDRouterVersion  = "v0.10.0"
	LLMDRouterCommit   = "71f4f0999f95b96c49a9d0c4afbd18dfdb943c26"
	LLMDRouterSnapshot = "llm-d-router-" + LLMDRouterVersion + ".tar.gz"
	LLMDRouterBinary   = "epp"
)

// GIE162Tool is the Tools key of the GIE v1.6.2 build (cmd/lwepp with the FULL_DUPLEX_STREAMED
// fixes, GIE #3028 and #3033), and GIE162Version its version.
const (
	GIE162Tool    = "gie-v1.6.2"
	GIE162Version = "v1.6.2"
)

// LLMDConfigsArtifact is the directory of llm-d-router's shipped EndpointPickerConfigs
// (deploy/config/*.yaml of its source snapshot).
const LLMDConfigsArtifact = "configs"

// SimTool is the Tools key of llm-d-inference-sim (module tools/sim-v0.10.2, cache sim-v0.10.2/),
// SimModule and SimVersion the pinned upstream module, SimBinary its one artifact.
const (
	SimTool    = "sim"
	SimModule  = "github.com/llm-d/llm-d-inference-sim"
	SimVersion = "v0.10.2"
	SimBinary  = "llm-d-inference-sim"
)

// GIE160Tool is the Tools key of the GIE v1.6.0 build (cmd/lwepp), and GIE160Version its version.
const (
	GIE160Tool    = "gie-v1.6.0"
	GIE160Version = "v1.6.0"
)

// Names lists the tool names, sorted.
func Names() []string {
	out := make([]string, 0, len(Tools))
	for n := range Tools {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the named tool; the error lists the known names.
func Lookup(name string) (Tool, error) {
	t, ok := Tools[name]
	if !ok {
		return Tool{}, fmt.Errorf("unknown tool %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return t, nil
}

// CacheRoot is ${XDG_CACHE_HOME:-~/.cache}/eppkit, or $EPPKIT_TOOLS_CACHE when set.
func CacheRoot() (string, error) {
	if d := os.Getenv("EPPKIT_TOOLS_CACHE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "eppkit"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("tools cache: neither XDG_CACHE_HOME nor a home directory: %w", err)
	}
	return filepath.Join(home, ".cache", "eppkit"), nil
}

// CacheDir is the directory of one tool's artifacts: <CacheRoot>/<name>-<version>.
func CacheDir(t Tool) (string, error) {
	root, err := CacheRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, t.Name+"-"+t.Version), nil
}

// ErrNotBuilt is wrapped by Path when the artifact is not in the cache.
var ErrNotBuilt = errors.New("not built")

// Path returns the cached path of tool/artifact. When it is missing the error wraps ErrNotBuilt
// and names the command that builds it.
func Path(tool, artifact string) (string, error) {
	t, err := Lookup(tool)
	if err != nil {
		return "", err
	}
	a, ok := t.Artifact(artifact)
	if !ok {
		return "", fmt.Errorf("tool %s has no artifact %q (have %s)", tool, artifact, strings.Join(artifactNames(t), ", "))
	}
	dir, err := CacheDir(t)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, a.Name)
	if !cached(a, p) {
		return p, fmt.Errorf("%s %s of %s-%s is %w (run `eppkit tools build %s --only %s` or `make tools`): %s",
			kindWord(a), a.Name, t.Name, t.Version, ErrNotBuilt, tool, a.Name, p)
	}
	return p, nil
}

// cached reports whether artifact a is complete at path p: the binary exists, or the CRD
// directory holds every file the artifact lists (a cache extracted before a file was added to
// the list is extracted again).
func cached(a Artifact, p string) bool {
	if _, err := os.Stat(p); err != nil {
		return false
	}
	switch a.Kind {
	case KindSnapshotSource:
		_, err := os.Stat(filepath.Join(filepath.Dir(p), sourceStamp))
		return err == nil
	case KindSnapshotFiles:
		entries, err := os.ReadDir(p)
		return err == nil && len(entries) > 0
	case KindCRDs:
	default:
		return true
	}
	for _, f := range a.Files {
		if _, err := os.Stat(filepath.Join(p, filepath.Base(f))); err != nil {
			return false
		}
	}
	return true
}

func kindWord(a Artifact) string {
	switch a.Kind {
	case KindCRDs, KindSnapshotSource, KindSnapshotFiles:
		return "directory"
	case KindNodeImage:
		return "image stamp"
	}
	return "binary"
}

func artifactNames(t Tool) []string {
	var out []string
	for _, a := range t.Artifacts {
		out = append(out, a.Name)
	}
	return out
}

// BuildOptions select what Build does.
type BuildOptions struct {
	// RepoRoot holds tools/ (FindRepoRoot finds it from the working directory).
	RepoRoot string
	// Only names the artifacts to build; empty = every non-optional artifact.
	Only []string
	// All adds the optional artifacts.
	All bool
	// Force rebuilds artifacts that are already cached.
	Force bool
	// GoCommand is the go binary ("" = "go" on PATH).
	GoCommand string
	// Parallelism is go build -p (0 = the go default).
	Parallelism int
	// Log receives progress lines and the go command's output (nil = discarded).
	Log io.Writer
	// Engine is the container engine CLI a KindNodeImage artifact is loaded into ("" = docker).
	Engine string
}

// Result says what happened to one artifact.
type Result struct {
	Artifact string
	Path     string
	// Skipped is true when the artifact was already cached.
	Skipped bool
	// Duration is the wall time of the build or extraction (0 when skipped).
	Duration time.Duration
	// Note says why the artifact was not built when it did not come from the cache ("from
	// KUBEBUILDER_ASSETS=<dir>, v1.34.1").
	Note string
}

// Build produces the selected artifacts of the tool into its cache directory, skipping those
// already present (unless Force). Each artifact is written to a temporary name and renamed, so an
// interrupted build never leaves a truncated binary in the cache. Errors name the artifact and
// include the go command's failure.
func Build(ctx context.Context, tool string, opts BuildOptions) ([]Result, error) {
	t, err := Lookup(tool)
	if err != nil {
		return nil, err
	}
	sel, err := selectArtifacts(t, opts)
	if err != nil {
		return nil, err
	}
	dir, err := CacheDir(t)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tools cache: %w", err)
	}
	logw := opts.Log
	if logw == nil {
		logw = io.Discard
	}
	goCmd := opts.GoCommand
	if goCmd == "" {
		goCmd = "go"
	}
	if t.Snapshot != nil {
		return buildSnapshotTool(ctx, t, sel, dir, goCmd, opts, logw)
	}
	modDir := filepath.Join(opts.RepoRoot, t.Dir())
	if _, err := os.Stat(filepath.Join(modDir, "go.mod")); err != nil {
		return nil, fmt.Errorf("tool %s: module %s not found (is --repo-root the eppkit checkout?): %w", t.Name, modDir, err)
	}
	// The control plane (the k8s tool's default artifacts, no --only or --all) comes from
	// KUBEBUILDER_ASSETS when that holds a supported kube-apiserver and etcd (EnvtestAssets).
	var envtest map[string]Result
	if t.Name == "k8s" && len(opts.Only) == 0 && !opts.All {
		if b, set, err := EnvtestAssets(ctx); err != nil {
			fmt.Fprintf(logw, "%v; building the pinned %s instead\n", err, t.Version)
		} else if set {
			envtest = map[string]Result{
				"kube-apiserver": {Artifact: "kube-apiserver", Path: b.APIServer, Skipped: true, Note: b.From + ", " + b.APIServerVersion},
				"etcd":           {Artifact: "etcd", Path: b.Etcd, Skipped: true, Note: b.From + ", " + b.EtcdVersion},
			}
		}
	}
	var results []Result
	for _, a := range sel {
		if r, ok := envtest[a.Name]; ok {
			results = append(results, r)
			continue
		}
		dst := filepath.Join(dir, a.Name)
		if a.Kind == KindNodeImage {
			start := time.Now()
			skipped, err := buildKindNodeImage(ctx, t, opts, dst, logw)
			if err != nil {
				return results, fmt.Errorf("tool %s-%s, artifact %s: %w", t.Name, t.Version, a.Name, err)
			}
			r := Result{Artifact: a.Name, Path: dst, Skipped: skipped}
			if !skipped {
				r.Duration = time.Since(start)
			}
			results = append(results, r)
			continue
		}
		if cached(a, dst) && !opts.Force {
			results = append(results, Result{Artifact: a.Name, Path: dst, Skipped: true})
			continue
		}
		start := time.Now()
		switch a.Kind {
		case KindBinary:
			fmt.Fprintf(logw, "building %s-%s %s (%s) ...\n", t.Name, t.Version, a.Name, a.Package)
			err = buildBinary(ctx, goCmd, filepath.Join(modDir, a.Subdir), a, dst, opts.Parallelism, logw)
		case KindCRDs:
			fmt.Fprintf(logw, "extracting %s-%s %s from %s@%s ...\n", t.Name, t.Version, a.Name, a.Module, a.ModuleVersion)
			err = extractFiles(ctx, goCmd, modDir, a, dst)
		}
		if err != nil {
			return results, fmt.Errorf("tool %s-%s, artifact %s: %w", t.Name, t.Version, a.Name, err)
		}
		results = append(results, Result{Artifact: a.Name, Path: dst, Duration: time.Since(start)})
	}
	return results, nil
}

func selectArtifacts(t Tool, opts BuildOptions) ([]Artifact, error) {
	if len(opts.Only) == 0 {
		var out []Artifact
		for _, a := range t.Artifacts {
			if !a.Optional || opts.All {
				out = append(out, a)
			}
		}
		return out, nil
	}
	var out []Artifact
	for _, n := range opts.Only {
		a, ok := t.Artifact(n)
		if !ok {
			return nil, fmt.Errorf("--only: tool %s has no artifact %q (have %s)", t.Name, n, strings.Join(artifactNames(t), ", "))
		}
		out = append(out, a)
	}
	return out, nil
}

func buildBinary(ctx context.Context, goCmd, modDir string, a Artifact, dst string, parallelism int, logw io.Writer) error {
	tmp := filepath.Join(filepath.Dir(dst), "."+a.Name+".tmp")
	_ = os.Remove(tmp)
	args := []string{"build", "-trimpath", "-o", tmp}
	if parallelism > 0 {
		args = append(args, fmt.Sprintf("-p=%d", parallelism))
	}
	if len(a.Tags) > 0 {
		args = append(args, "-tags="+strings.Join(a.Tags, ","))
	}
	ldflags := a.LDFlags
	if a.VersionVar != "" {
		v, err := packageModuleVersion(ctx, goCmd, modDir, a.Package)
		if err != nil {
			return err
		}
		if a.VersionTrimV {
			v = strings.TrimPrefix(v, "v")
		}
		ldflags = strings.TrimSpace(ldflags + " -X " + a.VersionVar + "=" + v)
	}
	if ldflags != "" {
		args = append(args, "-ldflags="+ldflags)
	}
	args = append(args, a.Package)
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = modDir
	// The tools modules are separate from the main module; a GOFLAGS=-mod=vendor or a GOWORK
	// from the caller's environment must not leak into them.
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false"), a.Env...)
	cmd.Stdout, cmd.Stderr = logw, logw
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("go %s (in %s): %w", strings.Join(args, " "), modDir, err)
	}
	return os.Rename(tmp, dst)
}

// packageModuleVersion is the version of the module providing pkg in modDir's module graph.
func packageModuleVersion(ctx context.Context, goCmd, modDir, pkg string) (string, error) {
	cmd := exec.CommandContext(ctx, goCmd, "list", "-f", "{{.Module.Version}}", pkg)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s (in %s): %w", pkg, modDir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// extractFiles copies a.Files out of the module a.Module@a.ModuleVersion, as the Go toolchain
// downloads it (the module zip, verified against the tool module's go.sum), into dst.
func extractFiles(ctx context.Context, goCmd, modDir string, a Artifact, dst string) error {
	cmd := exec.CommandContext(ctx, goCmd, "mod", "download", "-json", a.Module+"@"+a.ModuleVersion)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go mod download %s@%s: %w: %s", a.Module, a.ModuleVersion, err, strings.TrimSpace(stderr.String()))
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return fmt.Errorf("go mod download -json: %w", err)
	}
	if info.Error != "" || info.Dir == "" {
		return fmt.Errorf("go mod download %s@%s: %s", a.Module, a.ModuleVersion, info.Error)
	}
	tmp := filepath.Join(filepath.Dir(dst), "."+a.Name+".tmp")
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, f := range a.Files {
		b, err := os.ReadFile(filepath.Join(info.Dir, filepath.FromSlash(f)))
		if err != nil {
			_ = os.RemoveAll(tmp)
			return fmt.Errorf("%s@%s: %w", a.Module, a.ModuleVersion, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, filepath.Base(f)), b, 0o644); err != nil {
			_ = os.RemoveAll(tmp)
			return err
		}
	}
	_ = os.RemoveAll(dst)
	return os.Rename(tmp, dst)
}

// FindRepoRoot walks up from dir to the first directory holding tools/ with a go.mod of a tool
// module beside a go.mod (the eppkit checkout).
func FindRepoRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	probe := filepath.Join(Tools["k8s"].Dir(), "go.mod")
	for {
		if _, err := os.Stat(filepath.Join(d, probe)); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no eppkit checkout (with %s) at or above %s; pass --repo-root", probe, dir)
		}
		d = parent
	}
}
