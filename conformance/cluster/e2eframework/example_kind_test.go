package e2eframework_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/envfuncs"
	"sigs.k8s.io/e2e-framework/pkg/features"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/cluster/clustertarget"
	"github.com/eppkit/eppkit/conformance/cluster/e2eframework"
	"github.com/eppkit/eppkit/conformance/cluster/kind"
	"github.com/eppkit/eppkit/manifests"
)

// The example: what an implementer's e2e-framework test looks like. It creates a kind cluster
// through eppkit's provider, loads the eppkit image, and deploys with e2eframework.Setup what the
// conformance run tests — one fake vLLM pod per fleet member, the InferencePool over them and the
// reference EPP — into exampleNamespace; a first feature checks that pool is there and Ready, and
// e2eframework.Conformance runs eppkit's conformance suite against that very pool (the EPP and
// EPP-Routing profiles with the features below) and writes the same reports as `eppkit
// conformance --report-output` to out/reports-e2e-framework/. The features not claimed are the
// ones whose tests need processes on this host the EPP cannot reach (DataParallelRanks,
// PredictedLatency). It needs a container engine and the eppkit:dev image (`make image`), so it
// runs only when EPPKIT_E2E_FRAMEWORK=1 (make e2e-framework); the node image follows
// EPPKIT_KIND_NODE_IMAGE as suites/e2e does.
const (
	exampleCluster   = "eppkit-kind-e2ef"
	exampleNamespace = "eppkit-e2ef"
	exampleReports   = "../../../out/reports-e2e-framework"
)

var (
	testenv env.Environment
	opts    e2eframework.ConformanceOptions
)

func TestMain(m *testing.M) {
	if os.Getenv("EPPKIT_E2E_FRAMEWORK") != "1" {
		fmt.Println("e2eframework example: skipped (needs a container engine and eppkit:dev; run make e2e-framework or set EPPKIT_E2E_FRAMEWORK=1)")
		os.Exit(m.Run())
	}
	features, err := conformance.ParseFeatures("OpenAIRequestParsing,PrefixCacheAffinity,QueueAwareness,KVCacheAwareness,LoRAAffinity,EndpointChurn,RequestShedding")
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	opts = e2eframework.ConformanceOptions{
		Selection: conformance.Selection{Profiles: []conformance.Profile{conformance.ProfileEPP, conformance.ProfileEPPRouting},
			SupportedFeatures: features},
		Namespace: exampleNamespace,
		// The reference's conformance config: the features claimed above, lora-affinity-scorer
		// among them (its default config has no LoRA scorer, and LoRAAffinity fails without it).
		ConfigFile: "../../../manifests/epp-configs/conformance.yaml",
		ReportDir:  exampleReports,
		Implementation: confv1.Implementation{Organization: "eppkit", Project: "reference-epp", URL: "https://github.com/eppkit/eppkit",
			Version: "dev", Contact: []string{"https://github.com/eppkit/eppkit/issues"}},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	testenv = env.New()
	provider := e2eframework.Kind(kind.Options{NodeImage: os.Getenv(kind.NodeImageEnv), RecreateUnready: true, Log: os.Stderr})
	testenv.Setup(
		envfuncs.CreateCluster(provider, exampleCluster),
		envfuncs.LoadImageToCluster(exampleCluster, manifests.Image),
		e2eframework.Setup(opts),
	)
	testenv.Finish(e2eframework.Teardown())
	if os.Getenv("EPPKIT_KEEP_CLUSTER") != "true" {
		testenv.Finish(envfuncs.DestroyCluster(exampleCluster))
	}
	os.Exit(testenv.Run(m))
}

func TestKindExample(t *testing.T) {
	if testenv == nil {
		t.Skip("EPPKIT_E2E_FRAMEWORK is not 1")
	}
	deployed := features.New("deployed pool").
		Assess("the fleet pods, the InferencePool and the EPP run in the namespace", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			cs, err := kubernetes.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			pods, err := cs.CoreV1().Pods(exampleNamespace).List(ctx, metav1.ListOptions{LabelSelector: clustertarget.FleetLabel})
			if err != nil {
				t.Fatal(err)
			}
			ready := 0
			for _, p := range pods.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if ready == 0 || ready != len(pods.Items) {
				t.Errorf("fleet pods: %d of %d Ready", ready, len(pods.Items))
			}
			dep, err := cs.AppsV1().Deployments(exampleNamespace).Get(ctx, manifests.EPPDeployment, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if dep.Status.ReadyReplicas == 0 {
				t.Errorf("EPP deployment %s: no replica Ready", manifests.EPPDeployment)
			}
			return ctx
		}).Feature()
	testenv.Test(t, deployed, e2eframework.Conformance(opts))
}
