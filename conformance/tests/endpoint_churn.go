package tests

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EndpointChurn",
		Description: "Once the EPP has observed through discovery (within endpointChange) that an endpoint left the pool, it MUST " +
			"NOT pick it, and once it has observed an endpoint join the pool, it MUST route requests to it.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureEndpointChurn},
		Preconditions: []string{"the EPP discovers the pool from an InferencePool and its Pods (endpoint source apiserver); skipped with the static source, which cannot change the pool",
			"the EPP observes Pod deletions and creations within endpointChange"},
		Source: "llm-d-router v0.10.0 pkg/epp/controller/pod_reconciler.go Reconcile and updateDatastore: a deleted, " +
			"unready or relabelled Pod leaves the datastore, a Ready matching Pod is added; same in GIE v1.5.0. " +
			"SPEC §6 EndpointChurn.",
		EndpointSource: "apiserver",
		Run:            runEndpointChurn,
	})
}

func runEndpointChurn(t harness.TestingT, s *harness.Suite) {
	if !s.CanEditPool() {
		harness.Skip(t, "the endpoint source cannot add or remove pool members (run with --endpoint-source apiserver)")
	}
	pool := requireEndpoints(t, s, 2)
	c := s.ExtProc(t)
	r := s.Rand(t)
	out := pool[r.IntN(len(pool))]
	batch := 2 * len(pool)
	picks := func(addr string) (bool, error) {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		d, err := tryExchange(s, c, req)
		if err != nil {
			return false, err
		}
		if d.Immediate != nil {
			return false, fmt.Errorf("EPP refused a valid request with %d: %s", d.Immediate.Status, d.Immediate.Body)
		}
		return slices.Contains(splitPick(d.Pick()), addr), nil
	}

	// Leave: the endpoint's Pod is deleted.
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
	err := s.RemoveEndpoint(ctx, out)
	cancel()
	if err != nil {
		t.Fatalf("remove %s from the pool: %v", out, err)
	}
	removed := true
	t.Cleanup(func() {
		if !removed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
		defer cancel()
		if err := s.AddEndpoint(ctx, out); err != nil {
			t.Errorf("cleanup: add %s back to the pool: %v", out, err)
		}
	})
	start := time.Now()
	harness.MustEventually(t, s, s.Timeouts.EndpointChange.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		for i := 0; i < batch; i++ {
			hit, err := picks(out)
			if err != nil {
				return err
			}
			if hit {
				return fmt.Errorf("EPP still picks %s, which left the pool", out)
			}
		}
		return nil
	})
	t.Logf("removed %s; the EPP stopped picking it after %s", out, time.Since(start).Round(time.Millisecond))
	// A picker that kept the endpoint would pick it with probability 1/N each time.
	n := mustTrials(t, 1-1/float64(len(pool)), "avoids the removed endpoint")
	for i := 0; i < n; i++ {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		addrs := mustRoute(t, s, exchange(t, s, c, req), req)
		if slices.Contains(addrs, out) {
			t.Fatalf("trial %d/%d: EPP picked %v, including %s, which left the pool (seed %d)", i+1, n, addrs, out, s.Seed)
		}
	}

	// Join: a Pod with the endpoint's address is created Ready.
	ctx, cancel = context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
	err = s.AddEndpoint(ctx, out)
	cancel()
	if err != nil {
		t.Fatalf("add %s to the pool: %v", out, err)
	}
	removed = false
	start = time.Now()
	harness.MustEventually(t, s, s.Timeouts.EndpointChange.D(), 1, func() error {
		for i := 0; i < 4*len(pool); i++ {
			hit, err := picks(out)
			if err != nil {
				return err
			}
			if hit {
				return nil
			}
		}
		return fmt.Errorf("%s joined the pool but got none of %d requests", out, 4*len(pool))
	})
	t.Logf("added %s; the EPP routed to it after %s", out, time.Since(start).Round(time.Millisecond))
}
