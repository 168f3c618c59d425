package plugins_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
	"github.com/eppkit/eppkit/selfcheck/benchfixture"
)

// BenchmarkScheduleDefaultProfile measures one full scheduling cycle of the default profile
// (framework.DefaultConfig: queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3,
// max-score-picker; the approx-prefix-cache-producer auto-created for PrefixCacheMatchInfo),
// built through framework.NewRuntime with plugins.RegisterAll, on the benchfixture pool: 100
// endpoints, an 8,000-character prompt, 10 endpoints holding the whole prompt and 30 its first
// half. One op = fresh request-scoped snapshots of the 100 endpoints + Schedule (PrepareData,
// Admission, Scheduling) + EndRequest (plugin-state cleanup). PreRequest is not in the loop, so
// the index stays the fixture's.
func BenchmarkScheduleDefaultProfile(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	mds := benchfixture.EndpointMetadata()
	rt, err := framework.NewRuntime(framework.DefaultConfig(), reg, framework.RuntimeOptions{
		Context:   ctx,
		Clock:     clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0)),
		Seed:      1,
		Logger:    slog.New(slog.DiscardHandler),
		Endpoints: func() []*framework.EndpointMetadata { return mds },
	})
	if err != nil {
		b.Fatal(err)
	}
	// Warm the index: each warm-up request is scheduled with its target as the only candidate,
	// so the pick (and what PreRequest indexes) is the fixture's.
	for _, w := range benchfixture.Warmups() {
		eps := benchfixture.NewEndpoints(mds[w.Target : w.Target+1])
		res, err := rt.Schedule(ctx, w.Request, eps)
		if err != nil {
			b.Fatal(err)
		}
		rt.PreRequest(ctx, w.Request, res)
		rt.EndRequest(w.Request)
	}
	req := benchfixture.Request("bench", benchfixture.Prompt())
	res, err := rt.Schedule(ctx, req, benchfixture.NewEndpoints(mds))
	if err != nil {
		b.Fatal(err)
	}
	rt.EndRequest(req)
	fullHolders := make([]string, benchfixture.NumFull)
	for i := range fullHolders {
		fullHolders[i] = mds[i].Key()
	}
	if pick := res.Primary().TargetEndpoints[0].Key(); !slices.Contains(fullHolders, pick) {
		b.Fatalf("fixture is wrong: picked %s, not one of the endpoints holding the whole prompt", pick)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := rt.Schedule(ctx, req, benchfixture.NewEndpoints(mds)); err != nil {
			b.Fatal(err)
		}
		rt.EndRequest(req)
	}
}
