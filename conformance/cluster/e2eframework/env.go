package e2eframework

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/cluster/apply"
	"github.com/eppkit/eppkit/conformance/cluster/clustertarget"
	"github.com/eppkit/eppkit/conformance/cluster/existing"
	"github.com/eppkit/eppkit/conformance/harness"

	// The registry: every conformance test registers itself in its init.
	_ "github.com/eppkit/eppkit/conformance/tests"
	"github.com/eppkit/eppkit/manifests"
)

// Which manifests/k8s objects each env.Func applies (Envoy is not among them: the
// conformance harness is the gateway).
func isFleet(o *unstructured.Unstructured) bool {
	return strings.HasPrefix(o.GetName(), manifests.FakeVLLMDeployment) && (o.GetKind() == "Deployment" || o.GetKind() == "Service")
}

func isPool(o *unstructured.Unstructured) bool {
	return o.GetKind() == "CustomResourceDefinition" || (o.GetKind() == "InferencePool" && o.GetName() == manifests.PoolName)
}

func isEPP(o *unstructured.Unstructured) bool {
	switch o.GetKind() {
	case "ConfigMap":
		return o.GetName() == manifests.EPPConfigMap
	case "Deployment", "Service":
		return o.GetName() == manifests.EPPDeployment || o.GetName() == manifests.EPPService
	case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
		return true
	}
	return false
}

// applyInto applies the manifests/k8s objects selected by keep into namespace (created when
// missing) and, for Deployments, waits until they are available (3 minutes).
func applyInto(namespace string, keep func(*unstructured.Unstructured) bool) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		rc := cfg.Client().RESTConfig()
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return ctx, err
		}
		if _, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{}); err != nil {
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
				return ctx, fmt.Errorf("create namespace %s: %w", namespace, err)
			}
		}
		all, err := manifests.K8sObjects()
		if err != nil {
			return ctx, err
		}
		var objs []*unstructured.Unstructured
		for _, o := range all {
			if keep(o) {
				objs = append(objs, o)
			}
		}
		a, err := apply.New(rc)
		if err != nil {
			return ctx, err
		}
		if _, err := a.Apply(ctx, objs, apply.Options{Namespace: namespace}); err != nil {
			return ctx, err
		}
		for _, o := range objs {
			if o.GetKind() != "Deployment" {
				continue
			}
			if err := waitAvailable(ctx, cs, namespace, o.GetName(), 3*time.Minute); err != nil {
				return ctx, err
			}
		}
		return ctx, nil
	}
}

// DeployFleet applies manifests/k8s's fake vLLM Deployment and Service ("GPU servers" of the
// eppkit image, which must be on the nodes: envfuncs.LoadImageToCluster(name, manifests.Image))
// into namespace and waits for them.
func DeployFleet(namespace string) env.Func {
	return applyInto(namespace, isFleet)
}

// DeployPool installs the GIE CRDs and applies the InferencePool over the fleet into namespace.
func DeployPool(namespace string) env.Func { return applyInto(namespace, isPool) }

// DeployEPP applies manifests/k8s's reference EPP (RBAC, ConfigMap, Deployment, Service) into
// namespace and waits for it. An implementer's own EPP is deployed with their own env.Func
// under the same names (manifests.EPPService), or given to Conformance as ManifestsDir.
func DeployEPP(namespace string) env.Func {
	return applyInto(namespace, isEPP)
}

func waitAvailable(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d of %d replicas available", d.Status.AvailableReplicas, ptrOr(d.Spec.Replicas, 1))
		return d.Status.ObservedGeneration >= d.Generation && d.Status.AvailableReplicas == ptrOr(d.Spec.Replicas, 1) && available(d), nil
	})
	if err != nil {
		return fmt.Errorf("deployment %s/%s not available within %s: %s", ns, name, timeout, last)
	}
	return nil
}

func available(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// ConformanceOptions choose what Conformance runs.
type ConformanceOptions struct {
	// Selection is the profiles, claimed features and skips (conformance.Selection); at least
	// one profile.
	Selection conformance.Selection
	// ManifestsDir holds the EPP's YAML, templated with the target's fields ("" = the
	// reference EPP of manifests/k8s); see clustertarget.Options.ManifestsDir.
	ManifestsDir string
	// ConfigFile is the EndpointPickerConfig handed to the EPP ("" = its default).
	ConfigFile string
	// Seed seeds the fleet and the tests (0 = 1).
	Seed int64
	// Timeouts (zero = harness.DefaultTimeoutConfig()).
	Timeouts harness.TimeoutConfig
	// Logger receives the harness's progress (nil = discard).
	Logger *slog.Logger
}

// Conformance is the feature that runs eppkit's conformance registry against an EPP deployed in
// the environment's cluster (cfg.KubeconfigFile()): in a namespace of its own it runs the fleet
// pods and the InferencePool, applies the EPP's manifests, and reaches everything through
// port-forwards (conformance/cluster/clustertarget). Each selected test is a subtest of the
// Assess step, named Profile/ShortName; a failed or harness error fails it, a skip skips it.
func Conformance(opts ConformanceOptions) features.Feature {
	return features.New("eppkit conformance").
		WithLabel("suite", "eppkit-conformance").
		Assess("the EPP passes the selected conformance tests", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			runConformance(ctx, t, cfg, opts)
			return ctx
		}).Feature()
}

func runConformance(ctx context.Context, t *testing.T, cfg *envconf.Config, opts ConformanceOptions) {
	t.Helper()
	tests := conformance.All()
	if err := opts.Selection.Validate(tests); err != nil {
		t.Fatalf("conformance selection: %v", err)
	}
	seed := opts.Seed
	if seed == 0 {
		seed = 1
	}
	p, err := existing.New(existing.Options{Kubeconfig: cfg.KubeconfigFile(), DeleteTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("cluster of the environment: %v", err)
	}
	run, err := clustertarget.New(clustertarget.Options{Provider: p, ManifestsDir: opts.ManifestsDir, Logger: opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	var running []conformance.ConformanceTest
	for _, ct := range tests {
		if opts.Selection.Selected(ct) && opts.Selection.SkipReason(ct) == "" {
			running = append(running, ct)
		}
	}
	if len(running) == 0 {
		t.Fatalf("conformance: the selection %+v runs no test of the %d registered", opts.Selection, len(tests))
	}
	suite, err := harness.Start(ctx, harness.Config{Target: run.Target(), Source: run.Source(),
		ConfigFile: opts.ConfigFile, Timeouts: opts.Timeouts, Seed: seed, Logger: opts.Logger, LogDir: t.TempDir(),
		NoPredictorSidecar: true})
	if err != nil {
		t.Fatalf("conformance harness: %v", err)
	}
	defer suite.Close()
	if conformance.NeedsPredictorSidecar(running) {
		t.Log("note: tests that need the latency predictor sidecar run without it (it would run on this host, out of the EPP's reach)")
	}
	r := &conformance.Runner{Suite: suite, Selection: opts.Selection, Context: ctx}
	results := r.Run(tests)
	passed := 0
	for _, res := range results {
		if res.Outcome == conformance.Passed {
			passed++
		}
	}
	t.Logf("eppkit conformance: %d of %d selected tests passed (seed %d)", passed, len(running), seed)
	for _, res := range results {
		res := res
		t.Run(string(res.Test.Profile)+"/"+res.Test.ShortName, func(t *testing.T) {
			switch res.Outcome {
			case conformance.Passed:
			case conformance.Skipped:
				t.Skip(res.Message)
			default:
				t.Errorf("%s (%s): %s", res.Test.ShortName, res.Test.Description, res.Message)
			}
		})
	}
}
