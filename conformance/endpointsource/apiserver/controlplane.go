// Package apiserver is the "apiserver" endpoint source of the conformance harness: a real
// kube-apiserver v1.37.2 and etcd v3.6.11 (built from tools/k8s-v1.37.2 by `eppkit tools build k8s`)
// started envtest-style on loopback with sigs.k8s.io/controller-runtime/pkg/envtest, the
// InferencePool, InferenceObjective, InferenceModelRewrite and InferencePoolImport CRDs of the
// pinned GIE module installed (extracted by
// `eppkit tools build gie --only crds`), and an InferencePool plus one Ready Pod per fleet
// endpoint whose status.podIP is the endpoint's IP. A target EPP discovers the pool through the
// kubeconfig this package writes, the way it would in a cluster.
//
// Nothing runs the Pods: there is no kubelet, scheduler or controller manager. The Pods are bound
// to a fake node by spec.nodeName and their status (phase Running, podIP, Ready=True) is written
// through the status subresource, which is what an EPP reads (upstream
// gateway-api-inference-extension pkg/epp/util/pod/pod.go IsPodReady: the Ready condition and no
// deletionTimestamp).
package apiserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/eppkit/eppkit/internal/logtail"
	"github.com/eppkit/eppkit/internal/toolcache"
	"github.com/eppkit/eppkit/manifests"
)

// ControlPlaneOptions configure StartControlPlane. Zero values take the defaults noted per field.
type ControlPlaneOptions struct {
	// APIServerPath and EtcdPath are the binaries ("" = the cached k8s-v1.37.2 build; see
	// `eppkit tools path k8s kube-apiserver`).
	APIServerPath, EtcdPath string
	// CRDDir holds the CRD YAML files to install ("" = the cached gie-v1.5.0 crds directory).
	CRDDir string
	// Dir is where the kubeconfig and the control plane logs (kube-apiserver.log, etcd.log) go
	// ("" = a new temporary directory, removed by Stop unless KeepDir).
	Dir string
	// KeepDir keeps Dir after Stop (its logs are useful after a failed run).
	KeepDir bool
	// StartTimeout bounds the start of each process (default 60s: a cold kube-apiserver on a busy
	// 2-core machine takes 10-20s). StopTimeout bounds each graceful stop (default 20s) before
	// the process group is killed.
	StartTimeout, StopTimeout time.Duration
}

// ControlPlane is a running etcd + kube-apiserver with the CRDs installed and established.
type ControlPlane struct {
	// RestConfig authenticates as an admin (group system:masters) with a client certificate.
	RestConfig *rest.Config
	// KubeconfigPath is a kubeconfig file for RestConfig (certificates inlined).
	KubeconfigPath string
	// Client is a controller-runtime client (core types; use unstructured for the GIE kinds).
	Client client.Client
	// Clientset is a client-go clientset.
	Clientset kubernetes.Interface
	// Dir holds the kubeconfig and the logs.
	Dir string
	// Binaries says which kube-apiserver and etcd run, their versions and where they came from
	// (KUBEBUILDER_ASSETS or the tools cache).
	Binaries string

	env       *envtest.Environment
	logs      []*os.File
	removeDir bool
	stopOnce  sync.Once
	stopErr   error
}

// ErrBinariesMissing is wrapped by StartControlPlane when the kube-apiserver, etcd or the CRDs
// are not in the tools cache; tests skip on it.
var ErrBinariesMissing = errors.New("control plane binaries or CRDs not built")

// ResolvePaths fills the "" paths of opts: kube-apiserver and etcd from KUBEBUILDER_ASSETS when
// it holds supported versions, else from the tools cache (toolcache.ControlPlane), and the CRDs
// from the tools cache. It also returns one line saying which binaries were chosen and why, for
// the run's log. The error wraps ErrBinariesMissing and names the build command when something
// is missing.
func ResolvePaths(opts ControlPlaneOptions) (ControlPlaneOptions, string, error) {
	var missing []string
	desc := "kube-apiserver " + opts.APIServerPath + " and etcd " + opts.EtcdPath + " (given)"
	if opts.APIServerPath == "" || opts.EtcdPath == "" {
		bins, note, err := toolcache.ControlPlane(context.Background())
		if err != nil {
			missing = append(missing, err.Error())
		} else {
			if opts.APIServerPath == "" {
				opts.APIServerPath = bins.APIServer
			}
			if opts.EtcdPath == "" {
				opts.EtcdPath = bins.Etcd
			}
			desc = bins.String()
			if note != "" {
				desc += " (" + note + ")"
			}
		}
	}
	if opts.CRDDir == "" {
		p, err := toolcache.Path("gie", toolcache.CRDsArtifact)
		if err != nil {
			missing = append(missing, err.Error())
		}
		opts.CRDDir = p
	}
	if len(missing) > 0 {
		return opts, "", fmt.Errorf("%w: %s (build them with `eppkit tools build k8s && eppkit tools build gie --only crds`, or `make tools`; "+
			"or point %s at a setup-envtest directory with kube-apiserver %s and etcd %s)",
			ErrBinariesMissing, strings.Join(missing, "; "), toolcache.EnvtestAssetsEnv, toolcache.SupportedAPIServer, toolcache.SupportedEtcd)
	}
	return opts, desc, nil
}

// writeLLMDCRDs writes manifests.LLMDCRDs into dir.
func writeLLMDCRDs(dir string) error {
	crds, err := manifests.LLMDCRDs()
	if err != nil {
		return fmt.Errorf("apiserver: llm-d.ai CRDs: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("apiserver: llm-d.ai CRDs: %w", err)
	}
	for name, b := range crds {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("apiserver: llm-d.ai CRDs: %w", err)
		}
	}
	return nil
}

// ctrlLogOnce sets controller-runtime's logger once per process (StartControlPlane).
var ctrlLogOnce sync.Once

// StartControlPlane starts etcd and kube-apiserver on free loopback ports, installs the CRDs of
// opts.CRDDir and waits until they are established. On failure it stops what it started and
// the error carries the tail of the kube-apiserver log. ctx bounds the start only; Stop ends the
// processes.
func StartControlPlane(ctx context.Context, opts ControlPlaneOptions) (*ControlPlane, error) {
	// envtest's client and the harness's own clients log through controller-runtime's
	// process-wide logger, which prints a warning with a stack trace 30 s into a process that
	// never set it; the harness has nothing to say through it.
	ctrlLogOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) })
	opts, binaries, err := ResolvePaths(opts)
	if err != nil {
		return nil, err
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 20 * time.Second
	}
	cp := &ControlPlane{Dir: opts.Dir, Binaries: binaries}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "eppkit-apiserver-"); err != nil {
			return nil, fmt.Errorf("apiserver: temp dir: %w", err)
		}
		cp.removeDir = !opts.KeepDir
	} else if err := os.MkdirAll(cp.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("apiserver: Dir: %w", err)
	}
	apiLog, err := cp.openLog("kube-apiserver.log")
	if err != nil {
		return nil, cp.fail(err)
	}
	etcdLog, err := cp.openLog("etcd.log")
	if err != nil {
		return nil, cp.fail(err)
	}

	// llm-d-router v0.10.0's llm-d.ai InferenceObjective and InferenceModelRewrite CRDs
	// (manifests/k8s/crds-llmd), installed beside GIE's: EPPs that read llm-d.ai find it, the
	// others the legacy group (PutObjective and PutModelRewrite write both).
	llmdDir := filepath.Join(cp.Dir, "crds-llmd")
	if err := writeLLMDCRDs(llmdDir); err != nil {
		return nil, cp.fail(err)
	}
	useExisting := false
	env := &envtest.Environment{
		// Never USE_EXISTING_CLUSTER from the environment: this source owns its control plane.
		UseExistingCluster:       &useExisting,
		CRDDirectoryPaths:        []string{opts.CRDDir, llmdDir},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  opts.StopTimeout,
	}
	env.CRDInstallOptions.MaxTime = opts.StartTimeout
	api := env.ControlPlane.GetAPIServer()
	api.Path = opts.APIServerPath
	api.Out, api.Err = apiLog, apiLog
	// envtest's default authorization mode (RBAC) stays: kube-apiserver v1.37.2 turns anonymous
	// auth off under AlwaysAllow ("AnonymousAuth is not allowed with the AlwaysAllow authorizer"),
	// and envtest's readiness probe of /healthz is anonymous, so AlwaysAllow never becomes ready.
	// The harness and the target use the admin identity (system:masters) either way.
	env.ControlPlane.Etcd = &envtest.Etcd{}
	env.ControlPlane.Etcd.Path = opts.EtcdPath
	env.ControlPlane.Etcd.Out, env.ControlPlane.Etcd.Err = etcdLog, etcdLog
	cp.env = env

	type started struct {
		cfg *rest.Config
		err error
	}
	done := make(chan started, 1)
	go func() {
		cfg, err := env.Start()
		done <- started{cfg, err}
	}()
	var res started
	select {
	case res = <-done:
	case <-ctx.Done():
		// env.Start has its own timeouts; wait for it so Stop sees the processes it started.
		res = <-done
		if res.err == nil {
			res.err = ctx.Err()
		}
	}
	if res.err != nil {
		return nil, cp.fail(fmt.Errorf("apiserver: start control plane: %w", res.err))
	}
	cp.RestConfig = res.cfg
	cp.KubeconfigPath = filepath.Join(cp.Dir, "kubeconfig")
	if err := os.WriteFile(cp.KubeconfigPath, env.KubeConfig, 0o600); err != nil {
		return nil, cp.fail(fmt.Errorf("apiserver: write kubeconfig: %w", err))
	}
	if cp.Client, err = client.New(res.cfg, client.Options{}); err != nil {
		return nil, cp.fail(fmt.Errorf("apiserver: client: %w", err))
	}
	if cp.Clientset, err = kubernetes.NewForConfig(res.cfg); err != nil {
		return nil, cp.fail(fmt.Errorf("apiserver: clientset: %w", err))
	}
	return cp, nil
}

func (cp *ControlPlane) openLog(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(cp.Dir, name))
	if err != nil {
		return nil, fmt.Errorf("apiserver: log file: %w", err)
	}
	cp.logs = append(cp.logs, f)
	return f, nil
}

// fail stops what was started and returns err with the kube-apiserver and etcd log tails.
func (cp *ControlPlane) fail(err error) error {
	tail := cp.LogTail(30)
	_ = cp.Stop()
	if tail == "" {
		return err
	}
	return fmt.Errorf("%w\n%s", err, tail)
}

// LogTail returns the last n lines of the kube-apiserver and etcd logs, each under a header.
func (cp *ControlPlane) LogTail(n int) string {
	var b strings.Builder
	for _, name := range []string{"kube-apiserver.log", "etcd.log"} {
		lines := logtail.Lines(filepath.Join(cp.Dir, name), n)
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(&b, "--- last %d lines of %s ---\n%s\n", len(lines), filepath.Join(cp.Dir, name), strings.Join(lines, "\n"))
	}
	return b.String()
}

// Stop stops kube-apiserver and etcd (SIGTERM to each, then a kill after StopTimeout; envtest
// starts each in its own process group), closes the logs and removes Dir unless it was given or
// KeepDir was set. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		if cp.env != nil {
			cp.stopErr = cp.env.Stop()
		}
		for _, f := range cp.logs {
			_ = f.Close()
		}
		if cp.removeDir && cp.stopErr == nil {
			_ = os.RemoveAll(cp.Dir)
		}
	})
	return cp.stopErr
}
