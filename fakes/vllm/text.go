package vllm

import (
	"math/rand/v2"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// sentenceBank is the text random mode draws from (our own sentences; the simulator also answers
// with sentences from a fixed bank).
var sentenceBank = []string{
	"The quick brown fox jumps over the lazy dog. ",
	"Endpoint pickers route each request to the pod most likely to answer it fast. ",
	"A warm prefix cache turns a long prompt into a short prefill. ",
	"Queues grow when arrivals outpace the batch, and latency follows. ",
	"LoRA adapters share one base model, so keeping them together saves memory. ",
	"This is a fake model server; its words carry no meaning. ",
	"Tokens stream one by one until the answer is complete. ",
	"Every scheduler trades throughput against latency in the end. ",
}

var sentenceTokens = func() [][]engine.Token {
	out := make([][]engine.Token, len(sentenceBank))
	for i, s := range sentenceBank {
		out[i] = engine.Tokenize(s)
	}
	return out
}()

// randomTokens returns exactly n tokens of bank sentences chosen by rng (n > 0), or, when n ≤ 0,
// one to three whole sentences.
func randomTokens(rng *rand.Rand, n int) []engine.Token {
	if n <= 0 {
		var out []engine.Token
		for k := 1 + rng.IntN(3); k > 0; k-- {
			out = append(out, sentenceTokens[rng.IntN(len(sentenceTokens))]...)
		}
		return out
	}
	out := make([]engine.Token, 0, n)
	for len(out) < n {
		s := sentenceTokens[rng.IntN(len(sentenceTokens))]
		out = append(out, s[:min(len(s), n-len(out))]...)
	}
	return out
}
