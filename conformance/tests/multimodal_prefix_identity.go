package tests

import (
	"math/rand/v2"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// inlineDataChars is the length of the inline data of MultimodalPrefixIdentity's parts:
// longer than maxPrefixBlocksToMatch × 64 characters (16,384 with the defaults), so an EPP that
// hashes the data as text cuts the prompt before two parts that differ only at their end.
const inlineDataChars = 20000

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:   "MultimodalPrefixIdentity",
		FormerNames: []string{"ReferenceMultimodalPrefixIdentity"}, // in the Reference profile until issue 32
		Description: "Every content part of a chat message MUST reach the prefix hash by its identity (a URL, or a digest of its " +
			"inline data): two requests whose text is equal and whose inline image, audio clip or file differs MUST NOT score as " +
			"a full match (under a deep queue that only a full match outweighs, the second MUST go elsewhere, while the indexed " +
			"request itself still goes to its endpoint).",
		Level:    conformance.LevelEppkit,
		Profile:  conformance.ProfileEPPProduction,
		Features: []conformance.Feature{conformance.FeatureMultimodalPrefixIdentity},
		Preconditions: []string{"prefix blocks of 16 tokens (64 characters) and maxPrefixBlocksToMatch 256",
			"a full prefix match outweighs a deep waiting queue and a small match does not (the reference's default weights: prefix-cache 3, queue 2)",
			"the EPP observes pinned metrics within metricsPropagation"},
		Source: "SPEC §9.1 (content parts text, image_url, input_audio, file reach the hash; a non-text part by its URL or a " +
			"digest of its inline data); upstream v1.5.0 hashes inline data as text, cut at 256 blocks, and drops file parts",
		Run: runMultimodalPrefixIdentity,
	})
}

func runMultimodalPrefixIdentity(t harness.TestingT, s *harness.Suite) {
	runPrefixPressure(t, s, func(r *rand.Rand, i int) pressureTrial {
		lead, follow := uniquePrompt(s, t, r, 3), uniquePrompt(s, t, r, 90)
		data := strings.Repeat("QUFB", inlineDataChars/4) // the same long base64 run
		// Two parts of one kind whose data differ only in their last characters.
		kinds := []struct {
			name string
			part func(end string) map[string]any
		}{
			{"inline image", func(end string) map[string]any {
				return map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + data + end}}
			}},
			{"inline audio", func(end string) map[string]any {
				return map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": data + end, "format": "wav"}}
			}},
			{"file", func(end string) map[string]any {
				return map[string]any{"type": "file", "file": map[string]any{"filename": "report.pdf", "file_data": "data:application/pdf;base64," + data + end}}
			}},
		}
		k := kinds[i%len(kinds)]
		req := func(end string) extprocclient.Request {
			body := jsonBody(map[string]any{"model": s.ModelName, "max_tokens": 1, "messages": []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": lead},
				k.part(end),
				map[string]any{"type": "text", "text": follow},
			}}}})
			return surfaceRequest(pathChat, body, nil)
		}
		return pressureTrial{name: k.name, base: req("QQ=="), variant: req("Qg==")}
	})
}
