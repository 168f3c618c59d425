package gateway_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

// TestRouteWeightedAcrossTwoPools: two InferencePools behind one route, each with its own EPP.
// With both healthy every request is served by the pool whose EPP was asked, shared by weight;
// when pool A's EPP refuses (503, no eligible endpoint) the request fails over to pool B, whose
// EPP is asked and told the served endpoint; A's endpoints are never reused.
func TestRouteWeightedAcrossTwoPools(t *testing.T) {
	a, b := newUpstream(t, "pod-a", nil), newUpstream(t, "pod-b", nil)
	var aRefuses atomic.Bool
	eppA := startEPP(t, extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		if aRefuses.Load() {
			return []*extprocv3.ProcessingResponse{extproctest.Immediate(http.StatusServiceUnavailable, nil, []byte(`{"error":"no endpoints"}`))}
		}
		return extproctest.PickResponses(a.addr(), nil, seen.Body, 0, !seen.HeadersEOS)
	}})
	eppB := startEPP(t, pickScript(b.addr(), nil, 0))
	route, err := gateway.NewRoute(gateway.RouteConfig{Retries: 1, Seed: 7, Backends: []gateway.Backend{
		{Name: "pool-a", Weight: 1, Gateway: newGateway(t, gateway.Config{EPPAddress: eppA.Addr(), Endpoints: []string{a.addr()}})},
		{Name: "pool-b", Weight: 1, Gateway: newGateway(t, gateway.Config{EPPAddress: eppB.Addr(), Endpoints: []string{b.addr()}})},
	}})
	if err != nil {
		t.Fatal(err)
	}
	req := func() *gateway.Request {
		return &gateway.Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"x"}`)}
	}
	// n = 200 at weights 1:1: each pool's share is Binomial(200, 0.5); below 60 has probability
	// < 1e-8, so the bound [60, 140] fails a correct route almost never.
	const n = 200
	count := map[string]int{}
	for range n {
		rr := route.Do(context.Background(), req())
		f := rr.Final()
		if len(rr.Attempts) != 1 || f.Err != nil || f.Result.Status != http.StatusOK {
			t.Fatalf("healthy pools: %d attempts, final %+v", len(rr.Attempts), f)
		}
		want := map[string]string{"pool-a": "pod-a", "pool-b": "pod-b"}[f.Backend]
		if f.Result.ServedPod != want {
			t.Fatalf("backend %s answered from %s, want its own pod %s", f.Backend, f.Result.ServedPod, want)
		}
		count[f.Backend]++
	}
	t.Logf("weights 1:1, n=%d: %v (bound [60, 140] each)", n, count)
	if count["pool-a"] < 60 || count["pool-b"] < 60 {
		t.Fatalf("shares %v out of %d at weights 1:1", count, n)
	}

	aRefuses.Store(true)
	seenB := len(eppB.Seen())
	failovers := 0
	for range 20 {
		rr := route.Do(context.Background(), req())
		f := rr.Final()
		if f.Backend != "pool-b" || f.Err != nil || f.Result.Status != http.StatusOK || f.Result.ServedPod != "pod-b" {
			t.Fatalf("pool A refusing: final attempt %+v (attempts %d), want pool-b serving from pod-b", f, len(rr.Attempts))
		}
		if len(rr.Attempts) == 2 {
			if rr.Attempts[0].Backend != "pool-a" || rr.Attempts[0].Result.Status != http.StatusServiceUnavailable {
				t.Fatalf("first attempt %+v, want pool-a's 503", rr.Attempts[0])
			}
			failovers++
		}
	}
	if failovers == 0 {
		t.Fatal("20 requests and none was sent to pool A first: the weighted choice is broken")
	}
	served := 0
	for _, s := range eppB.Seen()[seenB:] {
		if extproctest.Served(s.ResponseMetadata) == b.addr() {
			served++
		}
	}
	if served < 20 {
		t.Fatalf("pool B's EPP was told the served endpoint %d times for 20 requests it served", served)
	}
	if got := len(a.requests()); got != count["pool-a"] {
		t.Fatalf("pool A's endpoint got %d requests, %d before it refused: an endpoint of pool A was reused after failover", got, count["pool-a"])
	}
	t.Logf("pool A refusing: 20 of 20 served by pool B, %d after failing over from A's 503", failovers)
}

func TestRouteConfigErrors(t *testing.T) {
	g := newGateway(t, gateway.Config{Mode: gateway.ModeRoundRobin, Endpoints: []string{"127.0.0.1:1"}})
	for _, cfg := range []gateway.RouteConfig{{}, {Backends: []gateway.Backend{{Name: "x"}}},
		{Backends: []gateway.Backend{{Name: "x", Gateway: g}}}, {Backends: []gateway.Backend{{Name: "x", Weight: -1, Gateway: g}}},
		{Retries: -1, Backends: []gateway.Backend{{Name: "x", Weight: 1, Gateway: g}}}} {
		if _, err := gateway.NewRoute(cfg); err == nil {
			t.Errorf("NewRoute(%+v) succeeded", cfg)
		}
	}
}
