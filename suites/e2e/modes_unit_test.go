package e2e_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/eppkit/eppkit/conformance/cluster/apply"
	"github.com/eppkit/eppkit/manifests"
)

// Plain Go tests of the suite's pure parts; they need no cluster (go test -run 'Test[^E]' ./suites/e2e).

func TestModesPerProvider(t *testing.T) {
	for _, tc := range []struct{ provider, gw, reach string }{
		{"local", gatewayStandin, reachDirect},
		{"kind", gatewayEnvoy, reachPortForward},
		{"existing", gatewayEnvoy, reachPortForward},
	} {
		gw, reach := defaultsFor(tc.provider)
		if gw != tc.gw || reach != tc.reach {
			t.Errorf("defaultsFor(%s) = %s, %s; want %s, %s", tc.provider, gw, reach, tc.gw, tc.reach)
		}
		if err := checkModes(gw, reach); err != nil {
			t.Errorf("defaults of %s refused: %v", tc.provider, err)
		}
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

// TestBindAllInterfaces: on a real container runtime the manifests' Deployments must listen on
// all interfaces (port-forwards arrive on localhost), and nothing else in them may change.
func TestBindAllInterfaces(t *testing.T) {
	objs, err := manifests.K8sObjects()
	if err != nil {
		t.Fatal(err)
	}
	rewritten := 0
	for _, o := range objs {
		before := o.DeepCopy()
		if err := apply.BindAllInterfaces(o); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		if o.GetKind() != "Deployment" {
			if diff := cmp.Diff(before.Object, o.Object); diff != "" {
				t.Errorf("%s %s changed:\n%s", o.GetKind(), o.GetName(), diff)
			}
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		bcs, _, _ := unstructured.NestedSlice(before.Object, "spec", "template", "spec", "containers")
		for i := range cs {
			args, _, _ := unstructured.NestedStringSlice(cs[i].(map[string]any), "args")
			bargs, _, _ := unstructured.NestedStringSlice(bcs[i].(map[string]any), "args")
			if len(args) != len(bargs) {
				t.Fatalf("%s: args %v became %v", o.GetName(), bargs, args)
			}
			for j := range args {
				switch {
				case args[j] == "$(POD_IP)" && j > 0 && (args[j-1] == "--bind-address" || args[j-1] == "--host"):
					t.Errorf("%s: %s still $(POD_IP)", o.GetName(), args[j-1])
				case args[j] != bargs[j]:
					if bargs[j] != "$(POD_IP)" || args[j] != "0.0.0.0" {
						t.Errorf("%s: arg %d %q became %q", o.GetName(), j, bargs[j], args[j])
					}
					rewritten++
				}
			}
		}
	}
	// The EPP's --bind-address and the fake vLLM's --host.
	if rewritten != 2 {
		t.Errorf("rewrote %d args, want 2 (%s --bind-address, %s --host)", rewritten, manifests.EPPDeployment, manifests.FakeVLLMDeployment)
	}
}
