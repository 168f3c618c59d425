package engine

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

// tokenLog is what a driver saw of one sequence's tokens.
type tokenLog struct {
	ID     string
	Index  int
	Final  bool
	Finish string
	At     time.Duration
}

// steppedWorkload submits the same requests to an engine at fixed offsets: three requests on one
// running slot with jitter on, so admissions follow finishes and due times depend on the order in
// which events are processed.
var steppedWorkload = []struct {
	at time.Duration
	r  Request
}{
	{0, Request{ID: "a", Prompt: words("p", 0, 40), MaxTokens: 3}},
	{5 * time.Millisecond, Request{ID: "b", Prompt: words("p", 0, 40), MaxTokens: 2}},
	{7 * time.Millisecond, Request{ID: "c", Prompt: words("q", 0, 20), MaxTokens: 4, FinishReason: FinishStop}},
}

func steppedConfig(c *Config) {
	c.PrefillOverhead = 10 * time.Millisecond
	c.PrefillTimePerToken = time.Millisecond
	c.InterTokenLatency = 4 * time.Millisecond
	c.InterTokenLatencyStdDev = time.Millisecond
	c.TimeFactorUnderLoad = 2
	c.MaxNumSeqs = 1
	c.Seed = 7
}

// TestSteppedEngineMatchesNext drives one engine as a discrete-event simulation does (Stepped,
// OnToken, NextDue, a clock moved only to due times) and another as the fake server does (a
// background goroutine and Next), with the same submissions, and wants the same tokens at the
// same times.
func TestSteppedEngineMatchesNext(t *testing.T) {
	// Stepped.
	fc := testingclock.NewFakeClock(epoch)
	var got []tokenLog
	cfg := DefaultConfig()
	cfg.EnablePrefixCaching = true
	steppedConfig(&cfg)
	cfg.Clock, cfg.Stepped = fc, true
	cfg.OnToken = func(s *Sequence, ev Event) {
		if ev.At != fc.Now() {
			t.Errorf("token %s/%d delivered at %v, due %v", s.req.ID, ev.Index, fc.Now().Sub(epoch), ev.At.Sub(epoch))
		}
		got = append(got, tokenLog{s.req.ID, ev.Index, ev.Final, ev.FinishReason, ev.At.Sub(epoch)})
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var seqs []*Sequence
	next := 0
	for {
		due, ok := e.NextDue()
		if next < len(steppedWorkload) && (!ok || !epoch.Add(steppedWorkload[next].at).After(due)) {
			fc.SetTime(epoch.Add(steppedWorkload[next].at))
			r := steppedWorkload[next].r
			r.Model = "m"
			s, err := e.Submit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, s)
			next++
			continue
		}
		if !ok {
			break
		}
		fc.SetTime(due)
	}
	for _, s := range seqs {
		if _, err := s.Next(context.Background()); err != io.EOF {
			t.Errorf("Next after the stream with OnToken = %v, want io.EOF", err)
		}
	}

	// Next-driven, the fake server's way: step the clock past everything, then drain.
	ref, rfc := newTestEngine(t, steppedConfig)
	var rseqs []*Sequence
	for _, w := range steppedWorkload {
		rfc.SetTime(epoch.Add(w.at))
		r := w.r
		r.Model = "m"
		rseqs = append(rseqs, submit(t, ref, r))
	}
	rfc.Step(10 * time.Second)
	_ = ref.Stats()
	var want []tokenLog
	for _, s := range rseqs {
		for {
			ev, err := s.Next(context.Background())
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, tokenLog{s.req.ID, ev.Index, ev.Final, ev.FinishReason, ev.At.Sub(epoch)})
		}
	}
	// OnToken sees tokens in due-time order across sequences; Next per sequence.
	byID := func(l []tokenLog) map[string][]tokenLog {
		m := map[string][]tokenLog{}
		for _, x := range l {
			m[x.ID] = append(m[x.ID], x)
		}
		return m
	}
	if d := cmp.Diff(byID(want), byID(got)); d != "" {
		t.Errorf("stepped engine tokens differ from the Next-driven engine's (-next +stepped):\n%s", d)
	}
	for i := 1; i < len(got); i++ {
		if got[i].At < got[i-1].At {
			t.Errorf("OnToken out of order: %+v after %+v", got[i], got[i-1])
		}
	}
	if len(got) != 3+2+4 {
		t.Errorf("OnToken saw %d tokens, want 9", len(got))
	}
	if _, ok := e.NextDue(); ok {
		t.Error("NextDue reports an event after every sequence finished")
	}
}

// TestCachedPrefixTokensMatchesAdmission checks the probe against what admission reports: a
// prompt hashed once reads, on an engine that served its prefix, exactly the cached tokens the
// next Submit of it gets; another block size or a cold engine reads 0.
func TestCachedPrefixTokensMatchesAdmission(t *testing.T) {
	e, fc := newTestEngine(t, func(c *Config) { c.PrefillOverhead = time.Millisecond })
	prompt := words("w", 0, 50) // 50 tokens: 3 full blocks of 16
	r := Request{Model: "m", Prompt: prompt, MaxTokens: 1}
	p := HashPrompt(r, 16)
	if p.Tokens != 50 || len(p.Hashes) != 3 {
		t.Fatalf("HashPrompt = %d tokens, %d hashes; want 50, 3", p.Tokens, len(p.Hashes))
	}
	if got := e.CachedPrefixTokens(p); got != 0 {
		t.Errorf("cold engine: CachedPrefixTokens = %d, want 0", got)
	}
	s := submit(t, e, r)
	fc.Step(time.Second)
	_ = e.Stats()
	if _, err := s.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	probe := e.CachedPrefixTokens(p)
	s2 := submit(t, e, Request{Model: "m", Prompt: prompt + "more words ", MaxTokens: 1})
	if probe != 48 || s2.CachedTokens() != 48 {
		t.Errorf("CachedPrefixTokens = %d, admission cached %d; want 48 and 48", probe, s2.CachedTokens())
	}
	// A prompt of exactly 3 blocks: at least one token is computed, so only 2 blocks count.
	exact := Request{Model: "m", Prompt: words("w", 0, 48), MaxTokens: 1}
	fc.Step(time.Second)
	_ = e.Stats()
	s3 := submit(t, e, exact)
	if got := e.CachedPrefixTokens(HashPrompt(exact, 16)); got != 32 || s3.CachedTokens() != 32 {
		t.Errorf("48-token prompt: CachedPrefixTokens = %d, admission cached %d; want 32 and 32 (capped at prompt − 1)", got, s3.CachedTokens())
	}
	if got := e.CachedPrefixTokens(HashPrompt(r, 32)); got != 0 {
		t.Errorf("hashes of block size 32 on a 16-token engine: %d cached, want 0", got)
	}
	other := HashPrompt(Request{Model: "m", LoRA: "a", Prompt: prompt}, 16)
	if got := e.CachedPrefixTokens(other); got != 0 {
		t.Errorf("same text for a LoRA adapter: %d cached, want 0 (the adapter is in the root hash)", got)
	}
}

// TestSteppedEngineClose checks Close on a Stepped engine returns (no loop to wait for)
// and a closed engine refuses work.
func TestSteppedEngineClose(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clock, cfg.Stepped = testingclock.NewFakeClock(epoch), true
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = e.Close(); _ = e.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close of a Stepped engine did not return")
	}
	if _, err := e.Submit(context.Background(), Request{Prompt: "x", MaxTokens: 1}); !errors.Is(err, ErrEngineClosed) {
		t.Errorf("Submit after Close = %v, want ErrEngineClosed", err)
	}
}
