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

// sharedMetrics is a metrics source like datalayer.Collector: Read hands out the stored value
// without copying.
type sharedMetrics struct {
	m map[string]*framework.Metrics
}

func (s *sharedMetrics) Metrics(key string) *framework.Metrics { return s.m[key].Clone() }
func (s *sharedMetrics) Stale(key string) bool                 { return s.m[key] == nil }
func (s *sharedMetrics) Read(key string) (*framework.Metrics, bool) {
	m := s.m[key]
	return m, m == nil
}

// BenchmarkHandleRequest measures the reference EPP's decision path below ext_proc: one op =
// Director.HandleRequest (parse a completions body, read the pool and every endpoint's metrics,
// PrepareData, Scheduling with the default profile, PreRequest indexing the pick) + EndRequest,
// for a static pool of N endpoints with fresh metrics (queue 0–4, KV 0–0.9) and a unique prompt
// of the given size per op (its first block differs, so no prefix matches, as in
// `eppkit bench extproc`).
func BenchmarkHandleRequest(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		for _, size := range []int{2 << 10, 32 << 10} {
			b.Run(fmt.Sprintf("endpoints=%d/prompt=%dKB", n, size>>10), func(b *testing.B) {
				benchHandleRequest(b, n, size)
			})
		}
	}
}

// BenchmarkHandleRequestFlowControl is BenchmarkHandleRequest at 100 endpoints / 2 KB with
// flow control on (featureGates: [flowControl], upstream's defaults) and idle: the pool is
// below saturation and nothing is queued, so every request takes the idle path (one saturation
// read of the pool and the in-flight count) — the figure to compare with flow control off.
func BenchmarkHandleRequestFlowControl(b *testing.B) {
	b.Run("endpoints=100/prompt=2KB", func(b *testing.B) { benchHandleRequestCfg(b, 100, 2<<10, true) })
}

func benchHandleRequest(b *testing.B, n, promptBytes int) {
	benchHandleRequestCfg(b, n, promptBytes, false)
}

func benchHandleRequestCfg(b *testing.B, n, promptBytes int, flowControl bool) {
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
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	var cfg *framework.EndpointPickerConfig
	if flowControl {
		cfg = framework.DefaultConfig()
		cfg.FeatureGates = []string{framework.FlowControlFeatureGate}
	}
	rt, err := framework.NewRuntime(cfg, reg, framework.RuntimeOptions{Context: ctx, Clock: clk, Seed: 1,
		Logger: slog.New(slog.DiscardHandler), Endpoints: src.Endpoints})
	if err != nil {
		b.Fatal(err)
	}
	d, err := director.New(director.Options{Runtime: rt, Endpoints: src, Metrics: ms, Clock: clk,
		Logger: slog.New(slog.DiscardHandler), Context: ctx})
	if err != nil {
		b.Fatal(err)
	}
	// The body: {"model":"m","prompt":"<12-digit counter> words…","max_tokens":16}; the counter
	// is rewritten in place per op.
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
