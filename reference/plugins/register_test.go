package plugins

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

func TestRegisterAll(t *testing.T) {
	reg := framework.NewRegistry()
	RegisterAll(reg)
	want := []string{
		"approx-prefix-cache-producer", "header-based-testing-filter", "kv-cache-utilization-scorer",
		"legacy-prefix-cache-scorer", "lora-affinity-filter", "lora-affinity-scorer", "max-score-picker",
		"prefix-cache-scorer", "queue-scorer", "random-picker", "running-requests-size-scorer",
		"single-profile-handler", "weighted-random-picker",
	}
	if diff := cmp.Diff(want, reg.Types()); diff != "" {
		t.Fatalf("registered types (-want +got):\n%s", diff)
	}
	if typ, ok := reg.DefaultProducer(prefix.PrefixCacheMatchInfoKey); !ok || typ != prefix.ProducerType {
		t.Fatalf("default producer of %s = %q %v", prefix.PrefixCacheMatchInfoKey, typ, ok)
	}
}

// TestDefaultConfigBuilds builds the runtime's default configuration with every reference
// plugin: the prefix scorer's producer must be auto-created and the DAG must type-check.
func TestDefaultConfigBuilds(t *testing.T) {
	reg := framework.NewRegistry()
	RegisterAll(reg)
	rt, err := framework.NewRuntime(nil, reg, framework.RuntimeOptions{Context: t.Context()})
	if err != nil {
		t.Fatalf("NewRuntime(default config): %v", err)
	}
	if _, ok := rt.Plugin(prefix.ProducerType); !ok {
		t.Fatalf("default producer not instantiated; plugins: %v", rt.Plugins())
	}
}
