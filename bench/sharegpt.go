package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
)

// shareGPTEntry is one conversation of a ShareGPT-layout file (the layout of
// ShareGPT_V3_unfiltered_cleaned_split.json that vLLM's --dataset-name sharegpt reads).
type shareGPTEntry struct {
	ID            string `json:"id"`
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
}

// shareGPTPool reads s.Path and returns its usable conversations shuffled with rng; the
// generator cycles through them. As vLLM's ShareGPT sampler does
// (vllm/benchmarks/datasets.py ShareGPTDataset), conversations with fewer than two turns are
// skipped, the first turn is the prompt and the second turn's length is the output length; prompts
// under 4 tokens or outputs under 4 tokens are skipped. Output lengths are capped at
// s.MaxOutputLen. Nothing is downloaded.
func shareGPTPool(rng *rand.Rand, s Spec) ([]Request, error) {
	data, err := os.ReadFile(s.Path)
	if err != nil {
		return nil, fmt.Errorf("workload sharegpt: path: %w", err)
	}
	var entries []shareGPTEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("workload sharegpt: %s is not a ShareGPT-layout JSON array: %w", s.Path, err)
	}
	var pool []Request
	for _, e := range entries {
		if len(e.Conversations) < 2 {
			continue
		}
		prompt := e.Conversations[0].Value
		pt := CountTokens(prompt)
		ot := CountTokens(e.Conversations[1].Value)
		if pt < 4 || ot < 4 {
			continue
		}
		pool = append(pool, Request{Prompt: prompt, PromptTokens: pt, OutputTokens: min(ot, s.MaxOutputLen), Group: -1})
	}
	if len(pool) == 0 {
		return nil, fmt.Errorf("workload sharegpt: %s has no conversation with two turns of at least 4 tokens each", s.Path)
	}
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	return pool, nil
}
