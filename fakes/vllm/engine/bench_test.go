package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// BenchmarkRequestBookkeeping measures the engine's own work for one request: tokenize and hash
// a 2,000-token prompt, queue, admit (cache lookup, block allocation, TTFT), then release on
// Close. The 32 prompts share a 1,000-token prefix, so admission also finds cache hits and the
// pool recycles blocks. The fake clock never moves: no token is produced, only bookkeeping.
//
//	go test -run '^$' -bench BenchmarkRequestBookkeeping -benchmem ./fakes/vllm/engine/
func BenchmarkRequestBookkeeping(b *testing.B) {
	cfg := DefaultConfig()
	cfg.EnablePrefixCaching = true
	cfg.MaxModelLen = 4096
	cfg.KVCacheSize = 2048
	cfg.PrefillOverhead = 30 * time.Millisecond
	cfg.PrefillTimePerToken = 250 * time.Microsecond
	cfg.Clock = testingclock.NewFakeClock(epoch)
	e, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	prefix := words("sys", 0, 1000)
	prompts := make([]string, 32)
	for i := range prompts {
		prompts[i] = prefix + words(fmt.Sprintf("u%d_", i), 0, 1000)
	}
	if n := len(Tokenize(prompts[0])); n != 2000 {
		b.Fatalf("prompt has %d tokens, want 2000", n)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := e.Submit(ctx, Request{Model: "m", Prompt: prompts[i%len(prompts)], MaxTokens: 16})
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
	b.StopTimer()
	st := e.Stats()
	if st.Running != 0 || st.KVUsage != 0 || (b.N > 1 && st.PrefixCacheHits == 0) {
		b.Fatalf("after the loop: %+v, want an idle engine with cache hits", st)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStreams runs concurrent streams on the real clock, each consumer reading every token
// with Next as a server handler would, and reports the CPU used per wall second (process-wide:
// engine plus consumers, no HTTP), and how late tokens reached their consumer (p50, p99, max)
// and the p99 gap between a stream's consecutive tokens as seen by the consumer.
//
//	go test -run '^$' -bench BenchmarkStreams -benchtime 1x ./fakes/vllm/engine/
func BenchmarkStreams(b *testing.B) {
	for _, tc := range []struct{ streams, tokens int }{{200, 100}, {1000, 50}} {
		b.Run(fmt.Sprintf("streams=%d/tokens=%d/itl=10ms", tc.streams, tc.tokens), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runStreams(b, tc.streams, tc.tokens)
			}
		})
		// The floor: the same goroutines sleeping 10 ms per token on a reused timer, no engine.
		b.Run(fmt.Sprintf("baseline-timers/streams=%d/tokens=%d", tc.streams, tc.tokens), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runTimerBaseline(b, tc.streams, tc.tokens)
			}
		})
	}
}

var benchITLStdDev time.Duration

func runStreams(b *testing.B, streams, tokens int) {
	cfg := DefaultConfig()
	cfg.EnablePrefixCaching = true
	cfg.MaxNumSeqs = streams
	cfg.MaxModelLen = 1024
	cfg.KVCacheSize = streams * 8
	cfg.PrefillOverhead = 20 * time.Millisecond
	cfg.InterTokenLatency = 10 * time.Millisecond
	cfg.InterTokenLatencyStdDev = benchITLStdDev
	cfg.Seed = 1
	e, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var mu sync.Mutex
	late := make([]time.Duration, 0, streams*tokens)
	gaps := make([]time.Duration, 0, streams*tokens)
	var wg sync.WaitGroup
	startCPU, start := cpuTime(), time.Now()
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, err := e.Submit(context.Background(), Request{Model: "m", Prompt: words("w", i%10, 50), MaxTokens: tokens})
			if err != nil {
				b.Error(err)
				return
			}
			defer s.Close()
			myLate := make([]time.Duration, 0, tokens)
			myGaps := make([]time.Duration, 0, tokens)
			var prev time.Time
			for {
				ev, err := s.Next(context.Background())
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				myLate = append(myLate, now.Sub(ev.At))
				if !prev.IsZero() {
					myGaps = append(myGaps, now.Sub(prev))
				}
				prev = now
			}
			mu.Lock()
			late = append(late, myLate...)
			gaps = append(gaps, myGaps...)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	wall, cpu := time.Since(start), cpuTime()-startCPU
	if len(late) != streams*tokens {
		b.Fatalf("%d tokens delivered, want %d", len(late), streams*tokens)
	}
	slices.Sort(late)
	slices.Sort(gaps)
	q := func(v []time.Duration, p float64) float64 {
		if len(v) == 0 {
			return 0
		}
		return float64(v[min(len(v)-1, int(p*float64(len(v))))]) / 1e6
	}
	b.ReportMetric(100*float64(cpu)/float64(wall), "cpu-%-of-1-core")
	b.ReportMetric(q(late, 0.5), "late-p50-ms")
	b.ReportMetric(q(late, 0.99), "late-p99-ms")
	b.ReportMetric(q(late, 1), "late-max-ms")
	b.ReportMetric(q(gaps, 0.99), "gap-p99-ms")
	b.ReportMetric(float64(len(late)), "tokens")
}

func runTimerBaseline(b *testing.B, streams, tokens int) {
	var wg sync.WaitGroup
	startCPU, start := cpuTime(), time.Now()
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(20 * time.Millisecond)
			<-t.C
			for k := 1; k < tokens; k++ {
				t.Reset(10 * time.Millisecond)
				<-t.C
			}
		}()
	}
	wg.Wait()
	wall, cpu := time.Since(start), cpuTime()-startCPU
	b.ReportMetric(100*float64(cpu)/float64(wall), "cpu-%-of-1-core")
}

// BenchmarkTokenPath measures the engine's work per output token without timers: 200 running
// sequences on a fake clock, the clock stepped by the inter-token latency, and Next called once
// per sequence per step (one op = one token delivered).
//
//	go test -run '^$' -bench BenchmarkTokenPath -benchmem ./fakes/vllm/engine/
func BenchmarkTokenPath(b *testing.B) {
	const streams = 200
	cfg := DefaultConfig()
	cfg.MaxNumSeqs = streams
	cfg.MaxModelLen = 1 << 15
	cfg.KVCacheSize = 1 << 18 // 200 × 1025 blocks
	cfg.InterTokenLatency = 10 * time.Millisecond
	fc := testingclock.NewFakeClock(epoch)
	cfg.Clock = fc
	e, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	seqs := make([]*Sequence, streams)
	for i := range seqs {
		if seqs[i], err = e.Submit(context.Background(), Request{Model: "m", Prompt: "p", MaxTokens: 1 << 14}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % streams
		if k == 0 && i > 0 {
			fc.Step(10 * time.Millisecond)
		}
		ev, err := seqs[k].Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if ev.Final { // worn out: replace it (prefill is 0, so its first token is due at once)
			seqs[k].Close()
			if seqs[k], err = e.Submit(ctx, Request{Model: "m", Prompt: "p", MaxTokens: 1 << 14}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
