package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	testingclock "k8s.io/utils/clock/testing"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newTestEngine builds an engine on a FakeClock from the simulator defaults with prefix
// caching on, after mutate.
func newTestEngine(t *testing.T, mutate func(*Config)) (*Engine, *testingclock.FakeClock) {
	t.Helper()
	fc := testingclock.NewFakeClock(epoch)
	cfg := DefaultConfig()
	cfg.EnablePrefixCaching = true
	cfg.Clock = fc
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, fc
}

// words returns a prompt of n tokens "<tag>0 <tag>1 ..." (each word with its space is one token).
func words(tag string, from, n int) string {
	var b strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, "%s%d ", tag, i)
	}
	return b.String()
}

func submit(t *testing.T, e *Engine, r Request) *Sequence {
	t.Helper()
	if r.Model == "" {
		r.Model = "m"
	}
	if r.MaxTokens == 0 && !r.PrefillOnly {
		r.MaxTokens = 1
	}
	s, err := e.Submit(context.Background(), r)
	if err != nil {
		t.Fatalf("Submit(%s): %v", r.ID, err)
	}
	t.Cleanup(s.Close)
	return s
}

// mustNext returns the next event, which must already be due: a Next that would block fails
// the test (after a real-time guard, which never elapses on the success path).
func mustNext(t *testing.T, s *Sequence) Event {
	t.Helper()
	type res struct {
		ev  Event
		err error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan res, 1)
	go func() {
		ev, err := s.Next(ctx)
		ch <- res{ev, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Next: %v", r.err)
		}
		return r.ev
	case <-time.After(10 * time.Second):
		t.Fatalf("Next blocked: no token due at %v", s.e.clock.Now())
		return Event{}
	}
}

// drain steps the clock by step until s has produced every token, and returns its events.
func drain(t *testing.T, fc *testingclock.FakeClock, s *Sequence, step time.Duration) []Event {
	t.Helper()
	var out []Event
	for i := 0; i < 1_000_000; i++ {
		s.e.mu.Lock()
		s.e.advanceLocked(s.e.now())
		ready := s.head < len(s.events)
		done := s.state == stateDone
		s.e.mu.Unlock()
		switch {
		case ready:
			out = append(out, mustNext(t, s))
		case done:
			if _, err := s.Next(context.Background()); !errors.Is(err, io.EOF) {
				t.Fatalf("Next after the final event = %v, want io.EOF", err)
			}
			return out
		default:
			fc.Step(step)
		}
	}
	t.Fatal("sequence never finished")
	return nil
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		field  string
		mutate func(*Config)
	}{
		{"MaxNumSeqs", func(c *Config) { c.MaxNumSeqs = 0 }},
		{"MaxWaitingQueueLength", func(c *Config) { c.MaxWaitingQueueLength = -1 }},
		{"BlockSize", func(c *Config) { c.BlockSize = 24 }},
		{"KVCacheSize", func(c *Config) { c.KVCacheSize = 0 }},
		{"KVCacheSize", func(c *Config) { c.KVCacheSize = 10 }}, // 10 × 16 < MaxModelLen 1024
		{"MaxModelLen", func(c *Config) { c.MaxModelLen = 0 }},
		{"MaxLoras", func(c *Config) { c.MaxLoras = 0 }},
		{"PrefillOverhead", func(c *Config) { c.PrefillOverhead = -time.Millisecond }},
		{"PrefillTimePerToken", func(c *Config) { c.PrefillTimePerToken = -1 }},
		{"PrefillTimeStdDev", func(c *Config) { c.PrefillTimeStdDev = -1 }},
		{"TimeToFirstToken", func(c *Config) { c.TimeToFirstToken = -1 }},
		{"TimeToFirstTokenStdDev", func(c *Config) { c.TimeToFirstTokenStdDev = -1 }},
		{"InterTokenLatency", func(c *Config) { c.InterTokenLatency = -1 }},
		{"InterTokenLatencyStdDev", func(c *Config) { c.InterTokenLatencyStdDev = -1 }},
		{"TimeFactorUnderLoad", func(c *Config) { c.TimeFactorUnderLoad = 0.5 }},
	}
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mutate(&cfg)
			e, err := New(cfg)
			if err == nil {
				_ = e.Close()
				t.Fatalf("New accepted a bad %s", tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New error %q does not name the field %s", err, tc.field)
			}
		})
	}
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatalf("New(DefaultConfig()): %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestSubmitValidation(t *testing.T) {
	e, _ := newTestEngine(t, func(c *Config) { c.MaxModelLen = 64; c.KVCacheSize = 64 })
	tests := []struct {
		name    string
		req     Request
		wantIs  error
		wantSub string
	}{
		{name: "no output tokens", req: Request{Prompt: "a", MaxTokens: 0}, wantSub: "MaxTokens"},
		{name: "output tokens on a prefill-only request", req: Request{Prompt: "a", MaxTokens: 1, PrefillOnly: true}, wantSub: "MaxTokens"},
		{name: "token-id prompt over the context window", req: Request{TokenIDs: make([]uint32, 64), MaxTokens: 1}, wantIs: ErrPromptTooLong, wantSub: "64 prompt tokens + 1 output tokens > 64"},
		{name: "unknown finish reason", req: Request{Prompt: "a", MaxTokens: 1, FinishReason: "tool_calls"}, wantSub: "FinishReason"},
		{name: "prompt plus output over the context window", req: Request{Prompt: words("w", 0, 60), MaxTokens: 5}, wantIs: ErrPromptTooLong, wantSub: "60 prompt tokens + 5 output tokens > 64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Submit(context.Background(), tc.req)
			if err == nil {
				t.Fatal("Submit accepted the request")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v is not %v", err, tc.wantIs)
			}
			if !strings.Contains(err.Error(), tc.wantSub) {
				t.Errorf("error %q does not contain %q", err, tc.wantSub)
			}
		})
	}
	s := submit(t, e, Request{Prompt: words("w", 0, 59), MaxTokens: 5})
	if got := s.PromptTokens(); got != 59 {
		t.Errorf("PromptTokens = %d, want 59", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Submit(ctx, Request{Prompt: "a", MaxTokens: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Submit with a cancelled ctx = %v, want context.Canceled", err)
	}
}

// TestRepeatedPromptTTFT: with jitter 0 and load factor 1, a repeated prompt's TTFT is lower
// by exactly cached tokens × PrefillTimePerToken, and cached tokens are the full blocks below
// prompt length − 1.
func TestRepeatedPromptTTFT(t *testing.T) {
	const overhead, perToken = 30 * time.Millisecond, time.Millisecond
	tests := []struct {
		prompt     int
		wantCached int
	}{
		{prompt: 1, wantCached: 0},
		{prompt: 15, wantCached: 0},
		{prompt: 16, wantCached: 0}, // one full block, but the last token must be computed
		{prompt: 17, wantCached: 16},
		{prompt: 32, wantCached: 16},
		{prompt: 33, wantCached: 32},
		{prompt: 100, wantCached: 96},
		{prompt: 128, wantCached: 112},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("prompt=%d", tc.prompt), func(t *testing.T) {
			e, fc := newTestEngine(t, func(c *Config) {
				c.PrefillOverhead, c.PrefillTimePerToken = overhead, perToken
				c.InterTokenLatency = 5 * time.Millisecond
			})
			p := words("w", 0, tc.prompt)
			first := submit(t, e, Request{Prompt: p, MaxTokens: 3})
			drain(t, fc, first, time.Millisecond)
			second := submit(t, e, Request{Prompt: p, MaxTokens: 3})
			evs := drain(t, fc, second, time.Millisecond)

			if got := first.CachedTokens(); got != 0 {
				t.Errorf("first CachedTokens = %d, want 0", got)
			}
			if got := second.CachedTokens(); got != tc.wantCached {
				t.Errorf("second CachedTokens = %d, want %d", got, tc.wantCached)
			}
			wantFirst := overhead + time.Duration(tc.prompt)*perToken
			if got := first.TTFT(); got != wantFirst {
				t.Errorf("first TTFT = %v, want %v", got, wantFirst)
			}
			if got, want := first.TTFT()-second.TTFT(), time.Duration(tc.wantCached)*perToken; got != want {
				t.Errorf("TTFT gain = %v, want exactly %d cached tokens × %v = %v", got, tc.wantCached, perToken, want)
			}
			// Token times: first at TTFT, then every 5 ms.
			for i, ev := range evs {
				want := evs[0].At.Add(time.Duration(i) * 5 * time.Millisecond)
				if ev.Index != i || !ev.At.Equal(want) {
					t.Errorf("event %d = {Index %d, At +%v}, want {Index %d, At +%v}", i, ev.Index, ev.At.Sub(epoch), i, want.Sub(epoch))
				}
			}
			if last := evs[len(evs)-1]; !last.Final || last.FinishReason != FinishLength {
				t.Errorf("last event = %+v, want Final with finish reason %q", last, FinishLength)
			}
		})
	}
}

// TestSharedPrefixCachedTokens: a prompt sharing only its first k full blocks with a cached one
// gets k × BlockSize cached tokens; a different model, adapter or salt gets none.
func TestSharedPrefixCachedTokens(t *testing.T) {
	const bs = 16
	base := Request{Model: "m", Prompt: words("w", 0, 5*bs+3)}
	tests := []struct {
		name       string
		req        Request
		wantCached int
	}{
		{name: "k=0 differs in the first block", req: Request{Model: "m", Prompt: "x " + words("w", 1, 5*bs+2)}, wantCached: 0},
		{name: "k=1", req: Request{Model: "m", Prompt: words("w", 0, bs) + words("z", 0, 4*bs)}, wantCached: bs},
		{name: "k=3 with a token changed in block 4", req: Request{Model: "m", Prompt: words("w", 0, 3*bs) + "x " + words("w", 3*bs+1, 2*bs)}, wantCached: 3 * bs},
		{name: "k=5 then a different tail", req: Request{Model: "m", Prompt: words("w", 0, 5*bs) + words("y", 0, 9)}, wantCached: 5 * bs},
		{name: "same tokens, other model", req: Request{Model: "m2", Prompt: base.Prompt}, wantCached: 0},
		{name: "same tokens, adapter", req: Request{Model: "m", LoRA: "a", Prompt: base.Prompt}, wantCached: 0},
		{name: "same tokens, cache salt", req: Request{Model: "m", CacheSalt: "s", Prompt: base.Prompt}, wantCached: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, fc := newTestEngine(t, nil)
			drain(t, fc, submit(t, e, base), time.Millisecond)
			s := submit(t, e, tc.req)
			drain(t, fc, s, time.Millisecond)
			if got := s.CachedTokens(); got != tc.wantCached {
				t.Errorf("CachedTokens = %d, want %d", got, tc.wantCached)
			}
		})
	}
}

func TestPrefixCachingOff(t *testing.T) {
	e, fc := newTestEngine(t, func(c *Config) { c.EnablePrefixCaching = false; c.PrefillOverhead = time.Millisecond })
	p := words("w", 0, 40)
	drain(t, fc, submit(t, e, Request{Prompt: p}), time.Millisecond)
	s := submit(t, e, Request{Prompt: p, MaxTokens: 8})
	if got := s.CachedTokens(); got != 0 {
		t.Errorf("CachedTokens with caching off = %d, want 0", got)
	}
	st := e.Stats()
	if st.PrefixCacheQueries != 0 || st.PrefixCacheHits != 0 {
		t.Errorf("prefix cache counters with caching off = %d/%d, want 0/0", st.PrefixCacheQueries, st.PrefixCacheHits)
	}
	// 40 + 8 tokens still hold ceil(48/16) = 3 blocks.
	if want := 3.0 / 1024; st.KVUsage != want {
		t.Errorf("KVUsage = %v, want %v", st.KVUsage, want)
	}
}

// TestLRUEvictionThroughEngine: with a pool that fits only some prompts, the least recently
// released prompt's blocks are evicted first, and a running request's never are.
func TestLRUEvictionThroughEngine(t *testing.T) {
	const bs = 16
	e, fc := newTestEngine(t, func(c *Config) {
		c.MaxModelLen = 4 * bs
		c.KVCacheSize = 8
		c.MaxNumSeqs = 2
		c.PrefillOverhead = time.Millisecond
		c.InterTokenLatency = time.Millisecond
	})
	pa, pb, pc := words("a", 0, 2*bs), words("b", 0, 2*bs), words("c", 0, 2*bs)
	// a and b: 2 full prompt blocks + 1 private block each; a is released first.
	drain(t, fc, submit(t, e, Request{ID: "a", Prompt: pa}), time.Millisecond)
	drain(t, fc, submit(t, e, Request{ID: "b", Prompt: pb}), time.Millisecond)
	// held: 2 full prompt blocks + 2 private blocks, running for 20 ms. The pool (8) is now
	// fully created: 4 blocks held, a's and b's 4 cached blocks unreferenced.
	held := submit(t, e, Request{ID: "held", Prompt: pc, MaxTokens: 20})
	if st := e.Stats(); st.KVUsage != 4.0/8 {
		t.Fatalf("KVUsage with held running = %v, want 0.5", st.KVUsage)
	}
	// x needs 2 new blocks: only unreferenced cached blocks are left, and a's go first.
	x := submit(t, e, Request{ID: "x", Prompt: words("x", 0, 2*bs-1)})
	if !x.admitted {
		t.Fatal("x not admitted: evictable blocks were not used")
	}
	drain(t, fc, x, time.Millisecond)
	rb := submit(t, e, Request{ID: "rb", Prompt: pb})
	drain(t, fc, rb, time.Millisecond)
	if got := rb.CachedTokens(); got != bs {
		t.Errorf("b repeated: CachedTokens = %d, want %d (b released after a, so kept)", got, bs)
	}
	ra := submit(t, e, Request{ID: "ra", Prompt: pa})
	drain(t, fc, ra, time.Millisecond)
	if got := ra.CachedTokens(); got != 0 {
		t.Errorf("a repeated: CachedTokens = %d, want 0 (a released first, so evicted)", got)
	}
	// Through all of that the held request kept its blocks, and its prefix still hits.
	if held.state != stateRunning {
		t.Fatalf("held finished early (state %d); the test needs it running", held.state)
	}
	for _, idx := range held.blocks {
		if e.pool.blocks[idx].ref < 1 {
			t.Fatalf("held request's block %d has ref %d", idx, e.pool.blocks[idx].ref)
		}
	}
	rc := submit(t, e, Request{ID: "rc", Prompt: pc})
	if got := rc.CachedTokens(); got != bs {
		t.Errorf("held prompt repeated: CachedTokens = %d, want %d (a running request's blocks are never evicted)", got, bs)
	}
}

// TestKVHeadOfLineBlocking: a request whose blocks do not fit waits, and so does every request
// behind it, until blocks are released.
func TestKVHeadOfLineBlocking(t *testing.T) {
	const bs = 16
	e, fc := newTestEngine(t, func(c *Config) {
		c.MaxModelLen = 4 * bs
		c.KVCacheSize = 4
		c.MaxNumSeqs = 4
		c.PrefillOverhead = time.Millisecond
		c.InterTokenLatency = time.Millisecond
	})
	big := submit(t, e, Request{ID: "big", Prompt: "a", MaxTokens: 3 * bs}) // 4 blocks: the whole pool
	next := submit(t, e, Request{ID: "next", Prompt: "b", MaxTokens: bs})   // 2 blocks: must wait
	small := submit(t, e, Request{ID: "small", Prompt: "c", MaxTokens: 1})  // 1 block: waits behind next
	st := e.Stats()
	if st.Running != 1 || st.Waiting != 2 || st.KVUsage != 1 {
		t.Fatalf("Stats = running %d waiting %d KV %v, want 1, 2, 1", st.Running, st.Waiting, st.KVUsage)
	}
	drain(t, fc, big, time.Millisecond)
	if !next.admitted || !small.admitted {
		t.Fatalf("after big finished: next admitted %v, small admitted %v, want both", next.admitted, small.admitted)
	}
	if next.QueueWait() != small.QueueWait() || next.QueueWait() <= 0 {
		t.Errorf("QueueWait next %v small %v: want equal and positive (admitted together)", next.QueueWait(), small.QueueWait())
	}
}

func TestQueueFullAndFIFO(t *testing.T) {
	e, fc := newTestEngine(t, func(c *Config) {
		c.MaxNumSeqs = 1
		c.MaxWaitingQueueLength = 2
		c.PrefillOverhead = 10 * time.Millisecond
	})
	var seqs []*Sequence
	for i := 0; i < 3; i++ {
		seqs = append(seqs, submit(t, e, Request{ID: fmt.Sprint(i), Prompt: words("p", i*10, 5)}))
	}
	if _, err := e.Submit(context.Background(), Request{ID: "3", Prompt: "x", MaxTokens: 1}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("fourth Submit = %v, want ErrQueueFull", err)
	}
	if st := e.Stats(); st.Running != 1 || st.Waiting != 2 {
		t.Fatalf("Stats running %d waiting %d, want 1 and 2", st.Running, st.Waiting)
	}
	var order []string
	var firsts []time.Time
	for _, s := range seqs {
		evs := drain(t, fc, s, time.Millisecond)
		order = append(order, s.req.ID)
		firsts = append(firsts, evs[0].At)
	}
	for i := 1; i < len(firsts); i++ {
		if !firsts[i].After(firsts[i-1]) {
			t.Errorf("request %d's first token at +%v is not after request %d's at +%v: not FIFO",
				i, firsts[i].Sub(epoch), i-1, firsts[i-1].Sub(epoch))
		}
	}
	if diff := cmp.Diff([]string{"0", "1", "2"}, order); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	// Each waited for the one before: queue waits 0, 10 ms, 20 ms.
	for i, s := range seqs {
		if got, want := s.QueueWait(), time.Duration(i)*10*time.Millisecond; got != want {
			t.Errorf("request %d QueueWait = %v, want %v", i, got, want)
		}
	}
	// A zero-length queue rejects whatever cannot run at once.
	e0, _ := newTestEngine(t, func(c *Config) {
		c.MaxNumSeqs, c.MaxWaitingQueueLength, c.PrefillOverhead = 1, 0, time.Millisecond
	})
	submit(t, e0, Request{Prompt: "a", MaxTokens: 5})
	if _, err := e0.Submit(context.Background(), Request{Prompt: "b", MaxTokens: 1}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("Submit with MaxWaitingQueueLength 0 and a busy slot = %v, want ErrQueueFull", err)
	}
}

func TestLoRASlots(t *testing.T) {
	tests := []struct {
		name        string
		maxLoras    int
		loras       []string // submitted in order, "" = base model
		wantRunning []string // request ids running right after submission
		wantRunLs   []string
		wantWaitLs  []string
	}{
		{
			name:     "one slot: a second adapter waits, later requests for the running one and the base model pass it",
			maxLoras: 1, loras: []string{"a", "b", "a", ""},
			wantRunning: []string{"0", "2", "3"}, wantRunLs: []string{"a"}, wantWaitLs: []string{"b"},
		},
		{
			name:     "two slots: a third adapter waits",
			maxLoras: 2, loras: []string{"a", "b", "c", "b"},
			wantRunning: []string{"0", "1", "3"}, wantRunLs: []string{"a", "b"}, wantWaitLs: []string{"c"},
		},
		{
			name:     "base model never needs a slot",
			maxLoras: 1, loras: []string{"", "", "a", ""},
			wantRunning: []string{"0", "1", "2", "3"}, wantRunLs: []string{"a"}, wantWaitLs: []string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, fc := newTestEngine(t, func(c *Config) {
				c.MaxNumSeqs = 4
				c.MaxLoras = tc.maxLoras
				c.InterTokenLatency = time.Millisecond
			})
			var seqs []*Sequence
			for i, l := range tc.loras {
				seqs = append(seqs, submit(t, e, Request{ID: fmt.Sprint(i), LoRA: l, Prompt: words("p", 0, 4), MaxTokens: 3}))
			}
			var running []string
			for _, s := range seqs {
				if s.state == stateRunning {
					running = append(running, s.req.ID)
				}
			}
			if diff := cmp.Diff(tc.wantRunning, running); diff != "" {
				t.Errorf("running (-want +got):\n%s", diff)
			}
			st := e.Stats()
			if diff := cmp.Diff(tc.wantRunLs, st.RunningLoRAs); diff != "" {
				t.Errorf("RunningLoRAs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWaitLs, st.WaitingLoRAs); diff != "" {
				t.Errorf("WaitingLoRAs (-want +got):\n%s", diff)
			}
			if st.MaxLoras != tc.maxLoras {
				t.Errorf("MaxLoras = %d, want %d", st.MaxLoras, tc.maxLoras)
			}
			// Once everything running finishes, the waiting adapter runs.
			for _, s := range seqs {
				drain(t, fc, s, time.Millisecond)
			}
			if st := e.Stats(); st.Running != 0 || st.Waiting != 0 || len(st.RunningLoRAs) != 0 {
				t.Errorf("after all finished: %+v", st)
			}
		})
	}
}

func TestLoadFactor(t *testing.T) {
	tests := []struct {
		f               float64
		running, maxSeq int
		want            float64
	}{
		{f: 1, running: 5, maxSeq: 5, want: 1},
		{f: 2, running: 1, maxSeq: 5, want: 1},
		{f: 2, running: 3, maxSeq: 5, want: 1.5},
		{f: 2, running: 5, maxSeq: 5, want: 2},
		{f: 3, running: 2, maxSeq: 3, want: 2},
		{f: 4, running: 1, maxSeq: 1, want: 1}, // max-num-seqs 1: no load effect
	}
	for _, tc := range tests {
		if got := loadFactor(tc.f, tc.running, tc.maxSeq); got != tc.want {
			t.Errorf("loadFactor(f=%v, running=%d, maxNumSeqs=%d) = %v, want %v", tc.f, tc.running, tc.maxSeq, got, tc.want)
		}
	}
}

// TestLoadFactorInLatencies: the k-th concurrent admission's prefill is scaled by its load
// factor, and inter-token gaps by the running count at each token.
func TestLoadFactorInLatencies(t *testing.T) {
	const overhead, itl = 40 * time.Millisecond, 8 * time.Millisecond
	e, fc := newTestEngine(t, func(c *Config) {
		c.MaxNumSeqs = 5
		c.TimeFactorUnderLoad = 2
		c.PrefillOverhead = overhead
		c.InterTokenLatency = itl
	})
	var seqs []*Sequence
	for i := 0; i < 3; i++ {
		seqs = append(seqs, submit(t, e, Request{ID: fmt.Sprint(i), Prompt: words("p", 100*i, 3), MaxTokens: 2}))
	}
	for i, s := range seqs {
		f := 1 + float64(i)*0.25 // running 1, 2, 3 of 5 at f=2
		if got, want := s.TTFT(), time.Duration(float64(overhead)*f); got != want {
			t.Errorf("request %d TTFT = %v, want %v (load factor %v)", i, got, want, f)
		}
	}
	// All three run while each emits its second token: gap = itl × 1.5.
	evs := drain(t, fc, seqs[0], time.Millisecond)
	if got, want := evs[1].At.Sub(evs[0].At), time.Duration(float64(itl)*1.5); got != want {
		t.Errorf("inter-token gap with 3 running = %v, want %v", got, want)
	}
}

func TestJitterBoundedAndReproducible(t *testing.T) {
	const seed, n = 42, 10000
	const mean, sd = 12 * time.Millisecond, 4 * time.Millisecond
	draw := func(seed int64) []time.Duration {
		e, _ := newTestEngine(t, func(c *Config) { c.Seed = seed })
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = jitter(e.rng, mean, sd)
		}
		return out
	}
	a, b, c := draw(seed), draw(seed), draw(seed+1)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("seed %d: draws differ between runs", seed)
	}
	if cmp.Equal(a, c) {
		t.Fatalf("seeds %d and %d give the same draws", seed, seed+1)
	}
	lo, hi := time.Duration(0.3*float64(mean)), time.Duration(1.7*float64(mean))
	var sum float64
	var clamped int
	for i, v := range a {
		if v < lo || v > hi {
			t.Fatalf("seed %d: draw %d = %v outside [%v, %v]", seed, i, v, lo, hi)
		}
		if v == lo || v == hi {
			clamped++
		}
		sum += float64(v)
	}
	// sd/mean = 1/3: the clamp at ±2.1σ cuts ~3.6% of draws; the mean stays within 2% (n=10000; 2% is 6 standard errors).
	if got := time.Duration(sum / n); got < mean*98/100 || got > mean*102/100 {
		t.Errorf("seed %d: mean of %d draws = %v, want %v ± 2%%", seed, n, got, mean)
	}
	if clamped == 0 || clamped > n/10 {
		t.Errorf("seed %d: %d of %d draws clamped, want some and at most 10%%", seed, clamped, n)
	}
	if got := jitter(nil, mean, 0); got != mean {
		t.Errorf("jitter with stddev 0 = %v, want the mean %v", got, mean)
	}
}

// TestEngineReproducibleForSeed: two engines with the same seed, inputs and clock steps give
// the same token times; the times stay within the jitter bounds.
func TestEngineReproducibleForSeed(t *testing.T) {
	const seed = 7
	run := func() []time.Duration {
		e, fc := newTestEngine(t, func(c *Config) {
			c.Seed = seed
			c.PrefillOverhead, c.PrefillTimeStdDev = 30*time.Millisecond, 6*time.Millisecond
			c.InterTokenLatency, c.InterTokenLatencyStdDev = 10*time.Millisecond, 3*time.Millisecond
		})
		s := submit(t, e, Request{Prompt: words("w", 0, 20), MaxTokens: 50})
		var out []time.Duration
		for _, ev := range drain(t, fc, s, 500*time.Microsecond) {
			out = append(out, ev.At.Sub(epoch))
		}
		return out
	}
	a, b := run(), run()
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("seed %d: token times differ between runs (-a +b):\n%s", seed, diff)
	}
	if a[0] < 9*time.Millisecond || a[0] > 51*time.Millisecond {
		t.Errorf("seed %d: TTFT %v outside [0.3, 1.7] × 30ms", seed, a[0])
	}
	for i := 1; i < len(a); i++ {
		if g := a[i] - a[i-1]; g < 3*time.Millisecond || g > 17*time.Millisecond {
			t.Errorf("seed %d: gap %d = %v outside [0.3, 1.7] × 10ms", seed, i, g)
		}
	}
}

func TestStatsCountersAndKVUsage(t *testing.T) {
	const bs = 16
	e, fc := newTestEngine(t, func(c *Config) {
		c.KVCacheSize, c.PrefillOverhead, c.InterTokenLatency = 100, time.Millisecond, time.Millisecond
	})
	p := words("w", 0, 40)                               // 40 tokens: 2 full blocks
	a := submit(t, e, Request{Prompt: p, MaxTokens: 10}) // ceil(50/16) = 4 blocks
	b := submit(t, e, Request{Prompt: p, MaxTokens: 30}) // shares 2 blocks, + ceil(70/16) − 2 = 3
	st := e.Stats()
	want := Stats{
		Running: 2, KVUsage: 7.0 / 100,
		RunningLoRAs: []string{}, WaitingLoRAs: []string{},
		MaxLoras: 1, BlockSize: bs, NumGPUBlocks: 100,
		PrefixCacheQueries: 80, PrefixCacheHits: 32,
	}
	if diff := cmp.Diff(want, st, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("Stats with two running (-want +got):\n%s", diff)
	}
	drain(t, fc, a, time.Millisecond)
	st = e.Stats()
	if st.KVUsage != 5.0/100 {
		t.Errorf("KVUsage after a finished = %v, want 0.05 (b's 5 blocks)", st.KVUsage)
	}
	drain(t, fc, b, time.Millisecond)
	st = e.Stats()
	want.Running, want.KVUsage = 0, 0
	want.PromptTokens, want.GenerationTokens = 80, 40
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("Stats after both finished (-want +got):\n%s", diff)
	}
}

// TestBlockingNextAndCancellation exercises Next blocked on the fake clock, abort by ctx, by
// Close, by the Submit context, and engine Close.
func TestBlockingNextAndCancellation(t *testing.T) {
	e, fc := newTestEngine(t, func(c *Config) {
		c.MaxNumSeqs = 1
		c.PrefillOverhead = 20 * time.Millisecond
		c.InterTokenLatency = 10 * time.Millisecond
	})
	s := submit(t, e, Request{Prompt: "hello world", MaxTokens: 2, FinishReason: FinishStop})
	type res struct {
		ev  Event
		err error
	}
	ch := make(chan res, 1)
	next := func() {
		go func() { ev, err := s.Next(context.Background()); ch <- res{ev, err} }()
		for !s.Blocked() {
			runtime.Gosched()
		}
	}
	next()
	fc.Step(19 * time.Millisecond)
	select {
	case r := <-ch:
		t.Fatalf("Next returned %+v, %v before the TTFT", r.ev, r.err)
	default:
	}
	fc.Step(time.Millisecond)
	r := <-ch
	if r.err != nil || r.ev.Index != 0 || !r.ev.At.Equal(epoch.Add(20*time.Millisecond)) {
		t.Fatalf("first Next = %+v, %v; want index 0 at +20ms", r.ev, r.err)
	}
	next()
	fc.Step(10 * time.Millisecond)
	r = <-ch
	if r.err != nil || !r.ev.Final || r.ev.FinishReason != FinishStop {
		t.Fatalf("second Next = %+v, %v; want the final event with reason stop", r.ev, r.err)
	}
	if _, err := s.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after final = %v, want io.EOF", err)
	}

	// ctx cancelled while blocked: error, and the slot is freed for the waiting request.
	busy := submit(t, e, Request{ID: "busy", Prompt: "a", MaxTokens: 100})
	queued := submit(t, e, Request{ID: "queued", Prompt: "b", MaxTokens: 1})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { ev, err := busy.Next(ctx); ch <- res{ev, err} }()
	for !busy.Blocked() {
		runtime.Gosched()
	}
	cancel()
	if r := <-ch; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Next with cancelled ctx = %v, want context.Canceled", r.err)
	}
	if queued.state != stateRunning {
		t.Fatalf("queued request not admitted after the running one was aborted")
	}
	if _, err := busy.Next(context.Background()); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after abort = %v, want context.Canceled", err)
	}

	// Close aborts; idempotent.
	queued.Close()
	queued.Close()
	if _, err := queued.Next(context.Background()); !errors.Is(err, ErrAborted) {
		t.Errorf("Next after Close = %v, want ErrAborted", err)
	}

	// The Submit context governs the sequence while it waits in the queue.
	head := submit(t, e, Request{ID: "head", Prompt: "a", MaxTokens: 100})
	sctx, scancel := context.WithCancel(context.Background())
	w, err := e.Submit(sctx, Request{ID: "w", Prompt: "c", MaxTokens: 1})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if st := e.Stats(); st.Waiting != 1 {
		t.Fatalf("Waiting = %d, want 1", st.Waiting)
	}
	scancel()
	for e.Stats().Waiting != 0 {
		runtime.Gosched()
	}
	if _, err := w.Next(context.Background()); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after the Submit ctx was cancelled = %v, want context.Canceled", err)
	}

	// Engine Close wakes a blocked Next with ErrEngineClosed and refuses new work.
	go func() { ev, err := head.Next(context.Background()); ch <- res{ev, err} }()
	for !head.Blocked() {
		runtime.Gosched()
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r := <-ch; !errors.Is(r.err, ErrEngineClosed) {
		t.Errorf("blocked Next after engine Close = %v, want ErrEngineClosed", r.err)
	}
	if _, err := e.Submit(context.Background(), Request{Prompt: "x", MaxTokens: 1}); !errors.Is(err, ErrEngineClosed) {
		t.Errorf("Submit after Close = %v, want ErrEngineClosed", err)
	}
	if st := e.Stats(); st.Running != 0 || st.Waiting != 0 || st.KVUsage != 0 {
		t.Errorf("Stats after Close = %+v, want nothing running or held", st)
	}
}

// TestConcurrentStreams runs many goroutines submitting and reading at once on a fake clock that
// a stepper advances, to give the race detector the engine's shared paths.
func TestConcurrentStreams(t *testing.T) {
	const n, tokens, seed = 64, 20, 11
	e, fc := newTestEngine(t, func(c *Config) {
		c.Seed = seed
		c.MaxNumSeqs = 8
		c.MaxWaitingQueueLength = n
		c.PrefillOverhead = 5 * time.Millisecond
		c.PrefillTimePerToken = 100 * time.Microsecond
		c.InterTokenLatency = 2 * time.Millisecond
		c.InterTokenLatencyStdDev = 500 * time.Microsecond
		c.TimeFactorUnderLoad = 2
		c.MaxLoras = 2
	})
	done := make(chan error, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			lora := []string{"", "a", "b", "c"}[i%4]
			s, err := e.Submit(context.Background(), Request{Prompt: words("w", i%5, 30), LoRA: lora, MaxTokens: tokens})
			if err != nil {
				done <- err
				return
			}
			defer s.Close()
			for k := 0; ; k++ {
				ev, err := s.Next(context.Background())
				if errors.Is(err, io.EOF) {
					if k != tokens {
						done <- fmt.Errorf("stream %d: %d tokens, want %d", i, k, tokens)
						return
					}
					done <- nil
					return
				}
				if err != nil || ev.Index != k {
					done <- fmt.Errorf("stream %d: event %+v, err %v at %d", i, ev, err, k)
					return
				}
				_ = e.Stats()
			}
		}(i)
	}
	finished := 0
	for finished < n {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			finished++
		default:
			fc.Step(100 * time.Microsecond)
			runtime.Gosched()
		}
	}
	st := e.Stats()
	if st.GenerationTokens != n*tokens || st.Running != 0 || st.Waiting != 0 || st.KVUsage != 0 {
		t.Errorf("seed %d: final Stats = %+v, want %d generation tokens and an idle engine", seed, st, n*tokens)
	}
}

func TestSetLatencies(t *testing.T) {
	e, fc := newTestEngine(t, func(c *Config) { c.PrefillOverhead = 10 * time.Millisecond })
	l := e.Latencies()
	l.PrefillOverhead = 50 * time.Millisecond
	l.InterTokenLatency = 3 * time.Millisecond
	if err := e.SetLatencies(l); err != nil {
		t.Fatalf("SetLatencies: %v", err)
	}
	s := submit(t, e, Request{Prompt: "a b", MaxTokens: 3})
	evs := drain(t, fc, s, time.Millisecond)
	if got := s.TTFT(); got != 50*time.Millisecond {
		t.Errorf("TTFT after SetLatencies = %v, want 50ms", got)
	}
	if got := evs[2].At.Sub(evs[1].At); got != 3*time.Millisecond {
		t.Errorf("inter-token gap after SetLatencies = %v, want 3ms", got)
	}
	bad := l
	bad.InterTokenLatencyStdDev = -1
	if err := e.SetLatencies(bad); err == nil || !strings.Contains(err.Error(), "InterTokenLatencyStdDev") {
		t.Errorf("SetLatencies with a negative std dev = %v, want an error naming InterTokenLatencyStdDev", err)
	}
	if diff := cmp.Diff(l, e.Latencies()); diff != "" {
		t.Errorf("a rejected SetLatencies changed the settings (-want +got):\n%s", diff)
	}
}

// TestRealClockNeverEarly runs a few short streams on the real clock: every token reaches its
// consumer at or after its due time, in order, with the configured gaps between due times.
func TestRealClockNeverEarly(t *testing.T) {
	const streams, tokens = 8, 10
	cfg := DefaultConfig()
	cfg.MaxNumSeqs = 4 // half the streams queue
	cfg.PrefillOverhead = time.Millisecond
	cfg.InterTokenLatency = time.Millisecond
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	errs := make(chan error, streams)
	for i := 0; i < streams; i++ {
		go func(i int) {
			s, err := e.Submit(context.Background(), Request{Model: "m", Prompt: words("w", i, 4), MaxTokens: tokens})
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			var prev time.Time
			for k := 0; ; k++ {
				ev, err := s.Next(context.Background())
				got := time.Now()
				if errors.Is(err, io.EOF) {
					errs <- nil
					return
				}
				if err != nil {
					errs <- err
					return
				}
				if got.Before(ev.At) {
					errs <- fmt.Errorf("stream %d token %d delivered %v before it was due", i, k, ev.At.Sub(got))
					return
				}
				if k > 0 && ev.At.Sub(prev) != time.Millisecond {
					errs <- fmt.Errorf("stream %d token %d: due %v after the previous, want 1ms", i, k, ev.At.Sub(prev))
					return
				}
				prev = ev.At
			}
		}(i)
	}
	for i := 0; i < streams; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if st := e.Stats(); st.GenerationTokens != streams*tokens || st.Running != 0 || st.Waiting != 0 {
		t.Errorf("final Stats = %+v, want %d tokens and an idle engine", st, streams*tokens)
	}
}

// TestEventBuffered: tokens that fell due while nobody called Next come out at once, each telling
// how many more are already waiting, so a late consumer can write them together.
func TestEventBuffered(t *testing.T) {
	e, fc := newTestEngine(t, func(c *Config) {
		c.PrefillOverhead, c.PrefillTimePerToken = 10*time.Millisecond, 0
		c.InterTokenLatency = 5 * time.Millisecond
	})
	s := submit(t, e, Request{Prompt: words("b", 0, 4), MaxTokens: 4})
	// First token at 10 ms, then 15, 20, 25 ms: at 22 ms three are due.
	fc.Step(22 * time.Millisecond)
	var got []int
	for range 3 {
		ev, err := s.Next(context.Background())
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		got = append(got, ev.Buffered)
	}
	if diff := cmp.Diff([]int{2, 1, 0}, got); diff != "" {
		t.Fatalf("Buffered of the three due tokens (-want +got):\n%s", diff)
	}
}

// TestTokenIDPrompt: a prompt given as token ids counts one token per id and is hashed by the
// ids as given, so a later text prompt whose dummy-tokenizer ids equal them hits the cache.
func TestTokenIDPrompt(t *testing.T) {
	e, fc := newTestEngine(t, func(c *Config) { c.BlockSize = 8 })
	text := words("w", 0, 33)
	var ids []uint32
	for _, tok := range Tokenize(text) {
		ids = append(ids, tok.ID)
	}
	a := submit(t, e, Request{ID: "ids", TokenIDs: ids, Prompt: "ignored when TokenIDs is set", MaxTokens: 1})
	if got := a.PromptTokens(); got != 33 {
		t.Fatalf("PromptTokens of 33 ids = %d", got)
	}
	drain(t, fc, a, time.Millisecond)
	b := submit(t, e, Request{ID: "text", Prompt: text, MaxTokens: 1})
	drain(t, fc, b, time.Millisecond)
	if got := b.CachedTokens(); got != 32 {
		t.Errorf("text prompt with the same ids: CachedTokens = %d, want 32 (4 full blocks of 8)", got)
	}
	c := submit(t, e, Request{ID: "other ids", TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}, MaxTokens: 1})
	drain(t, fc, c, time.Millisecond)
	if got := c.CachedTokens(); got != 0 {
		t.Errorf("unrelated ids: CachedTokens = %d, want 0", got)
	}
}

// TestPrefillOnly: a pooling request occupies a slot and its prompt's blocks until its prefill
// ends, then finishes with one Final event at the prefill time and no generation token.
func TestPrefillOnly(t *testing.T) {
	e, fc := newTestEngine(t, func(c *Config) {
		c.MaxNumSeqs = 1
		c.PrefillOverhead = 10 * time.Millisecond
		c.PrefillTimePerToken = time.Millisecond
	})
	p := submit(t, e, Request{ID: "embed", Prompt: words("e", 0, 20), PrefillOnly: true})
	q := submit(t, e, Request{ID: "behind", Prompt: "x", MaxTokens: 1})
	st := e.Stats()
	if st.Running != 1 || st.Waiting != 1 {
		t.Fatalf("running %d waiting %d, want the pooling request running and the other queued", st.Running, st.Waiting)
	}
	if want := float64(2) / float64(e.cfg.KVCacheSize); st.KVUsage != want {
		t.Errorf("KV usage %v, want %v (2 blocks of 16 for 20 prompt tokens, none for output)", st.KVUsage, want)
	}
	evs := drain(t, fc, p, time.Millisecond)
	want := []Event{{Index: 0, Final: true, FinishReason: FinishStop, At: epoch.Add(30 * time.Millisecond)}}
	if diff := cmp.Diff(want, evs); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	st = e.Stats()
	if st.GenerationTokens != 0 || st.PromptTokens != 20 {
		t.Errorf("counters: generation %d prompt %d, want 0 and 20", st.GenerationTokens, st.PromptTokens)
	}
	if st.Running != 1 || st.Waiting != 0 {
		t.Errorf("after the prefill: running %d waiting %d, want the queued request admitted", st.Running, st.Waiting)
	}
	drain(t, fc, q, time.Millisecond)
}
