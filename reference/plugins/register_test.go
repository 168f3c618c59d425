package plugins

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

func TestRegisterAll(t *testing.T) {
	reg := framework.NewRegistry()
	RegisterAll(reg)
	want := []string{
		"active-request-scorer", "approx-prefix-cache-producer", "concurrency-detector", "disagg-profile-handler", "header-based-testing-filter",
		"inflight-load-producer", "kv-cache-utilization-scorer",
		"latency-fallback-profile-handler", "latency-scorer", "latency-slo-admitter",
		"legacy-prefix-cache-scorer", "lora-affinity-filter", "lora-affinity-scorer", "max-score-picker",
		"precise-prefix-cache-producer", "predicted-latency-producer", "prefix-cache-affinity-filter",
		"prefix-cache-scorer", "queue-scorer", "random-picker", "running-requests-size-scorer",
		"session-affinity-filter", "session-affinity-scorer",
		"single-profile-handler", "slo-headroom-tier-filter", "token-load-scorer", "utilization-detector", "weighted-random-picker",
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

func loadRuntime(t *testing.T, yaml string) (*framework.Runtime, error) {
	t.Helper()
	cfg, err := framework.LoadConfig([]byte(yaml))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	reg := framework.NewRegistry()
	RegisterAll(reg)
	return framework.NewRuntime(cfg, reg, framework.RuntimeOptions{Context: t.Context()})
}

// TestOldMonolithParameters: producer parameters on prefix-cache-scorer reach the auto-created
// producer (GIE v1.5.0 configloader behaviour), and conflict with an explicit producer.
func TestOldMonolithParameters(t *testing.T) {
	const head = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
	rt, err := loadRuntime(t, head+`plugins:
- type: prefix-cache-scorer
  parameters:
    blockSizeTokens: 32
    maxPrefixBlocksToMatch: 100
`)
	if err != nil {
		t.Fatalf("NewRuntime: %v", err)
	}
	pl, ok := rt.Plugin(prefix.ProducerType)
	if !ok {
		t.Fatalf("producer not auto-created")
	}
	got := pl.(*prefix.Producer).Parameters()
	if got.BlockSizeTokens != 32 || got.MaxPrefixBlocksToMatch != 100 || !got.AutoTune {
		t.Fatalf("auto-created producer parameters = %+v", got)
	}

	_, err = loadRuntime(t, head+`plugins:
- type: prefix-cache-scorer
  parameters:
    blockSizeTokens: 32
- type: approx-prefix-cache-producer
  parameters:
    blockSizeTokens: 64
`)
	if err == nil {
		t.Fatalf("conflicting explicit producer accepted")
	}

	_, err = loadRuntime(t, head+`plugins:
- type: prefix-cache-scorer
  parameters:
    blockSizeTokns: 32
`)
	if err == nil || !strings.Contains(err.Error(), "blockSizeTokns") {
		t.Fatalf("misspelt scorer parameter: err = %v", err)
	}
}
