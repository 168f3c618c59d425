// Package manifests embeds eppkit's deployable files and reads them as Kubernetes objects:
//
//   - k8s/: the InferencePool, InferenceObjective, InferenceModelRewrite and InferencePoolImport
//     CRDs of the pinned GIE module (k8s/crds/, equal to what `eppkit tools build gie --only crds`
//     extracts), llm-d-router v0.10.0's InferenceObjective and InferenceModelRewrite CRDs of the
//     llm-d.ai group (k8s/crds-llmd/, from its snapshot; LLMDCRDs), the EPP's RBAC, the fake vLLM
//     Deployment and its headless Service, the InferencePool, the reference EPP Deployment +
//     Service + config, and Envoy (Deployment, Service, bootstrap ConfigMap). No object names a
//     namespace: the applier chooses it (conformance/cluster/apply).
//   - envoy/: the Envoy bootstrap (validated by package manifests/envoy).
//   - kind/: the kind cluster config with the node image pinned by digest.
//
// The files are plain YAML, usable with `kubectl apply -n NS -f manifests/k8s/ -R` as well.
package manifests

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

//go:embed k8s envoy/envoy.yaml kind/cluster.yaml
var files embed.FS

//go:embed epp-configs/conformance.yaml
var conformanceEPPConfig []byte

// ConformanceEPPConfig returns epp-configs/conformance.yaml: the reference EPP's
// EndpointPickerConfig that claims every feature with tests (its defaults, lora-affinity-scorer,
// predicted-latency routing for requests with SLO headers, latency-slo-admitter). `eppkit
// conformance --target reference` gives it to the reference when no --config-file is set.
func ConformanceEPPConfig() []byte { return bytes.Clone(conformanceEPPConfig) }

// Names, images and ports of the objects in k8s/, for code that applies them and then talks to
// them (the e2e suite, `eppkit conformance --target cluster`).
const (
	// Image is the single eppkit image (Dockerfile at the repository root) the fake vLLM and EPP
	// Deployments run, with the subcommand as the first argument. Providers load it (LoadImage).
	Image = "eppkit:dev"
	// EnvoyImage is the gateway image of envoy.yaml (gateway-api-inference-extension v1.5.0
	// test/testdata/envoy.yaml pins the same tag).
	EnvoyImage = "envoyproxy/envoy:distroless-v1.33.2"

	// PoolName is the InferencePool (group inference.networking.k8s.io, v1) of the fake servers.
	PoolName = "fake-vllm"
	// FakeVLLMDeployment and FakeVLLMService (headless) serve the pool; pods carry PoolLabel.
	FakeVLLMDeployment = "fake-vllm"
	FakeVLLMService    = "fake-vllm"
	// PoolLabelKey and PoolLabelValue select the pool's pods (InferencePool spec.selector).
	PoolLabelKey   = "app"
	PoolLabelValue = "fake-vllm"
	// FakeVLLMPort is the model servers' HTTP port (the pool's targetPort).
	FakeVLLMPort = 8000
	// FakeVLLMModel is the base model the fake servers serve; FakeVLLMLoRA is their LoRA adapter.
	FakeVLLMModel = "meta-llama/Llama-3.1-8B-Instruct"
	FakeVLLMLoRA  = "food-review-1"

	// EPPDeployment, EPPService, EPPConfigMap and EPPServiceAccount are the endpoint picker's.
	EPPDeployment     = "eppkit-epp"
	EPPService        = "eppkit-epp"
	EPPConfigMap      = "eppkit-epp-config"
	EPPServiceAccount = "eppkit-epp"
	// EPPMetricsReaderClusterRole may get the EPP's /metrics (--metrics-endpoint-auth): bind a
	// scraper's identity to it.
	EPPMetricsReaderClusterRole = "eppkit-epp-metrics-reader"
	// EPPLeaseName is the Lease the EPP replicas of PoolName elect their leader with, in the
	// namespace the manifests are applied to: "epp-<namespace>-<pool>.llm-d.ai"
	// (reference/discovery.LeaseName; llm-d-router v0.10.0's LeaderElectionID).
	EPPLeaseNameFormat = "epp-%s-" + PoolName + ".llm-d.ai"
	// EPPPodLabelValue is the value of label "app" on the EPP pods (the Service's selector).
	EPPPodLabelValue = "eppkit-epp"
	// EPPGRPCPort (ext_proc), EPPHealthPort (gRPC health) and EPPMetricsPort (Prometheus).
	EPPGRPCPort    = 9002
	EPPHealthPort  = 9003
	EPPMetricsPort = 9090

	// EnvoyDeployment, EnvoyService and EnvoyConfigMap are the gateway's. EnvoyFailOpenPort
	// behaves as failureMode FailOpen, EnvoyFailClosePort as FailClose; EnvoyAdminPort serves
	// /ready and /stats.
	EnvoyDeployment    = "envoy"
	EnvoyService       = "envoy"
	EnvoyConfigMap     = "envoy-config"
	EnvoyFailOpenPort  = 8081
	EnvoyFailClosePort = 8082
	EnvoyAdminPort     = 19000

	// EnvoyBootstrapKey is the key of the bootstrap in the EnvoyConfigMap.
	EnvoyBootstrapKey = "envoy.yaml"
	// EnvoyRouteHeader is the response header every Envoy route adds: EnvoyRoutePicked when the
	// request went to the EPP's pick, EnvoyRouteFailOpen when it bypassed a failed EPP.
	EnvoyRouteHeader   = "x-eppkit-envoy-route"
	EnvoyRoutePicked   = "picked"
	EnvoyRouteFailOpen = "failopen"
)

// EnvoyBootstrap returns envoy/envoy.yaml.
func EnvoyBootstrap() []byte { return mustRead("envoy/envoy.yaml") }

// KindConfig returns kind/cluster.yaml (a kind.x-k8s.io/v1alpha4 Cluster).
func KindConfig() []byte { return mustRead("kind/cluster.yaml") }

func mustRead(name string) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		// The go:embed directive above lists the file, so the build fails before this can.
		panic(fmt.Sprintf("manifests: embedded %s: %v", name, err))
	}
	return b
}

// LLMDCRDs returns the files of k8s/crds-llmd/ (name → YAML): llm-d-router v0.10.0's
// InferenceObjective and InferenceModelRewrite CRDs, group llm-d.ai, version v1alpha2 (config/crd/bases
// of its snapshot; TestLLMDCRDsEqualSnapshot). The apiserver endpoint source installs them beside
// GIE's.
func LLMDCRDs() (map[string][]byte, error) {
	entries, err := fs.ReadDir(files, "k8s/crds-llmd")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, e := range entries {
		b, err := fs.ReadFile(files, "k8s/crds-llmd/"+e.Name())
		if err != nil {
			return nil, err
		}
		out[e.Name()] = b
	}
	return out, nil
}

// K8sObjects returns every object of k8s/ (recursively), CRDs first, then in file order.
// Errors name the file and the document.
func K8sObjects() ([]*unstructured.Unstructured, error) {
	sub, err := fs.Sub(files, "k8s")
	if err != nil {
		return nil, err
	}
	return ReadObjects(sub)
}

// ReadObjects reads every *.yaml and *.yml file of fsys (recursively, in lexical path order) as a
// stream of YAML documents and returns one object per non-empty document. CustomResourceDefinitions
// come first so a caller applying the list in order installs them before their instances. A
// document without apiVersion, kind or metadata.name is an error naming the file and the
// document's index (0-based).
func ReadObjects(fsys fs.FS) ([]*unstructured.Unstructured, error) {
	var paths []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := path.Ext(p); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	sort.Strings(paths)
	var objs []*unstructured.Unstructured
	for _, p := range paths {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("manifests: %w", err)
		}
		got, err := DecodeObjects(b)
		if err != nil {
			return nil, fmt.Errorf("manifests: %s: %w", p, err)
		}
		objs = append(objs, got...)
	}
	sort.SliceStable(objs, func(i, j int) bool { return isCRD(objs[i]) && !isCRD(objs[j]) })
	return objs, nil
}

func isCRD(u *unstructured.Unstructured) bool {
	return u.GetKind() == "CustomResourceDefinition" && strings.HasPrefix(u.GetAPIVersion(), "apiextensions.k8s.io/")
}

// DecodeObjects splits a multi-document YAML (or JSON) stream and decodes each non-empty document
// into an object. Errors name the document's index (0-based) and the missing field.
func DecodeObjects(b []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		// YAML → JSON → map with apimachinery's JSON decoder, which keeps integers as int64 the
		// way unstructured objects expect (sigs.k8s.io/yaml alone would give float64).
		jb, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var m map[string]any
		if err := utiljson.Unmarshal(jb, &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue // comments only, or an empty document between separators
		}
		u := &unstructured.Unstructured{Object: m}
		switch {
		case u.GetAPIVersion() == "":
			return nil, fmt.Errorf("document %d: apiVersion is missing", i)
		case u.GetKind() == "":
			return nil, fmt.Errorf("document %d (%s): kind is missing", i, u.GetAPIVersion())
		case u.GetName() == "":
			return nil, fmt.Errorf("document %d (%s): metadata.name is missing", i, u.GetKind())
		}
		out = append(out, u)
	}
}
