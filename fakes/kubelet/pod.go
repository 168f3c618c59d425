package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Restart back-off of exited containers (the kubelet's is 10 s doubling to 5 min; shorter here
// because local processes start in milliseconds and tests wait for them).
const (
	minBackoff = time.Second
	maxBackoff = 20 * time.Second
	// maxShutdownGrace bounds each Pod's stop when the kubelet itself stops.
	maxShutdownGrace = 10 * time.Second
)

// container is one container of a Pod and its current process.
type container struct {
	idx     int
	spec    corev1.Container
	binary  string
	argv    []string
	env     []string
	dir     string
	logPath string
	pidPath string

	// waitingReason/Message: the container cannot be started (unknown image, config error).
	waitingReason, waitingMessage string

	cmd        *exec.Cmd
	running    bool
	startedAt  metav1.Time
	ready      bool
	started    bool          // the startup probe succeeded (or there is none) for this process
	exited     chan struct{} // closed when this process has been reaped
	probeMsg   string
	stopProbe  context.CancelFunc
	lastExit   *corev1.ContainerStateTerminated
	restarts   int32
	backoff    time.Duration
	nextStart  time.Time // zero: no restart pending
	finished   bool      // exited and will not be restarted
	generation int       // incremented per start, so late events of an old process are ignored
}

type exitEvent struct {
	c          *container
	generation int
	code       int
	signal     string
	at         time.Time
}

type probeEvent struct {
	c          *container
	generation int
	kind       probeKind
	ready      bool // probeReadiness: the verdict
	msg        string
}

// podWorker owns one Pod: its IP, directory, processes and status. run is its only goroutine
// (plus one waiter and one prober per process); update and objectGone hand it news.
type podWorker struct {
	k   *Kubelet
	uid string
	key string

	mu     sync.Mutex
	latest *corev1.Pod
	gone   bool
	notify chan struct{}

	pod        *corev1.Pod
	ip         netip.Addr
	dir        string
	containers []*container
	setupOK    bool
	startTime  metav1.Time
	exits      chan exitEvent
	probes     chan probeEvent
}

func newPodWorker(k *Kubelet, pod *corev1.Pod) *podWorker {
	return &podWorker{k: k, uid: string(pod.UID), key: pod.Namespace + "/" + pod.Name, notify: make(chan struct{}, 1),
		exits: make(chan exitEvent, len(pod.Spec.Containers)+1), probes: make(chan probeEvent, 16)}
}

func (w *podWorker) update(pod *corev1.Pod) {
	w.mu.Lock()
	w.latest = pod
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *podWorker) objectGone() {
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *podWorker) take() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest, w.gone
}

func (w *podWorker) run(ctx context.Context) {
	<-w.notify
	pod, gone := w.take()
	if pod == nil || gone {
		return
	}
	w.pod = pod
	log := w.k.log.With("pod", w.key)
	if pod.DeletionTimestamp != nil {
		// Terminating before this worker ran anything: a late event after an earlier worker's
		// final delete, or a pod an earlier kubelet ran (Run killed its processes at start).
		w.finalDelete()
		return
	}
	w.setup(ctx)
	for _, c := range w.containers {
		w.start(ctx, c)
	}
	w.writeStatus(ctx)

	var timer *time.Timer
	for {
		var timerC <-chan time.Time
		if next := w.nextRestart(); !next.IsZero() {
			if timer != nil {
				timer.Stop()
			}
			timer = time.NewTimer(time.Until(next))
			timerC = timer.C
		}
		select {
		case <-ctx.Done():
			log.Info("kubelet stopping: stopping the pod's containers")
			w.stopAll(min(w.gracePeriod(), maxShutdownGrace))
			w.releaseIP()
			return
		case <-w.notify:
			pod, gone := w.take()
			if gone {
				log.Info("pod object deleted: killing its containers")
				w.stopAll(0)
				w.releaseIP()
				return
			}
			w.pod = pod
			if pod.DeletionTimestamp != nil {
				grace := w.gracePeriod()
				log.Info("pod deleted: stopping its containers", "grace", grace)
				w.k.event(pod, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Stopping containers (grace period %s)", grace))
				w.stopAll(grace)
				w.finalDelete()
				w.releaseIP()
				return
			}
		case e := <-w.exits:
			w.handleExit(e)
		case p := <-w.probes:
			if p.generation == p.c.generation && p.c.running {
				w.handleProbe(p)
			}
		case <-timerC:
			for _, c := range w.containers {
				if !c.running && !c.nextStart.IsZero() && !time.Now().Before(c.nextStart) {
					c.nextStart = time.Time{}
					w.start(ctx, c)
				}
			}
		}
		w.writeStatus(ctx)
	}
}

func (w *podWorker) gracePeriod() time.Duration {
	switch {
	case w.pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*w.pod.DeletionGracePeriodSeconds) * time.Second
	case w.pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*w.pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return DefaultGracePeriod
}

// setup allocates the pod IP, creates the pod directory, materialises volumes and prepares each
// container's command line and environment. Problems become waiting reasons, not errors.
func (w *podWorker) setup(ctx context.Context) {
	pod := w.pod
	w.startTime = metav1.Now().Rfc3339Copy()
	w.containers = make([]*container, len(pod.Spec.Containers))
	for i, cs := range pod.Spec.Containers {
		w.containers[i] = &container{idx: i, spec: cs}
	}
	fail := func(reason, msg string) {
		for _, c := range w.containers {
			if c.waitingReason == "" {
				c.waitingReason, c.waitingMessage = reason, msg
			}
		}
		w.k.event(pod, corev1.EventTypeWarning, "Failed", msg)
		w.k.log.Warn("pod cannot start", "pod", w.key, "reason", reason, "msg", msg)
	}
	ip, err := w.k.allocateIP(pod.UID, pod.Status.PodIP)
	if err != nil {
		fail(ReasonConfigError, err.Error())
		return
	}
	w.ip = ip
	w.dir = filepath.Join(w.k.podsDir(), pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
	if err := os.MkdirAll(filepath.Join(w.dir, "tmp"), 0o755); err != nil {
		fail(ReasonConfigError, "pod directory: "+err.Error())
		return
	}
	if len(pod.Spec.InitContainers) > 0 {
		fail(ReasonConfigError, "init containers are not supported by the process kubelet")
		return
	}
	vols, err := w.materialiseVolumes(ctx)
	if err != nil {
		fail(ReasonConfigError, err.Error())
		return
	}
	w.setupOK = true
	for _, c := range w.containers {
		w.prepare(ctx, c, vols)
	}
}

// materialiseVolumes writes ConfigMap and Secret volumes and creates emptyDirs under the pod
// directory; hostPath volumes map to the host path itself. It returns volume name → local path.
func (w *podWorker) materialiseVolumes(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range w.pod.Spec.Volumes {
		dir := filepath.Join(w.dir, "volumes", v.Name)
		switch {
		case v.ConfigMap != nil:
			cm, err := w.k.cfg.Client.CoreV1().ConfigMaps(w.pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && ptr.Deref(v.ConfigMap.Optional, false) {
					cm = &corev1.ConfigMap{}
				} else {
					return nil, fmt.Errorf("volume %s: configmap %s: %w", v.Name, v.ConfigMap.Name, err)
				}
			}
			data := map[string][]byte{}
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
			for k, b := range cm.BinaryData {
				data[k] = b
			}
			if err := writeKeys(dir, data, v.ConfigMap.Items, "configmap "+v.ConfigMap.Name); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.Secret != nil:
			s, err := w.k.cfg.Client.CoreV1().Secrets(w.pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && ptr.Deref(v.Secret.Optional, false) {
					s = &corev1.Secret{}
				} else {
					return nil, fmt.Errorf("volume %s: secret %s: %w", v.Name, v.Secret.SecretName, err)
				}
			}
			if err := writeKeys(dir, s.Data, v.Secret.Items, "secret "+v.Secret.SecretName); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.HostPath != nil:
			dir = v.HostPath.Path
		default:
			return nil, fmt.Errorf("volume %s: only configMap, secret, emptyDir and hostPath volumes are supported by the process kubelet", v.Name)
		}
		out[v.Name] = dir
	}
	return out, nil
}

// writeKeys writes data into dir, all keys or only items (key → relative path).
func writeKeys(dir string, data map[string][]byte, items []corev1.KeyToPath, what string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(rel string, b []byte) error {
		clean := filepath.Clean(rel)
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("%s: path %q leaves the volume", what, rel)
		}
		p := filepath.Join(dir, clean)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, b, 0o644)
	}
	if len(items) == 0 {
		for k, b := range data {
			if err := write(k, b); err != nil {
				return err
			}
		}
		return nil
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("%s has no key %q", what, it.Key)
		}
		if err := write(it.Path, b); err != nil {
			return err
		}
	}
	return nil
}

// prepare resolves the container's binary, environment and command line.
func (w *podWorker) prepare(ctx context.Context, c *container, vols map[string]string) {
	pod := w.pod
	bin, ok := MatchImage(w.k.cfg.Images, c.spec.Image)
	if !ok {
		c.waitingReason = ReasonImageNotMapped
		c.waitingMessage = fmt.Sprintf("the process kubelet has no local binary for image %q (known images: %s)",
			c.spec.Image, strings.Join(imageKeys(w.k.cfg.Images), ", "))
		w.k.event(pod, corev1.EventTypeWarning, "Failed", "container "+c.spec.Name+": "+c.waitingMessage)
		return
	}
	c.binary = bin
	// Mount paths → local paths, longest first so /etc/a/b wins over /etc/a.
	var mounts []mountRewrite
	for _, m := range c.spec.VolumeMounts {
		local, ok := vols[m.Name]
		if !ok {
			c.waitingReason, c.waitingMessage = ReasonConfigError, fmt.Sprintf("volumeMount %s: no volume named %s", m.MountPath, m.Name)
			return
		}
		if m.SubPath != "" {
			local = filepath.Join(local, m.SubPath)
		}
		mounts = append(mounts, mountRewrite{from: filepath.Clean(m.MountPath), to: local})
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].from) > len(mounts[j].from) })

	env, err := w.containerEnv(ctx, c, mounts)
	if err != nil {
		c.waitingReason, c.waitingMessage = ReasonConfigError, "container "+c.spec.Name+": "+err.Error()
		w.k.event(pod, corev1.EventTypeWarning, "Failed", c.waitingMessage)
		return
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	var words []string
	if len(c.spec.Command) > 1 {
		words = append(words, c.spec.Command[1:]...)
	}
	words = append(words, c.spec.Args...)
	for _, a := range words {
		c.argv = append(c.argv, rewritePaths(expand(a, vars), mounts))
	}
	c.env = env
	c.dir = w.dir
	if c.spec.WorkingDir != "" {
		c.dir = rewritePaths(c.spec.WorkingDir, mounts)
	}
	c.logPath = filepath.Join(w.dir, c.spec.Name+".log")
	c.pidPath = filepath.Join(w.dir, c.spec.Name+".pid")
}

// containerEnv builds the process environment: a few host variables, the cluster variables,
// envFrom, then env (later entries override), with $(VAR) expanded against what came before.
func (w *podWorker) containerEnv(ctx context.Context, c *container, mounts []mountRewrite) ([]string, error) {
	pod := w.pod
	order := []string{}
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	set("PATH", os.Getenv("PATH"))
	set("HOME", w.dir)
	set("TMPDIR", filepath.Join(w.dir, "tmp"))
	set("HOSTNAME", pod.Name)
	set("KUBECONFIG", w.k.cfg.Kubeconfig)
	if w.k.cfg.APIServerHost != "" {
		set("KUBERNETES_SERVICE_HOST", w.k.cfg.APIServerHost)
		set("KUBERNETES_SERVICE_PORT", w.k.cfg.APIServerPort)
	}
	for _, ef := range c.spec.EnvFrom {
		var data map[string]string
		switch {
		case ef.ConfigMapRef != nil:
			cm, err := w.k.cfg.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && ptr.Deref(ef.ConfigMapRef.Optional, false) {
					continue
				}
				return nil, fmt.Errorf("envFrom configmap %s: %w", ef.ConfigMapRef.Name, err)
			}
			data = cm.Data
		case ef.SecretRef != nil:
			s, err := w.k.cfg.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, ef.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && ptr.Deref(ef.SecretRef.Optional, false) {
					continue
				}
				return nil, fmt.Errorf("envFrom secret %s: %w", ef.SecretRef.Name, err)
			}
			data = map[string]string{}
			for k, b := range s.Data {
				data[k] = string(b)
			}
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(ef.Prefix+k, data[k])
		}
	}
	for _, e := range c.spec.Env {
		if e.ValueFrom == nil {
			set(e.Name, rewritePaths(expand(e.Value, vals), mounts))
			continue
		}
		v, skip, err := w.valueFrom(ctx, c, e)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if !skip {
			set(e.Name, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

func (w *podWorker) valueFrom(ctx context.Context, c *container, e corev1.EnvVar) (v string, skip bool, err error) {
	pod, src := w.pod, e.ValueFrom
	switch {
	case src.FieldRef != nil:
		path := src.FieldRef.FieldPath
		switch path {
		case "metadata.name":
			return pod.Name, false, nil
		case "metadata.namespace":
			return pod.Namespace, false, nil
		case "metadata.uid":
			return string(pod.UID), false, nil
		case "spec.nodeName":
			return w.k.cfg.NodeName, false, nil
		case "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, false, nil
		case "status.podIP", "status.podIPs":
			return w.ip.String(), false, nil
		case "status.hostIP", "status.hostIPs":
			return w.k.cfg.NodeIP, false, nil
		}
		for _, pfx := range []string{"metadata.labels['", "metadata.annotations['"} {
			if strings.HasPrefix(path, pfx) && strings.HasSuffix(path, "']") {
				key := path[len(pfx) : len(path)-2]
				if pfx == "metadata.labels['" {
					return pod.Labels[key], false, nil
				}
				return pod.Annotations[key], false, nil
			}
		}
		return "", false, fmt.Errorf("fieldRef %q is not supported by the process kubelet", path)
	case src.ConfigMapKeyRef != nil:
		r := src.ConfigMapKeyRef
		cm, err := w.k.cfg.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) && ptr.Deref(r.Optional, false) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("configmap %s: %w", r.Name, err)
		}
		val, ok := cm.Data[r.Key]
		if !ok {
			if ptr.Deref(r.Optional, false) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("configmap %s has no key %q", r.Name, r.Key)
		}
		return val, false, nil
	case src.SecretKeyRef != nil:
		r := src.SecretKeyRef
		s, err := w.k.cfg.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) && ptr.Deref(r.Optional, false) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("secret %s: %w", r.Name, err)
		}
		val, ok := s.Data[r.Key]
		if !ok {
			if ptr.Deref(r.Optional, false) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("secret %s has no key %q", r.Name, r.Key)
		}
		return string(val), false, nil
	case src.ResourceFieldRef != nil:
		// No resources are enforced: report the limit (else the request, else the node's
		// capacity) in whole units, rounded up.
		r := src.ResourceFieldRef
		name := r.Resource
		var q = c.spec.Resources.Limits
		if strings.HasPrefix(name, "requests.") {
			q = c.spec.Resources.Requests
		}
		res := corev1.ResourceName(strings.TrimPrefix(strings.TrimPrefix(name, "limits."), "requests."))
		if qty, ok := q[res]; ok {
			if res == corev1.ResourceCPU {
				return strconv.FormatInt((qty.MilliValue()+999)/1000, 10), false, nil
			}
			return strconv.FormatInt(qty.Value(), 10), false, nil
		}
		if res == corev1.ResourceCPU {
			return "64", false, nil
		}
		return strconv.FormatInt(256<<30, 10), false, nil
	}
	return "", false, errors.New("valueFrom has no source")
}

// start launches the container's process (if it can run) and its probers (probe.go runProbes).
func (w *podWorker) start(ctx context.Context, c *container) {
	if c.waitingReason != "" || c.binary == "" {
		return
	}
	c.generation++
	c.ready, c.probeMsg = false, ""
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		w.startFailed(c, "log file: "+err.Error())
		return
	}
	fmt.Fprintf(logf, "# %s %s: %s %s\n", time.Now().Format(time.RFC3339Nano), Component, c.binary, strings.Join(c.argv, " "))
	cmd := exec.Command(c.binary, c.argv...)
	cmd.Env, cmd.Dir = c.env, c.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		w.startFailed(c, err.Error())
		return
	}
	if st, ok := procStartTime(cmd.Process.Pid); ok {
		_ = os.WriteFile(c.pidPath, []byte(strconv.Itoa(cmd.Process.Pid)+" "+st+"\n"), 0o644)
	}
	c.cmd, c.running, c.startedAt = cmd, true, metav1.Now().Rfc3339Copy()
	exited := make(chan struct{})
	c.exited = exited
	gen := c.generation
	w.k.log.Info("container started", "pod", w.key, "container", c.spec.Name, "pid", cmd.Process.Pid, "ip", w.ip)
	if c.restarts == 0 {
		w.k.event(w.pod, corev1.EventTypeNormal, "Started", fmt.Sprintf("Started container %s (pid %d, pod IP %s)", c.spec.Name, cmd.Process.Pid, w.ip))
	}
	go func() {
		err := cmd.Wait()
		logf.Close()
		e := exitEvent{c: c, generation: gen, at: time.Now()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				e.code, e.signal = 128+int(ws.Signal()), ws.Signal().String()
			} else {
				e.code = ee.ExitCode()
			}
		} else if err != nil {
			e.code = 128
		}
		close(exited)
		w.exits <- e
	}()
	// Without a startup probe the container counts as started at once; without a readiness
	// probe it is ready once started.
	c.started = c.spec.StartupProbe == nil
	c.ready = c.started && c.spec.ReadinessProbe == nil
	if c.spec.StartupProbe != nil || c.spec.ReadinessProbe != nil || c.spec.LivenessProbe != nil {
		pctx, cancel := context.WithCancel(ctx)
		c.stopProbe = cancel
		spec, ip := c.spec, w.ip.String()
		go runProbes(pctx, &spec, ip, func(ev probeEvent) {
			ev.c, ev.generation = c, gen
			select {
			case w.probes <- ev:
			case <-pctx.Done():
			}
		})
	}
}

// handleProbe applies a prober's news to the running container it is about.
func (w *podWorker) handleProbe(p probeEvent) {
	c := p.c
	switch p.kind {
	case probeReadiness:
		c.ready, c.probeMsg = p.ready, p.msg
	case probeStarted:
		c.started, c.probeMsg = true, p.msg
		if c.spec.ReadinessProbe == nil {
			c.ready = true
		}
	case probeStartupFailed, probeLivenessFailed:
		which, probe := "Startup", c.spec.StartupProbe
		if p.kind == probeLivenessFailed {
			which, probe = "Liveness", c.spec.LivenessProbe
		}
		// The kubelet kills the container with the probe's terminationGracePeriodSeconds when
		// set, else the pod's (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go),
		// and the restart policy decides what follows.
		grace := w.gracePeriod()
		if probe != nil && probe.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*probe.TerminationGracePeriodSeconds) * time.Second
		}
		c.ready, c.probeMsg = false, p.msg
		if c.stopProbe != nil {
			c.stopProbe()
			c.stopProbe = nil
		}
		w.k.log.Info("probe failed: killing the container", "pod", w.key, "container", c.spec.Name, "probe", which, "msg", p.msg, "grace", grace)
		w.k.event(w.pod, corev1.EventTypeWarning, "Unhealthy", which+" "+p.msg)
		w.k.event(w.pod, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Container %s failed %s probe, will be restarted", c.spec.Name, strings.ToLower(which)))
		pid, exited := c.cmd.Process.Pid, c.exited
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		go func() {
			select {
			case <-exited:
			case <-time.After(grace):
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}()
	}
}

// startFailed records a failed start as an exit with code 128 and schedules a restart.
func (w *podWorker) startFailed(c *container, msg string) {
	w.k.event(w.pod, corev1.EventTypeWarning, "Failed", "container "+c.spec.Name+": start: "+msg)
	c.lastExit = &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: msg, FinishedAt: metav1.Now().Rfc3339Copy()}
	w.scheduleRestart(c, 128)
}

func (w *podWorker) handleExit(e exitEvent) {
	c := e.c
	if e.generation != c.generation {
		return
	}
	c.running, c.ready = false, false
	if c.stopProbe != nil {
		c.stopProbe()
		c.stopProbe = nil
	}
	_ = os.Remove(c.pidPath)
	reason := "Completed"
	if e.code != 0 {
		reason = "Error"
	}
	msg := ""
	if e.signal != "" {
		msg = "killed by " + e.signal
	}
	c.lastExit = &corev1.ContainerStateTerminated{ExitCode: int32(e.code), Reason: reason, Message: msg,
		StartedAt: c.startedAt, FinishedAt: metav1.NewTime(e.at).Rfc3339Copy()}
	w.k.log.Info("container exited", "pod", w.key, "container", c.spec.Name, "code", e.code, "signal", e.signal)
	w.scheduleRestart(c, e.code)
}

// scheduleRestart applies the restart policy after an exit with code.
func (w *podWorker) scheduleRestart(c *container, code int) {
	policy := w.pod.Spec.RestartPolicy
	if policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && code == 0) {
		c.finished = true
		return
	}
	// A container that ran for a while starts over from the shortest back-off.
	if c.backoff == 0 || (!c.startedAt.IsZero() && time.Since(c.startedAt.Time) > 2*maxBackoff) {
		c.backoff = minBackoff
	} else {
		c.backoff = min(2*c.backoff, maxBackoff)
	}
	c.restarts++
	c.nextStart = time.Now().Add(c.backoff)
	w.k.event(w.pod, corev1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off %s restarting failed container %s (exit code %d)", c.backoff, c.spec.Name, code))
}

func (w *podWorker) nextRestart() time.Time {
	var next time.Time
	for _, c := range w.containers {
		if !c.running && !c.nextStart.IsZero() && (next.IsZero() || c.nextStart.Before(next)) {
			next = c.nextStart
		}
	}
	return next
}

// stopAll sends SIGTERM to every running container's process group, waits up to grace for them
// to exit, then SIGKILLs what is left and waits for it.
func (w *podWorker) stopAll(grace time.Duration) {
	running := 0
	for _, c := range w.containers {
		c.nextStart = time.Time{}
		if c.stopProbe != nil {
			c.stopProbe()
			c.stopProbe = nil
		}
		if c.running {
			running++
			sig := syscall.SIGTERM
			if grace <= 0 {
				sig = syscall.SIGKILL
			}
			_ = syscall.Kill(-c.cmd.Process.Pid, sig)
		}
	}
	killed := grace <= 0
	if killed {
		grace = 5 * time.Second // how long to wait for SIGKILLed processes to be reaped
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for running > 0 {
		select {
		case e := <-w.exits:
			if e.generation == e.c.generation && e.c.running {
				e.c.running = false
				_ = os.Remove(e.c.pidPath)
				running--
			}
		case <-deadline.C:
			if killed {
				// SIGKILLed processes that still do not exit: give up waiting.
				w.k.log.Warn("containers did not exit after SIGKILL", "pod", w.key)
				return
			}
			for _, c := range w.containers {
				if c.running {
					w.k.log.Info("grace period over: killing", "pod", w.key, "container", c.spec.Name)
					_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
				}
			}
			killed = true
			deadline.Reset(5 * time.Second)
		}
	}
}

// finalDelete removes the Pod object (grace period 0, only this UID), as the kubelet does once
// a terminating Pod's containers are gone.
func (w *podWorker) finalDelete() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	uid := w.pod.UID
	err := w.k.cfg.Client.CoreV1().Pods(w.pod.Namespace).Delete(ctx, w.pod.Name,
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.k.log.Warn("final delete of pod", "pod", w.key, "err", err)
	}
}

func (w *podWorker) releaseIP() {
	if w.ip.IsValid() {
		w.k.releaseIP(w.ip, w.pod.UID)
	}
}

// status builds the pod status from the containers' state, keeping transition times of
// conditions that did not change.
func (w *podWorker) status(current *corev1.PodStatus) corev1.PodStatus {
	st := corev1.PodStatus{HostIP: w.k.cfg.NodeIP, HostIPs: []corev1.HostIP{{IP: w.k.cfg.NodeIP}},
		StartTime: &w.startTime, QOSClass: current.QOSClass}
	if w.ip.IsValid() {
		st.PodIP, st.PodIPs = w.ip.String(), []corev1.PodIP{{IP: w.ip.String()}}
	}
	allReady, anyRunning, allFinished, allOK := len(w.containers) > 0, false, len(w.containers) > 0, true
	var notReady []string
	for _, c := range w.containers {
		cs := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, RestartCount: c.restarts, Ready: c.running && c.ready,
			ImageID: "eppkit-process://" + c.binary}
		if c.lastExit != nil && (c.running || !c.nextStart.IsZero()) {
			cs.LastTerminationState.Terminated = c.lastExit
		}
		switch {
		case c.waitingReason != "":
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.waitingReason, Message: c.waitingMessage}
		case c.running:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: c.startedAt}
			cs.Started = ptr.To(c.started)
			cs.ContainerID = "eppkit-process://" + strconv.Itoa(c.cmd.Process.Pid)
		case c.finished && c.lastExit != nil:
			cs.State.Terminated = c.lastExit
			cs.Started = ptr.To(false)
		case !c.nextStart.IsZero():
			msg := fmt.Sprintf("back-off %s restarting failed container %s", c.backoff, c.spec.Name)
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: ReasonCrashLoop, Message: msg}
			cs.Started = ptr.To(false)
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		if !cs.Ready {
			allReady = false
			notReady = append(notReady, c.spec.Name)
		}
		if c.running || !c.nextStart.IsZero() {
			anyRunning = true
		}
		if !c.finished {
			allFinished = false
		} else if c.lastExit == nil || c.lastExit.ExitCode != 0 {
			allOK = false
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	switch {
	case allFinished && allOK:
		st.Phase = corev1.PodSucceeded
	case allFinished:
		st.Phase = corev1.PodFailed
	case anyRunning:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	now := metav1.Now().Rfc3339Copy()
	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s, reason, msg = corev1.ConditionTrue, "", ""
		}
		c := corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: now}
		for _, old := range current.Conditions {
			if old.Type == t && old.Status == s {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	msg := ""
	if len(notReady) > 0 {
		msg = "containers with unready status: [" + strings.Join(notReady, " ") + "]"
		for _, c := range w.containers {
			if c.waitingReason != "" {
				msg += "; " + c.spec.Name + ": " + c.waitingReason + ": " + c.waitingMessage
			} else if c.running && !c.ready && c.probeMsg != "" {
				msg += "; " + c.spec.Name + ": " + c.probeMsg
			}
		}
	}
	st.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, w.setupOK, "SetupFailed", "pod setup failed"),
		cond(corev1.PodInitialized, true, "", ""),
		cond(corev1.ContainersReady, allReady, "ContainersNotReady", msg),
		cond(corev1.PodReady, allReady, "ContainersNotReady", msg),
	}
	// Keep conditions owned by others (PodScheduled, DisruptionTarget, readiness gates).
	for _, old := range current.Conditions {
		switch old.Type {
		case corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady:
		default:
			st.Conditions = append(st.Conditions, old)
		}
	}
	return st
}

// writeStatus writes the status when it differs from what was last written (ignoring nothing:
// the builder keeps timestamps stable), retrying on conflicts.
func (w *podWorker) writeStatus(ctx context.Context) {
	pods := w.k.cfg.Client.CoreV1().Pods(w.pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, w.pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != w.pod.UID || cur.DeletionTimestamp != nil {
			return nil
		}
		st := w.status(&cur.Status)
		if equality.Semantic.DeepEqual(st, cur.Status) {
			return nil
		}
		cur.Status = st
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		w.k.log.Warn("write pod status", "pod", w.key, "err", err)
	}
}
