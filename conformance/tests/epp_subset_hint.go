package tests

import (
	"net"
	"slices"
	"strconv"

	"github.com/eppkit/eppkit/conformance"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPSubsetHint",
		Description: "When the filter metadata envoy.lb.subset_hint/x-gateway-destination-endpoint-subset lists endpoints, " +
			"the EPP MUST pick only endpoints from that list, matching by IP (the hint's ports may differ from the pool's).",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model",
			"fleet members on distinct IPs (127.0.10.x loopback aliases)"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol), Endpoint Subset; matching by IP: SPEC §5.1 (upstream v1.5.0 compares the hint's IPs)",
		Run:    runEPPSubsetHint,
	})
}

func runEPPSubsetHint(t conformance.TestingT, s *conformance.Suite) {
	requireLoopbackFleet(t, s)
	pool := requireEndpoints(t, s, 2)
	c := s.ExtProc(t)
	r := s.Rand(t)

	// A one-endpoint hint: an EPP that ignores hints lands on it with probability 1/N, so m trials
	// bound its chance to pass by MaxFalsePass. Every third trial the hint carries another port
	// for the same IP, which must still match.
	m := mustTrials(t, 1/float64(len(pool)), "honours a one-endpoint hint")
	for i := 0; i < m; i++ {
		want := pool[r.IntN(len(pool))]
		hint := want
		if i%3 == 2 {
			hint = otherPort(want)
		}
		req := chatRequest(s, uniquePrompt(s, t, r, 12), []string{hint})
		addrs := mustRoute(t, s, exchange(t, s, c, req), req)
		for _, a := range addrs {
			if hostOf(a) != hostOf(want) {
				t.Fatalf("trial %d/%d: subset hint %q, EPP picked %v: %s is outside the hint (seed %d)", i+1, m, []string{hint}, addrs, a, s.Seed)
			}
		}
	}

	// A larger hint (all but one endpoint, in random order, half with other ports): every picked
	// address must belong to it.
	for i := 0; i < len(pool); i++ {
		members := slices.Clone(pool)
		r.Shuffle(len(members), func(a, b int) { members[a], members[b] = members[b], members[a] })
		members = members[:len(members)-1]
		hint := slices.Clone(members)
		for j := range hint {
			if r.IntN(2) == 0 {
				hint[j] = otherPort(hint[j])
			}
		}
		req := chatRequest(s, uniquePrompt(s, t, r, 12), hint)
		addrs := mustRoute(t, s, exchange(t, s, c, req), req)
		for _, a := range addrs {
			if !slices.ContainsFunc(hint, func(h string) bool { return hostOf(h) == hostOf(a) }) {
				t.Fatalf("subset hint %q, EPP picked %v: %s is outside the hint (seed %d)", hint, addrs, a, s.Seed)
			}
		}
	}
}

// otherPort returns addr with a different port (port+1000, wrapping below 65536).
func otherPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	p, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa((p+1000)%65536))
}
