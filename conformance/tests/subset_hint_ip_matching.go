package tests

import (
	"net"
	"strconv"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "SubsetHintIPMatching",
		Description: "When the subset hint names a pool endpoint's IP with a port other than the pool's, the EPP MUST treat " +
			"the entry as naming that endpoint: it routes (no 503) and picks only pool endpoints whose IP is in the hint.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureSubsetHintIPMatching},
		Preconditions: []string{"the EPP serves the pool's base model",
			"fleet members on distinct IPs (127.0.10.x loopback aliases)",
			"the hint's ports are the pool's port + 1000, where no endpoint listens; the pick is the pool's own ip:port"},
		Source: "llm-d-router v0.10.0 pkg/epp/requestcontrol/candidates.go DatastoreEndpointCandidates.Locate: each " +
			"hint entry is cut at its last ':' and matched against pod IPs; same in GIE v1.5.0 (and v1.4.0 " +
			"locator.go). GIE proposal 004 lists ip:port without saying ports may differ; SPEC §5.1.",
		Run: runSubsetHintIPMatching,
	})
}

// runSubsetHintIPMatching: one-endpoint hints on another port (an EPP that matches exact
// addresses finds no eligible endpoint and answers 503, which fails at once), then hints of all
// but one endpoint with every other entry on another port; every pick must have an IP of the hint.
func runSubsetHintIPMatching(t harness.TestingT, s *harness.Suite) {
	subsetHintTrials(t, s, "honours a one-endpoint hint by IP", func(addr string, j int) string {
		if j%2 == 0 {
			return otherPort(addr)
		}
		return addr
	}, func(entry, picked string) bool { return hostOf(entry) == hostOf(picked) }, "has no IP of the hint")
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
