package director_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/discovery"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
)

// prefixProducerConfigs are the default profile's scorers (queue 2, KV 2, prefix 3, max-score
// picker) with the prefix match from either producer.
var prefixProducerConfigs = map[string]string{
	"approx": `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
  - {pluginRef: max-score-picker}
`,
	"precise": `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-producer
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
  - {pluginRef: max-score-picker}
`,
}

// BenchmarkHandleRequestPrefixProducer is BenchmarkHandleRequest at 100 endpoints and a 2 KB
// prompt with the prefix match from approx-prefix-cache-producer or from
// precise-prefix-cache-producer (which tokenizes the prompt, keys its 16-token blocks and looks
// them up in its event index; its subscribers dial 10.x.x.x:5557, where nothing answers, and
// wait on the benchmark's fake clock). docs/fake-vllm.md has the figures.
func BenchmarkHandleRequestPrefixProducer(b *testing.B) {
	for _, producer := range []string{"approx", "precise"} {
		b.Run("producer="+producer+"/endpoints=100/prompt=2KB", func(b *testing.B) {
			benchPrefixProducer(b, prefixProducerConfigs[producer], 100, 2<<10)
		})
	}
}

func benchPrefixProducer(b *testing.B, config string, n, promptBytes int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	addrs := make([]string, n)
	ms := &sharedMetrics{m: map[string]*framework.Metrics{}}
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.%d.%d.%d:8000", i/65536, i/256%256, i%256)
		ms.m[addrs[i]] = &framework.Metrics{WaitingQueueSize: i % 5, RunningRequests: i % 7,
			KVCacheUsage: float64(i%10) / 10, UpdateTime: clk.Now()}
	}
	src, err := discovery.NewStatic(addrs, nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := framework.LoadConfig([]byte(config))
	if err != nil {
		b.Fatal(err)
	}
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	rt, err := framework.NewRuntime(cfg, reg, framework.RuntimeOptions{Context: ctx, Clock: clk, Seed: 1,
		Logger: slog.New(slog.DiscardHandler), Endpoints: src.Endpoints})
	if err != nil {
		b.Fatal(err)
	}
	d, err := director.New(director.Options{Runtime: rt, Endpoints: src, Metrics: ms, Clock: clk,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	sb.WriteString(`{"model":"m","prompt":"`)
	at := sb.Len()
	sb.WriteString("000000000000")
	for i := 0; sb.Len() < at+promptBytes; i++ {
		sb.WriteString(" w")
		sb.WriteString(strconv.Itoa(i % 97))
	}
	sb.WriteString(`","max_tokens":16}`)
	body := []byte(sb.String())
	headers := map[string]string{":path": "/v1/completions", "x-request-id": "bench"}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		copy(body[at:at+12], fmt.Appendf(nil, "%012d", i))
		res, err := d.HandleRequest(ctx, &director.Input{Headers: headers, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		d.EndRequest(res.Request)
	}
}
