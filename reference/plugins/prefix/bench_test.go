package prefix

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/selfcheck/benchfixture"
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

// fillIndex returns an index of 100 endpoints holding 10,000 distinct block hashes each (1M
// entries, as after ~30,000 unique 2 KB requests), every 50th hash also held by three more
// endpoints (so some reverse-map entries have more than one holder).
func fillIndex() *Index {
	ix := NewIndex(0)
	hs := make([]uint64, 10_000)
	for e := range 100 {
		for i := range hs {
			hs[i] = uint64(e)<<32 | uint64(i)
			if i%50 == 0 {
				hs[i] = uint64(e/4) << 32 // shared with the other endpoints of its group of 4
			}
		}
		ix.Add(fmt.Sprintf("10.0.%d.%d:8000", e/256, e%256), 0, hs)
	}
	return ix
}

// BenchmarkIndexAdd measures one Add of 32 new hashes (one 2 KB request) to one of 100 endpoints
// of an index holding 1M entries (fillIndex), garbage collection included: the index's reverse
// map is what the collector scans on every cycle.
func BenchmarkIndexAdd(b *testing.B) {
	ix := fillIndex()
	hs := make([]uint64, 32)
	next := uint64(1) << 48
	b.ReportAllocs()
	b.ResetTimer()
	e := 0
	for b.Loop() {
		for i := range hs {
			hs[i] = next
			next++
		}
		ix.Add(fmt.Sprintf("10.0.0.%d:8000", e%100), 0, hs)
		e++
	}
}

// BenchmarkIndexGC measures one full garbage collection with a 1M-entry index (fillIndex) live:
// the marking work the index adds to every GC cycle of the EPP.
func BenchmarkIndexGC(b *testing.B) {
	ix := fillIndex()
	runtime.GC()
	b.ResetTimer()
	for b.Loop() {
		runtime.GC()
	}
	runtime.KeepAlive(ix)
}
