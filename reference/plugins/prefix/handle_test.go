package prefix

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/reference/framework"
)

// testHandle is a minimal framework.Handle for calling plugin methods directly.
type testHandle struct {
	ctx   context.Context
	state *framework.PluginState
	clk   clock.WithTicker

	mu  sync.Mutex
	eps []*framework.EndpointMetadata
}

func newTestHandle(t testing.TB) (*testHandle, *clocktesting.FakeClock) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fc := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	return &testHandle{ctx: ctx, state: framework.NewPluginState(fc, 0, 0), clk: fc}, fc
}

func (h *testHandle) Context() context.Context               { return h.ctx }
func (h *testHandle) PluginState() *framework.PluginState    { return h.state }
func (h *testHandle) Plugin(string) (framework.Plugin, bool) { return nil, false }
func (h *testHandle) Clock() clock.WithTicker                { return h.clk }
func (h *testHandle) Seed() int64                            { return 1 }
func (h *testHandle) Logger() *slog.Logger                   { return slog.New(slog.DiscardHandler) }
func (h *testHandle) setEndpoints(eps ...*framework.EndpointMetadata) {
	h.mu.Lock()
	h.eps = eps
	h.mu.Unlock()
}
func (h *testHandle) Endpoints() []*framework.EndpointMetadata {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*framework.EndpointMetadata(nil), h.eps...)
}

func meta(name, ip string) *framework.EndpointMetadata {
	return &framework.EndpointMetadata{Namespace: "default", Name: name, PodName: name, Address: ip, Port: 8000}
}
