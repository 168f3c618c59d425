package tests

import (
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

// Prompt shape of PrefixCacheAffinity (SPEC §6): a shared prefix of at least prefixMinChars
// characters (≥ 32 blocks of 64 characters — 16 tokens × 4 characters, the upstream default
// block — with room to spare for EPPs with larger blocks) and a distinct tail of at most a ninth
// of the prefix, so the follow-up shares ≥ 90% of its prompt with the first request. The whole
// prompt stays well under the fakes' 1024-token context.
const (
	prefixMinChars = 2700
	prefixTailMax  = prefixMinChars / 9
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "PrefixCacheAffinity",
		Description: "With equal load, a request that shares at least 90% of a long prompt (≥ 32 blocks) with an earlier request " +
			"MUST go to the endpoint that served the earlier request.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeaturePrefixCacheAffinity},
		Preconditions: []string{"the EPP scores prefix-cache affinity (e.g. approx-prefix-cache-producer + prefix-cache-scorer) and indexes a request's prefix when it picks",
			"completions prompts are hashed as text"},
		Source: "llm-d-router v0.10.0 " +
			"pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/plugin.go Produce/PreRequest " +
			"(hashes: dataproducer/prefixhash/hashing.go GetBlockHashes) and scheduling/scorer/prefix/plugin.go " +
			"Score. GIE v1.5.0 same producer/scorer pair, hashing chars (approximateprefix/hashing.go " +
			"hashPrompt), ≤ 256 blocks, partial block dropped. SPEC §2, §6.",
		Run: runPrefixCacheAffinity,
	})
}

func runPrefixCacheAffinity(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 2)
	r := s.Rand(t)
	plan := harness.MustPlan(t, harness.Shape{
		Outcome: "follow-up requests sent to the endpoint that served their prefix", Tail: harness.AtLeast,
		Compliant: 1 - harness.Exploration, Random: 1 / float64(len(pool)),
	})
	words := func(atLeast int) string {
		var b strings.Builder
		for b.Len() < atLeast {
			b.WriteString(vocabulary[r.IntN(len(vocabulary))])
			b.WriteByte(' ')
		}
		return b.String()
	}
	hits := 0
	var misses []string
	// Trials run one after another so the load stays equal (no request in flight elsewhere).
	for i := 0; i < plan.N; i++ {
		prefix := uniquePrompt(s, t, r, 0) + " " + words(prefixMinChars)
		tailA := words(prefixTailMax - 10)[:prefixTailMax-10]
		tailB := "Z " + words(prefixTailMax - 10)[:prefixTailMax-12]
		first := mustSend(t, s, pathCompletions, completionBody(s.ModelName, prefix+tailA, nil))
		second := mustSend(t, s, pathCompletions, completionBody(s.ModelName, prefix+tailB, nil))
		if second == first {
			hits++
		} else {
			misses = append(misses, first+"→"+second)
		}
	}
	if len(misses) > 0 {
		t.Logf("follow-ups that left their prefix's endpoint (first→second): %v", misses)
	}
	plan.Check(t, s, hits, plan.N)
}
