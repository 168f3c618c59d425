package e2e_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/eppkit/eppkit/manifests"
)

// Plain Go tests of the suite's pure parts; they need no cluster (go test -run 'Test[^E]' ./suites/e2e).

func TestModes(t *testing.T) {
	if err := checkModes(gatewayEnvoy, reachPortForward); err != nil {
		t.Errorf("the defaults (Envoy through port-forwards) refused: %v", err)
	}
	for _, tc := range []struct{ gw, reach, want string }{
		{"nginx", reachDirect, `--gateway "nginx"`},
		{gatewayEnvoy, "vpn", `--reach "vpn"`},
	} {
		if err := checkModes(tc.gw, tc.reach); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkModes(%s, %s) = %v, want an error containing %q", tc.gw, tc.reach, err, tc.want)
		}
	}
	if err := checkModes(gatewayEnvoy, reachDirect); err != nil {
		t.Errorf("Envoy with direct reach refused: %v", err)
	}
	// kind without Envoy's image: the stand-in dials pods through port-forwards.
	if err := checkModes(gatewayStandin, reachPortForward); err != nil {
		t.Errorf("stand-in through port-forwards refused: %v", err)
	}
}

// TestManifestsListenOnAllInterfaces: port-forwards arrive on the pod's localhost and Services on
// its IP, so the manifests' EPP (--bind-address) and fake vLLM (--host) must listen on 0.0.0.0.
func TestManifestsListenOnAllInterfaces(t *testing.T) {
	objs, err := manifests.K8sObjects()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
			for j := 1; j < len(args); j++ {
				if args[j-1] == "--bind-address" || args[j-1] == "--host" {
					checked++
					if args[j] != "0.0.0.0" {
						t.Errorf("%s: %s %s, want 0.0.0.0", o.GetName(), args[j-1], args[j])
					}
				}
			}
		}
	}
	if checked != 2 {
		t.Errorf("checked %d listen addresses, want 2 (%s --bind-address, %s --host)", checked, manifests.EPPDeployment, manifests.FakeVLLMDeployment)
	}
}
