package preciseprefix

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/eppkit/eppkit/reference/framework"
)

// Defaults of llm-d-router v0.10.0 (kvevents.DefaultConfig, kvblock.DefaultTokenProcessorConfig).
const (
	// PluginType is the producer's type (upstream's name).
	PluginType = "precise-prefix-cache-producer"
	// DefaultSocketPort is the KV-events PUB port on every endpoint IP (vLLM's default endpoint
	// tcp://*:5557).
	DefaultSocketPort = 5557
	// DefaultTopicFilter is the topic prefix subscribed to.
	DefaultTopicFilter = "kv@"
	// DefaultBlockSizeTokens is the block size requests are keyed with.
	DefaultBlockSizeTokens = 16
	// TokenizerSimulator is llm-d-inference-sim's dummy tokenizer (Tokenize).
	TokenizerSimulator = "simulator"
)

// Parameters are the producer's `parameters`, with upstream's JSON names; decoded strictly.
type Parameters struct {
	// TokenProcessorConfig: blockSizeTokens (default 16; must equal the engines' block size),
	// blockSize (deprecated name of the same), hashSeed (seeds the request keys; default "").
	TokenProcessorConfig TokenProcessorConfig `json:"tokenProcessorConfig"`
	// IndexerConfig is upstream's kv-cache indexer configuration (backends, metrics); accepted
	// and ignored (the reference's index is in memory) — except tokenizersPoolConfig, which
	// upstream rejects too.
	IndexerConfig json.RawMessage `json:"indexerConfig,omitempty"`
	// KVEventsConfig says where the events come from.
	KVEventsConfig KVEventsConfig `json:"kvEventsConfig"`
	// SpeculativeIndexing (upstream: seed the index with the pick before the engine confirms)
	// is not implemented: true is a config error. SpeculativeTTL is accepted with it.
	SpeculativeIndexing bool   `json:"speculativeIndexing"`
	SpeculativeTTL      string `json:"speculativeTTL,omitempty"`
	// Tokenizer [eppkit] names the tokenizer requests are tokenized with: "simulator" (the only
	// one, the default).
	Tokenizer string `json:"tokenizer,omitempty"`
}

// TokenProcessorConfig is upstream's kvblock.TokenProcessorConfig.
type TokenProcessorConfig struct {
	BlockSizeTokens int    `json:"blockSizeTokens"`
	BlockSize       int    `json:"blockSize,omitempty"`
	HashSeed        string `json:"hashSeed"`
}

// KVEventsConfig is upstream's kvevents.Config, with the fields the reference honours.
type KVEventsConfig struct {
	// ZMQEndpoint is upstream's central socket (the EPP binds, engines connect); not supported
	// by the reference: only per-endpoint discovery (DiscoverPods).
	ZMQEndpoint string `json:"zmqEndpoint,omitempty"`
	// TopicFilter is the subscription prefix (default "kv@").
	TopicFilter string `json:"topicFilter"`
	// Concurrency is upstream's event-worker count; accepted (each subscriber applies its own
	// events here).
	Concurrency int `json:"concurrency,omitempty"`
	// EngineType must be "vllm" (upstream also knows "sglang").
	EngineType string `json:"engineType"`
	// DiscoverPods subscribes to every endpoint (default true; false leaves nothing to follow and
	// is a config error).
	DiscoverPods       bool               `json:"discoverPods"`
	PodDiscoveryConfig PodDiscoveryConfig `json:"podDiscoveryConfig"`
}

// PodDiscoveryConfig is upstream's per-pod subscription configuration.
type PodDiscoveryConfig struct {
	// PodLabelSelector and PodNamespace are accepted; the reference follows the pool's endpoints.
	PodLabelSelector string `json:"podLabelSelector,omitempty"`
	PodNamespace     string `json:"podNamespace,omitempty"`
	// SocketPort is the PUB port on every endpoint IP (default 5557), plus the rank index.
	SocketPort int `json:"socketPort"`
	// ReplaySocketPort, when > 0, is the replay (ROUTER) port, plus the rank index.
	ReplaySocketPort int `json:"replaySocketPort,omitempty"`
}

// DefaultParameters returns upstream's defaults.
func DefaultParameters() Parameters {
	return Parameters{
		TokenProcessorConfig: TokenProcessorConfig{BlockSizeTokens: DefaultBlockSizeTokens},
		KVEventsConfig: KVEventsConfig{TopicFilter: DefaultTopicFilter, Concurrency: 4, EngineType: "vllm", DiscoverPods: true,
			PodDiscoveryConfig: PodDiscoveryConfig{SocketPort: DefaultSocketPort}},
		Tokenizer: TokenizerSimulator,
	}
}

// DecodeParameters decodes raw over DefaultParameters strictly and validates; errors name the
// field (parameters.<path>).
func DecodeParameters(raw json.RawMessage) (Parameters, error) {
	p := DefaultParameters()
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return p, err
	}
	return p, p.Validate()
}

// Validate checks every field, naming the first bad one.
func (p *Parameters) Validate() error {
	tp := &p.TokenProcessorConfig
	if tp.BlockSize != 0 && tp.BlockSizeTokens == DefaultBlockSizeTokens {
		tp.BlockSizeTokens = tp.BlockSize // the deprecated name, as upstream maps it
	}
	kc := p.KVEventsConfig
	switch {
	case tp.BlockSizeTokens <= 0:
		return fmt.Errorf("parameters.tokenProcessorConfig.blockSizeTokens: must be > 0, got %d", tp.BlockSizeTokens)
	case kc.ZMQEndpoint != "":
		return errors.New("parameters.kvEventsConfig.zmqEndpoint: the central socket mode is not supported by the reference; use discoverPods with podDiscoveryConfig.socketPort")
	case kc.EngineType != "vllm":
		return fmt.Errorf("parameters.kvEventsConfig.engineType: only \"vllm\" is supported, got %q", kc.EngineType)
	case !kc.DiscoverPods:
		return errors.New("parameters.kvEventsConfig.discoverPods: must be true (the reference subscribes to every endpoint of the pool)")
	case kc.PodDiscoveryConfig.SocketPort <= 0 || kc.PodDiscoveryConfig.SocketPort > 65535:
		return fmt.Errorf("parameters.kvEventsConfig.podDiscoveryConfig.socketPort: must be in [1, 65535], got %d", kc.PodDiscoveryConfig.SocketPort)
	case kc.PodDiscoveryConfig.ReplaySocketPort < 0 || kc.PodDiscoveryConfig.ReplaySocketPort > 65535:
		return fmt.Errorf("parameters.kvEventsConfig.podDiscoveryConfig.replaySocketPort: must be in [0, 65535], got %d", kc.PodDiscoveryConfig.ReplaySocketPort)
	case kc.Concurrency < 0:
		return fmt.Errorf("parameters.kvEventsConfig.concurrency: must be >= 0, got %d", kc.Concurrency)
	case p.SpeculativeIndexing:
		return errors.New("parameters.speculativeIndexing: not implemented in the reference (the index follows the engines' events only)")
	case p.Tokenizer != TokenizerSimulator:
		return fmt.Errorf("parameters.tokenizer: only %q (llm-d-inference-sim's dummy tokenizer) is available, got %q", TokenizerSimulator, p.Tokenizer)
	}
	if p.SpeculativeTTL != "" {
		if _, err := time.ParseDuration(p.SpeculativeTTL); err != nil {
			return fmt.Errorf("parameters.speculativeTTL: %v", err)
		}
	}
	if trimmed := bytes.TrimSpace(p.IndexerConfig); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		var ic map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &ic); err != nil {
			return fmt.Errorf("parameters.indexerConfig: want an object: %v", err)
		}
		if _, ok := ic["tokenizersPoolConfig"]; ok {
			return errors.New("parameters.indexerConfig.tokenizersPoolConfig: not supported (upstream rejects it too; tokens come from the tokenizer parameter)")
		}
	}
	return nil
}
