package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Defaults of Config.
const (
	// DefaultNodeName is the Node the kubelet registers.
	DefaultNodeName = "eppkit-node"
	// DefaultPodCIDR is the node's spec.podCIDR. The addresses must be local to this machine
	// (bindable): the loopback range works without privileges but the API server refuses
	// loopback addresses in EndpointSlices, so the local provider uses a range of the
	// benchmarking block 198.18.0.0/15 (RFC 2544) made local with `ip route add local
	// 198.18.0.0/24 dev lo` (see docs/kubelet.md).
	DefaultPodCIDR = "198.18.0.0/24"
	// DefaultNodeIP is the node's InternalIP and every Pod's hostIP.
	DefaultNodeIP = "127.0.0.1"
	// DefaultLeaseDuration is the node Lease's leaseDurationSeconds; it is renewed every quarter.
	DefaultLeaseDuration = 40 * time.Second
	// DefaultGracePeriod is used when a Pod has neither deletionGracePeriodSeconds nor
	// terminationGracePeriodSeconds.
	DefaultGracePeriod = 30 * time.Second
	// Component is the event source and the node's kubelet version suffix.
	Component = "eppkit-kubelet"
	// ContainerRuntimeVersion is the node's status.nodeInfo.containerRuntimeVersion: how clients
	// tell the process kubelet's nodes (pods share the host's network namespace, each on its own
	// IP) from a real container runtime's.
	ContainerRuntimeVersion = "eppkit-process://v1"
)

// Waiting reasons the kubelet sets on containers it cannot run.
const (
	// ReasonImageNotMapped: no local binary is known for the container's image.
	ReasonImageNotMapped = "ErrImageNotMapped"
	// ReasonConfigError: a volume, env source or field the process kubelet does not support,
	// or a ConfigMap/Secret that does not exist.
	ReasonConfigError = "CreateContainerConfigError"
	// ReasonCrashLoop: the container exited and waits for its restart back-off.
	ReasonCrashLoop = "CrashLoopBackOff"
)

// Config configures a Kubelet. Client, Kubeconfig and StateDir are required.
type Config struct {
	// Client talks to the API server with rights to nodes, leases, pods, pods/status, events,
	// configmaps and secrets (the local provider gives it the admin identity).
	Client kubernetes.Interface
	// NodeName is the Node to register (default DefaultNodeName).
	NodeName string
	// PodCIDR is the node's pod range, an IPv4 prefix whose addresses are local to this machine
	// (a loopback range, or one with a local route; default DefaultPodCIDR).
	PodCIDR string
	// NodeIP is the node's InternalIP (default DefaultNodeIP).
	NodeIP string
	// Images maps images to local binaries (see MatchImage).
	Images map[string]string
	// Kubeconfig is the kubeconfig path every container gets as KUBECONFIG.
	Kubeconfig string
	// APIServerHost and APIServerPort become KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT
	// (omitted when empty).
	APIServerHost, APIServerPort string
	// StateDir holds pods/<namespace>_<name>_<uid>/ with the container logs
	// (<container>.log), pid files and materialised volumes.
	StateDir string
	// LeaseDuration is the node Lease's duration (default DefaultLeaseDuration).
	LeaseDuration time.Duration
	// Logger receives one line per pod lifecycle step (default: discard).
	Logger *slog.Logger
	// NodeOnly registers the node and renews its lease but runs no pods: for a node whose pods'
	// status someone else writes (conformance/endpointsource/apiserver's pool pods in `eppkit conformance
	// --target cluster`), so the pod garbage collector and the node lifecycle controller leave
	// them alone. Kubeconfig and StateDir are not needed then.
	NodeOnly bool
	// ServerPort is the port of the kubelet API (pod port-forwarding; see serveAPI) on NodeIP,
	// published as the node's daemonEndpoints.kubeletEndpoint (0 = a free port). Not served
	// with NodeOnly.
	ServerPort int
	// Taints are set on the node at registration (e.g. NoSchedule so the scheduler places no
	// pods on a NodeOnly node).
	Taints []corev1.Taint
}

// Kubelet runs the Pods bound to one node as processes. Create it with New, run it with Run.
type Kubelet struct {
	cfg    Config
	log    *slog.Logger
	prefix netip.Prefix

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	ips     map[netip.Addr]types.UID
	nextIP  netip.Addr
	wg      sync.WaitGroup
	apiPort int // the kubelet API's port (0: not served)
}

// New validates cfg and returns a Kubelet. Errors name the field.
func New(cfg Config) (*Kubelet, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubelet: Client is required")
	}
	if cfg.Kubeconfig == "" && !cfg.NodeOnly {
		return nil, errors.New("kubelet: Kubeconfig is required (containers get it as KUBECONFIG)")
	}
	if cfg.StateDir == "" && !cfg.NodeOnly {
		return nil, errors.New("kubelet: StateDir is required")
	}
	if cfg.NodeName == "" {
		cfg.NodeName = DefaultNodeName
	}
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = DefaultPodCIDR
	}
	if cfg.NodeIP == "" {
		cfg.NodeIP = DefaultNodeIP
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.LeaseDuration < 4*time.Second {
		return nil, fmt.Errorf("kubelet: LeaseDuration %v must be at least 4s", cfg.LeaseDuration)
	}
	prefix, err := netip.ParsePrefix(cfg.PodCIDR)
	if err != nil {
		return nil, fmt.Errorf("kubelet: PodCIDR %q: %w", cfg.PodCIDR, err)
	}
	if !prefix.Addr().Is4() || prefix.Bits() < 8 || prefix.Bits() > 30 {
		return nil, fmt.Errorf("kubelet: PodCIDR %q must be an IPv4 range between /8 and /30 (e.g. %s)", cfg.PodCIDR, DefaultPodCIDR)
	}
	prefix = prefix.Masked()
	if _, err := netip.ParseAddr(cfg.NodeIP); err != nil {
		return nil, fmt.Errorf("kubelet: NodeIP %q: %w", cfg.NodeIP, err)
	}
	for img, p := range cfg.Images {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("kubelet: Images[%q] = %q: the binary path must be absolute", img, p)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Kubelet{cfg: cfg, log: log, prefix: prefix, workers: map[types.UID]*podWorker{},
		ips: map[netip.Addr]types.UID{}, nextIP: prefix.Addr().Next()}, nil
}

// Run registers the node, keeps its Lease renewed and runs the node's Pods until ctx ends; then
// it stops every container (SIGTERM, SIGKILL after each Pod's grace period, at most 10 s) and
// returns. Pods stay in the API server, like after a real kubelet stops. Processes left behind by
// an earlier Run on the same StateDir (a crashed kubelet) are killed first.
func (k *Kubelet) Run(ctx context.Context) error {
	if !k.cfg.NodeOnly {
		k.killStale()
		port, err := k.serveAPI(ctx)
		if err != nil {
			return err
		}
		k.apiPort = port
	}
	if err := k.registerNode(ctx); err != nil {
		return err
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.heartbeat(ctx)
	}()
	if k.cfg.NodeOnly {
		k.log.Info("keeping node registered (runs no pods)", "node", k.cfg.NodeName)
		<-ctx.Done()
		k.wg.Wait()
		return nil
	}

	factory := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.NodeName).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.dispatch(ctx, obj, false) },
		UpdateFunc: func(_, obj any) { k.dispatch(ctx, obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			k.dispatch(ctx, obj, true)
		},
	}); err != nil {
		return fmt.Errorf("kubelet: pod informer: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		factory.Shutdown()
		k.wg.Wait()
		return ctx.Err()
	}
	k.log.Info("kubelet running", "node", k.cfg.NodeName, "podCIDR", k.cfg.PodCIDR, "images", imageKeys(k.cfg.Images))
	<-ctx.Done()
	factory.Shutdown()
	k.wg.Wait()
	return nil
}

func (k *Kubelet) dispatch(ctx context.Context, obj any, deleted bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName != k.cfg.NodeName {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	w := k.workers[pod.UID]
	if w == nil {
		if deleted || ctx.Err() != nil {
			return
		}
		w = newPodWorker(k, pod)
		k.workers[pod.UID] = w
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			w.run(ctx)
			k.mu.Lock()
			delete(k.workers, pod.UID)
			k.mu.Unlock()
		}()
	}
	if deleted {
		w.objectGone()
		return
	}
	w.update(pod)
}

// allocateIP returns a free pod IP, preferred when it is in the range and free (a Pod already
// running from an earlier kubelet keeps its IP), else the next free one after the last handed out,
// so a just-released IP is not reused at once.
func (k *Kubelet) allocateIP(uid types.UID, preferred string) (netip.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, err := netip.ParseAddr(preferred); err == nil && k.usable(p) {
		if owner, taken := k.ips[p]; !taken || owner == uid {
			k.ips[p] = uid
			return p, nil
		}
	}
	a := k.nextIP
	for range 1 << (32 - k.prefix.Bits()) {
		if !k.usable(a) {
			a = k.prefix.Addr().Next()
			continue
		}
		if _, taken := k.ips[a]; !taken {
			k.ips[a] = uid
			k.nextIP = a.Next()
			return a, nil
		}
		a = a.Next()
	}
	return netip.Addr{}, fmt.Errorf("no free pod IP in %s", k.prefix)
}

// usable is true for addresses of the range other than its network and broadcast address.
func (k *Kubelet) usable(a netip.Addr) bool {
	if !k.prefix.Contains(a) || a == k.prefix.Addr() {
		return false
	}
	return a.Next().IsValid() && k.prefix.Contains(a.Next())
}

func (k *Kubelet) releaseIP(a netip.Addr, uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ips[a] == uid {
		delete(k.ips, a)
	}
}

// registerNode creates the Node (or adopts an existing one of the same name) and writes a Ready
// status.
func (k *Kubelet) registerNode(ctx context.Context) error {
	nodes := k.cfg.Client.CoreV1().Nodes()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Labels: map[string]string{
			"kubernetes.io/hostname": k.cfg.NodeName, "kubernetes.io/os": runtime.GOOS,
			"kubernetes.io/arch": runtime.GOARCH, "eppkit.io/process-kubelet": "true",
		}},
		Spec: corev1.NodeSpec{PodCIDR: k.cfg.PodCIDR, PodCIDRs: []string{k.cfg.PodCIDR}, Taints: k.cfg.Taints},
	}
	created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = nodes.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if err == nil && created.Spec.PodCIDR != "" && created.Spec.PodCIDR != k.cfg.PodCIDR {
			return fmt.Errorf("kubelet: node %s already exists with podCIDR %s, not %s (delete the node or use its CIDR)",
				k.cfg.NodeName, created.Spec.PodCIDR, k.cfg.PodCIDR)
		}
	}
	if err != nil {
		return fmt.Errorf("kubelet: register node %s: %w", k.cfg.NodeName, err)
	}
	// The node lifecycle controller taints a new node at once: retry on conflicts.
	first := true
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if !first {
			if created, err = nodes.Get(ctx, k.cfg.NodeName, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		first = false
		return k.writeNodeStatus(ctx, created)
	})
}

func (k *Kubelet) writeNodeStatus(ctx context.Context, node *corev1.Node) error {
	now := metav1.Now()
	node = node.DeepCopy()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse(strconv.Itoa((1 << (32 - k.prefix.Bits())) - 2)), // one per usable pod IP
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
		for _, old := range node.Status.Conditions {
			if old.Type == t && old.Status == s {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	node.Status = corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Phase: corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "eppkit process kubelet is posting ready status"),
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "no memory pressure is modelled"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "no disk pressure is modelled"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "no PID pressure is modelled"),
		},
		// InternalIP only: the API server dials the first address of its
		// --kubelet-preferred-address-types (Hostname first by default) for port-forwarding, and
		// the node name does not resolve.
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.cfg.NodeIP}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(k.apiPort)}},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2-" + Component, OperatingSystem: runtime.GOOS,
			Architecture: runtime.GOARCH, ContainerRuntimeVersion: ContainerRuntimeVersion},
	}
	if _, err := k.cfg.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return err // unwrapped, so RetryOnConflict sees it
		}
		return fmt.Errorf("kubelet: node %s status: %w", k.cfg.NodeName, err)
	}
	return nil
}

// heartbeat renews the node Lease every LeaseDuration/4 and rewrites the node status every
// minute (the real kubelet's nodeStatusReportFrequency is longer; the Lease is what the node
// lifecycle controller watches).
func (k *Kubelet) heartbeat(ctx context.Context) {
	renew := time.NewTicker(k.cfg.LeaseDuration / 4)
	defer renew.Stop()
	lastStatus := time.Now()
	for {
		if err := k.renewLease(ctx); err != nil && ctx.Err() == nil {
			k.log.Warn("renew node lease", "node", k.cfg.NodeName, "err", err)
		}
		if time.Since(lastStatus) > time.Minute {
			if node, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{}); err == nil {
				if err := k.writeNodeStatus(ctx, node); err != nil && ctx.Err() == nil {
					k.log.Warn("node status", "err", err)
				}
			}
			lastStatus = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
		}
	}
}

func (k *Kubelet) renewLease(ctx context.Context) error {
	leases := k.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	secs := int32(k.cfg.LeaseDuration / time.Second)
	l, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, nerr := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if nerr != nil {
			return nerr
		}
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.cfg.NodeName), LeaseDurationSeconds: &secs, RenewTime: &now},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = ptr.To(k.cfg.NodeName), &secs, &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// event writes a core/v1 Event about pod (best effort: failures are logged).
func (k *Kubelet) event(pod *corev1.Pod, typ, reason, msg string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name + "." + rand.String(10), Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		Reason: reason, Message: msg, Type: typ, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Source:              corev1.EventSource{Component: Component, Host: k.cfg.NodeName},
		ReportingController: Component, ReportingInstance: k.cfg.NodeName,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := k.cfg.Client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		k.log.Debug("write event", "pod", pod.Namespace+"/"+pod.Name, "reason", reason, "err", err)
	}
}

// podsDir is where every Pod's directory lives.
func (k *Kubelet) podsDir() string { return filepath.Join(k.cfg.StateDir, "pods") }

// killStale kills the process groups recorded in pid files under StateDir/pods by an earlier
// kubelet (a pid file holds "<pgid> <start time in clock ticks>"; a process is killed only when
// its start time still matches, so a reused pid is left alone).
func (k *Kubelet) killStale() {
	files, _ := filepath.Glob(filepath.Join(k.podsDir(), "*", "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fields := strings.Fields(string(b))
		if len(fields) != 2 {
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err != nil || pid <= 1 {
			continue
		}
		if start, ok := procStartTime(pid); ok && start == fields[1] {
			k.log.Info("killing a container left by an earlier kubelet", "pid", pid, "pidfile", f)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		_ = os.Remove(f)
	}
}

// procStartTime returns field 22 of /proc/<pid>/stat (start time in clock ticks since boot).
func procStartTime(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	// After the command: field 3 is state, so start time (field 22) is f[19].
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}
