package bench

import (
	"math/rand/v2"
	"strings"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

const letters = "abcdefghijklmnopqrstuvwxyz"

// words returns n random lower-case words (2–8 letters), each followed by one space: n tokens
// for the fake vLLM's tokenizer, about 6 characters per token.
func words(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 7)
	for range n {
		l := 2 + rng.IntN(7)
		for range l {
			b.WriteByte(letters[rng.IntN(len(letters))])
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// CountTokens is the prompt length in fake-vLLM tokens (fakes/vllm/engine.Tokenize, the
// llm-d-inference-sim dummy tokenizer).
func CountTokens(s string) int { return len(engine.Tokenize(s)) }
