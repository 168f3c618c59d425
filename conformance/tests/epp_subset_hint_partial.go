package tests

import (
	"net"
	"slices"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPSubsetHintPartial",
		Description: "When the subset hint names pool endpoints together with addresses outside the pool, or names an endpoint " +
			"twice, the EPP MUST route the request to an endpoint of the hint that is in the pool (not refuse it, not leave the hint).",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model",
			"the hint's pool entries are the pool's own ip:port (matching by IP alone is SubsetHintIPMatching)"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol), Endpoint Subset: \"the EPP MUST only select " +
			"endpoints from the specified list\"; 503 only \"If none of the endpoints in the list is eligible or the list is empty\"",
		Run: runEPPSubsetHintPartial,
	})
}

func runEPPSubsetHintPartial(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 2)
	c := s.ExtProc(t)
	r := s.Rand(t)
	_, port, _ := net.SplitHostPort(pool[0])
	foreign := net.JoinHostPort(outsideAddrs[0], port)
	for i := 0; i < 8; i++ {
		a, b := pool[r.IntN(len(pool))], pool[r.IntN(len(pool))]
		var hint []string
		switch i % 4 {
		case 0: // a pool endpoint after an address outside the pool
			hint = []string{foreign, a}
		case 1: // ... and before one
			hint = []string{a, foreign}
		case 2: // an endpoint named twice
			hint = []string{a, a}
		case 3: // two pool endpoints (maybe the same) around a foreign one
			hint = []string{a, foreign, b}
		}
		req := chatRequest(s, uniquePrompt(s, t, r, 12), hint)
		d := exchange(t, s, c, req)
		if d.Immediate != nil {
			t.Fatalf("%s: the hint names a ready pool endpoint, yet the EPP answered ImmediateResponse %d: %s",
				describe(req), d.Immediate.Status, d.Immediate.Body)
		}
		for _, addr := range mustRoute(t, s, d, req) {
			if !slices.Contains(hint, addr) {
				t.Fatalf("%s: the EPP picked %s, which the subset hint does not name", describe(req), addr)
			}
		}
	}
}
