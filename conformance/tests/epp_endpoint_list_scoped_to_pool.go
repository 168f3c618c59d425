package tests

import (
	"net/http"
	"slices"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPEndpointListScopedToPool",
		Description: "With two InferencePools behind one route, each with its own EPP, every endpoint an EPP returns (fallbacks " +
			"included) MUST belong to the pool it serves: a subset hint naming both pools' endpoints is answered from the EPP's own " +
			"pool, and a hint naming only the other pool's endpoints MUST get an ImmediateResponse 503.",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model",
			"a target that can start a second instance for a second pool (command, reference) and a source that can present one (static, apiserver); otherwise the test does not apply",
			"loopback aliases (the second pool's pods on 127.0.11.x, one port, as an InferencePool's)"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol) as of GIE v1.6.2, Destination Endpoint: \"The ordered " +
			"endpoint list is scoped to the selected InferencePool backend for which the EPP was invoked\" (GIE PR #3003, GIE v1.6.0); " +
			"Endpoint Subset: \"the EPP MUST only select endpoints from the specified list\", 503 when none is eligible; GIE " +
			"conformance GatewayWeightedAcrossTwoInferencePools (\"Each pool's EPP should filter to endpoints that actually belong to its pool\")",
		Run: runEPPEndpointListScopedToPool,
	})
}

func runEPPEndpointListScopedToPool(t harness.TestingT, s *harness.Suite) {
	requireEndpoints(t, s, 2)
	if why := s.SidePoolUnsupported(); why != "" {
		harness.Skip(t, "%s", why)
	}
	requireLoopbackFleet(t, s)
	other := s.StartVariantPool(t, harness.FleetVariant{Name: "second-pool", Pods: 2, SharedNamespace: true})
	pools := []struct {
		name  string
		suite *harness.Suite
	}{{"the run's pool", s}, {"the second pool", other}}
	r := s.Rand(t)
	for i, p := range pools {
		own, foreign := p.suite.Endpoints(), pools[1-i].suite.Endpoints()
		// Both pools' endpoints, the other pool's first, then (second round) the EPP's own first.
		otherFirst := append(append([]string(nil), foreign...), own...)
		ownFirst := append(append([]string(nil), own...), foreign...)
		c := p.suite.ExtProc(t)
		for j := 0; j < 6; j++ {
			var hint []string
			switch j {
			case 1:
				hint = otherFirst
			case 4:
				hint = ownFirst
			}
			req := chatRequest(p.suite, uniquePrompt(p.suite, t, r, 12), hint)
			d := exchange(t, p.suite, c, req)
			if d.Immediate != nil {
				t.Fatalf("%s's EPP refused %s with ImmediateResponse %d: %s", p.name, describe(req), d.Immediate.Status, d.Immediate.Body)
			}
			// pickProblem checks every address of the list against this pool's endpoints.
			for _, a := range mustRoute(t, p.suite, d, req) {
				if slices.Contains(foreign, a) {
					t.Fatalf("%s's EPP returned %s, an endpoint of the other pool (%s)", p.name, a, describe(req))
				}
			}
			if j%3 == 2 {
				req := chatRequest(p.suite, uniquePrompt(p.suite, t, r, 12), foreign)
				d := exchange(t, p.suite, c, req)
				switch {
				case d.Immediate == nil:
					t.Fatalf("%s's EPP routed a request whose hint names only the other pool's endpoints %v to %q; want 503",
						p.name, foreign, d.Pick())
				case d.Immediate.Status != http.StatusServiceUnavailable:
					t.Fatalf("%s's EPP answered a hint of only the other pool's endpoints with %d, want 503", p.name, d.Immediate.Status)
				}
			}
		}
		t.Logf("%s (%v): every pick inside it, hints of both pools answered from it, hints of the other pool refused 503", p.name, own)
	}
}
