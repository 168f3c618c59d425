package scorers

import "github.com/eppkit/eppkit/internal/mutant"

// mutantFlatten is the hook of the queue-ignored, kv-ignored and lora-ignored mutants
// (internal/mutant): the named scorer gives every endpoint 1, so its signal is lost. In builds
// without the eppkit_mutants tag it returns out unchanged.
func mutantFlatten(typ string, out map[string]float64) map[string]float64 {
	if !mutant.Enabled {
		return out
	}
	if typ == QueueScorerType && mutant.On(mutant.QueueIgnored) ||
		typ == KVCacheScorerType && mutant.On(mutant.KVIgnored) ||
		typ == LoRAAffinityScorerType && mutant.On(mutant.LoRAIgnored) {
		for k := range out {
			out[k] = 1
		}
	}
	return out
}

// mutantFlattenIndexed is mutantFlatten for ScoreIndexed's slice.
func mutantFlattenIndexed(typ string, out []float64) {
	if !mutant.Enabled {
		return
	}
	if typ == QueueScorerType && mutant.On(mutant.QueueIgnored) ||
		typ == KVCacheScorerType && mutant.On(mutant.KVIgnored) ||
		typ == LoRAAffinityScorerType && mutant.On(mutant.LoRAIgnored) {
		for i := range out {
			out[i] = 1
		}
	}
}
