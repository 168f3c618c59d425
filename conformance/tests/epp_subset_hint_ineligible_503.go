package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPSubsetHintIneligible503",
		Description: "An endpoint that is not ready is not eligible: once the EPP has observed it, a subset hint naming only that " +
			"endpoint MUST get an ImmediateResponse 503, and a hint naming it with a ready endpoint MUST be routed to the ready one.",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model",
			"an endpoint source that can mark endpoints not ready (apiserver); with another source the test does not apply"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol), Endpoint Subset: \"If none of the endpoints in the " +
			"list is eligible or the list is empty, then the EPP MUST return a ImmediateResponse with 503\"; Destination Endpoint: " +
			"503 \"if there are no ready endpoints\"",
		EndpointSource: "apiserver",
		Run:            runEPPSubsetHintIneligible503,
	})
}

func runEPPSubsetHintIneligible503(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 2)
	c := s.ExtProc(t)
	r := s.Rand(t)
	down, up := pool[0], pool[1]

	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
	err := s.SetEndpointReady(ctx, down, false)
	cancel()
	if errors.Is(err, harness.ErrUnsupported) {
		harness.Skip(t, "the endpoint source cannot mark an endpoint not ready (%v)", err)
	}
	if err != nil {
		t.Fatalf("mark %s not ready: %v", down, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
		defer cancel()
		if err := s.SetEndpointReady(ctx, down, true); err != nil {
			t.Errorf("mark %s ready again: %v", down, err)
			return
		}
		// The next test starts with the whole pool: wait until the EPP routes to down again.
		err := harness.Eventually(s.Timeouts.EndpointChange.D(), s.Timeouts.Poll.D(), 1, func() error {
			d, err := tryExchange(s, c, chatRequest(s, uniquePrompt(s, t, r, 12), []string{down}))
			if err != nil {
				return err
			}
			if d.Immediate != nil {
				return fmt.Errorf("a hint of %s still gets %d after it is ready again", down, d.Immediate.Status)
			}
			return nil
		})
		if err != nil {
			t.Errorf("restoring %s: %v", down, err)
		}
	})

	harness.MustEventually(t, s, s.Timeouts.EndpointChange.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), []string{down})
		d, err := tryExchange(s, c, req)
		switch {
		case err != nil:
			return err
		case d.Immediate == nil:
			return fmt.Errorf("the hint names only %s, which is not ready, yet the EPP routed to %q", down, d.Pick())
		case d.Immediate.Status != http.StatusServiceUnavailable:
			return fmt.Errorf("the hint names only %s, which is not ready: want ImmediateResponse 503, got %d", down, d.Immediate.Status)
		}
		return nil
	})
	for i := 0; i < 4; i++ {
		hint := []string{down, up}
		if i%2 == 1 {
			hint = []string{up, down}
		}
		req := chatRequest(s, uniquePrompt(s, t, r, 12), hint)
		for _, addr := range mustRoute(t, s, exchange(t, s, c, req), req) {
			if addr != up && !slices.Contains(hint, addr) {
				t.Fatalf("%s: the EPP picked %s, outside the hint", describe(req), addr)
			}
			if addr == down {
				t.Fatalf("%s: the EPP picked %s, which it has observed not ready", describe(req), down)
			}
		}
	}
}
