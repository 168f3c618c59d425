package e2eframework_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/envfuncs"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/cluster/e2eframework"
	"github.com/eppkit/eppkit/conformance/cluster/kind"
	"github.com/eppkit/eppkit/manifests"
)

// The example: what an implementer's e2e-framework test looks like. It creates a kind cluster
// through eppkit's provider, loads the eppkit image, deploys the fake vLLM fleet, the
// InferencePool and the reference EPP, checks they run, and runs eppkit's conformance suite
// (the EPP-Routing profile with the features below) against an EPP in the cluster. The features
// not claimed are the ones whose tests need processes on this host the EPP cannot reach
// (DataParallelRanks, PredictedLatency). It needs a
// container engine and the eppkit:dev image (`make image`), so it runs only when
// EPPKIT_E2E_FRAMEWORK=1 (make e2e-framework); the node image follows EPPKIT_KIND_NODE_IMAGE
// as suites/e2e does.
const (
	exampleCluster   = "eppkit-kind-e2ef"
	exampleNamespace = "eppkit-e2ef"
)

var testenv env.Environment

func TestMain(m *testing.M) {
	if os.Getenv("EPPKIT_E2E_FRAMEWORK") != "1" {
		fmt.Println("e2eframework example: skipped (needs a container engine and eppkit:dev; run make e2e-framework or set EPPKIT_E2E_FRAMEWORK=1)")
		os.Exit(m.Run())
	}
	testenv = env.New()
	provider := e2eframework.Kind(kind.Options{NodeImage: os.Getenv(kind.NodeImageEnv), RecreateUnready: true, Log: os.Stderr})
	testenv.Setup(
		envfuncs.CreateCluster(provider, exampleCluster),
		envfuncs.LoadImageToCluster(exampleCluster, manifests.Image),
		e2eframework.DeployPool(exampleNamespace),
		e2eframework.DeployFleet(exampleNamespace),
		e2eframework.DeployEPP(exampleNamespace),
	)
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
		Assess("the fleet and the EPP run Ready in the namespace", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			cs, err := kubernetes.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{manifests.FakeVLLMDeployment, manifests.EPPDeployment} {
				dep, err := cs.AppsV1().Deployments(exampleNamespace).Get(ctx, d, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if dep.Status.ReadyReplicas == 0 || dep.Status.ReadyReplicas != *dep.Spec.Replicas {
					t.Errorf("deployment %s: %d of %d replicas Ready", d, dep.Status.ReadyReplicas, *dep.Spec.Replicas)
				}
			}
			return ctx
		}).Feature()
	features, err := conformance.ParseFeatures("OpenAIRequestParsing,PrefixCacheAffinity,QueueAwareness,KVCacheAwareness,LoRAAffinity,EndpointChurn,RequestShedding")
	if err != nil {
		t.Fatal(err)
	}
	suite := e2eframework.Conformance(e2eframework.ConformanceOptions{
		Selection: conformance.Selection{Profiles: []conformance.Profile{conformance.ProfileEPPRouting}, SupportedFeatures: features},
		// The reference's conformance config: the features claimed above, lora-affinity-scorer
		// among them (its default config has no LoRA scorer, and LoRAAffinity fails without it).
		ConfigFile: "../../../manifests/epp-configs/conformance.yaml",
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	testenv.Test(t, deployed, suite)
}
