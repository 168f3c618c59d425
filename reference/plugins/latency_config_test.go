package plugins

import (
	"path/filepath"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/reference/plugins/profiles"
)

// TestLatencyConfigsBuild builds the committed predicted-latency configs with every reference
// plugin: the fallback handler is the profile handler, and the latency producer runs after the
// prefix producer in the PrepareData DAG.
func TestLatencyConfigsBuild(t *testing.T) {
	for _, name := range []string{"predicted-latency.yaml", "conformance.yaml"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := framework.LoadConfigFile(filepath.Join("..", "..", "manifests", "epp-configs", name))
			if err != nil {
				t.Fatal(err)
			}
			reg := framework.NewRegistry()
			RegisterAll(reg)
			rt, err := framework.NewRuntime(cfg, reg, framework.RuntimeOptions{Context: t.Context()})
			if err != nil {
				t.Fatalf("NewRuntime: %v", err)
			}
			if got := rt.ProfileHandler().TypedName().Type; got != profiles.LatencyFallbackProfileHandlerType {
				t.Fatalf("profile handler %s", got)
			}
			order := rt.PrepareDataOrder()
			pos := map[string]int{}
			for i, tn := range order {
				pos[tn.Type] = i
			}
			pi, okP := pos[prefix.ProducerType]
			li, okL := pos[latency.ProducerType]
			if !okP || !okL || pi >= li {
				t.Fatalf("PrepareData order %v: want %s before %s", order, prefix.ProducerType, latency.ProducerType)
			}
		})
	}
}

// TestLatencyScorerAloneCreatesProducers: a config with only latency-scorer gets the default
// predicted-latency-producer, which in turn gets the default prefix producer.
func TestLatencyScorerAloneCreatesProducers(t *testing.T) {
	rt, err := loadRuntime(t, "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: latency-scorer\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{latency.ProducerType, prefix.ProducerType} {
		if _, ok := rt.Plugin(typ); !ok {
			t.Fatalf("%s not created; auto-created: %v", typ, rt.AutoCreated())
		}
	}
}
