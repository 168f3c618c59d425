package bench

import (
	"math/rand/v2"
	"strings"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

const letters = "abcdefghijklmnopqrstuvwxyz"

// words returns n random lower-case words (2–4 letters), each followed by one space: n tokens
// for the fake vLLM's tokenizer, 4 characters per token on average.
//
// Four is the characters-per-token ratio that approximate prefix routing assumes
// (kubernetes-sigs/gateway-api-inference-extension v1.5.0,
// pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/types.go
// averageCharactersPerToken; SPEC §2.1 blocks of blockSizeTokens × 4 characters) and roughly what
// real tokenizers give on English text. With longer words (this generator used 2–8 letters,
// 6 characters per token, until 2026-12-01) one KV block of 16 tokens spans 1.5 index blocks of
// 64 characters, so an index sized in num_gpu_blocks entries (SPEC §2.2 autoTune) covers only
// two thirds of what the engine caches, and an EPP forgets prefixes its endpoints still hold.
func words(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 4)
	for range n {
		l := 2 + rng.IntN(3)
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
