package framework

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestPluginStateTTL(t *testing.T) {
	tests := []struct {
		name      string
		idle      time.Duration // time since the last access when Sweep runs
		touch     bool          // read the entry half way, which refreshes it
		wantSwept int
	}{
		{"fresh entry stays", 4 * time.Minute, false, 0},
		{"entry idle exactly the TTL stays", 5 * time.Minute, false, 0},
		{"entry idle past the TTL goes", 5*time.Minute + time.Second, false, 1},
		{"a read refreshes the idle time", 5*time.Minute + time.Second, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fc := clocktesting.NewFakeClock(time.Unix(0, 0))
			s := NewPluginState(fc, 0, 0)
			s.Write("r1", "k", 1)
			if tc.touch {
				fc.Step(tc.idle / 2)
				if v, ok := s.Read("r1", "k"); !ok || v != 1 {
					t.Fatalf("Read = %v, %v", v, ok)
				}
				fc.Step(tc.idle - tc.idle/2)
			} else {
				fc.Step(tc.idle)
			}
			if got := s.Sweep(); got != tc.wantSwept {
				t.Fatalf("Sweep removed %d, want %d", got, tc.wantSwept)
			}
			if got := s.Len(); got != 1-tc.wantSwept {
				t.Fatalf("Len = %d", got)
			}
		})
	}
}

func TestPluginStateDelete(t *testing.T) {
	s := NewPluginState(nil, 0, 0)
	s.Write("r1", "a", 1)
	s.Write("r1", "b", 2)
	s.Write("r2", "a", 3)
	s.DeleteKey("r1", "a")
	if _, ok := s.Read("r1", "a"); ok {
		t.Fatal("DeleteKey left the key")
	}
	if v, ok := s.Read("r1", "b"); !ok || v != 2 {
		t.Fatal("DeleteKey removed another key")
	}
	s.DeleteKey("r1", "b")
	if s.Len() != 1 {
		t.Fatalf("the request's last key was deleted but the request stays: Len = %d", s.Len())
	}
	s.Delete("r2")
	s.Delete("unknown")
	s.DeleteKey("unknown", "a")
	if s.Len() != 0 {
		t.Fatalf("Len = %d", s.Len())
	}
}

// The sweeper runs on the injected clock's ticker and stops when its context is cancelled.
func TestPluginStateSweeper(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Unix(0, 0))
	s := NewPluginState(fc, 5*time.Minute, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(stopped)
	}()
	for !fc.HasWaiters() { // the ticker is registered
		time.Sleep(time.Millisecond)
	}
	s.Write("old", "k", 1)
	fc.Step(4 * time.Minute)
	s.Write("new", "k", 1)
	// 6 minutes after "old" was written, 2 after "new": the next tick sweeps "old" only.
	fc.Step(2 * time.Minute)
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("sweeper did not remove the idle request: Len = %d", s.Len())
		}
		time.Sleep(time.Millisecond)
	}
	if _, ok := s.Read("new", "k"); !ok {
		t.Fatal("sweeper removed a fresh request")
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("sweeper goroutine did not stop after its context was cancelled")
	}
}

// Runtime.Start runs the sweeper with the given context.
func TestRuntimeStartRunsSweeper(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Unix(0, 0))
	r, err := NewRuntime(cfgWith(nil), testRegistry(t), RuntimeOptions{Clock: fc, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.Start(ctx)
	for !fc.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	r.PluginState().Write("r", "k", 1)
	fc.Step(DefaultPluginStateTTL + DefaultPluginStateSweepInterval)
	deadline := time.Now().Add(5 * time.Second)
	for r.PluginState().Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("Start did not sweep")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	waited := make(chan struct{})
	go func() {
		r.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("the sweeper did not stop after its context was cancelled")
	}
	// Stopped means stopped: no more sweeps, however far the clock moves.
	r.PluginState().Write("r2", "k", 1)
	fc.Step(10 * DefaultPluginStateTTL)
	time.Sleep(10 * time.Millisecond)
	if r.PluginState().Len() != 1 {
		t.Fatal("a sweep ran after the sweeper stopped")
	}
}
