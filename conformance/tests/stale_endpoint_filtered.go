package tests

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/vllm"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:   "StaleEndpointFiltered",
		FormerNames: []string{"ReferenceStaleEndpointFiltered"}, // in the Reference profile until issue 32
		Description: "The EPP MUST NOT pick an endpoint of the pool whose metrics scrape fails (stale for longer than its stale " +
			"threshold) while other endpoints have fresh metrics.",
		Level:    conformance.LevelEppkit,
		Profile:  conformance.ProfileEPPProduction,
		Features: []conformance.Feature{conformance.FeatureStaleEndpointFiltering},
		Preconditions: []string{"the EPP scrapes the model servers' /metrics and filters stale endpoints (reference: --stale-threshold, default 1s)",
			"the EPP prefers an idle endpoint with a nearly empty KV cache (e.g. queue-scorer, kv-cache-utilization-scorer)",
			"the stale threshold is shorter than metricsPropagation"},
		// Upstream v1.5.0 only de-prioritises endpoints with stale metrics; filtering them is eppkit's.
		Source: "SPEC §3 \"Stale endpoints [eppkit]\"; eppkit reference/director",
		Run:    runStaleEndpointFiltered,
	})
}

func runStaleEndpointFiltered(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 2)
	c := s.ExtProc(t)
	r := s.Rand(t)
	idx := r.IntN(len(pool))
	stale := pool[idx]
	if s.Fleet == nil {
		t.Fatalf("precondition: this test stops a model server's metrics endpoint, which needs the in-process fake fleet (this run uses an external fleet)")
	}
	m := s.Fleet.Member(idx)
	if m.Addr() != stale {
		t.Fatalf("fleet member %d is at %s, the pool lists %s", idx, m.Addr(), stale)
	}
	picked := func() ([]string, error) {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		d, err := tryExchange(s, c, req)
		if err != nil {
			return nil, err
		}
		if d.Immediate != nil {
			return nil, fmt.Errorf("EPP refused a valid request with %d: %s", d.Immediate.Status, d.Immediate.Body)
		}
		return splitPick(d.Pick()), nil
	}

	// First make the endpoint about to go stale the most attractive one (idle, nearly empty KV
	// cache; the others loaded) and wait until the EPP prefers it. An EPP that keeps scoring an
	// endpoint's last scraped metrics then keeps picking it after the scrape fails, and fails
	// below; without this the frozen metrics could look worse than the others' by chance and
	// such an EPP would pass (seen with the upstream EPP v1.5.0 in make interop).
	pins := map[string]vllm.FakeMetrics{}
	for _, a := range pool {
		pins[a] = vllm.FakeMetrics{RunningRequests: 4, WaitingRequests: 4, KVCacheUsage: 0.6}
	}
	pins[stale] = vllm.FakeMetrics{KVCacheUsage: 0.05}
	pinAll(t, s, pins)
	awaitObserved(t, s, stale+" preferred (idle, KV 0.05)", func() (string, []byte) {
		return pathCompletions, completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil)
	}, func(ep string) bool { return ep == stale })

	// The model server stops answering (its /metrics scrape fails) but stays in the pool.
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	err := m.Stop(ctx)
	cancel()
	if err != nil {
		t.Fatalf("stop fleet member %s: %v", stale, err)
	}
	t.Cleanup(func() {
		if err := m.Start(); err != nil {
			t.Errorf("cleanup: restart fleet member %s: %v", stale, err)
			return
		}
		// Leave the pool as found: wait until the EPP picks the endpoint again.
		err := s.Eventually(s.Timeouts.MetricsPropagation.D()+s.Timeouts.EndpointChange.D(), 1, func() error {
			for i := 0; i < 4*len(pool); i++ {
				addrs, err := picked()
				if err != nil {
					return err
				}
				if slices.Contains(addrs, stale) {
					return nil
				}
			}
			return fmt.Errorf("%s is still avoided after it came back", stale)
		})
		if err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	start := time.Now()
	harness.MustEventually(t, s, s.Timeouts.MetricsPropagation.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		for i := 0; i < 2*len(pool); i++ {
			addrs, err := picked()
			if err != nil {
				return err
			}
			if slices.Contains(addrs, stale) {
				return fmt.Errorf("EPP still picks %s, whose metrics cannot be scraped", stale)
			}
		}
		return nil
	})
	t.Logf("stopped %s; the EPP stopped picking it after %s", stale, time.Since(start).Round(time.Millisecond))
	n := mustTrials(t, 1-1/float64(len(pool)), "avoids the stale endpoint")
	for i := 0; i < n; i++ {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		addrs := mustRoute(t, s, exchange(t, s, c, req), req)
		if slices.Contains(addrs, stale) {
			t.Fatalf("trial %d/%d: EPP picked %v, including %s, whose metrics have not been scraped since it stopped (seed %d)", i+1, n, addrs, stale, s.Seed)
		}
	}
}
