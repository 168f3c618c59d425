package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/conformance/target"
)

// TestBenchUpstreamPolicies: the two upstream policies of `eppkit bench compare` run the cached
// upstream EPP against the apiserver source; only upstream-v1.5.0-predicted-latency gets its
// config file and the harness's predictor sidecar as both latency predictor servers, and it is
// skipped with the missing file's name when the config is not there.
func TestBenchUpstreamPolicies(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("EPPKIT_TOOLS_CACHE", cache)
	for _, f := range []string{"gie-v1.5.0/epp", "k8s-v1.37.2/kube-apiserver"} {
		p := filepath.Join(cache, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	configs, err := filepath.Abs("../../manifests/epp-configs")
	if err != nil {
		t.Fatal(err)
	}
	targets, notes, err := bench.Policies("round-robin,upstream-v1.5.0,upstream-v1.5.0-predicted-latency", bench.PolicyOptions{ConfigsDir: configs})
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 0 || len(targets) != 3 {
		t.Fatalf("targets %d, notes %q; want 3 targets and no notes", len(targets), notes)
	}
	plain, predicted := targets[1], targets[2]
	if plain.ConfigFile != "" || harness.ReceivesPredictorURL(plain.Target) {
		t.Errorf("upstream-v1.5.0: config %q, receives the predictor URL %v; want neither", plain.ConfigFile, harness.ReceivesPredictorURL(plain.Target))
	}
	if want := filepath.Join(configs, "upstream-v1.5.0-predicted-latency.yaml"); predicted.Name != bench.PolicyUpstreamPredicted || predicted.ConfigFile != want {
		t.Errorf("predicted policy %q config %q; want %q with %s", predicted.Name, predicted.ConfigFile, bench.PolicyUpstreamPredicted, want)
	}
	if !harness.ReceivesPredictorURL(predicted.Target) {
		t.Error("upstream-v1.5.0-predicted-latency does not receive {{.PredictorURL}}: the harness would start no predictor for it")
	}
	cmd, err := predicted.Target.(*target.CommandTarget).Render(harness.TargetEnv{PredictorURL: "http://127.0.0.1:7000",
		ConfigFile: predicted.ConfigFile, Kubeconfig: "/k", PoolName: "pool", PoolNamespace: "ns", GRPCPort: 1, HealthPort: 2, MetricsPort: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PREDICTION_SERVER_URL=http://127.0.0.1:7000 ", "TRAINING_SERVER_URL=http://127.0.0.1:7000 ",
		"--config-file " + predicted.ConfigFile, filepath.Join(cache, "gie-v1.5.0/epp")} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command %q lacks %q", cmd, want)
		}
	}

	// The reference policy is the default profile for every request (default.yaml), not the
	// reference target's own conformance config, which routes SLO requests by predicted latency.
	refs, _, err := bench.Policies("round-robin,reference", bench.PolicyOptions{ConfigsDir: configs})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(configs, "default.yaml"); len(refs) != 2 || refs[1].ConfigFile != want {
		t.Errorf("reference policy: %+v, want config %s", refs, want)
	}

	_, notes, err = bench.Policies("round-robin,upstream-v1.5.0-predicted-latency", bench.PolicyOptions{ConfigsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "upstream-v1.5.0-predicted-latency.yaml not found") {
		t.Errorf("without the config: notes %q, want one naming upstream-v1.5.0-predicted-latency.yaml", notes)
	}
}
