package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPPickIsReadyEndpoint",
		Description: "Without a subset hint the EPP MUST pick only ready endpoints of the InferencePool; " +
			"an endpoint that stops being ready MUST stop being picked once the EPP has observed it.",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model",
			"the not-ready half runs only with an endpoint source that can mark endpoints not ready (apiserver); with the static source only pool membership is checked"},
		Source:         "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol), Endpoint Subset: without a hint the EPP MUST select from the InferencePool; SPEC §5.1",
		EndpointSource: "apiserver",
		Run:            runEPPPickIsReadyEndpoint,
	})
}

func runEPPPickIsReadyEndpoint(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 2)
	c := s.ExtProc(t)
	r := s.Rand(t)

	// Part 1: every pick of a unique request is a pool member. An EPP that picks outside the pool
	// at all fails here; there is no chance involved, so a fixed count suffices.
	seen := map[string]int{}
	for i := 0; i < 4*len(pool); i++ {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		for _, a := range mustRoute(t, s, exchange(t, s, c, req), req) {
			seen[a]++
		}
	}
	t.Logf("picks over %d unique requests: %v", 4*len(pool), seen)

	// Part 2: take one endpoint out of the pool (not ready) and check the EPP stops picking it.
	out := pool[r.IntN(len(pool))]
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
	err := s.SetEndpointReady(ctx, out, false)
	cancel()
	if errors.Is(err, harness.ErrUnsupported) {
		t.Logf("not-ready half not run: the endpoint source cannot mark an endpoint not ready (%v)", err)
		return
	}
	if err != nil {
		t.Fatalf("mark %s not ready: %v", out, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
		defer cancel()
		if err := s.SetEndpointReady(ctx, out, true); err != nil {
			t.Errorf("mark %s ready again: %v", out, err)
			return
		}
		// Leave the pool as found: wait until the EPP routes to the endpoint again. No Fatalf in
		// a cleanup: failures are reported with Errorf.
		err := s.Eventually(s.Timeouts.EndpointChange.D(), 1, func() error {
			req := chatRequest(s, uniquePrompt(s, t, r, 12), []string{out})
			d, err := tryExchange(s, c, req)
			if err != nil {
				return err
			}
			if d.Immediate != nil || !slices.Contains(splitPick(d.Pick()), out) {
				return fmt.Errorf("EPP does not route to %s yet after it became ready again", out)
			}
			return nil
		})
		if err != nil {
			t.Errorf("restoring %s: %v", out, err)
		}
	})
	t.Logf("marked %s not ready", out)
	// Until the EPP observes the change it may still pick the endpoint; a batch of picks all
	// avoiding it, RequiredConsecutiveSuccesses times in a row, shows it did.
	batch := 2 * len(pool)
	harness.MustEventually(t, s, s.Timeouts.EndpointChange.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		for i := 0; i < batch; i++ {
			req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
			d := exchange(t, s, c, req)
			if d.Immediate == nil && slices.Contains(splitPick(d.Pick()), out) {
				return fmt.Errorf("EPP still picks %s, which is not ready", out)
			}
		}
		return nil
	})
	// Now every pick must avoid it. A picker that ignored readiness would pick it with
	// probability 1/N each time.
	n := mustTrials(t, 1-1/float64(len(pool)), "avoids the not-ready endpoint")
	for i := 0; i < n; i++ {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		addrs := mustRoute(t, s, exchange(t, s, c, req), req)
		if slices.Contains(addrs, out) {
			t.Fatalf("trial %d/%d: EPP picked %v, including %s, which is not ready (seed %d)", i+1, n, addrs, out, s.Seed)
		}
	}
}
