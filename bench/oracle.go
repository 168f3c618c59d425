package bench

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// LatencyModel is the part of the fake vLLM's latency model that bounds TTFT from below
// (SPEC §7; fakes/vllm/engine admitLocked): prefill = (PrefillOverhead + uncached prompt tokens ×
// PrefillTimePerToken) × load factor, load factor ≥ 1, plus queue wait ≥ 0. Cache hits are
// whole leading blocks of BlockSize tokens, at most (prompt − 1) / BlockSize blocks (vLLM's
// get_computed_blocks cap).
type LatencyModel struct {
	PrefillOverhead     time.Duration `json:"prefill_overhead_ns"`
	PrefillTimePerToken time.Duration `json:"prefill_time_per_token_ns"`
	BlockSize           int           `json:"block_size"`
}

// Oracle is the lower bound on TTFT for a workload: every request hits the longest prefix any
// request sent before it could have left in some endpoint's cache (an omniscient router with an
// unbounded cache), runs alone (load factor 1) and never queues.
type Oracle struct {
	// MeanTTFTMs is the bound on mean TTFT over the requests (ms).
	MeanTTFTMs float64 `json:"mean_ttft_ms"`
	// P90TTFTMs is the 90th percentile of the per-request bounds (ms).
	P90TTFTMs float64 `json:"p90_ttft_ms"`
	// CachedTokenFraction is cached prompt tokens ÷ prompt tokens under the oracle, in [0,1].
	CachedTokenFraction float64 `json:"cached_token_fraction"`
	// N is the number of requests.
	N int `json:"n"`
	// PerRequestMs are the per-request bounds in send order.
	PerRequestMs []float64 `json:"-"`
}

// OracleBound computes the bound for reqs in send order. A request's Model ("" = the base
// model) is part of the cache key, as it is of the fake's root block hash.
// Errors name the bad LatencyModel field.
func OracleBound(reqs []Request, m LatencyModel) (Oracle, error) {
	switch m.BlockSize {
	case 8, 16, 32, 64, 128:
	default:
		return Oracle{}, fmt.Errorf("oracle: BlockSize must be one of 8, 16, 32, 64, 128, got %d", m.BlockSize)
	}
	if m.PrefillOverhead < 0 || m.PrefillTimePerToken < 0 {
		return Oracle{}, fmt.Errorf("oracle: PrefillOverhead and PrefillTimePerToken must not be negative, got %v and %v",
			m.PrefillOverhead, m.PrefillTimePerToken)
	}
	seen := map[uint64]struct{}{}
	o := Oracle{N: len(reqs), PerRequestMs: make([]float64, len(reqs))}
	var cached, prompt int64
	buf := make([]byte, 0, 8+4*m.BlockSize)
	for i, r := range reqs {
		toks := engine.Tokenize(r.Prompt)
		n := len(toks)
		full := n / m.BlockSize
		capBlocks := max(n-1, 0) / m.BlockSize
		parent := xxhash.Sum64String("eppkit-oracle-root\x00" + r.Model)
		hit, counting := 0, true
		for b := 0; b < full; b++ {
			buf = binary.LittleEndian.AppendUint64(buf[:0], parent)
			for _, t := range toks[b*m.BlockSize : (b+1)*m.BlockSize] {
				buf = binary.LittleEndian.AppendUint32(buf, t.ID)
			}
			h := xxhash.Sum64(buf)
			if _, ok := seen[h]; ok && counting && b < capBlocks {
				hit++
			} else {
				counting = false
			}
			seen[h] = struct{}{}
			parent = h
		}
		c := hit * m.BlockSize
		t := m.PrefillOverhead + time.Duration(n-c)*m.PrefillTimePerToken
		o.PerRequestMs[i] = ms(t)
		cached += int64(c)
		prompt += int64(n)
	}
	if len(reqs) > 0 {
		d := Summarise(o.PerRequestMs, []float64{90})
		o.MeanTTFTMs, o.P90TTFTMs = d.Mean, d.Percentiles["p90"]
	}
	if prompt > 0 {
		o.CachedTokenFraction = float64(cached) / float64(prompt)
	}
	return o, nil
}
