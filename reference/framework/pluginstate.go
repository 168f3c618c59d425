package framework

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Plugin-state defaults (SPEC §1): entries idle for 5 minutes are swept every minute.
const (
	DefaultPluginStateTTL           = 5 * time.Minute
	DefaultPluginStateSweepInterval = time.Minute
)

// PluginState holds per-request data that plugins share across extension points (PrepareData,
// Scheduling, PreRequest, Response*). Entries are grouped by request ID. A request's entries are
// deleted on its normal path (Delete); entries idle for longer than the TTL are removed by the
// sweeper, so no request's state outlives the TTL plus one sweep interval. Safe for concurrent use.
type PluginState struct {
	clock         clock.WithTicker
	ttl           time.Duration
	sweepInterval time.Duration

	mu       sync.Mutex
	requests map[string]*requestState
}

type requestState struct {
	lastAccess time.Time
	data       map[string]any
}

// NewPluginState returns an empty store. ttl and sweepInterval ≤ 0 take the defaults (5 min, 1 min).
// clk nil means the real clock.
func NewPluginState(clk clock.WithTicker, ttl, sweepInterval time.Duration) *PluginState {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if ttl <= 0 {
		ttl = DefaultPluginStateTTL
	}
	if sweepInterval <= 0 {
		sweepInterval = DefaultPluginStateSweepInterval
	}
	return &PluginState{clock: clk, ttl: ttl, sweepInterval: sweepInterval, requests: map[string]*requestState{}}
}

// Read returns the value a plugin wrote for (requestID, key) and refreshes the request's idle time.
func (s *PluginState) Read(requestID, key string) (any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, ok := s.requests[requestID]
	if !ok {
		return nil, false
	}
	rs.lastAccess = s.clock.Now()
	v, ok := rs.data[key]
	return v, ok
}

// Write stores value for (requestID, key) and refreshes the request's idle time.
func (s *PluginState) Write(requestID, key string, value any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, ok := s.requests[requestID]
	if !ok {
		rs = &requestState{data: map[string]any{}}
		s.requests[requestID] = rs
	}
	rs.lastAccess = s.clock.Now()
	rs.data[key] = value
}

// Delete removes every entry of a request. Deleting an unknown request is a no-op.
func (s *PluginState) Delete(requestID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, requestID)
}

// DeleteKey removes one entry of a request, and the request when it was its last entry.
func (s *PluginState) DeleteKey(requestID, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, ok := s.requests[requestID]
	if !ok {
		return
	}
	delete(rs.data, key)
	if len(rs.data) == 0 {
		delete(s.requests, requestID)
	}
}

// Len returns how many requests have state.
func (s *PluginState) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// Sweep removes every request idle for longer than the TTL and returns how many it removed.
func (s *PluginState) Sweep() int {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, rs := range s.requests {
		if now.Sub(rs.lastAccess) > s.ttl {
			delete(s.requests, id)
			n++
		}
	}
	return n
}

// Run sweeps every sweep interval until ctx is cancelled, then returns. Run it in its own goroutine.
func (s *PluginState) Run(ctx context.Context) {
	t := s.clock.NewTicker(s.sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			s.Sweep()
		}
	}
}
