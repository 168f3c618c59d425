// Package local is the "local" cluster provider (DESIGN.md test tier 5): a real Kubernetes
// control plane on this machine without a container engine or privileges. etcd v3.6.11 and
// kube-apiserver v1.37.2 are started envtest-style by conformance/endpointsource/apiserver (with the GIE CRDs
// installed), kube-controller-manager and kube-scheduler v1.37.2 beside them (all built from
// tools/k8s-v1.37.2: `eppkit tools build k8s --all`), and the process kubelet of fakes/kubelet
// (run as `eppkit cluster kubelet`) registers one node whose pods run as local processes on
// IPs of a pod CIDR local to this machine (198.18.0.0/24 by default, made local with one
// `ip route add local 198.18.0.0/24 dev lo`, which needs CAP_NET_ADMIN; the API server refuses
// loopback addresses in EndpointSlices, so 127.x pod IPs would leave Services without
// endpoints). Deployments, ReplicaSets, scheduling, garbage collection and
// EndpointSlices are the real controllers'; Services are not proxied.
//
// Create or reuse: every process is started detached and recorded (pid + start time) in
// <StateDir>/state.json, so a second Create — from another process too — finds the cluster
// running and reuses it in about a second; a kubelet built from a different eppkit binary is
// restarted, and dead controller-manager/scheduler are restarted. Destroy stops everything and
// removes the state directory. One process at a time may use a cluster (an flock on
// <StateDir>.lock, held until the process exits).
package local

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/eppkit/eppkit/conformance/cluster"
	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
	"github.com/eppkit/eppkit/fakes/kubelet"
	"github.com/eppkit/eppkit/internal/logtail"
	"github.com/eppkit/eppkit/internal/toolcache"
)

// Defaults of Options.
const (
	// DefaultName names the cluster and its state directory.
	DefaultName = "eppkit"
	// DefaultStartTimeout bounds Create.
	DefaultStartTimeout = 3 * time.Minute
)

// Controllers are the kube-controller-manager controllers the local cluster runs: what
// Deployments, Services and namespaces need. Not run: service-account tokens (the kubelet hands
// pods an admin kubeconfig instead), node IPAM (the kubelet sets its own podCIDR), CSR signing
// and approval (no kubelet certificates), cloud controllers.
var Controllers = []string{
	"deployment-controller", "replicaset-controller", "endpointslice-controller",
	"endpointslice-mirroring-controller", "garbage-collector-controller", "namespace-controller",
	"serviceaccount-controller", "node-lifecycle-controller", "pod-garbage-collector-controller",
	"disruption-controller",
}

// Options configure New. Eppkit is required; "" paths come from the tools cache.
type Options struct {
	// Name of the cluster (default DefaultName); the state lives in StateDir.
	Name string
	// StateDir holds state.json, the kubeconfig, certificates, etcd data and every log
	// (default ${XDG_CACHE_HOME:-~/.cache}/eppkit/clusters/<Name>).
	StateDir string
	// Eppkit is the eppkit binary: it runs the kubelet (`eppkit cluster kubelet`) and is what
	// the image "eppkit" (any registry or tag, e.g. eppkit:dev) runs.
	Eppkit string
	// Images maps further images to local binaries (see kubelet.MatchImage), e.g. the upstream
	// EPP v1.5.0 from `eppkit tools path gie epp`.
	Images map[string]string
	// PodCIDR is the node's pod range (default kubelet.DefaultPodCIDR).
	PodCIDR string
	// Binaries and CRDs; "" = the tools cache (k8s-v1.37.2, gie-v1.5.0 crds).
	APIServerPath, EtcdPath, ControllerManagerPath, SchedulerPath, CRDDir string
	// StartTimeout bounds Create (default DefaultStartTimeout).
	StartTimeout time.Duration
	// Logger receives progress (default: discard).
	Logger *slog.Logger
}

// Provider is the local cluster.Provider.
type Provider struct {
	opts Options
	log  *slog.Logger
	lock *os.File
	st   *state
	// routeAdded: a replaced cluster had added the pod CIDR's route (kept for Destroy).
	routeAdded bool
}

var _ cluster.Provider = (*Provider)(nil)

// state is <StateDir>/state.json.
type state struct {
	Name       string            `json:"name"`
	Kubeconfig string            `json:"kubeconfig"`
	Server     string            `json:"server"`
	Procs      map[string]proc   `json:"procs"`
	Eppkit     fileID            `json:"eppkit"`
	Images     map[string]string `json:"images"`
	PodCIDR    string            `json:"podCIDR"`
	// RouteAdded is true when Create added the pod CIDR's local route (Destroy removes it).
	RouteAdded bool      `json:"routeAdded"`
	Created    time.Time `json:"created"`
}

// fileID identifies a binary's build: a rebuilt eppkit means the kubelet must restart.
type fileID struct {
	Path  string    `json:"path"`
	Size  int64     `json:"size"`
	MTime time.Time `json:"mtime"`
}

func identify(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	return fileID{Path: path, Size: fi.Size(), MTime: fi.ModTime().UTC()}, nil
}

// Component names (keys of state.Procs and log file stems).
const (
	compEtcd      = "etcd"
	compAPIServer = "kube-apiserver"
	compKCM       = "kube-controller-manager"
	compScheduler = "kube-scheduler"
	compKubelet   = "kubelet"
)

// New validates opts and fills the defaults. It starts nothing.
func New(opts Options) (*Provider, error) {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if strings.ContainsAny(opts.Name, "/\\ ") {
		return nil, fmt.Errorf("local provider: Name %q must not contain slashes or spaces", opts.Name)
	}
	if opts.Eppkit == "" {
		return nil, errors.New("local provider: Eppkit (the eppkit binary path) is required: it runs the kubelet and the eppkit image")
	}
	abs, err := filepath.Abs(opts.Eppkit)
	if err != nil {
		return nil, fmt.Errorf("local provider: Eppkit: %w", err)
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("local provider: Eppkit: %w (run `make build`)", err)
	}
	opts.Eppkit = abs
	if opts.StateDir == "" {
		root, err := toolcache.CacheRoot()
		if err != nil {
			return nil, fmt.Errorf("local provider: StateDir: %w", err)
		}
		opts.StateDir = filepath.Join(root, "clusters", opts.Name)
	}
	if opts.StateDir, err = filepath.Abs(opts.StateDir); err != nil {
		return nil, fmt.Errorf("local provider: StateDir: %w", err)
	}
	if opts.PodCIDR == "" {
		opts.PodCIDR = kubelet.DefaultPodCIDR
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	for img, p := range opts.Images {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("local provider: Images[%q]: %q must be an absolute path", img, p)
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{opts: opts, log: log}, nil
}

// Name implements cluster.Provider.
func (p *Provider) Name() string { return "local" }

// StateDir is where the cluster's state, kubeconfig and logs live.
func (p *Provider) StateDir() string { return p.opts.StateDir }

// KubeconfigPath implements cluster.Provider.
func (p *Provider) KubeconfigPath() string { return filepath.Join(p.opts.StateDir, "kubeconfig") }

// images is the kubelet's image map: "eppkit" → the eppkit binary, plus Options.Images.
func (p *Provider) images() map[string]string {
	m := map[string]string{kubelet.EppkitImage: p.opts.Eppkit}
	for k, v := range p.opts.Images {
		m[k] = v
	}
	return m
}

// LoadImage implements cluster.Provider: nothing is pulled; the image must map to a binary.
func (p *Provider) LoadImage(_ context.Context, image string) error {
	if _, ok := kubelet.MatchImage(p.images(), image); ok {
		return nil
	}
	keys := make([]string, 0)
	for k := range p.images() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return fmt.Errorf("local provider: image %q maps to no local binary (known: %s; add one with Options.Images / --image NAME=PATH)",
		image, strings.Join(keys, ", "))
}

// acquire takes the cluster's lock (<StateDir>.lock) for the life of this process.
func (p *Provider) acquire() error {
	if p.lock != nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p.opts.StateDir), 0o755); err != nil {
		return fmt.Errorf("local provider: %w", err)
	}
	f, err := os.OpenFile(p.opts.StateDir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("local provider: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(p.opts.StateDir + ".lock")
		f.Close()
		return fmt.Errorf("local provider: cluster %s is in use by another process (pid %s in %s.lock); wait for it or use another cluster name",
			p.opts.Name, strings.TrimSpace(string(b)), p.opts.StateDir)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	p.lock = f
	return nil
}

func (p *Provider) statePath() string { return filepath.Join(p.opts.StateDir, "state.json") }

func (p *Provider) loadState() *state {
	b, err := os.ReadFile(p.statePath())
	if err != nil {
		return nil
	}
	var st state
	if json.Unmarshal(b, &st) != nil || st.Procs == nil {
		return nil
	}
	return &st
}

func (p *Provider) saveState() error {
	b, err := json.MarshalIndent(p.st, "", "  ")
	if err != nil {
		return err
	}
	tmp := p.statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p.statePath())
}

// Create implements cluster.Provider: reuse the running cluster when every recorded process is
// alive and the API server answers (restarting the kubelet if the eppkit binary or the image map
// changed, and a dead controller-manager or scheduler), else start a new one from scratch.
func (p *Provider) Create(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	if err := p.acquire(); err != nil {
		return err
	}
	start := time.Now()
	if st := p.loadState(); st != nil {
		p.st = st
		reused, err := p.reuse(ctx)
		if err == nil && reused {
			p.log.Info("reusing the local cluster", "state", p.opts.StateDir, "after", time.Since(start).Round(time.Millisecond))
			return nil
		}
		p.log.Info("the recorded local cluster is not usable: starting a new one", "reason", err)
		p.stopAll()
		p.routeAdded = st.RouteAdded
	}
	if err := p.fresh(ctx); err != nil {
		return err
	}
	p.log.Info("local cluster up", "state", p.opts.StateDir, "after", time.Since(start).Round(time.Millisecond))
	return nil
}

// reuse checks the recorded cluster; true when it is usable (after restarting what may be).
func (p *Provider) reuse(ctx context.Context) (bool, error) {
	st := p.st
	if st.PodCIDR != p.opts.PodCIDR {
		return false, fmt.Errorf("pod CIDR changed from %s to %s", st.PodCIDR, p.opts.PodCIDR)
	}
	for _, c := range []string{compEtcd, compAPIServer} {
		if !st.Procs[c].alive() {
			return false, fmt.Errorf("%s is not running", c)
		}
	}
	cs, err := p.clientset()
	if err != nil {
		return false, err
	}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(vctx); err != nil {
		return false, fmt.Errorf("kube-apiserver /readyz: %w", err)
	}
	if !st.Procs[compKCM].alive() {
		if err := p.startKCM(ctx); err != nil {
			return false, err
		}
	}
	if !st.Procs[compScheduler].alive() {
		if err := p.startScheduler(ctx); err != nil {
			return false, err
		}
	}
	id, err := identify(p.opts.Eppkit)
	if err != nil {
		return false, err
	}
	if !st.Procs[compKubelet].alive() || st.Eppkit != id || !reflect.DeepEqual(st.Images, p.images()) {
		p.log.Info("restarting the kubelet (not running, or the eppkit binary or image map changed)")
		stopProc(st.Procs[compKubelet], 15*time.Second)
		if err := p.startKubelet(ctx); err != nil {
			return false, err
		}
	}
	if err := p.saveState(); err != nil {
		return false, err
	}
	return true, p.waitNodeReady(ctx, cs)
}

// fresh starts a new cluster in an emptied state directory.
func (p *Provider) fresh(ctx context.Context) error {
	if err := os.RemoveAll(p.opts.StateDir); err != nil {
		return fmt.Errorf("local provider: clear %s: %w", p.opts.StateDir, err)
	}
	cpDir := filepath.Join(p.opts.StateDir, "controlplane")
	for _, d := range []string{filepath.Join(cpDir, "certs"), filepath.Join(cpDir, "etcd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("local provider: %w", err)
		}
	}
	paths, err := p.resolve()
	if err != nil {
		return err
	}
	p.st = &state{Name: p.opts.Name, Procs: map[string]proc{}, Created: time.Now().UTC(), PodCIDR: p.opts.PodCIDR}
	cidr, err := netip.ParsePrefix(p.opts.PodCIDR)
	if err != nil {
		return fmt.Errorf("local provider: PodCIDR %q: %w", p.opts.PodCIDR, err)
	}
	if p.st.RouteAdded, err = ensureLocalRoute(cidr.Masked()); err != nil {
		return fmt.Errorf("local provider: %w", err)
	}
	if p.routeAdded && p.opts.PodCIDR == cidr.Masked().String() {
		p.st.RouteAdded = true // added by the cluster this one replaces
	}
	if p.st.RouteAdded {
		p.log.Info("made the pod CIDR local", "route", "local "+cidr.Masked().String()+" dev lo")
	}
	cp, err := apiserver.StartControlPlane(ctx, apiserver.ControlPlaneOptions{
		APIServerPath: paths.apiserver, EtcdPath: paths.etcd, CRDDir: p.opts.CRDDir,
		Dir: cpDir, KeepDir: true, CertDir: filepath.Join(cpDir, "certs"), EtcdDataDir: filepath.Join(cpDir, "etcd"),
	})
	if err != nil {
		return fmt.Errorf("local provider: %w", err)
	}
	// The processes outlive this one: record them by binary and flag, not through envtest.
	for comp, find := range map[string][2]string{
		compEtcd:      {paths.etcd, filepath.Join(cpDir, "etcd")},
		compAPIServer: {paths.apiserver, filepath.Join(cpDir, "certs")},
	} {
		found := findProcs(find[0], find[1])
		if len(found) != 1 {
			_ = cp.Stop()
			return fmt.Errorf("local provider: found %d %s processes for %s, want 1", len(found), comp, find[1])
		}
		p.st.Procs[comp] = found[0]
	}
	kc, err := os.ReadFile(cp.KubeconfigPath)
	if err == nil {
		err = os.WriteFile(p.KubeconfigPath(), kc, 0o600)
	}
	if err != nil {
		p.stopAll()
		return fmt.Errorf("local provider: kubeconfig: %w", err)
	}
	p.st.Kubeconfig, p.st.Server = p.KubeconfigPath(), cp.RestConfig.Host
	if err := p.saveState(); err != nil {
		p.stopAll()
		return fmt.Errorf("local provider: %w", err)
	}
	for _, start := range []func(context.Context) error{p.startKCM, p.startScheduler, p.startKubelet} {
		if err := start(ctx); err != nil {
			p.stopAll()
			return err
		}
		if err := p.saveState(); err != nil {
			p.stopAll()
			return fmt.Errorf("local provider: %w", err)
		}
	}
	cs, err := p.clientset()
	if err != nil {
		p.stopAll()
		return err
	}
	if err := p.waitNodeReady(ctx, cs); err != nil {
		p.stopAll()
		return err
	}
	return nil
}

type binPaths struct{ apiserver, etcd, kcm, scheduler string }

func (p *Provider) resolve() (binPaths, error) {
	var missing []string
	get := func(given, artifact string) string {
		if given != "" {
			return given
		}
		path, err := toolcache.Path("k8s", artifact)
		if err != nil {
			missing = append(missing, err.Error())
		}
		return path
	}
	b := binPaths{
		apiserver: get(p.opts.APIServerPath, "kube-apiserver"), etcd: get(p.opts.EtcdPath, "etcd"),
		kcm: get(p.opts.ControllerManagerPath, "kube-controller-manager"), scheduler: get(p.opts.SchedulerPath, "kube-scheduler"),
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("local provider: %w: %s (build them with `eppkit tools build k8s --all && eppkit tools build gie --only crds`)",
			apiserver.ErrBinariesMissing, strings.Join(missing, "; "))
	}
	return b, nil
}

// ErrBinariesMissing is wrapped by Create when a control-plane binary is not built.
var ErrBinariesMissing = apiserver.ErrBinariesMissing

func (p *Provider) logPath(comp string) string {
	return filepath.Join(p.opts.StateDir, comp+".log")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startComponent starts a control-plane component serving HTTPS /healthz on a free port and waits
// for it; errors name the component and its log.
func (p *Provider) startComponent(ctx context.Context, comp, path string, args []string) error {
	port, err := freePort()
	if err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	certDir := filepath.Join(p.opts.StateDir, comp+"-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	args = append(args, "--kubeconfig="+p.KubeconfigPath(), "--authentication-kubeconfig="+p.KubeconfigPath(),
		"--authorization-kubeconfig="+p.KubeconfigPath(), "--leader-elect=false", "--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port), "--cert-dir="+certDir, "--v=1")
	pr, exited, exitErr, err := startDetached(path, args, os.Environ(), p.logPath(comp))
	if err != nil {
		return fmt.Errorf("%s: start: %w", comp, err)
	}
	p.st.Procs[comp] = pr
	if err := waitHealthz(ctx, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", exited); err != nil {
		if isClosed(exited) {
			err = fmt.Errorf("%w", *exitErr)
		}
		return fmt.Errorf("%s: %v (log: %s)\n%s", comp, err, p.logPath(comp), logtail.String(p.logPath(comp), 15))
	}
	return nil
}

func (p *Provider) startKCM(ctx context.Context) error {
	path, err := p.binary(p.opts.ControllerManagerPath, "kube-controller-manager")
	if err != nil {
		return err
	}
	return p.startComponent(ctx, compKCM, path, []string{
		"--controllers=" + strings.Join(Controllers, ","), "--use-service-account-credentials=false",
		"--allocate-node-cidrs=false", "--cluster-name=" + p.opts.Name,
		// Deletions and scale-downs show up at once in the e2e suite.
		"--concurrent-deployment-syncs=5", "--concurrent-replicaset-syncs=5",
	})
}

func (p *Provider) startScheduler(ctx context.Context) error {
	path, err := p.binary(p.opts.SchedulerPath, "kube-scheduler")
	if err != nil {
		return err
	}
	return p.startComponent(ctx, compScheduler, path, nil)
}

func (p *Provider) binary(given, artifact string) (string, error) {
	if given != "" {
		return given, nil
	}
	path, err := toolcache.Path("k8s", artifact)
	if err != nil {
		return "", fmt.Errorf("local provider: %w", err)
	}
	return path, nil
}

// startKubelet runs `eppkit cluster kubelet` detached and records the binary it runs.
func (p *Provider) startKubelet(ctx context.Context) error {
	u, err := url.Parse(p.st.Server)
	if err != nil {
		return fmt.Errorf("kubelet: API server URL %q: %w", p.st.Server, err)
	}
	args := []string{"cluster", "kubelet", "--kubeconfig", p.KubeconfigPath(), "--state-dir", filepath.Join(p.opts.StateDir, "kubelet"),
		"--pod-cidr", p.opts.PodCIDR, "--apiserver-host", u.Hostname(), "--apiserver-port", u.Port()}
	imgs := p.images()
	keys := make([]string, 0, len(imgs))
	for k := range imgs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--image", k+"="+imgs[k])
	}
	id, err := identify(p.opts.Eppkit)
	if err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	pr, exited, exitErr, err := startDetached(p.opts.Eppkit, args, os.Environ(), p.logPath(compKubelet))
	if err != nil {
		return fmt.Errorf("kubelet: start: %w", err)
	}
	p.st.Procs[compKubelet], p.st.Eppkit, p.st.Images = pr, id, imgs
	// Give a kubelet that fails on its flags a moment to say so.
	select {
	case <-exited:
		return fmt.Errorf("kubelet: %v (log: %s)\n%s", *exitErr, p.logPath(compKubelet), logtail.String(p.logPath(compKubelet), 15))
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
	}
	return nil
}

func (p *Provider) clientset() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.KubeconfigPath())
	if err != nil {
		return nil, fmt.Errorf("local provider: kubeconfig: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

// waitNodeReady waits for the kubelet's node to be Ready with a fresh lease.
func (p *Provider) waitNodeReady(ctx context.Context, cs kubernetes.Interface) error {
	var last string
	for {
		node, err := cs.CoreV1().Nodes().Get(ctx, kubelet.DefaultNodeName, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = fmt.Sprintf("Ready=%s (%s)", c.Status, c.Message)
				}
			}
		} else {
			last = err.Error()
		}
		if !p.st.Procs[compKubelet].alive() {
			return fmt.Errorf("kubelet: exited (log: %s)\n%s", p.logPath(compKubelet), logtail.String(p.logPath(compKubelet), 15))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubelet: node %s not Ready: %s: %w (log: %s)", kubelet.DefaultNodeName, last, ctx.Err(), p.logPath(compKubelet))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func waitHealthz(ctx context.Context, u string, exited <-chan struct{}) error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed serving certificate of a local component
	defer c.CloseIdleConnections()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := c.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		}
		last = err
		select {
		case <-exited:
			return errors.New("exited")
		case <-ctx.Done():
			return fmt.Errorf("/healthz not OK: %v: %w", last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// stopAll stops every recorded process: the kubelet first (it stops its pods), then the
// scheduler, controller manager, kube-apiserver and etcd.
func (p *Provider) stopAll() {
	if p.st == nil {
		return
	}
	for _, c := range []string{compKubelet, compScheduler, compKCM, compAPIServer, compEtcd} {
		if pr, ok := p.st.Procs[c]; ok {
			stopProc(pr, 20*time.Second)
		}
	}
}

// ExportLogs implements cluster.Provider: the control-plane and kubelet logs, and every
// container log as pods/<namespace>_<pod>_<uid>/<container>.log.
func (p *Provider) ExportLogs(_ context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var errs []error
	for _, src := range []string{
		filepath.Join(p.opts.StateDir, "controlplane", "kube-apiserver.log"), filepath.Join(p.opts.StateDir, "controlplane", "etcd.log"),
		p.logPath(compKCM), p.logPath(compScheduler), p.logPath(compKubelet),
	} {
		if err := copyFile(src, filepath.Join(dir, filepath.Base(src))); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(p.opts.StateDir, "kubelet", "pods", "*", "*.log"))
	for _, src := range logs {
		rel, _ := filepath.Rel(filepath.Join(p.opts.StateDir, "kubelet"), src)
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := copyFile(src, dst); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PodLogPath returns the log file of a container of a pod run by this cluster's kubelet.
func (p *Provider) PodLogPath(namespace, pod, uid, container string) string {
	return filepath.Join(p.opts.StateDir, "kubelet", "pods", namespace+"_"+pod+"_"+uid, container+".log")
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Destroy implements cluster.Provider: stop every process and remove the state directory.
func (p *Provider) Destroy(context.Context) error {
	if err := p.acquire(); err != nil {
		return err
	}
	if p.st == nil {
		p.st = p.loadState()
	}
	p.stopAll()
	if p.st != nil && p.st.RouteAdded {
		if err := removeLocalRoute(p.st.PodCIDR); err != nil {
			p.log.Warn("remove the pod CIDR's local route", "err", err)
		}
	}
	p.st = nil
	if err := os.RemoveAll(p.opts.StateDir); err != nil {
		return fmt.Errorf("local provider: remove %s: %w", p.opts.StateDir, err)
	}
	// The lock file goes too (this process holds the lock until it exits).
	_ = os.Remove(p.opts.StateDir + ".lock")
	return nil
}
