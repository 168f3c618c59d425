package toolcache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// EnvtestAssetsEnv is the environment variable through which controller-runtime's envtest (and
// `setup-envtest use -p path`) names a directory holding kube-apiserver, etcd and kubectl. When
// it is set, the apiserver endpoint source uses the kube-apiserver and etcd found there instead
// of building the pinned ones, provided their versions are in the supported ranges below.
const EnvtestAssetsEnv = "KUBEBUILDER_ASSETS"

// The versions of a KUBEBUILDER_ASSETS control plane the apiserver source accepts, as
// [min, max] of minor versions. kube-apiserver: v1.29 (CEL validation rules, which GIE's
// InferencePool CRD carries in x-kubernetes-validations, are GA from v1.29) up to v1.37 (the
// pinned build, tools/k8s-v1.37.2; a newer one is refused until it has been tried). etcd: the
// v3.5 and v3.6 lines, which those Kubernetes releases support.
var (
	SupportedAPIServer = VersionRange{Major: 1, MinMinor: 29, MaxMinor: 37}
	SupportedEtcd      = VersionRange{Major: 3, MinMinor: 5, MaxMinor: 6}
)

// VersionRange is major.MinMinor to major.MaxMinor, any patch.
type VersionRange struct{ Major, MinMinor, MaxMinor int }

// String renders the range as "v1.29 to v1.37".
func (r VersionRange) String() string {
	return fmt.Sprintf("v%d.%d to v%d.%d", r.Major, r.MinMinor, r.Major, r.MaxMinor)
}

// Contains reports whether the version "vMAJOR.MINOR.PATCH" (leading v optional) is in r.
func (r VersionRange) Contains(v string) bool {
	major, minor, ok := majorMinor(v)
	return ok && major == r.Major && minor >= r.MinMinor && minor <= r.MaxMinor
}

var semverRE = regexp.MustCompile(`v?(\d+)\.(\d+)\.(\d+)`)

func majorMinor(v string) (int, int, bool) {
	m := semverRE.FindStringSubmatch(v)
	if m == nil {
		return 0, 0, false
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return major, minor, true
}

// ControlPlaneBinaries are the kube-apiserver and etcd a control plane runs, with their versions
// and where they came from.
type ControlPlaneBinaries struct {
	APIServer, Etcd               string
	APIServerVersion, EtcdVersion string
	// From is "KUBEBUILDER_ASSETS=<dir>" or "the tools cache".
	From string
}

// String is one line for a run's log: which binaries, which versions, from where.
func (b ControlPlaneBinaries) String() string {
	return fmt.Sprintf("kube-apiserver %s (%s) and etcd %s (%s), from %s", b.APIServerVersion, b.APIServer,
		b.EtcdVersion, b.Etcd, b.From)
}

// ErrEnvtestUnsupported is wrapped by EnvtestAssets when KUBEBUILDER_ASSETS is set but does not
// hold a usable kube-apiserver and etcd in the supported ranges.
var ErrEnvtestUnsupported = errors.New("KUBEBUILDER_ASSETS not usable")

// EnvtestAssets reads KUBEBUILDER_ASSETS. It returns ok=false and no error when the variable is
// unset or empty. When it is set, it returns the kube-apiserver and etcd found in that directory
// with the versions they print (`--version`), or an error wrapping ErrEnvtestUnsupported that
// names the directory, what was found and the supported versions (a binary missing, a version
// that does not parse or is outside SupportedAPIServer / SupportedEtcd).
func EnvtestAssets(ctx context.Context) (ControlPlaneBinaries, bool, error) {
	dir := strings.TrimSpace(os.Getenv(EnvtestAssetsEnv))
	if dir == "" {
		return ControlPlaneBinaries{}, false, nil
	}
	b := ControlPlaneBinaries{APIServer: filepath.Join(dir, "kube-apiserver"), Etcd: filepath.Join(dir, "etcd"),
		From: EnvtestAssetsEnv + "=" + dir}
	var problems []string
	var err error
	if b.APIServerVersion, err = binaryVersion(ctx, b.APIServer); err != nil {
		problems = append(problems, err.Error())
	} else if !SupportedAPIServer.Contains(b.APIServerVersion) {
		problems = append(problems, fmt.Sprintf("kube-apiserver %s is not supported (supported: %s)", b.APIServerVersion, SupportedAPIServer))
	}
	if b.EtcdVersion, err = binaryVersion(ctx, b.Etcd); err != nil {
		problems = append(problems, err.Error())
	} else if !SupportedEtcd.Contains(b.EtcdVersion) {
		problems = append(problems, fmt.Sprintf("etcd %s is not supported (supported: %s)", b.EtcdVersion, SupportedEtcd))
	}
	if len(problems) > 0 {
		return b, true, fmt.Errorf("%w: %s=%s: %s", ErrEnvtestUnsupported, EnvtestAssetsEnv, dir, strings.Join(problems, "; "))
	}
	return b, true, nil
}

// binaryVersion runs `path --version` and returns the first vX.Y.Z it prints ("Kubernetes
// v1.37.2", "etcd Version: 3.6.11" → "v3.6.11").
func binaryVersion(ctx context.Context, path string) (string, error) {
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s: not found", path)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v", path, err)
	}
	m := semverRE.FindStringSubmatch(string(out))
	if m == nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return "", fmt.Errorf("%s --version printed no version (%q)", path, first)
	}
	return "v" + m[1] + "." + m[2] + "." + m[3], nil
}

// ControlPlane returns the kube-apiserver and etcd the apiserver endpoint source runs: those of
// KUBEBUILDER_ASSETS when it is set and supported, else the cached build of the k8s tool. When
// KUBEBUILDER_ASSETS is set but unsupported and the cache has the build, the cache is used and
// note says why; when neither is usable the error names both causes and the build command (it
// wraps ErrNotBuilt when the cache is the missing part).
func ControlPlane(ctx context.Context) (bins ControlPlaneBinaries, note string, err error) {
	env, set, envErr := EnvtestAssets(ctx)
	if set && envErr == nil {
		return env, "", nil
	}
	api, err1 := Path("k8s", "kube-apiserver")
	etcd, err2 := Path("k8s", "etcd")
	if err := errors.Join(err1, err2); err != nil {
		if envErr != nil {
			return ControlPlaneBinaries{}, "", fmt.Errorf("%v; and %w", envErr, err)
		}
		return ControlPlaneBinaries{}, "", err
	}
	bins = ControlPlaneBinaries{APIServer: api, Etcd: etcd, From: "the tools cache"}
	if bins.APIServerVersion, err = binaryVersion(ctx, api); err != nil {
		return ControlPlaneBinaries{}, "", err
	}
	if bins.EtcdVersion, err = binaryVersion(ctx, etcd); err != nil {
		return ControlPlaneBinaries{}, "", err
	}
	if envErr != nil {
		note = envErr.Error() + "; using the pinned build instead"
	}
	return bins, note, nil
}
