package engine

import (
	"fmt"
	"math"
	"time"

	"k8s.io/utils/clock"
)

// Config configures an Engine. Field names follow llm-d-inference-sim's flags
// (pkg/common/config.go); DefaultConfig gives the simulator's defaults. New rejects a Config
// whose fields are out of range, naming the field.
type Config struct {
	// MaxNumSeqs is the number of running slots (--max-num-seqs, default 5); at least 1.
	MaxNumSeqs int
	// MaxWaitingQueueLength is the waiting queue's capacity in requests
	// (--max-waiting-queue-length, default 1000); at least 0. A request that can neither run nor
	// queue gets ErrQueueFull.
	MaxWaitingQueueLength int
	// BlockSize is the number of tokens per KV block (--block-size, default 16); one of 8, 16,
	// 32, 64, 128.
	BlockSize int
	// KVCacheSize is the number of blocks in the KV pool (--kv-cache-size, default 1024); it must
	// hold at least one request of MaxModelLen tokens.
	KVCacheSize int
	// EnablePrefixCaching turns prefix caching on (--enable-kvcache). When false no block is
	// hashed, no cache hit is counted and the prefix-cache counters stay 0 (vLLM records prefix
	// cache stats only with caching on); blocks still occupy the pool.
	EnablePrefixCaching bool
	// MaxModelLen is the context window in tokens (--max-model-len, default 1024): prompt tokens
	// plus MaxTokens may not exceed it.
	MaxModelLen int
	// MaxLoras is the number of distinct LoRA adapters that may have running requests at once
	// (--max-loras, default 1); at least 1.
	MaxLoras int
	// PrefillOverhead is the fixed part of the prefill time (--prefill-overhead).
	PrefillOverhead time.Duration
	// PrefillTimePerToken is the prefill time per uncached prompt token
	// (--prefill-time-per-token).
	PrefillTimePerToken time.Duration
	// PrefillTimeStdDev is the standard deviation of the prefill time (--prefill-time-std-dev).
	// Added beside the brief's API: the simulator draws the prefill-model TTFT with this
	// deviation, not with TimeToFirstTokenStdDev.
	PrefillTimeStdDev time.Duration
	// TimeToFirstToken is a fixed prefill time (--time-to-first-token). As in the simulator
	// (pkg/llm-d-inference-sim/latencies.go GetTimeToFirstToken), it replaces the prefill model
	// (PrefillOverhead + uncached tokens × PrefillTimePerToken) whenever it or
	// TimeToFirstTokenStdDev is non-zero.
	TimeToFirstToken time.Duration
	// TimeToFirstTokenStdDev is the standard deviation of TimeToFirstToken
	// (--time-to-first-token-std-dev).
	TimeToFirstTokenStdDev time.Duration
	// InterTokenLatency is the time between two output tokens at load factor 1
	// (--inter-token-latency).
	InterTokenLatency time.Duration
	// InterTokenLatencyStdDev is its standard deviation (--inter-token-latency-std-dev).
	InterTokenLatencyStdDev time.Duration
	// TimeFactorUnderLoad is the load factor f ≥ 1 at full occupancy (--time-factor-under-load,
	// default 1): latencies are multiplied by 1 + (f − 1)(running − 1)/(MaxNumSeqs − 1).
	TimeFactorUnderLoad float64
	// Seed seeds the jitter source; equal seeds and equal event orders give equal latencies.
	Seed int64
	// Clock is the engine's time source; nil means the real clock. Tests pass a
	// k8s.io/utils/clock/testing FakeClock.
	Clock clock.WithTicker
	// Stepped runs the engine without its background goroutine: it advances only inside calls
	// (Submit, Stats, NextDue, the Sequence methods). A discrete-event driver that owns the clock
	// (bench/sim) sets it and calls NextDue at every due time it reports, so events
	// nobody waits on (a finish that frees a slot) are still processed at their due times.
	Stepped bool
	// OnToken, when set, receives every output token of every sequence instead of Next: it is
	// called, with the engine's lock held, at the token's due time (ev.At), in due-time order; it
	// must not call the engine or block. Next then returns only the end of the stream (io.EOF) or
	// the sequence's error. For drivers with no goroutine per sequence (bench/sim).
	OnToken func(s *Sequence, ev Event)
	// KVEvents, when set with EnablePrefixCaching, receives the KV-cache events of every engine
	// step that changed the prefix cache (an admission that stored or evicted blocks,
	// ResetPrefixCache), in order, called with the engine's lock held: it must not block or call
	// the engine, and must copy what it keeps past the call except TokenIDs (immutable). Block
	// hashes in the events are vLLM's (VLLMBlockHasher seeded with KVEventsHashSeed); computing
	// them costs one SHA-256 per full prompt block at Submit, so the engine does it only when
	// this is set.
	KVEvents func(KVEventBatch)
	// KVEventsHashSeed is vLLM's PYTHONHASHSEED for the event hashes (VLLMBlockHasher).
	KVEventsHashSeed string
}

// DefaultConfig returns llm-d-inference-sim's defaults (pkg/common/config.go newConfig):
// 5 running slots, a queue of 1000, 16-token blocks, 1024 blocks, a 1024-token context, one
// LoRA slot, load factor 1, zero latencies, prefix caching off (--enable-kvcache defaults to
// false there), the real clock.
func DefaultConfig() Config {
	return Config{
		MaxNumSeqs:            5,
		MaxWaitingQueueLength: 1000,
		BlockSize:             16,
		KVCacheSize:           1024,
		MaxModelLen:           1024,
		MaxLoras:              1,
		TimeFactorUnderLoad:   1,
	}
}

// maxKVCacheSize bounds KVCacheSize so block indices fit in int32.
const maxKVCacheSize = 1 << 30

func (c *Config) validate() error {
	if c.MaxNumSeqs < 1 {
		return fmt.Errorf("engine: MaxNumSeqs must be at least 1, got %d", c.MaxNumSeqs)
	}
	if c.MaxWaitingQueueLength < 0 {
		return fmt.Errorf("engine: MaxWaitingQueueLength must be at least 0, got %d", c.MaxWaitingQueueLength)
	}
	switch c.BlockSize {
	case 8, 16, 32, 64, 128:
	default:
		return fmt.Errorf("engine: BlockSize must be one of 8, 16, 32, 64, 128, got %d", c.BlockSize)
	}
	if c.KVCacheSize < 1 || c.KVCacheSize > maxKVCacheSize {
		return fmt.Errorf("engine: KVCacheSize must be in [1, %d] blocks, got %d", maxKVCacheSize, c.KVCacheSize)
	}
	if c.MaxModelLen < 1 {
		return fmt.Errorf("engine: MaxModelLen must be at least 1 token, got %d", c.MaxModelLen)
	}
	if need := ceilDiv(c.MaxModelLen, c.BlockSize); need > c.KVCacheSize {
		return fmt.Errorf("engine: KVCacheSize of %d blocks cannot hold one request of MaxModelLen %d tokens (%d blocks of %d)",
			c.KVCacheSize, c.MaxModelLen, need, c.BlockSize)
	}
	if c.MaxLoras < 1 {
		return fmt.Errorf("engine: MaxLoras must be at least 1, got %d", c.MaxLoras)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PrefillOverhead", c.PrefillOverhead},
		{"PrefillTimePerToken", c.PrefillTimePerToken},
		{"PrefillTimeStdDev", c.PrefillTimeStdDev},
		{"TimeToFirstToken", c.TimeToFirstToken},
		{"TimeToFirstTokenStdDev", c.TimeToFirstTokenStdDev},
		{"InterTokenLatency", c.InterTokenLatency},
		{"InterTokenLatencyStdDev", c.InterTokenLatencyStdDev},
	} {
		if d.v < 0 {
			return fmt.Errorf("engine: %s must not be negative, got %v", d.name, d.v)
		}
	}
	if math.IsNaN(c.TimeFactorUnderLoad) || math.IsInf(c.TimeFactorUnderLoad, 0) || c.TimeFactorUnderLoad < 1 {
		return fmt.Errorf("engine: TimeFactorUnderLoad must be a finite number >= 1, got %v", c.TimeFactorUnderLoad)
	}
	return nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// Latencies is the part of Config that may change while an engine runs: the latency keys of
// llm-d-inference-sim's POST /admin/config. Fields mean what the Config fields of the same names
// mean.
type Latencies struct {
	PrefillOverhead, PrefillTimePerToken, PrefillTimeStdDev time.Duration
	TimeToFirstToken, TimeToFirstTokenStdDev                time.Duration
	InterTokenLatency, InterTokenLatencyStdDev              time.Duration
	TimeFactorUnderLoad                                     float64
}

func (c *Config) latencies() Latencies {
	return Latencies{
		PrefillOverhead: c.PrefillOverhead, PrefillTimePerToken: c.PrefillTimePerToken, PrefillTimeStdDev: c.PrefillTimeStdDev,
		TimeToFirstToken: c.TimeToFirstToken, TimeToFirstTokenStdDev: c.TimeToFirstTokenStdDev,
		InterTokenLatency: c.InterTokenLatency, InterTokenLatencyStdDev: c.InterTokenLatencyStdDev,
		TimeFactorUnderLoad: c.TimeFactorUnderLoad,
	}
}

func (c *Config) setLatencies(l Latencies) {
	c.PrefillOverhead, c.PrefillTimePerToken, c.PrefillTimeStdDev = l.PrefillOverhead, l.PrefillTimePerToken, l.PrefillTimeStdDev
	c.TimeToFirstToken, c.TimeToFirstTokenStdDev = l.TimeToFirstToken, l.TimeToFirstTokenStdDev
	c.InterTokenLatency, c.InterTokenLatencyStdDev = l.InterTokenLatency, l.InterTokenLatencyStdDev
	c.TimeFactorUnderLoad = l.TimeFactorUnderLoad
}
