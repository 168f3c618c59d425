package tests

import (
	"math/rand/v2"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

// Prompt shape of PartialBlockHashed: one full block of blockChars characters (16
// tokens × 4, the default block) and a tail of tailChars (a partial block).
const (
	partialBlockChars = 64
	partialTailChars  = 40
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:   "PartialBlockHashed",
		FormerNames: []string{"ReferencePartialBlockHashed"}, // in the Reference profile until issue 32
		Description: "The trailing partial block of a prompt MUST take part in the prefix hash: a request that differs from an " +
			"indexed one only in its last, partial block MUST NOT score as a full match (under a deep queue that only a full match " +
			"outweighs, it MUST go elsewhere, while the indexed request itself still goes to its endpoint).",
		Level:    conformance.LevelEppkit,
		Profile:  conformance.ProfileEPPProduction,
		Features: []conformance.Feature{conformance.FeaturePartialBlockHashing},
		Preconditions: []string{"prefix blocks of 16 tokens (64 characters)",
			"a full prefix match outweighs a deep waiting queue and a half match does not (the reference's default weights: prefix-cache 3, queue 2)",
			"the EPP observes pinned metrics within metricsPropagation"},
		Source: "SPEC §2.1 (the trailing partial block is hashed; GIE PR #2823 — upstream v1.5.0 drops it)",
		Run:    runPartialBlockHashed,
	})
}

func runPartialBlockHashed(t harness.TestingT, s *harness.Suite) {
	runPrefixPressure(t, s, func(r *rand.Rand, i int) pressureTrial {
		block := fit(uniquePrompt(s, t, r, 20), partialBlockChars)
		tail := func() string { return fit(uniquePrompt(s, t, r, 12), partialTailChars) }
		a, b := block+tail(), block+tail()
		return pressureTrial{
			name:    "tail " + strings.TrimSpace(a[partialBlockChars:partialBlockChars+8]) + "… vs " + strings.TrimSpace(b[partialBlockChars:partialBlockChars+8]) + "…",
			base:    surfaceRequest(pathCompletions, completionBody(s.ModelName, a, nil), nil),
			variant: surfaceRequest(pathCompletions, completionBody(s.ModelName, b, nil), nil),
		}
	})
}

// fit cuts or pads (with dots) ASCII text to exactly n characters.
func fit(s string, n int) string {
	if len(s) >= n {
		return s[:n]
	}
	return s + strings.Repeat(".", n-len(s))
}
