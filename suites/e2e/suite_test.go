// Package e2e_test is the cluster end-to-end suite (DESIGN.md test tier 5): manifests/k8s applied
// to a real cluster — the fake vLLM Deployment behind an InferencePool, the reference EPP as a
// Deployment + Service + ConfigMap, and on kind/existing the Envoy Deployment — and requests sent
// through a gateway. Where each request landed is read from the model server's x-inference-pod
// header.
//
// Providers (--provider, env EPPKIT_PROVIDER, default kind):
//   - kind (conformance/cluster/kind: sigs.k8s.io/kind in process; needs Docker, Podman or
//     nerdctl — hack/container-engine.sh — and the image eppkit:dev built locally, `make image`).
//     The node image is the pinned kindest/node when the engine has or can pull it, else the
//     offline one of `eppkit tools build kind-node` (--node-image / EPPKIT_KIND_NODE_IMAGE
//     choose; "offline" asks for that one). Gateway: Envoy (manifests/k8s/envoy.yaml; listener
//     8081 = FailOpen, 8082 = FailClose) when its image is in the engine (it is loaded into the
//     node), else the stand-in (fakes/gateway/clustergw), which resolves InferencePool →
//     endpointPickerRef Service → EndpointSlice → EPP pod itself and dials pods through
//     port-forwards. Pods are reached through the API server's pods/portforward only (the EPP's
//     /metrics, the fake vLLM admin API). A listed cluster of the suite's name with no Ready node
//     is deleted and created again.
//   - existing (any kubeconfig, --context): as kind; the image eppkit:dev must be pullable by the
//     cluster (--image names another).
//
// --gateway=standin|envoy (env EPPKIT_E2E_GATEWAY) and --reach=direct|port-forward (env
// EPPKIT_E2E_REACH) override the defaults (--reach=direct dials pod IPs, for clusters whose pod
// network this machine routes to).
//
// One namespace per run (eppkit-e2e-<seed>). On failure the suite prints pods, events and log
// tails and exports every log under out/e2e/<namespace>/. EPPKIT_KEEP_CLUSTER=true keeps the
// namespace and the cluster (the next run then reuses it in about a second).
//
//	make e2e                              # builds eppkit:dev, then runs this suite on kind
//	go run github.com/onsi/ginkgo/v2/ginkgo --label-filter=e2e ./suites/e2e -- --provider=existing --context=C
package e2e_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/eppkit/eppkit/conformance/cluster"
	"github.com/eppkit/eppkit/conformance/cluster/apply"
	"github.com/eppkit/eppkit/conformance/cluster/existing"
	"github.com/eppkit/eppkit/conformance/cluster/kind"
	"github.com/eppkit/eppkit/conformance/cluster/portforward"
	"github.com/eppkit/eppkit/fakes/gateway/clustergw"
	"github.com/eppkit/eppkit/internal/testseed"
	"github.com/eppkit/eppkit/manifests"
)

// Names, sizes and bounds of the suite.
const (
	// suiteLabel selects the suite with --label-filter.
	suiteLabel = "e2e"
	// failClosePool is a second InferencePool over the same pods and EPP Service whose
	// failureMode is FailClose (manifests' pool is FailOpen).
	failClosePool = "fake-vllm-failclose"
	// initialReplicas is the fake vLLM Deployment's replica count in manifests/k8s.
	initialReplicas = 3
	// eppReplicas is the EPP Deployment's replica count in manifests/k8s: one leader (Ready) and
	// one warm follower (not Ready: readiness is the leader's alone).
	eppReplicas = 2
	// createTimeout bounds bringing the cluster up (a new kind cluster on a loaded 2-core
	// machine takes 25–90 s; one bounded retry of the creation is inside the provider).
	createTimeout = 5 * time.Minute
	// rolloutTimeout bounds every wait for Deployments and pods.
	rolloutTimeout = 2 * time.Minute
	// discoveryWindow bounds how long a change of pods (Ready, scaled) may take to reach the
	// routing: kubelet probe period 1 s × failureThreshold 2, the EndpointSlice controller, the
	// EPP's pod watch, and a loaded machine.
	discoveryWindow = 30 * time.Second
	// requestTimeout bounds one request through the gateway.
	requestTimeout = 20 * time.Second
	// staleThreshold and scrapeTimeout are given to the reference EPP: its defaults (1 s, 10
	// scrape intervals) turn slow scrapes on a loaded machine into stale endpoints and noise.
	staleThreshold = "5s"
	scrapeTimeout  = "3s"
)

var (
	flagProvider    = flag.String("provider", envOr("EPPKIT_PROVIDER", "kind"), "cluster provider: kind or existing (env EPPKIT_PROVIDER)")
	flagClusterName = flag.String("cluster-name", envOr("EPPKIT_CLUSTER_NAME", "eppkit-e2e"), "cluster name (env EPPKIT_CLUSTER_NAME)")
	flagContext     = flag.String("context", os.Getenv("EPPKIT_CONTEXT"), "kubeconfig context for --provider existing (env EPPKIT_CONTEXT)")
	flagOut         = flag.String("out", envOr("EPPKIT_E2E_OUT", "../../out/e2e"), "where logs are exported on failure (env EPPKIT_E2E_OUT)")
	flagGateway     = flag.String("gateway", os.Getenv("EPPKIT_E2E_GATEWAY"), "gateway: standin or envoy (env EPPKIT_E2E_GATEWAY; default envoy, on kind the stand-in when Envoy's image is not in the engine)")
	flagImage       = flag.String("image", os.Getenv("EPPKIT_E2E_IMAGE"), "run the manifests' eppkit image as this one (env EPPKIT_E2E_IMAGE; for existing clusters that pull from a registry)")
	flagReach       = flag.String("reach", os.Getenv("EPPKIT_E2E_REACH"), "how pods are reached: direct or port-forward (env EPPKIT_E2E_REACH; default port-forward)")
	flagNodeImage   = flag.String("node-image", os.Getenv(kind.NodeImageEnv), "kind node image, or \"offline\" for the one of `eppkit tools build kind-node` (env "+kind.NodeImageEnv+"; default: the pinned kindest/node when it can be had, else the offline one)")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func keepCluster() bool { return os.Getenv("EPPKIT_KEEP_CLUSTER") == "true" }

func TestE2E(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Cluster end-to-end suite")
}

// env is the suite's cluster, namespace, clients and gateways.
type env struct {
	provider cluster.Provider
	rest     *rest.Config
	cs       kubernetes.Interface
	dyn      dynamic.Interface
	ns       string
	seed     int64
	// gateway and reach are the modes in use (gatewayStandin/gatewayEnvoy,
	// reachDirect/reachPortForward); forwards serves reachPortForward.
	gateway, reach string
	forwards       *portforward.Pool
	// failOpen and failClose send through the FailOpen and the FailClose pool.
	failOpen, failClose gatewayClient
}

var e *env

var _ = ginkgo.JustAfterEach(func() {
	if ginkgo.CurrentSpecReport().Failed() {
		seed := testseed.Seed()
		ginkgo.GinkgoWriter.Println(testseed.Repro{Seed: seed, Suite: "e2e", LabelFilter: suiteLabel,
			Focus: ginkgo.CurrentSpecReport().LeafNodeText, Env: []string{"EPPKIT_PROVIDER=" + *flagProvider}})
		if e != nil {
			dump(context.Background(), e)
		}
	}
})

// newProvider builds the --provider.
func newProvider(name string) (cluster.Provider, error) {
	switch name {
	case "existing":
		// Any kubeconfig ($KUBECONFIG or ~/.kube/config, --context). Envoy is the gateway and
		// pods are reached by port-forward unless --gateway/--reach say otherwise; the image
		// eppkit:dev must be pullable by the cluster.
		return existing.New(existing.Options{Context: *flagContext, DeleteTimeout: 2 * time.Minute})
	case "kind":
		// Needs a container engine (Create fails with kind.ErrNoContainerEngine otherwise) and
		// the image eppkit:dev built locally (`make image`); LoadImage imports it into the nodes.
		return kind.New(kind.Options{Name: *flagClusterName, NodeImage: *flagNodeImage, RecreateUnready: true, Log: ginkgo.GinkgoWriter})
	}
	return nil, fmt.Errorf("--provider %q: want kind or existing", name)
}

var _ = ginkgo.BeforeSuite(func(ctx context.Context) {
	seed := testseed.Seed()
	gwMode, reach := gatewayEnvoy, reachPortForward
	gwWhy := "the default"
	if *flagProvider == "kind" {
		gwMode, gwWhy = kindGateway(ctx)
	}
	if *flagGateway != "" {
		gwMode, gwWhy = *flagGateway, "--gateway / EPPKIT_E2E_GATEWAY"
	}
	if *flagReach != "" {
		reach = *flagReach
	}
	gomega.Expect(checkModes(gwMode, reach)).To(gomega.Succeed())
	ginkgo.GinkgoWriter.Printf("e2e: provider %s, gateway %s (%s), reach %s, seed %d\n", *flagProvider, gwMode, gwWhy, reach, seed)
	ginkgo.AddReportEntry("gateway", fmt.Sprintf("%s (%s)", gwMode, gwWhy), ginkgo.ReportEntryVisibilityAlways)
	p, err := newProvider(*flagProvider)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	start := time.Now()
	gomega.Expect(p.Create(ctx)).To(gomega.Succeed(), "bring up the %s cluster", p.Name())
	what := fmt.Sprintf("%s cluster %q", p.Name(), *flagClusterName)
	if p.Name() == "existing" {
		what = "existing cluster (kubeconfig " + p.KubeconfigPath() + ")"
	}
	if kp, ok := p.(*kind.Provider); ok {
		if img, why := kp.NodeImage(); img != "" {
			what += fmt.Sprintf(", node image %s (%s)", img, why)
		} else {
			what += " (reused)"
		}
	}
	ginkgo.AddReportEntry("cluster up", fmt.Sprintf("%s up in %s", what, time.Since(start).Round(time.Millisecond)), ginkgo.ReportEntryVisibilityAlways)
	e = &env{provider: p, seed: seed, gateway: gwMode, reach: reach}
	ginkgo.DeferCleanup(func(ctx context.Context) {
		if keepCluster() {
			ginkgo.GinkgoWriter.Printf("e2e: EPPKIT_KEEP_CLUSTER=true: keeping namespace %s and the %s cluster (kubeconfig %s)\n", e.ns, p.Name(), p.KubeconfigPath())
			return
		}
		gomega.Expect(p.Destroy(ctx)).To(gomega.Succeed())
	}, ginkgo.NodeTimeout(2*time.Minute))

	if err := p.LoadImage(ctx, manifests.Image); errors.Is(err, cluster.ErrImageLoadUnsupported) {
		ginkgo.GinkgoWriter.Printf("e2e: %s cannot load images (%v): %s must be pullable by the cluster (--image / EPPKIT_E2E_IMAGE names another)\n", p.Name(), err, manifests.Image)
	} else {
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	}
	if p.Name() == "kind" && gwMode == gatewayEnvoy {
		// The node cannot pull: Envoy's image comes from the engine too.
		gomega.Expect(p.LoadImage(ctx, manifests.EnvoyImage)).To(gomega.Succeed())
	}
	e.rest, err = clientcmd.BuildConfigFromFlags("", p.KubeconfigPath())
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	e.rest.QPS, e.rest.Burst = 50, 100
	e.cs, err = kubernetes.NewForConfig(e.rest)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	e.dyn, err = dynamic.NewForConfig(e.rest)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	if reach == reachPortForward {
		e.forwards = portforward.NewPool(e.rest, ginkgo.GinkgoWriter)
		ginkgo.DeferCleanup(e.forwards.Close)
	}

	e.ns = fmt.Sprintf("eppkit-e2e-%d", seed)
	if seed < 0 {
		e.ns = fmt.Sprintf("eppkit-e2e-m%d", -seed)
	}
	// A namespace left by a kept run with the same seed is removed first.
	if _, err := e.cs.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{}); err == nil {
		deleteNamespace(ctx, e.cs, e.ns)
	}
	gomega.Expect(cluster.CreateNamespace(ctx, p, e.cs, e.ns, map[string]string{"eppkit.io/e2e": "true"})).To(gomega.Succeed())
	gomega.Expect(cluster.WaitForDefaultServiceAccount(ctx, e.cs, e.ns, time.Minute)).To(gomega.Succeed())
	ginkgo.DeferCleanup(func(ctx context.Context) {
		if ginkgo.CurrentSpecReport().Failed() {
			dump(ctx, e)
		}
		if !keepCluster() {
			deleteNamespace(ctx, e.cs, e.ns)
		}
	}, ginkgo.NodeTimeout(2*time.Minute))

	ginkgo.By("applying manifests/k8s to namespace " + e.ns)
	objs, err := manifests.K8sObjects()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	objs = selectObjects(objs, gwMode)
	objs = append(objs, failClosePoolObject(objs))
	applier, err := apply.New(e.rest)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	mutators := []func(*unstructured.Unstructured) error{tuneEPP}
	if *flagImage != "" {
		mutators = append(mutators, apply.SetImage(manifests.Image, *flagImage))
	}
	mutate := func(u *unstructured.Unstructured) error {
		for _, m := range mutators {
			if err := m(u); err != nil {
				return err
			}
		}
		return nil
	}
	_, err = applier.Apply(ctx, objs, apply.Options{Namespace: e.ns, Mutate: mutate})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())

	ginkgo.By("waiting for the fake vLLM and EPP Deployments")
	waitDeployment(ctx, manifests.FakeVLLMDeployment, initialReplicas)
	waitEPP(ctx, eppReplicas)

	switch gwMode {
	case gatewayStandin:
		ginkgo.By("starting the gateway stand-ins for the FailOpen and FailClose pools")
		e.failOpen = standin{startGateway(ctx, manifests.PoolName)}
		e.failClose = standin{startGateway(ctx, failClosePool)}
	case gatewayEnvoy:
		ginkgo.By("waiting for the Envoy Deployment (listener FailOpen :8081, FailClose :8082)")
		// Envoy's listeners carry the failure modes (manifests/envoy/envoy.yaml); the
		// FailClose InferencePool copy is then only an object the EPP also watches.
		waitEnvoy(ctx)
		e.failOpen = &envoyGW{port: manifests.EnvoyFailOpenPort}
		e.failClose = &envoyGW{port: manifests.EnvoyFailClosePort}
	}
	// The EPP has discovered the pool once a request through each gateway is served by it.
	for _, gw := range []gatewayClient{e.failOpen, e.failClose} {
		gomega.Eventually(func(g gomega.Gomega) {
			r := send(ctx, gw, "warm-up "+fmt.Sprint(seed))
			g.Expect(r.Status).To(gomega.Equal(200), "%s: body %s", gw, r.Body)
			g.Expect(r.FailedOpen).To(gomega.BeFalse(), "%s failed open", gw)
		}).WithContext(ctx).WithTimeout(discoveryWindow).WithPolling(500 * time.Millisecond).Should(gomega.Succeed())
	}
}, ginkgo.NodeTimeout(createTimeout+3*rolloutTimeout))

// selectObjects drops Envoy (its Deployment, Service and ConfigMap) unless it is the gateway: with
// the stand-in it has no part to play.
func selectObjects(objs []*unstructured.Unstructured, gwMode string) []*unstructured.Unstructured {
	if gwMode == gatewayEnvoy {
		return objs
	}
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if strings.HasPrefix(o.GetName(), manifests.EnvoyDeployment) {
			continue
		}
		out = append(out, o)
	}
	return out
}

// failClosePoolObject copies the manifests' InferencePool as failClosePool with failureMode
// FailClose.
func failClosePoolObject(objs []*unstructured.Unstructured) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == "InferencePool" && o.GetName() == manifests.PoolName {
			c := o.DeepCopy()
			c.SetName(failClosePool)
			gomega.Expect(unstructured.SetNestedField(c.Object, "FailClose", "spec", "endpointPickerRef", "failureMode")).To(gomega.Succeed())
			return c
		}
	}
	ginkgo.Fail("manifests/k8s has no InferencePool " + manifests.PoolName)
	return nil
}

// tuneEPP adds --stale-threshold and --metrics-scrape-timeout to the reference EPP's args (see
// the constants) unless the manifest already sets them.
func tuneEPP(u *unstructured.Unstructured) error {
	if u.GetKind() != "Deployment" || u.GetName() != manifests.EPPDeployment {
		return nil
	}
	containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		return fmt.Errorf("deployment %s: no containers: %v", u.GetName(), err)
	}
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if len(args) == 0 || args[0] != "reference-epp" {
		return nil // another EPP: leave it alone
	}
	joined := strings.Join(args, " ")
	if !strings.Contains(joined, "--stale-threshold") {
		args = append(args, "--stale-threshold", staleThreshold)
	}
	if !strings.Contains(joined, "--metrics-scrape-timeout") {
		args = append(args, "--metrics-scrape-timeout", scrapeTimeout)
	}
	anyArgs := make([]any, len(args))
	for i, a := range args {
		anyArgs[i] = a
	}
	c["args"] = anyArgs
	containers[0] = c
	return unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

func startGateway(ctx context.Context, pool string) *clustergw.Gateway {
	cfg := clustergw.Config{Client: e.cs, Dynamic: e.dyn, Namespace: e.ns, Pool: pool, MessageTimeout: requestTimeout, Logger: newLogger()}
	if e.reach == reachPortForward {
		// Pod IPs (the EPP's, the picked endpoint's) through port-forwards, never routed.
		cfg.Dial = e.forwards.PodDialer(portforward.LookupByIP(e.cs), e.ns)
	}
	gw, err := clustergw.New(cfg)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(gw.Start(context.Background())).To(gomega.Succeed())
	ginkgo.DeferCleanup(gw.Close)
	return gw
}

// deleteNamespace deletes ns and waits (up to 2 minutes) until it is gone, so its pods are
// stopped before the cluster is reused or destroyed.
func deleteNamespace(ctx context.Context, cs kubernetes.Interface, ns string) {
	err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err != nil {
		ginkgo.GinkgoWriter.Printf("e2e: delete namespace %s: %v\n", ns, err)
		return
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	ginkgo.GinkgoWriter.Printf("e2e: namespace %s still terminating after 2m\n", ns)
}

// dump prints pods, events and log tails of the run's namespace and exports every log.
func dump(ctx context.Context, e *env) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	w := ginkgo.GinkgoWriter
	fmt.Fprintf(w, "==== e2e dump: namespace %s ====\n", e.ns)
	if e.cs != nil && e.ns != "" {
		if pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, p := range pods.Items {
				fmt.Fprintf(w, "pod %s phase=%s ip=%s ready=%v\n", p.Name, p.Status.Phase, p.Status.PodIP, podReady(&p))
				for _, c := range p.Status.Conditions {
					if c.Status != corev1.ConditionTrue {
						fmt.Fprintf(w, "    %s=%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
					}
				}
				for _, cs := range p.Status.ContainerStatuses {
					if cs.State.Waiting != nil {
						fmt.Fprintf(w, "    container %s waiting: %s %s\n", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
					}
				}
				for _, c := range p.Spec.Containers {
					// The kubelet's containerLogs through the API server.
					b, _ := e.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: ptr.To[int64](15)}).DoRaw(ctx)
					lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
					if len(lines) > 15 {
						lines = lines[len(lines)-15:]
					}
					fmt.Fprintf(w, "    --- last lines of %s/%s ---\n    %s\n", p.Name, c.Name, strings.Join(lines, "\n    "))
				}
			}
		}
		if evs, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, ev := range evs.Items {
				fmt.Fprintf(w, "event %s %s/%s %s: %s\n", ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
			}
		}
		if deps, err := e.cs.AppsV1().Deployments(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, d := range deps.Items {
				fmt.Fprintf(w, "deployment %s replicas=%d ready=%d available=%d\n", d.Name, ptrVal(d.Spec.Replicas), d.Status.ReadyReplicas, d.Status.AvailableReplicas)
			}
		}
	}
	dir := filepath.Join(*flagOut, e.ns)
	if err := e.provider.ExportLogs(ctx, dir); err != nil {
		fmt.Fprintf(w, "export logs: %v\n", err)
	} else {
		abs, _ := filepath.Abs(dir)
		fmt.Fprintf(w, "logs exported to %s\n", abs)
	}
}

func ptrVal(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// waitDeployment waits until the Deployment has replicas Ready (and updated) replicas and
// exactly that many pods exist, failing fast with the pods' waiting reasons.
func waitDeployment(ctx context.Context, name string, replicas int32) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(func(g gomega.Gomega) {
		d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(d.Status.ObservedGeneration).To(gomega.BeNumerically(">=", d.Generation))
		pods := deploymentPods(ctx, g, d)
		for _, p := range pods {
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" {
					gomega.StopTrying(fmt.Sprintf("deployment %s: pod %s cannot start: %s: %s", name, p.Name, w.Reason, w.Message)).Now()
				}
			}
		}
		g.Expect(d.Status.ReadyReplicas).To(gomega.Equal(replicas), "deployment %s ready replicas", name)
		g.Expect(d.Status.UpdatedReplicas).To(gomega.Equal(replicas), "deployment %s updated replicas", name)
		g.Expect(pods).To(gomega.HaveLen(int(replicas)), "deployment %s pods (terminating ones included)", name)
	}).WithContext(ctx).WithTimeout(rolloutTimeout).WithPolling(250 * time.Millisecond).Should(gomega.Succeed())
}

// waitEPP waits until the EPP Deployment runs replicas pods, all updated, of which exactly one
// (the leader) is Ready — none when replicas is 0 — and no pod is terminating.
func waitEPP(ctx context.Context, replicas int32) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(func(g gomega.Gomega) {
		d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, manifests.EPPDeployment, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(d.Status.ObservedGeneration).To(gomega.BeNumerically(">=", d.Generation))
		pods := deploymentPods(ctx, g, d)
		g.Expect(pods).To(gomega.HaveLen(int(replicas)), "EPP pods (terminating ones included)")
		g.Expect(d.Status.UpdatedReplicas).To(gomega.Equal(replicas), "EPP updated replicas")
		g.Expect(d.Status.ReadyReplicas).To(gomega.Equal(min(replicas, 1)), "EPP Ready replicas (the leader alone)")
	}).WithContext(ctx).WithTimeout(rolloutTimeout).WithPolling(250 * time.Millisecond).Should(gomega.Succeed())
}

// deploymentPods lists the pods selected by d's selector.
func deploymentPods(ctx context.Context, g gomega.Gomega, d *appsv1.Deployment) []corev1.Pod {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	return pods.Items
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
