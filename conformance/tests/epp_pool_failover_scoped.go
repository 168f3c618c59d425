package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPPoolFailoverScoped",
		Description: "With two InferencePools behind one weighted route, each with its own EPP, every request MUST be served by an " +
			"endpoint of the pool whose EPP picked it; when one pool has no ready endpoint its EPP MUST answer 503, and the " +
			"request the data plane fails over to the other pool is picked by that pool's EPP, from that pool, and its served " +
			"endpoint reported to it is accepted.",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model",
			"the apiserver endpoint source (the run's pods are marked not ready, then ready again) and a target that can start a second instance for a second pool (command, reference)",
			"loopback aliases (the second pool's pods on 127.0.11.x)"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol) as of GIE v1.6.2, Destination Endpoint (GIE PR #3003, " +
			"GIE v1.6.0): \"If route-level retry or failover selects a different InferencePool backend, the data plane MUST invoke " +
			"the EPP associated with the newly selected backend\"; the served endpoint \"MUST be reported to the EPP associated with " +
			"the backend that produced the terminal response\"; 503 when no endpoint is eligible. The data plane's part is played by " +
			"fakes/gateway.Route, as GIE conformance GatewayWeightedAcrossTwoInferencePools expects of a gateway.",
		EndpointSource: "apiserver",
		Run:            runEPPPoolFailoverScoped,
	})
}

func runEPPPoolFailoverScoped(t harness.TestingT, s *harness.Suite) {
	own := requireEndpoints(t, s, 2)
	if why := s.SidePoolUnsupported(); why != "" {
		harness.Skip(t, "%s", why)
	}
	requireLoopbackFleet(t, s)
	other := s.StartVariantPool(t, harness.FleetVariant{Name: "failover-pool", Pods: 2})
	r := s.Rand(t)
	route, err := gateway.NewRoute(gateway.RouteConfig{Retries: 1, Seed: r.Uint64(), Backends: []gateway.Backend{
		{Name: "pool-a", Weight: 1, Gateway: s.Gateway}, {Name: "pool-b", Weight: 1, Gateway: other.Gateway}}})
	if err != nil {
		t.Fatalf("route: %v", err)
	}
	pools := map[string][]string{"pool-a": own, "pool-b": other.Endpoints()}
	send := func(phase string) *gateway.RouteResult {
		rr := route.Do(testContext(t, s), &gateway.Request{Path: pathChat, Headers: map[string]string{"content-type": "application/json"},
			Body: chatBody(s.ModelName, uniquePrompt(s, t, r, 8))})
		f := rr.Final()
		switch {
		case f.Err != nil:
			t.Fatalf("%s: the request through pool %s failed: %v", phase, f.Backend, f.Err)
		case f.Result.Status != http.StatusOK:
			t.Fatalf("%s: the request through pool %s: status %d: %.200s", phase, f.Backend, f.Result.Status, f.Result.Body)
		case !slices.Contains(pools[f.Backend], f.Result.Endpoint):
			t.Fatalf("%s: %s's EPP sent the request to %s, not an endpoint of its pool %v", phase, f.Backend, f.Result.Endpoint, pools[f.Backend])
		}
		return rr
	}

	// Both pools ready: n = 40 requests at weights 1:1; each pool gets at least one unless the
	// route is broken (probability 2 × 2^-40 for a correct one).
	const n = 40
	count := map[string]int{}
	for range n {
		count[send("both pools ready").Final().Backend]++
	}
	if count["pool-a"] == 0 || count["pool-b"] == 0 {
		t.Fatalf("n=%d requests at weights 1:1 gave %v", n, count)
	}

	// Pool A loses every ready endpoint: its EPP must answer 503 once it has observed that.
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
	defer cancel()
	for _, a := range own {
		err := s.SetEndpointReady(ctx, a, false)
		if errors.Is(err, harness.ErrUnsupported) {
			harness.Skip(t, "the endpoint source cannot mark an endpoint not ready (use --endpoint-source apiserver)")
		}
		if err != nil {
			t.Fatalf("mark %s not ready: %v", a, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
		defer cancel()
		for _, a := range own {
			if err := s.SetEndpointReady(ctx, a, true); err != nil {
				t.Errorf("mark %s ready again: %v", a, err)
			}
		}
		// Leave the run's pool as found: its EPP routes again.
		err := harness.Eventually(s.Timeouts.EndpointChange.D(), s.Timeouts.Poll.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
			res, err := s.Gateway.Do(context.Background(), &gateway.Request{Path: pathChat, Body: chatBody(s.ModelName, "after failover")})
			if err == nil && res.Status != http.StatusOK {
				err = fmt.Errorf("status %d", res.Status)
			}
			return err
		})
		if err != nil {
			t.Errorf("the run's EPP does not route again after its pods were marked ready: %v", err)
		}
	})
	start := time.Now()
	harness.MustEventually(t, s, s.Timeouts.EndpointChange.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		res, err := s.Gateway.Do(context.Background(), &gateway.Request{Path: pathChat, Body: chatBody(s.ModelName, uniquePrompt(s, t, r, 4))})
		switch {
		case err != nil:
			return err
		case !res.Immediate || res.Status != http.StatusServiceUnavailable:
			return fmt.Errorf("pool A's EPP with every pod not ready answered status %d (EPP refusal %v, endpoint %q), want its 503",
				res.Status, res.Immediate, res.Endpoint)
		}
		return nil
	})
	observed := time.Since(start)

	// Every request now ends in pool B, picked by pool B's EPP; those sent to A first were refused
	// 503 by A's EPP and failed over. n = 20: none sent to A first has probability 2^-20.
	failovers := 0
	for range 20 {
		rr := send("pool A without ready endpoints")
		if f := rr.Final(); f.Backend != "pool-b" {
			t.Fatalf("pool A has no ready endpoint, yet a request ended in %s with %d", f.Backend, f.Result.Status)
		}
		if len(rr.Attempts) == 2 {
			if a := rr.Attempts[0]; a.Backend != "pool-a" || a.Result == nil || a.Result.Status != http.StatusServiceUnavailable {
				t.Fatalf("the failed-over attempt: %+v, want pool A's 503", a)
			}
			failovers++
		}
	}
	if failovers == 0 {
		t.Fatalf("20 requests and none failed over from pool A: the route never chose it")
	}
	t.Logf("both pools ready: n=%d shared %v, each served inside its pool; pool A without ready pods: its EPP answered 503 %v after, "+
		"20 of 20 requests served by pool B's EPP inside pool B, %d of them failed over from A's 503",
		n, count, observed.Round(time.Millisecond), failovers)
}
