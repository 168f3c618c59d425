package tests

import (
	"fmt"
	"slices"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPSubsetHint",
		Description: "When the filter metadata envoy.lb.subset_hint/x-gateway-destination-endpoint-subset lists endpoints " +
			"of the pool as ip:port, the EPP MUST pick only endpoints from that list.",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model",
			"fleet members on distinct IPs (127.0.10.x loopback aliases): an EPP that matches hints by IP alone cannot tell endpoints on one IP apart",
			"the hint names endpoints by the pool's own ip:port; hints with other ports are SubsetHintIPMatching's, an upstream feature"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol), Endpoint Subset: the list is " +
			"[<ip:port>, ...]; \"If the key x-gateway-destination-endpoint-subset is set, the EPP MUST only select endpoints from the specified list\"; SPEC §5.1",
		Run: runEPPSubsetHint,
	})
}

func runEPPSubsetHint(t harness.TestingT, s *harness.Suite) {
	subsetHintTrials(t, s, "honours a one-endpoint hint", func(addr string, _ int) string { return addr },
		func(entry, picked string) bool { return entry == picked }, "is outside the hint")
}

// subsetHintTrials runs the trials of EPPSubsetHint and SubsetHintIPMatching. First, one-endpoint
// hints: an EPP that ignores hints lands on the hinted endpoint with probability 1/N, so
// mustTrials' m trials bound its chance to pass by MaxFalsePass. Then, for each pool member, a hint
// of all but one endpoint in random order. entry(addr, j) is the hint's j-th entry for the pool
// address addr; allows(entry, picked) says whether that entry admits the picked address; every
// picked address must be admitted by some entry, else the test fails with "<picked> <mismatch>".
func subsetHintTrials(t harness.TestingT, s *harness.Suite, what string, entry func(addr string, j int) string,
	allows func(entry, picked string) bool, mismatch string) {
	requireLoopbackFleet(t, s)
	pool := requireEndpoints(t, s, 2)
	c := s.ExtProc(t)
	r := s.Rand(t)
	check := func(trial string, hint []string) {
		req := chatRequest(s, uniquePrompt(s, t, r, 12), hint)
		addrs := mustRoute(t, s, exchange(t, s, c, req), req)
		for _, a := range addrs {
			if !slices.ContainsFunc(hint, func(h string) bool { return allows(h, a) }) {
				t.Fatalf("%ssubset hint %q, EPP picked %v: %s %s (seed %d)", trial, hint, addrs, a, mismatch, s.Seed)
			}
		}
	}
	m := mustTrials(t, 1/float64(len(pool)), what)
	for i := 0; i < m; i++ {
		check(fmt.Sprintf("trial %d/%d: ", i+1, m), []string{entry(pool[r.IntN(len(pool))], 0)})
	}
	for i := 0; i < len(pool); i++ {
		members := slices.Clone(pool)
		r.Shuffle(len(members), func(a, b int) { members[a], members[b] = members[b], members[a] })
		hint := members[:len(members)-1]
		for j := range hint {
			hint[j] = entry(hint[j], j)
		}
		check("", hint)
	}
}
