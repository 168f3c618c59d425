package legacyprefix

import (
	"encoding/json"
	"fmt"

	"github.com/eppkit/eppkit/reference/framework"
)

// Defaults of the upstream monolith (gateway-api-inference-extension,
// pkg/epp/scheduling/framework/plugins/multi/prefix/plugin.go, December 2025; the same values
// survive in v1.5.0's approximateprefix/types.go).
const (
	// DefaultBlockSizeTokens is vLLM's default KV block size, in tokens.
	DefaultBlockSizeTokens = 16
	// DefaultMaxPrefixBlocksToMatch caps how many blocks of a prompt are hashed and matched.
	DefaultMaxPrefixBlocksToMatch = 256
	// DefaultLRUCapacityPerServer is the per-endpoint index capacity, in block hashes
	// (upstream's sizing: ~500K cached tokens on an H100 for an 8B model / 16 tokens per block).
	DefaultLRUCapacityPerServer = 31250
	// CharactersPerToken converts a block size in tokens to the block size in characters: the
	// prompt is not tokenized, so upstream assumes 4 characters per token.
	CharactersPerToken = 4
)

// Config holds the parameters of legacy-prefix-cache-scorer. The field names are the upstream
// monolith's, so an old `prefix-cache-scorer` parameters block can be moved over as it is.
type Config struct {
	// AutoTune takes the block size from the endpoints' vllm:cache_config_info{block_size} and
	// each endpoint's index capacity from its num_gpu_blocks. Default true.
	AutoTune bool `json:"autoTune"`
	// BlockSizeTokens is the hashing block size in tokens (× 4 = characters). Default 16.
	BlockSizeTokens int `json:"blockSizeTokens"`
	// BlockSize is upstream's deprecated block size in characters. Upstream (December 2025)
	// rejects a config that gives only BlockSize; when both are given, BlockSizeTokens wins.
	BlockSize int `json:"blockSize"`
	// MaxPrefixBlocksToMatch is the most blocks hashed per request. Default 256.
	MaxPrefixBlocksToMatch int `json:"maxPrefixBlocksToMatch"`
	// LRUCapacityPerServer is each endpoint's index capacity in block hashes when AutoTune does
	// not supply one. Default 31250.
	LRUCapacityPerServer int `json:"lruCapacityPerServer"`
}

// DefaultConfig returns the upstream defaults.
func DefaultConfig() Config {
	return Config{
		AutoTune:               true,
		BlockSizeTokens:        DefaultBlockSizeTokens,
		MaxPrefixBlocksToMatch: DefaultMaxPrefixBlocksToMatch,
		LRUCapacityPerServer:   DefaultLRUCapacityPerServer,
	}
}

// ParseConfig decodes a plugin's `parameters` strictly (framework.DecodeParameters: unknown
// fields are errors) over the defaults and validates them. Errors name the field:
//   - a negative blockSizeTokens, blockSize, maxPrefixBlocksToMatch or lruCapacityPerServer;
//   - blockSize given without blockSizeTokens (upstream December 2025 refuses it the same way,
//     because blockSize counts characters and blockSizeTokens counts tokens).
//
// Zero values of blockSizeTokens, maxPrefixBlocksToMatch and lruCapacityPerServer take the
// defaults, as upstream's New did.
func ParseConfig(params json.RawMessage) (Config, error) {
	cfg := DefaultConfig()
	// blockSizeTokens is decoded twice: once into the config, once into a pointer that tells
	// whether it was present at all.
	var presence struct {
		BlockSizeTokens *int `json:"blockSizeTokens"`
	}
	if err := framework.DecodeParameters(params, &cfg); err != nil {
		return Config{}, err
	}
	if len(params) > 0 {
		// Strictness was checked above; this pass only records presence.
		if err := json.Unmarshal(params, &presence); err != nil {
			return Config{}, fmt.Errorf("parameters: %w", err)
		}
	}
	switch {
	case cfg.BlockSizeTokens < 0:
		return Config{}, fmt.Errorf("parameters: blockSizeTokens must be >= 0, got %d", cfg.BlockSizeTokens)
	case cfg.BlockSize < 0:
		return Config{}, fmt.Errorf("parameters: blockSize must be >= 0, got %d", cfg.BlockSize)
	case cfg.MaxPrefixBlocksToMatch < 0:
		return Config{}, fmt.Errorf("parameters: maxPrefixBlocksToMatch must be >= 0, got %d", cfg.MaxPrefixBlocksToMatch)
	case cfg.LRUCapacityPerServer < 0:
		return Config{}, fmt.Errorf("parameters: lruCapacityPerServer must be >= 0, got %d", cfg.LRUCapacityPerServer)
	case cfg.BlockSize > 0 && (presence.BlockSizeTokens == nil || *presence.BlockSizeTokens <= 0):
		return Config{}, fmt.Errorf("parameters: blockSize (%d characters) is deprecated; set blockSizeTokens (tokens) instead", cfg.BlockSize)
	}
	if cfg.BlockSizeTokens == 0 {
		cfg.BlockSizeTokens = DefaultBlockSizeTokens
	}
	if cfg.MaxPrefixBlocksToMatch == 0 {
		cfg.MaxPrefixBlocksToMatch = DefaultMaxPrefixBlocksToMatch
	}
	if cfg.LRUCapacityPerServer == 0 {
		cfg.LRUCapacityPerServer = DefaultLRUCapacityPerServer
	}
	return cfg, nil
}
