package e2eframework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"

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

// ConformanceOptions choose what Setup and Conformance run and where the reports go.
type ConformanceOptions struct {
	// Selection is the profiles, claimed features and skips (conformance.Selection); at least
	// one profile.
	Selection conformance.Selection
	// Namespace is where the run deploys the fleet pods, the InferencePool and the EPP ("" = a
	// fresh eppkit-conformance-<n>); deleted at the end unless EPPKIT_KEEP_CLUSTER=true.
	Namespace string
	// ManifestsDir holds the EPP's YAML, templated with the target's fields ("" = the
	// reference EPP of manifests/k8s); see clustertarget.Options.ManifestsDir.
	ManifestsDir string
	// ConfigFile is the EndpointPickerConfig handed to the EPP ("" = its default).
	ConfigFile string
	// Seed seeds the fleet and the tests (0 = 1; EPPKIT_SEED overrides it).
	Seed int64
	// Timeouts (zero = harness.DefaultTimeoutConfig()).
	Timeouts harness.TimeoutConfig
	// ReportDir, ResultsFile and Implementation are conformance.Options': the same
	// ConformanceReport per profile, junit.xml, summary.md and results file as `eppkit
	// conformance --report-output` (Implementation is required with ReportDir).
	ReportDir, ResultsFile string
	Implementation         confv1.Implementation
	// Logger receives the harness's progress (nil = discard).
	Logger *slog.Logger
}

// sessionKey keys the conformance session Setup starts in the environment's context.
type sessionKey struct{}

// Setup is the env.Func that deploys what the conformance run tests into the environment's
// cluster (cfg.KubeconfigFile()), in opts.Namespace: one fake vLLM pod per fleet member, the
// InferencePool over them with the conformance InferenceObjectives and model rewrite, and the
// EPP (opts.ManifestsDir, default the reference), then waits until the EPP is ready. The running
// session goes into the context; the Conformance feature runs the tests against it and writes the
// reports, Teardown removes what Setup deployed if the feature did not run.
func Setup(opts ConformanceOptions) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		s, err := startSession(ctx, cfg, opts, nil)
		if err != nil {
			return ctx, err
		}
		return context.WithValue(ctx, sessionKey{}, s), nil
	}
}

// Teardown is the env.Func that finishes a session Setup started and no Conformance feature
// finished (its reports then list every test not run).
func Teardown() env.Func {
	return func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
		if s, ok := ctx.Value(sessionKey{}).(*conformance.Session); ok && !s.Finished() {
			_, err := s.Finish()
			var ee *conformance.ExitError
			if errors.As(err, &ee) && ee.Code != conformance.ExitHarness {
				err = nil // the verdict is the feature's; here only a harness error matters
			}
			return ctx, err
		}
		return ctx, nil
	}
}

// startSession starts a conformance session on the cluster of cfg, through conformance.Start:
// the run every eppkit driver uses.
func startSession(ctx context.Context, cfg *envconf.Config, opts ConformanceOptions, out io.Writer) (*conformance.Session, error) {
	if err := opts.Selection.Validate(conformance.All()); err != nil {
		return nil, fmt.Errorf("conformance selection: %w", err)
	}
	seed := opts.Seed
	if seed == 0 {
		seed = 1
	}
	p, err := existing.New(existing.Options{Kubeconfig: cfg.KubeconfigFile(), DeleteTimeout: 2 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("cluster of the environment: %w", err)
	}
	run, err := clustertarget.New(clustertarget.Options{Provider: p, ManifestsDir: opts.ManifestsDir, Logger: opts.Logger,
		Namespace: opts.Namespace, KeepCluster: os.Getenv("EPPKIT_KEEP_CLUSTER") == "true"})
	if err != nil {
		return nil, err
	}
	logDir, err := os.MkdirTemp("", "eppkit-e2ef-*")
	if err != nil {
		return nil, err
	}
	return conformance.Start(ctx, conformance.Options{
		TargetImpl: run.Target(), SourceImpl: run.Source(),
		Profiles: opts.Selection.Profiles, SupportedFeatures: opts.Selection.SupportedFeatures,
		ExemptFeatures: opts.Selection.ExemptFeatures, SkipTests: opts.Selection.SkipTests, RunTest: opts.Selection.RunTest,
		ConfigFile: opts.ConfigFile, Timeouts: opts.Timeouts, Seed: seed, LogDir: logDir, Logger: opts.Logger,
		ReportDir: opts.ReportDir, ResultsFile: opts.ResultsFile, Implementation: opts.Implementation, Out: out, Err: out,
	})
}

// Conformance is the feature that runs eppkit's conformance registry against an EPP deployed in
// the environment's cluster: against the session Setup started when the context holds one (so
// the suite tests the pool the environment deployed), else it deploys its own in a namespace of
// its own. Each selected test is a subtest of the Assess step, named Profile/ShortName (a failure
// prints its message once with its reproduction, a not-applicable or skipped test skips it, a
// test of a feature not claimed has none); then the session's reports are written (the same
// ConformanceReport, junit.xml, summary.md and results file as the CLI) and the harness stops.
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
	out := &logWriter{t: t}
	s, ok := ctx.Value(sessionKey{}).(*conformance.Session)
	if !ok {
		var err error
		if s, err = startSession(ctx, cfg, opts, out); err != nil {
			t.Fatalf("conformance: %v", err)
		}
	}
	if s.Suite() != nil && conformance.NeedsPredictorSidecar(s.Tests()) {
		t.Log("note: tests that need the latency predictor sidecar run without it (it would run on this host, out of the EPP's reach)")
	}
	for _, ct := range s.Tests() {
		if s.NotSupported(ct) {
			continue
		}
		t.Run(string(ct.Profile)+"/"+ct.ShortName, func(t *testing.T) {
			res := s.RunOne(ct)
			switch res.Outcome {
			case conformance.Passed:
			case conformance.Skipped:
				t.Skip(res.Message)
			default:
				t.Errorf("%s\nrule: %s\nseed %d (EPPKIT_SEED=%d reproduces the run)", res.Message, ct.Description, s.Seed(), s.Seed())
			}
		})
	}
	res, err := s.Finish()
	t.Logf("eppkit conformance: %s (seed %d); reports: %v %s %s", res.Verdict.Line(), s.Seed(), res.Reports.Reports, res.Reports.JUnit, res.Reports.Summary)
	var ee *conformance.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Code == conformance.ExitTestFailed) {
		t.Errorf("conformance: %v", err) // a failed test already failed its subtest
	}
}

// logWriter sends the session's console lines to t.Log.
type logWriter struct{ t *testing.T }

func (w *logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
