package clustertarget

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/manifests"
)

func TestFleetPod(t *testing.T) {
	spec := harness.FleetSpec{Count: 2, ModelName: "eppkit/conformance-base", MaxNumSeqs: 16, Seed: 40,
		Adapters: [][]string{{"conformance-lora-0-0", "conformance-lora-0-1"}, {"conformance-lora-1-0"}}}
	p := fleetPod("eppkit:dev", "eppkit-conformance", 1, spec)
	if p.Name != "eppkit-conformance-1" {
		t.Errorf("name %q", p.Name)
	}
	if d := cmp.Diff(map[string]string{FleetLabel: "eppkit-conformance", PoolMemberLabel: "true"}, p.Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	c := p.Spec.Containers[0]
	want := []string{"fake-vllm", "--model", "eppkit/conformance-base", "--host", "0.0.0.0", "--port", "8000", "--enable-kvcache",
		"--max-num-seqs", "16", "--seed", "41", "--max-loras", "1", "--lora-modules", `{"name": "conformance-lora-1-0"}`}
	if d := cmp.Diff(want, c.Args); d != "" {
		t.Errorf("args (-want +got):\n%s", d)
	}
	if c.Image != "eppkit:dev" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s policy %s", c.Image, c.ImagePullPolicy)
	}
	if pr := c.ReadinessProbe; pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != "/health" || pr.HTTPGet.Port.IntValue() != FleetPort {
		t.Errorf("readiness probe %+v, want GET /health :%d", c.ReadinessProbe, FleetPort)
	}
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	if d := cmp.Diff([]string{"POD_NAME", "POD_NAMESPACE"}, names); d != "" {
		t.Errorf("env (-want +got):\n%s", d)
	}
}

func TestWaitingReason(t *testing.T) {
	pod := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}}}
	}
	for reason, fatal := range map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "CreateContainerConfigError": true, "ContainerCreating": false, "PodInitializing": false} {
		if got := waitingReason(pod(reason)) != ""; got != fatal {
			t.Errorf("%s: fatal = %v, want %v", reason, got, fatal)
		}
	}
}

// TestReferenceObjects: the default EPP is told the pool and the seed and listens on every
// interface (its port-forwards arrive on the pod's localhost); the fleet and Envoy are not
// among its objects.
func TestReferenceObjects(t *testing.T) {
	r := &Run{}
	objs, err := r.objects(harness.TargetEnv{PoolName: "pool-x", Seed: 7}, "ns")
	if err != nil {
		t.Fatal(err)
	}
	var dep bool
	for _, o := range objs {
		if strings.HasPrefix(o.GetName(), manifests.FakeVLLMDeployment) || strings.HasPrefix(o.GetName(), manifests.EnvoyDeployment) {
			t.Errorf("unexpected object %s %s", o.GetKind(), o.GetName())
		}
		if o.GetKind() != "Deployment" {
			continue
		}
		dep = true
		cs := o.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
		var args []string
		for _, a := range cs[0].(map[string]any)["args"].([]any) {
			args = append(args, a.(string))
		}
		joined := strings.Join(args, " ")
		for _, w := range []string{"--pool-name pool-x", "--seed 7", "--bind-address 0.0.0.0"} {
			if !strings.Contains(joined, w) {
				t.Errorf("EPP args %q lack %q", joined, w)
			}
		}
	}
	if !dep {
		t.Error("no EPP Deployment")
	}
}
