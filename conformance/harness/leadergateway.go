package harness

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/eppkit/eppkit/fakes/gateway"
)

// LeaderGateway is a data plane in front of the replicas of an EPP that sends each request to the
// replica currently answering readiness SERVING — what a Kubernetes Service whose endpoints are
// the Ready pods gives a gateway (the cluster stand-in, fakes/gateway/clustergw, resolves the
// same way) — following readiness every poll interval. With no replica ready it answers as the
// pool's failure mode says: FailOpen round-robin over the pool, FailClose a 500 local reply
// (Envoy's status_on_error default).
type LeaderGateway struct {
	rs       *Replicas
	mode     gateway.FailureMode
	perEPP   []*gateway.Gateway
	fallback *gateway.Gateway

	mu      sync.Mutex
	current int // the ready replica, -1 for none
	stop    chan struct{}
}

// LeaderGateway starts a LeaderGateway over rs with the failure mode mode; it stops in
// t.Cleanup.
func (rs *Replicas) LeaderGateway(t TestingT, s *Suite, mode gateway.FailureMode) *LeaderGateway {
	t.Helper()
	g := &LeaderGateway{rs: rs, mode: mode, current: -1, stop: make(chan struct{})}
	for _, r := range rs.Members {
		gw, err := gateway.New(gateway.Config{EPPAddress: r.GRPCAddress, EPPTLS: s.TargetTLS, Mode: gateway.ModeStrict,
			FailureMode: mode, Endpoints: rs.Endpoints, MessageTimeout: s.Timeouts.Request.D(), Dial: s.cfg.EndpointDial})
		if err != nil {
			t.Fatalf("gateway for replica %d: %v", r.Index, err)
		}
		t.Cleanup(func() { _ = gw.Close() })
		g.perEPP = append(g.perEPP, gw)
	}
	fb, err := gateway.New(gateway.Config{Mode: gateway.ModeRoundRobin, Endpoints: rs.Endpoints, Dial: s.cfg.EndpointDial})
	if err != nil {
		t.Fatalf("round-robin gateway: %v", err)
	}
	t.Cleanup(func() { _ = fb.Close() })
	g.fallback = fb
	g.follow(s.Timeouts.Poll.D())
	go func() {
		tick := time.NewTicker(s.Timeouts.Poll.D())
		defer tick.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-tick.C:
				g.follow(s.Timeouts.Poll.D())
			}
		}
	}()
	t.Cleanup(func() { close(g.stop) })
	return g
}

func (g *LeaderGateway) follow(time.Duration) {
	ready := g.rs.Serving(context.Background(), "readiness")
	g.mu.Lock()
	defer g.mu.Unlock()
	g.current = -1
	if len(ready) > 0 {
		g.current = ready[0]
	}
}

// Do sends req to the ready replica's EPP, or answers as the failure mode says.
func (g *LeaderGateway) Do(ctx context.Context, req *gateway.Request) (*gateway.Result, error) {
	g.mu.Lock()
	cur := g.current
	g.mu.Unlock()
	if cur >= 0 {
		return g.perEPP[cur].Do(ctx, req)
	}
	if g.mode == gateway.FailOpen {
		res, err := g.fallback.Do(ctx, req)
		if res != nil {
			res.FailedOpen = true
		}
		return res, err
	}
	return &gateway.Result{Status: http.StatusInternalServerError, Headers: http.Header{},
		Body: []byte("no ready EPP replica (FailClose)")}, nil
}
