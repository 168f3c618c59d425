package prefix

import (
	"context"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/benchfixture"
)

// BenchmarkProducerPrepareData measures one PrepareRequestData call (hash the 8,000-character
// prompt into 125 blocks, match it, put an attribute on 100 endpoints, write plugin state) on the
// benchfixture pool: 10 endpoints hold the whole prompt, 30 its first half. Default parameters.
// The plugin-state entry is deleted after each call so the store does not grow.
func BenchmarkProducerPrepareData(b *testing.B) {
	h, _ := newTestHandle(b)
	p, err := NewProducer("", DefaultProducerParameters(), h)
	if err != nil {
		b.Fatal(err)
	}
	mds := benchfixture.EndpointMetadata()
	ctx := context.Background()
	for _, w := range benchfixture.Warmups() {
		eps := benchfixture.NewEndpoints(mds)
		if err := p.PrepareRequestData(ctx, w.Request, eps); err != nil {
			b.Fatal(err)
		}
		p.PreRequest(ctx, w.Request, &framework.SchedulingResult{PrimaryProfileName: "default",
			ProfileResults: map[string]*framework.ProfileRunResult{"default": {TargetEndpoints: []*framework.Endpoint{eps[w.Target]}}}})
	}
	req := benchfixture.Request("bench", benchfixture.Prompt())
	eps := benchfixture.NewEndpoints(mds)
	if err := p.PrepareRequestData(ctx, req, eps); err != nil {
		b.Fatal(err)
	}
	full, half, none := MatchScore(eps[0]), MatchScore(eps[benchfixture.NumFull]), MatchScore(eps[benchfixture.NumEndpoints-1])
	if full != 1 || half != 62.0/125.0 || none != 0 {
		b.Fatalf("fixture is wrong: full %v half %v none %v", full, half, none)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_ = p.PrepareRequestData(ctx, req, eps)
		h.state.DeleteKey(req.RequestID, p.StateKey())
	}
}
