package main

import (
	"context"
	"log/slog"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/framework"
)

// handle is the minimal framework.Handle eppkit's producer needs outside an EPP: a real clock,
// a plugin-state store, and an empty pool list (no churn in these workloads).
type handle struct {
	ctx   context.Context
	state *framework.PluginState
}

func newHandle(ctx context.Context) *handle {
	return &handle{ctx: ctx, state: framework.NewPluginState(clock.RealClock{}, 0, 0)}
}

func (h *handle) Context() context.Context                 { return h.ctx }
func (h *handle) PluginState() *framework.PluginState      { return h.state }
func (h *handle) Plugin(string) (framework.Plugin, bool)   { return nil, false }
func (h *handle) Clock() clock.WithTicker                  { return clock.RealClock{} }
func (h *handle) Seed() int64                              { return 1 }
func (h *handle) Logger() *slog.Logger                     { return slog.New(slog.DiscardHandler) }
func (h *handle) Endpoints() []*framework.EndpointMetadata { return nil }
