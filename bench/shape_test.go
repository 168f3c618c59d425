package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShapesBuildValidWorkloads: every --shape preset gives a valid workload whose prompts fit the
// fakes' context, and flags given explicitly win over the preset.
func TestShapesBuildValidWorkloads(t *testing.T) {
	for _, shape := range Shapes {
		o := ServeOptions{Shape: shape, Workload: WorkloadSharedPrefix, Seed: 1, Rate: "2", Duration: 10e9, Burstiness: 1, KVCacheSize: DefaultKVCacheSize, MaxModelLen: DefaultMaxModelLen}
		rc, err := o.RunConfig(nil)
		if err != nil {
			t.Fatalf("%s: %v", shape, err)
		}
		reqs, err := Generate(rc.Spec, 50)
		if err != nil {
			t.Fatalf("%s: %v", shape, err)
		}
		for _, r := range reqs {
			if r.PromptTokens+r.OutputTokens > DefaultMaxModelLen {
				t.Fatalf("%s: a request of %d+%d tokens exceeds the fakes' context", shape, r.PromptTokens, r.OutputTokens)
			}
		}
		if o.Name() != shape {
			t.Fatalf("name %q", o.Name())
		}
	}
	o := ServeOptions{Shape: ShapePrefillBound, SystemPromptLen: 500}
	if err := o.ApplyShape(); err != nil || o.SystemPromptLen != 500 || o.Groups != 24 {
		t.Fatalf("explicit sizes must win: %+v %v", o, err)
	}
	if err := (&ServeOptions{Shape: "prefill"}).ApplyShape(); err == nil || !strings.Contains(err.Error(), "--shape") {
		t.Fatalf("unknown shape: %v", err)
	}
}

// TestLLMDRouterOptimizedBaseline extracts the EndpointPickerConfig from llm-d-router's Helm
// values (the snapshot's file when the tools cache has it, else a copy of its shape).
func TestLLMDRouterOptimizedBaseline(t *testing.T) {
	values := []byte("router:\n  epp:\n    pluginsConfigFile: \"ob.yaml\"\n    pluginsCustomConfig:\n      ob.yaml: |\n" +
		"        apiVersion: llm-d.ai/v1alpha1\n        kind: EndpointPickerConfig\n        plugins:\n        - type: queue-scorer\n")
	if home, err := os.UserCacheDir(); err == nil {
		if b, err := os.ReadFile(filepath.Join(home, "eppkit", "llmd-router-v0.10.0", "src", LLMDRouterOptimizedBaselinePath)); err == nil {
			values = b
		}
	}
	cfg, err := LLMDRouterOptimizedBaseline(values)
	if err != nil || !strings.HasPrefix(string(cfg), "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n") ||
		!strings.Contains(string(cfg), "- type: queue-scorer") {
		t.Fatalf("config %q, %v", cfg, err)
	}
	if _, err := LLMDRouterOptimizedBaseline([]byte("router: {}\n")); err == nil {
		t.Fatal("values without a config were accepted")
	}
}
