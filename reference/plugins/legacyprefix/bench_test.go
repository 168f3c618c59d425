package legacyprefix

import (
	"context"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/selfcheck/benchfixture"
)

// BenchmarkLegacyScore measures one Score call (hash the 8,000-character prompt into 125 blocks,
// match it, score 100 endpoints, write cycle and plugin state) on the benchfixture pool shared
// with the producer's benchmark: 10 endpoints hold the whole prompt, 30 its first half. Default
// parameters. Each call overwrites the same plugin-state entry, so the store does not grow.
func BenchmarkLegacyScore(b *testing.B) {
	h := newFakeHandle(b)
	p := New("", DefaultConfig(), h)
	mds := benchfixture.EndpointMetadata()
	ctx := context.Background()
	for _, w := range benchfixture.Warmups() {
		eps := benchfixture.NewEndpoints(mds)
		p.Score(ctx, framework.NewCycleState(), w.Request, eps)
		p.PreRequest(ctx, w.Request, result(eps[w.Target], nil))
	}
	req := benchfixture.Request("bench", benchfixture.Prompt())
	eps := benchfixture.NewEndpoints(mds)
	cycle := framework.NewCycleState()
	scores := p.Score(ctx, cycle, req, eps)
	full, half, none := scores[eps[0].Key()], scores[eps[benchfixture.NumFull].Key()], scores[eps[benchfixture.NumEndpoints-1].Key()]
	if full != 1 || half != 62.0/125.0 || none != 0 {
		b.Fatalf("fixture is wrong: full %v half %v none %v", full, half, none)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p.Score(ctx, cycle, req, eps)
	}
}
