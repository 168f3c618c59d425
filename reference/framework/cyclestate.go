package framework

import "sync"

// CycleState holds data that plugins share within one scheduling cycle (one request's run of
// the profile handler loop). It is safe for concurrent use.
type CycleState struct {
	m sync.Map
}

// NewCycleState returns an empty cycle state.
func NewCycleState() *CycleState { return &CycleState{} }

// Read returns the value stored under key.
func (c *CycleState) Read(key string) (any, bool) { return c.m.Load(key) }

// Write stores value under key, replacing any earlier value.
func (c *CycleState) Write(key string, value any) { c.m.Store(key, value) }

// Delete removes key.
func (c *CycleState) Delete(key string) { c.m.Delete(key) }
