package legacyprefix

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
)

// BenchmarkLegacyScore measures one Score call (hash an 8,000-character prompt, match it, score
// 100 endpoints, write cycle and plugin state) on the fixed fixture shared with the producer's
// benchmark: 100 endpoints, 10 holding the whole prompt and 30 holding its first half, default
// parameters (16-token blocks → 125 blocks).
func BenchmarkLegacyScore(b *testing.B) {
	h := newFakeHandle(b)
	p := New("legacy", DefaultConfig(), h)
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 200)[:8000]
	endpoints := make([]*framework.Endpoint, 100)
	for i := range endpoints {
		endpoints[i] = endpoint(fmt.Sprintf("pod-%03d", i), fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), &framework.Metrics{})
	}
	full := completions("meta-llama/Llama-3.1-8B-Instruct", prompt, "")
	half := completions("meta-llama/Llama-3.1-8B-Instruct", prompt[:4000], "")
	for i, ep := range endpoints[:40] {
		req := full
		if i >= 10 {
			req = half
		}
		req.RequestID = fmt.Sprintf("warm-%d", i)
		p.Score(context.Background(), framework.NewCycleState(), req, endpoints)
		p.PreRequest(context.Background(), req, result(ep, nil))
	}
	req := completions("meta-llama/Llama-3.1-8B-Instruct", prompt, "")
	req.RequestID = "bench"
	cycle := framework.NewCycleState()
	scores := p.Score(context.Background(), cycle, req, endpoints)
	if scores[endpoints[0].Key()] != 1 || scores[endpoints[10].Key()] != float64(4000/64)/float64(8000/64) || scores[endpoints[99].Key()] != 0 {
		b.Fatalf("fixture is wrong: full %v half %v none %v", scores[endpoints[0].Key()], scores[endpoints[10].Key()], scores[endpoints[99].Key()])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p.Score(context.Background(), cycle, req, endpoints)
	}
}
