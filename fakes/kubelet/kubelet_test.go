package kubelet_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/eppkit/eppkit/conformance/cluster/portforward"
	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
	"github.com/eppkit/eppkit/fakes/kubelet"
)

// testPodCIDR is a loopback range: bindable without privileges (nothing here needs EndpointSlices,
// which refuse loopback addresses).
const testPodCIDR = "127.1.0.0/24"

// helperEnv makes the test binary act as a container: `helper serve ...` (see runHelper).
const helperEnv = "EPPKIT_KUBELET_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(runHelper(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runHelper is the process the test pods run: an HTTP server on $POD_IP:--http-port with
// /health (200, or 503 after POST /unready), /env (the environment as JSON) and /file (the
// contents of --file); optionally a gRPC health server on --grpc-port; on SIGTERM it prints
// "got SIGTERM" and exits after --term-delay, or ignores it with --ignore-term; --exit-code N
// exits at once; --listen-delay D opens the HTTP port only after D.
func runHelper(args []string) int {
	fs := flag.NewFlagSet("helper", flag.ContinueOnError)
	httpPort := fs.Int("http-port", 0, "")
	grpcPort := fs.Int("grpc-port", 0, "")
	file := fs.String("file", "", "")
	termDelay := fs.Duration("term-delay", 0, "")
	ignoreTerm := fs.Bool("ignore-term", false, "")
	exitCode := fs.Int("exit-code", -1, "")
	listenDelay := fs.Duration("listen-delay", 0, "")
	_ = fs.String("pod", "", "ignored: checks $(POD_NAME) expansion through /env's ARGS")
	if len(args) == 0 || args[0] != "serve" {
		fmt.Println("helper: want `serve` as the first argument, got", args)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *exitCode >= 0 {
		fmt.Println("exiting with", *exitCode)
		return *exitCode
	}
	ip := os.Getenv("POD_IP")
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	var unready atomic.Bool
	if *httpPort > 0 {
		mux := http.NewServeMux()
		mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
			if unready.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		mux.HandleFunc("/unready", func(http.ResponseWriter, *http.Request) { unready.Store(true) })
		mux.HandleFunc("/ready", func(http.ResponseWriter, *http.Request) { unready.Store(false) })
		mux.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
			m := map[string]string{}
			for _, kv := range os.Environ() {
				k, v, _ := strings.Cut(kv, "=")
				m[k] = v
			}
			m["ARGS"] = strings.Join(os.Args[1:], " ")
			_ = json.NewEncoder(w).Encode(m)
		})
		mux.HandleFunc("/file", func(w http.ResponseWriter, r *http.Request) {
			b, err := os.ReadFile(*file)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, _ = w.Write(b)
		})
		time.Sleep(*listenDelay)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(*httpPort)))
		if err != nil {
			fmt.Println("listen:", err)
			return 1
		}
		go func() { _ = http.Serve(l, mux) }()
	}
	if *grpcPort > 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(*grpcPort)))
		if err != nil {
			fmt.Println("listen:", err)
			return 1
		}
		s := grpc.NewServer()
		h := health.NewServer()
		h.SetServingStatus("inference-extension", healthpb.HealthCheckResponse_SERVING)
		healthpb.RegisterHealthServer(s, h)
		go func() { _ = s.Serve(l) }()
	}
	fmt.Println("helper serving on", ip)
	for range sigs {
		fmt.Println("got SIGTERM")
		if *ignoreTerm {
			continue
		}
		time.Sleep(*termDelay)
		return 0
	}
	return 0
}

type env struct {
	cs       kubernetes.Interface
	rest     *rest.Config
	ns       string
	stateDir string
	self     string
}

// startEnv starts kube-apiserver + etcd and a kubelet whose image "helper" is this test binary.
func startEnv(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := apiserver.StartControlPlane(ctx, apiserver.ControlPlaneOptions{})
	if errors.Is(err, apiserver.ErrBinariesMissing) {
		t.Skip(err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(cp.RestConfig.Host, "https://"))
	k, err := kubelet.New(kubelet.Config{Client: cp.Clientset, Kubeconfig: cp.KubeconfigPath, StateDir: state,
		PodCIDR: testPodCIDR, Images: map[string]string{"helper": self}, APIServerHost: host, APIServerPort: port, LeaseDuration: 4 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(kctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("kubelet Run: %v", err)
		}
	})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubelet-test"}}
	if _, err := cp.Clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &env{cs: cp.Clientset, rest: cp.RestConfig, ns: ns.Name, stateDir: state, self: self}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// helperPod is a pod of image "helper" bound to the kubelet's node.
func (e *env) helperPod(name string, args []string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{NodeName: kubelet.DefaultNodeName, TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []corev1.Container{{Name: "main", Image: "helper:v1", Args: append([]string{"serve"}, args...),
				Env: []corev1.EnvVar{
					{Name: helperEnv, Value: "1"},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				}}}},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func (e *env) create(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPod polls the pod until cond holds (1 minute); it fails with the last pod status.
func (e *env) waitPod(t *testing.T, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			last = p
			if cond(p) {
				return p
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := json.MarshalIndent(last, "", "  ")
	t.Fatalf("pod %s: not %s within 1m; last seen:\n%s", name, what, b)
	return nil
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (e *env) podLog(p *corev1.Pod, container string) string {
	b, _ := os.ReadFile(filepath.Join(e.stateDir, "pods", p.Namespace+"_"+p.Name+"_"+string(p.UID), container+".log"))
	return string(b)
}

func TestKubeletAgainstAPIServer(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	cidr := netip.MustParsePrefix(testPodCIDR)

	t.Run("node is Ready with a loopback podCIDR and a renewed lease", func(t *testing.T) {
		// Run registers the node asynchronously: poll for up to 30 s.
		var node *corev1.Node
		readyCond := false
		for deadline := time.Now().Add(30 * time.Second); !readyCond && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			n, err := e.cs.CoreV1().Nodes().Get(ctx, kubelet.DefaultNodeName, metav1.GetOptions{})
			if err != nil {
				continue
			}
			node = n
			for _, c := range node.Status.Conditions {
				readyCond = readyCond || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
			}
		}
		if node == nil || !readyCond {
			t.Fatalf("node %s not registered Ready within 30s: %+v", kubelet.DefaultNodeName, node)
		}
		if node.Spec.PodCIDR != testPodCIDR {
			t.Errorf("podCIDR = %q, want %q", node.Spec.PodCIDR, testPodCIDR)
		}
		var err error
		lease := func() *coordinationv1.Lease {
			var l *coordinationv1.Lease
			for i := 0; i < 50; i++ {
				if l, err = e.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, kubelet.DefaultNodeName, metav1.GetOptions{}); err == nil {
					return l
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Fatalf("lease: %v", err)
			return nil
		}
		first := lease().Spec.RenewTime.Time
		time.Sleep(2500 * time.Millisecond) // LeaseDuration 4s: renewed every 1s
		if second := lease().Spec.RenewTime.Time; !second.After(first) {
			t.Errorf("lease renewTime did not advance in 2.5s: %v then %v", first, second)
		}
	})

	t.Run("runs a pod: IP, downward API env, kubeconfig, configmap volume, http readiness", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: e.ns}, Data: map[string]string{"config.yaml": "hello: world\n"}}
		if _, err := e.cs.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := e.helperPod("web", []string{"--http-port", "8080", "--file", "/etc/cfg/config.yaml", "--pod=$(POD_NAME)"}, func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}},
				PeriodSeconds: 1, FailureThreshold: 1}
			c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
			c.VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}}
			p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}
		})
		e.create(t, p)
		got := e.waitPod(t, "web", "Ready", ready)
		ip, err := netip.ParseAddr(got.Status.PodIP)
		if err != nil || !cidr.Contains(ip) {
			t.Fatalf("podIP %q is not in %s", got.Status.PodIP, cidr)
		}
		if got.Status.Phase != corev1.PodRunning || len(got.Status.ContainerStatuses) != 1 || !got.Status.ContainerStatuses[0].Ready {
			t.Errorf("status: phase %s, containerStatuses %+v; want Running with a ready container", got.Status.Phase, got.Status.ContainerStatuses)
		}
		_, body := get(t, "http://"+got.Status.PodIP+":8080/env")
		var envm map[string]string
		if err := json.Unmarshal(body, &envm); err != nil {
			t.Fatalf("/env: %v: %s", err, body)
		}
		for k, want := range map[string]string{"POD_NAME": "web", "POD_NAMESPACE": e.ns, "POD_IP": got.Status.PodIP, "HOSTNAME": "web"} {
			if envm[k] != want {
				t.Errorf("env %s = %q, want %q", k, envm[k], want)
			}
		}
		for _, k := range []string{"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
			if envm[k] == "" {
				t.Errorf("env %s is empty", k)
			}
		}
		if !strings.Contains(envm["ARGS"], "--pod=web") || strings.Contains(envm["ARGS"], "/etc/cfg") {
			t.Errorf("args %q: want $(POD_NAME) expanded and /etc/cfg rewritten", envm["ARGS"])
		}
		if code, b := get(t, "http://"+got.Status.PodIP+":8080/file"); code != 200 || string(b) != "hello: world\n" {
			t.Errorf("/file = %d %q, want the configmap's config.yaml", code, b)
		}

		// Readiness follows the probe both ways.
		if code, _ := get(t, "http://"+got.Status.PodIP+":8080/unready"); code != 200 {
			t.Fatalf("/unready: %d", code)
		}
		notReady := e.waitPod(t, "web", "not Ready after the probe fails", func(p *corev1.Pod) bool { return !ready(p) })
		if notReady.Status.ContainerStatuses[0].Ready {
			t.Errorf("containerStatuses[0].ready = true while the pod is not Ready")
		}
		get(t, "http://"+got.Status.PodIP+":8080/ready")
		e.waitPod(t, "web", "Ready again", ready)
	})

	t.Run("two pods listen on the same port on their own IPs", func(t *testing.T) {
		for _, n := range []string{"same-a", "same-b"} {
			e.create(t, e.helperPod(n, []string{"--http-port", "8090"}, func(p *corev1.Pod) {
				p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8090)}}, PeriodSeconds: 1}
			}))
		}
		a := e.waitPod(t, "same-a", "Ready (tcp probe)", ready)
		b := e.waitPod(t, "same-b", "Ready (tcp probe)", ready)
		if a.Status.PodIP == b.Status.PodIP {
			t.Fatalf("both pods got IP %s", a.Status.PodIP)
		}
		for _, p := range []*corev1.Pod{a, b} {
			if code, _ := get(t, "http://"+p.Status.PodIP+":8090/health"); code != 200 {
				t.Errorf("%s /health = %d", p.Name, code)
			}
		}
	})

	t.Run("port-forward through the API server reaches the named pod (client-go tools/portforward)", func(t *testing.T) {
		// Reuses same-a and same-b of the previous subtest: both listen on 8090, so only the
		// pod name in the forward tells them apart.
		node, err := e.cs.CoreV1().Nodes().Get(ctx, kubelet.DefaultNodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Status.DaemonEndpoints.KubeletEndpoint.Port == 0 {
			t.Fatalf("node publishes no kubelet endpoint port: %+v", node.Status.DaemonEndpoints)
		}
		for _, n := range []string{"same-a", "same-b"} {
			e.waitPod(t, n, "Ready (tcp probe)", ready)
		}
		pool := portforward.NewPool(e.rest, testWriter{t})
		t.Cleanup(pool.Close)
		for _, n := range []string{"same-a", "same-b", "same-a"} {
			addr, err := pool.Addr(ctx, portforward.Target{Namespace: e.ns, Pod: n, Port: 8090})
			if err != nil {
				t.Fatalf("forward to %s: %v", n, err)
			}
			// Two connections over one forward (a new stream pair each).
			for i := 0; i < 2; i++ {
				code, body := get(t, "http://"+addr+"/env")
				var env map[string]string
				if err := json.Unmarshal(body, &env); code != 200 || err != nil {
					t.Fatalf("GET /env through %s (pod %s): %d %v %s", addr, n, code, err, body)
				}
				if env["POD_NAME"] != n {
					t.Errorf("forward to %s reached pod %q", n, env["POD_NAME"])
				}
			}
		}
		if got := pool.Started(); got != 2 {
			t.Errorf("pool started %d forwards for 2 targets, want 2 (one reused)", got)
		}

		// A port nothing listens on: the kubelet's dial error comes back on the error stream,
		// the client drops the connection and the forward stops; the pool then starts anew.
		dead := portforward.Target{Namespace: e.ns, Pod: "same-a", Port: 8091}
		addr, err := pool.Addr(ctx, dead)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/env"); err == nil {
			resp.Body.Close()
			t.Fatalf("GET through a forward to a closed port: HTTP %d, want a transport error", resp.StatusCode)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			addr2, err := pool.Addr(ctx, dead)
			if err != nil {
				t.Fatal(err)
			}
			if addr2 != addr {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("forward to the closed port %s still running 10s after the dial error", dead)
			}
			time.Sleep(100 * time.Millisecond)
		}

		// A pod that does not exist: the upgrade is refused and Start says so.
		if _, err := portforward.Start(ctx, e.rest, portforward.Target{Namespace: e.ns, Pod: "no-such-pod", Port: 8090}, nil); err == nil {
			t.Error("Start to a missing pod succeeded")
		}
	})

	t.Run("grpc readiness probe", func(t *testing.T) {
		e.create(t, e.helperPod("grpc", []string{"--grpc-port", "9003"}, func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9003, Service: ptr.To("inference-extension")}}, PeriodSeconds: 1}
		}))
		e.waitPod(t, "grpc", "Ready (grpc probe)", ready)
		// A probe of a service the server does not know never makes the pod Ready.
		e.create(t, e.helperPod("grpc-unknown", []string{"--grpc-port", "9003"}, func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9003, Service: ptr.To("nope")}}, PeriodSeconds: 1}
		}))
		p := e.waitPod(t, "grpc-unknown", "Running with a failed probe in its Ready condition", func(p *corev1.Pod) bool {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "readiness probe failed") {
					return true
				}
			}
			return false
		})
		if ready(p) {
			t.Errorf("pod probing an unknown gRPC service is Ready")
		}
	})

	t.Run("unknown image: clear waiting reason, no hang", func(t *testing.T) {
		e.create(t, e.helperPod("unknown", nil, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "nginx:1.27" }))
		p := e.waitPod(t, "unknown", "waiting with "+kubelet.ReasonImageNotMapped, func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == kubelet.ReasonImageNotMapped
		})
		if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "nginx:1.27") {
			t.Errorf("waiting message %q does not name the image", msg)
		}
		if p.Status.Phase != corev1.PodPending || ready(p) {
			t.Errorf("phase %s ready %v; want Pending, not Ready", p.Status.Phase, ready(p))
		}
		if err := e.cs.CoreV1().Pods(e.ns).Delete(ctx, "unknown", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitGone(t, "unknown", 10*time.Second)
	})

	httpProbe := func(port int32, period, failures int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(port)}},
			PeriodSeconds: period, FailureThreshold: failures}
	}
	status := func(p *corev1.Pod) corev1.ContainerStatus {
		if len(p.Status.ContainerStatuses) != 1 {
			return corev1.ContainerStatus{}
		}
		return p.Status.ContainerStatuses[0]
	}

	t.Run("liveness probe failure kills and restarts the container; restartCount counts it", func(t *testing.T) {
		e.create(t, e.helperPod("live", []string{"--http-port", "8140"}, func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.LivenessProbe, c.ReadinessProbe = httpProbe(8140, 1, 2), httpProbe(8140, 1, 1)
			// Without a startup probe, liveness starts at once and, on a loaded machine, can kill
			// the helper before it listens (as a real kubelet would): the startup probe holds
			// liveness back until the first success.
			c.StartupProbe = httpProbe(8140, 1, 30)
			p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
		}))
		p := e.waitPod(t, "live", "Ready", ready)
		if cs := status(p); cs.RestartCount != 0 || cs.Started == nil || !*cs.Started {
			t.Fatalf("healthy container: restartCount %d started %v, want 0 true", cs.RestartCount, ptr.Deref(cs.Started, false))
		}
		if code, _ := get(t, "http://"+p.Status.PodIP+":8140/unready"); code != 200 {
			t.Fatalf("POST /unready: %d", code)
		}
		// Two failed liveness probes (1 s apart), SIGTERM, 1 s back-off, a new healthy process.
		p = e.waitPod(t, "live", "restarted and Ready again", func(p *corev1.Pod) bool {
			return status(p).RestartCount >= 1 && ready(p)
		})
		cs := status(p)
		if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil {
			t.Errorf("after one liveness failure: restartCount %d lastState %+v, want 1 and a terminated state", cs.RestartCount, cs.LastTerminationState)
		}
		if code, _ := get(t, "http://"+p.Status.PodIP+":8140/health"); code != 200 {
			t.Errorf("the restarted process is not the healthy new one: /health %d", code)
		}
		evs, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=live"})
		if err != nil {
			t.Fatal(err)
		}
		var killing bool
		for _, ev := range evs.Items {
			killing = killing || (ev.Reason == "Killing" && strings.Contains(ev.Message, "failed liveness probe"))
		}
		if !killing {
			t.Errorf("no Killing event naming the liveness probe among %d events", len(evs.Items))
		}
	})

	t.Run("startup probe gates readiness and liveness until it succeeds", func(t *testing.T) {
		// The port opens after 3 s. A liveness probe with failureThreshold 1 would kill the
		// container at its first probe if it ran before the startup probe succeeded.
		e.create(t, e.helperPod("slow-start", []string{"--http-port", "8120", "--listen-delay", "3s"}, func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.StartupProbe, c.LivenessProbe, c.ReadinessProbe = httpProbe(8120, 1, 20), httpProbe(8120, 1, 1), httpProbe(8120, 1, 1)
		}))
		p := e.waitPod(t, "slow-start", "running, not started", func(p *corev1.Pod) bool {
			cs := status(p)
			return cs.State.Running != nil && cs.Started != nil && !*cs.Started
		})
		if ready(p) {
			t.Errorf("pod Ready before its startup probe succeeded")
		}
		p = e.waitPod(t, "slow-start", "Ready", ready)
		if cs := status(p); cs.RestartCount != 0 || cs.Started == nil || !*cs.Started {
			t.Errorf("restartCount %d started %v, want 0 true (liveness must not run before startup succeeds)", cs.RestartCount, ptr.Deref(cs.Started, false))
		}
	})

	t.Run("startup probe failure restarts the container, never Ready", func(t *testing.T) {
		// The startup probe checks a port nothing listens on: 2 failures, kill, restart.
		e.create(t, e.helperPod("no-start", []string{"--http-port", "8130"}, func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8131)}},
				PeriodSeconds: 1, FailureThreshold: 2}
			c.ReadinessProbe = httpProbe(8130, 1, 1)
			p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
		}))
		sawReady := false
		e.waitPod(t, "no-start", "restarted after the startup probe failed", func(p *corev1.Pod) bool {
			sawReady = sawReady || ready(p)
			cs := status(p)
			return cs.RestartCount >= 1 && cs.LastTerminationState.Terminated != nil
		})
		if sawReady {
			t.Error("pod was Ready although its startup probe never succeeded")
		}
	})

	t.Run("crashing container restarts with back-off", func(t *testing.T) {
		e.create(t, e.helperPod("crash", []string{"--exit-code", "3"}, nil))
		p := e.waitPod(t, "crash", "restarted at least once", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1 &&
				p.Status.ContainerStatuses[0].LastTerminationState.Terminated != nil
		})
		if code := p.Status.ContainerStatuses[0].LastTerminationState.Terminated.ExitCode; code != 3 {
			t.Errorf("last exit code %d, want 3", code)
		}
		// restartPolicy Never: the pod fails and stays failed.
		e.create(t, e.helperPod("crash-never", []string{"--exit-code", "4"}, func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }))
		e.waitPod(t, "crash-never", "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	})

	t.Run("deletion: SIGTERM, grace period, then the pod object is removed", func(t *testing.T) {
		// The readiness probe makes Ready mean the helper has installed its SIGTERM handler.
		probe := func(port int32) func(*corev1.Pod) {
			return func(p *corev1.Pod) {
				p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(port)}}, PeriodSeconds: 1}
			}
		}
		e.create(t, e.helperPod("term", []string{"--http-port", "8070", "--term-delay", "1s"}, probe(8070)))
		p := e.waitPod(t, "term", "Ready", ready)
		start := time.Now()
		if err := e.cs.CoreV1().Pods(e.ns).Delete(ctx, "term", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitGone(t, "term", 10*time.Second)
		if el := time.Since(start); el < time.Second {
			t.Errorf("pod gone after %v, before the 1s the process takes after SIGTERM", el)
		}
		if log := e.podLog(p, "main"); !strings.Contains(log, "got SIGTERM") {
			t.Errorf("container log has no SIGTERM line:\n%s", log)
		}

		// A process that ignores SIGTERM is killed when the grace period (2s) ends.
		e.create(t, e.helperPod("stubborn", []string{"--http-port", "8071", "--ignore-term"}, probe(8071)))
		e.waitPod(t, "stubborn", "Ready", ready)
		start = time.Now()
		if err := e.cs.CoreV1().Pods(e.ns).Delete(ctx, "stubborn", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](2)}); err != nil {
			t.Fatal(err)
		}
		e.waitGone(t, "stubborn", 15*time.Second)
		if el := time.Since(start); el < 2*time.Second {
			t.Errorf("stubborn pod gone after %v, before its 2s grace period", el)
		}
	})
}

func (e *env) waitGone(t *testing.T, name string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		_, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pod %s still exists %v after deletion", name, within)
}
