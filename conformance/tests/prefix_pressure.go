package tests

import (
	"math/rand/v2"

	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// Prefix identity under queue pressure: how the tests of what enters the prefix hash
// (PartialBlockHashed, MultimodalPrefixIdentity) see a prefix match from
// outside. One endpoint, drawn at random, is pinned to a deep waiting queue (the others to none),
// so that only a (nearly) full prefix match outweighs its queue (the reference's default weights:
// prefix-cache 3 against queue 2, so a match above 2/3 of the blocks wins and a match of half
// loses). Each trial then
//
//  1. sends the base request with a subset hint naming the loaded endpoint, so the EPP must pick
//     it (SPEC §5.1) and indexes the base request's blocks there;
//  2. sends the base request again, without a hint: the control, which must go to the loaded
//     endpoint (a full match) — otherwise the precondition does not hold and the test says so;
//  3. sends the variant, which differs from the base request only where the rule under test says
//     the hash must see a difference: it must not go to the loaded endpoint.
//
// Everything goes over ext_proc only (no model server sees the requests), so the load the EPP
// sees is the pinned one.

// pressureTrial is one trial's base request and variant.
type pressureTrial struct {
	name          string
	base, variant extprocclient.Request
}

// runPrefixPressure runs the procedure above: mk(i) builds trial i. Two plans decide: the
// controls (at least, compliant 1 − Exploration, uniform random 1/N) and the variants sent to the
// loaded endpoint (at most, compliant Exploration, uniform random 1/N); the trials are as many as
// the larger plan needs, and each plan is checked on its first N.
func runPrefixPressure(t harness.TestingT, s *harness.Suite, mk func(r *rand.Rand, i int) pressureTrial) {
	pool := requireEndpoints(t, s, 2)
	r := s.Rand(t)
	control := harness.MustPlan(t, harness.Shape{
		Outcome: "controls (the indexed request again) sent to the loaded endpoint that holds their prefix", Tail: harness.AtLeast,
		Compliant: 1 - harness.Exploration, Random: 1 / float64(len(pool)),
	})
	variant := harness.MustPlan(t, harness.Shape{
		Outcome: "variants sent to the loaded endpoint", Tail: harness.AtMost,
		Compliant: harness.Exploration, Random: 1 / float64(len(pool)),
	})
	n := max(control.N, variant.N)

	loaded := pool[r.IntN(len(pool))]
	mkUnique := func() (string, []byte) {
		return pathCompletions, completionBody(s.ModelName, uniquePrompt(s, t, r, 24), nil)
	}
	t.Cleanup(func() { restoreRouting(t, s, loaded, mkUnique) })
	pins := map[string]vllm.FakeMetrics{}
	for _, a := range pool {
		pins[a] = vllm.FakeMetrics{RunningRequests: 1, KVCacheUsage: 0.1}
	}
	pins[loaded] = vllm.FakeMetrics{RunningRequests: 1, WaitingRequests: int64(queueDeep), KVCacheUsage: 0.1}
	pinAll(t, s, pins)
	awaitObserved(t, s, "the deep queue on "+loaded, mkUnique, func(ep string) bool { return ep != loaded })

	c := s.ExtProc(t)
	controlHits, variantHits := 0, 0
	var log []string
	for i := 0; i < n; i++ {
		tr := mk(r, i)
		tr.base.SubsetHint = []string{loaded}
		if got := mustRoute(t, s, exchange(t, s, c, tr.base), tr.base); len(got) == 0 || got[0] != loaded {
			t.Fatalf("trial %d (%s): the base request with the subset hint [%s] was routed to %v (SPEC §5.1: the pick stays inside the hint)",
				i, tr.name, loaded, got)
		}
		tr.base.SubsetHint = nil
		ctl := mustRoute(t, s, exchange(t, s, c, tr.base), tr.base)[0]
		v := mustRoute(t, s, exchange(t, s, c, tr.variant), tr.variant)[0]
		if i < control.N && ctl == loaded {
			controlHits++
		}
		if i < variant.N && v == loaded {
			variantHits++
		}
		log = append(log, tr.name+": control→"+ctl+", variant→"+v)
	}
	t.Logf("loaded endpoint %s; trials: %v", loaded, log)
	if !control.Check(t, s, controlHits, control.N) {
		t.Fatalf("precondition: a full prefix match does not outweigh the deep queue on this EPP, so the variants say nothing " +
			"(the test needs prefix affinity weighted above queue depth, as the reference's defaults are)")
	}
	variant.Check(t, s, variantHits, variant.N)
}
