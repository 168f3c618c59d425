package tests

import (
	"math/rand/v2"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

// Token-id prompt shape of TokenIDPrompts: a shared run of tokenPrefixIDs ids (≥ 32
// blocks of 16 ids, the upstream default block) and a distinct tail of tokenTailIDs (under a
// ninth of the prefix, so the follow-up shares ≥ 90% of its prompt).
const (
	tokenPrefixIDs = 576
	tokenTailIDs   = 48
)

// tokenIDPair returns two prompts of token ids drawn from r that share a prefix of
// tokenPrefixIDs ids and end in distinct tails of tokenTailIDs ids: a first request and its
// follow-up, as TokenIDPrompts and VLLMGRPCRouted send them.
func tokenIDPair(r *rand.Rand) (first, second []int) {
	prefix := tokenIDs(r.Uint64(), tokenPrefixIDs)
	first = append(append([]int(nil), prefix...), tokenIDs(r.Uint64(), tokenTailIDs)...)
	second = append(append([]int(nil), prefix...), tokenIDs(r.Uint64(), tokenTailIDs)...)
	return first, second
}

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:   "TokenIDPrompts",
		FormerNames: []string{"ReferenceTokenIDPrompts"}, // in the Reference profile until issue 32
		Description: "Completions and embeddings requests whose prompt or input is an array of token ids or an array of token-id " +
			"arrays MUST be routed with the body unchanged, and with equal load a token-id prompt that shares at least 90% of a " +
			"long run of ids (≥ 32 blocks) with an earlier request MUST go to the endpoint that served it (ids are hashed as ids).",
		Level:    conformance.LevelEppkit,
		Profile:  conformance.ProfileEPPProduction,
		Features: []conformance.Feature{conformance.FeatureTokenIDPrompts},
		Preconditions: []string{"the EPP hashes token-id prompts by their ids (4-byte little-endian values in blocks of blockSizeTokens ids)",
			"prefix-cache affinity as in PrefixCacheAffinity"},
		Source: "SPEC §9.1 (prompt forms []int and [][]int; upstream v1.5.0 accepts only string and []string) and §2.1",
		Run:    runTokenIDPrompts,
	})
}

func runTokenIDPrompts(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 2)
	r := s.Rand(t)
	routeForms(t, s, []surfaceCase{
		{"completions prompt []int", pathCompletions, jsonBody(map[string]any{"model": s.ModelName, "prompt": tokenIDs(r.Uint64(), 40), "max_tokens": 1})},
		{"completions prompt [][]int", pathCompletions, jsonBody(map[string]any{"model": s.ModelName,
			"prompt": [][]int{tokenIDs(r.Uint64(), 20), tokenIDs(r.Uint64(), 7)}, "max_tokens": 1})},
		{"embeddings input []int", pathEmbeddings, jsonBody(map[string]any{"model": s.ModelName, "input": tokenIDs(r.Uint64(), 30)})},
		{"embeddings input [][]int", pathEmbeddings, jsonBody(map[string]any{"model": s.ModelName, "input": [][]int{tokenIDs(r.Uint64(), 9), tokenIDs(r.Uint64(), 11)}})},
	})

	plan := harness.MustPlan(t, harness.Shape{
		Outcome: "token-id follow-ups sent to the endpoint that served their prefix", Tail: harness.AtLeast,
		Compliant: 1 - harness.Exploration, Random: 1 / float64(len(pool)),
	})
	c := s.ExtProc(t)
	hits := 0
	var misses []string
	for i := 0; i < plan.N; i++ {
		first, second := tokenIDPair(r)
		pick := func(ids []int, hint []string) string {
			req := surfaceRequest(pathCompletions, jsonBody(map[string]any{"model": s.ModelName, "prompt": ids, "max_tokens": 1}), nil)
			req.SubsetHint = hint
			return mustRoute(t, s, exchange(t, s, c, req), req)[0]
		}
		// The first request is placed on an endpoint drawn at random (a subset hint, SPEC §5.1), so
		// an EPP that ignores the ids — whose equal-load ties may always break the same way, or whose
		// id-less prompts may all hash alike — meets the follow-up there only 1 time in len(pool).
		home := pool[r.IntN(len(pool))]
		a := pick(first, []string{home})
		if a != home {
			t.Fatalf("trial %d: the first request with the subset hint [%s] was routed to %s (SPEC §5.1: the pick stays inside the hint)", i, home, a)
		}
		b := pick(second, nil)
		if a == b {
			hits++
		} else {
			misses = append(misses, fmtIDs(first)+": "+a+"→"+b)
		}
	}
	if len(misses) > 0 {
		t.Logf("follow-ups that left their prefix's endpoint: %v", misses)
	}
	plan.Check(t, s, hits, plan.N)
}
