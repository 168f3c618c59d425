package datalayer

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/reference/framework"
)

// TestAgainstFakeVLLM scrapes a real fakes/vllm server (the same command line `eppkit fake-vllm`
// takes) to prove the default names match what it, and vLLM, export, in every metric-name
// generation (current, legacy, both).
func TestAgainstFakeVLLM(t *testing.T) {
	for _, gen := range vllm.MetricsGenerations {
		t.Run(gen, func(t *testing.T) { againstFakeVLLM(t, gen) })
	}
}

func againstFakeVLLM(t *testing.T, generation string) {
	cfg, _, err := vllm.ParseArgs([]string{"--metrics-names", generation,
		"--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "0", "--host", "127.0.0.1",
		"--max-loras", "3", "--block-size", "32",
		"--lora-modules", `{"name":"sql-lora"}`, `{"name":"chat-lora"}`,
		"--fake-metrics", `{"running-requests":4,"waiting-requests":9,"kv-cache-usage":0.625,` +
			`"loras":[{"running":"sql-lora","waiting":"","timestamp":100},` +
			`{"running":"sql-lora,chat-lora","waiting":"sql-lora,new-lora","timestamp":200}]}`,
		"--data-parallel-size", "2",
	}, nil)
	if err != nil {
		t.Fatalf("ParseArgs: %v", err)
	}
	inst, err := vllm.Start(cfg, vllm.Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = inst.Shutdown(ctx)
	})

	var eps []*framework.EndpointMetadata
	for i, r := range inst.Ranks {
		host, port, err := net.SplitHostPort(r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		eps = append(eps, &framework.EndpointMetadata{Name: "pod-rank-" + strconv.Itoa(i), Address: host, Port: p})
	}
	if len(eps) != 2 {
		t.Fatalf("%d ranks, want 2", len(eps))
	}
	c, _ := startCollector(t, Config{Interval: 20 * time.Millisecond, Timeout: 5 * time.Second})
	c.SetEndpoints(eps)
	for _, ep := range eps {
		waitFor(t, "scrape of "+ep.Key(), nil, func() bool { return c.Metrics(ep.Key()) != nil })
		got := c.Metrics(ep.Key())
		if got.ScrapeError != nil {
			t.Fatalf("%s: ScrapeError %v", ep.Key(), got.ScrapeError)
		}
		want := &framework.Metrics{
			WaitingQueueSize: 9, RunningRequests: 4, KVCacheUsage: 0.625,
			ActiveModels:    map[string]struct{}{"sql-lora": {}, "chat-lora": {}},
			WaitingModels:   map[string]struct{}{"new-lora": {}}, // sql-lora runs: counted once
			MaxActiveModels: 3, CacheBlockSize: 32,
		}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(framework.Metrics{}, "UpdateTime", "CacheNumGPUBlocks")); diff != "" {
			t.Errorf("%s (-want +got):\n%s", ep.Key(), diff)
		}
		if got.CacheNumGPUBlocks <= 0 {
			t.Errorf("%s: CacheNumGPUBlocks = %d, want the fake's positive block count", ep.Key(), got.CacheNumGPUBlocks)
		}
		if c.Stale(ep.Key()) {
			t.Errorf("%s stale after a good scrape", ep.Key())
		}
	}
}
