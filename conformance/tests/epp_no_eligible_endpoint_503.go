package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPNoEligibleEndpoint503",
		Description: "When no endpoint is eligible — the subset hint names only addresses outside the pool, or the pool has no " +
			"ready endpoint — the EPP MUST answer with an ImmediateResponse of HTTP status 503.",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model",
			"the empty-pool half runs only with an endpoint source that can mark endpoints not ready (apiserver); with the static source only the hint half runs"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol): Endpoint Subset (\"If none of the endpoints in the list is eligible ... 503\") " +
			"and Destination Endpoint (\"503 ... if there are no ready endpoints\"); SPEC §5.1",
		EndpointSource: "apiserver",
		Run:            runEPPNoEligibleEndpoint503,
	})
}

// outsideAddrs are addresses that are never pool members: TEST-NET-1 (RFC 5737).
var outsideAddrs = []string{"192.0.2.1", "192.0.2.77"}

func runEPPNoEligibleEndpoint503(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 1)
	c := s.ExtProc(t)
	r := s.Rand(t)
	_, port, _ := net.SplitHostPort(pool[0])

	// Half 1: a hint of addresses outside the pool (on the pool's port, so only the IP is foreign).
	control := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
	mustRoute(t, s, exchange(t, s, c, control), control)
	for i := 0; i < 4; i++ {
		hint := []string{net.JoinHostPort(outsideAddrs[i%2], port)}
		if i >= 2 {
			hint = append(hint, net.JoinHostPort(outsideAddrs[(i+1)%2], strconv.Itoa(9)))
		}
		req := chatRequest(s, uniquePrompt(s, t, r, 12), hint)
		mustRefuse(t, s, exchange(t, s, c, req), req, http.StatusServiceUnavailable)
	}

	// Half 2: every endpoint not ready.
	var marked []string
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
		defer cancel()
		for _, a := range marked {
			if err := s.SetEndpointReady(ctx, a, true); err != nil {
				t.Errorf("mark %s ready again: %v", a, err)
			}
		}
		if len(marked) == 0 {
			return
		}
		err := s.Eventually(s.Timeouts.EndpointChange.D(), 1, func() error {
			d, err := tryExchange(s, c, chatRequest(s, uniquePrompt(s, t, r, 12), nil))
			if err != nil {
				return err
			}
			if d.Immediate != nil {
				return fmt.Errorf("EPP still answers %d after the pool is ready again", d.Immediate.Status)
			}
			return nil
		})
		if err != nil {
			t.Errorf("restoring the pool: %v", err)
		}
	})
	for _, a := range pool {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
		err := s.SetEndpointReady(ctx, a, false)
		cancel()
		if errors.Is(err, harness.ErrUnsupported) {
			t.Logf("empty-pool half not run: the endpoint source cannot mark endpoints not ready (%v)", err)
			return
		}
		if err != nil {
			t.Fatalf("mark %s not ready: %v", a, err)
		}
		marked = append(marked, a)
	}
	harness.MustEventually(t, s, s.Timeouts.EndpointChange.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		d, err := tryExchange(s, c, req)
		switch {
		case err != nil:
			return err
		case d.Immediate == nil:
			return fmt.Errorf("no endpoint is ready, yet the EPP routed to %q", d.Pick())
		case d.Immediate.Status != http.StatusServiceUnavailable:
			return fmt.Errorf("no endpoint is ready: want ImmediateResponse 503, got %d", d.Immediate.Status)
		}
		return nil
	})
}
