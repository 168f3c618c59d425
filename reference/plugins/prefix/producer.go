package prefix

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/framework"
)

// Plugin types and the data key of this package (upstream names, SPEC §1).
const (
	// ProducerType is the plugin type of the PrepareData producer.
	ProducerType = "approx-prefix-cache-producer"
	// ScorerType is the plugin type of the thin scorer.
	ScorerType = "prefix-cache-scorer"
	// PrefixCacheMatchInfoKey is the data key under which the producer puts a
	// *PrefixCacheMatchInfo on every candidate endpoint.
	PrefixCacheMatchInfoKey = "PrefixCacheMatchInfo"
	// PrefillProfileName is the profile whose first target PreRequest also indexes, besides the
	// primary profile's (GIE v1.5.0 approximateprefix/types.go experimentalDefaultPrefillProfile).
	PrefillProfileName = "prefill"
	// DefaultBlockSizeTokens is the default block size in tokens (vLLM's default, GIE v1.5.0).
	DefaultBlockSizeTokens = 16
	// DefaultMaxPrefixBlocksToMatch is the default cap on hashed blocks per request (GIE v1.5.0).
	DefaultMaxPrefixBlocksToMatch = 256
	// DefaultSweepInterval is how often the producer purges endpoints that left the pool from its
	// index (GIE v1.5.0 podActiveCheckInterval, 2 min).
	DefaultSweepInterval = 2 * time.Minute
)

// PrefixCacheMatchInfo is the attribute the producer writes on each candidate, always as a
// pointer (*PrefixCacheMatchInfo). All counts are in blocks of BlockSizeTokens tokens
// (= BlockSizeTokens×4 characters of hashed input).
type PrefixCacheMatchInfo struct {
	// MatchBlocks is the endpoint's match length (package doc, "Match length"); 0 when none.
	MatchBlocks int
	// TotalBlocks is the number of blocks hashed for the request; 0 when the input is shorter than
	// one block or cannot be built.
	TotalBlocks int
	// BlockSizeTokens is the block size the request was hashed with, in tokens.
	BlockSizeTokens int
}

// ProducerParameters are the `parameters` of approx-prefix-cache-producer (and, for old
// configs, of prefix-cache-scorer). JSON names are GIE v1.5.0's.
type ProducerParameters struct {
	// AutoTune (default true): take the block size from the endpoints' CacheBlockSize and each
	// endpoint's LRU capacity from its CacheNumGPUBlocks when they report them.
	AutoTune bool `json:"autoTune"`
	// BlockSizeTokens is the block size in tokens (default 16); > 0 unless AutoTune.
	BlockSizeTokens int `json:"blockSizeTokens"`
	// BlockSize is deprecated (a block size in characters, pre-v1.x). Accepted and ignored with a
	// warning while BlockSizeTokens > 0; an error when BlockSizeTokens ≤ 0 (as GIE v1.5.0).
	BlockSize int `json:"blockSize,omitempty"`
	// MaxPrefixBlocksToMatch caps the hashed blocks per request (default 256, > 0).
	MaxPrefixBlocksToMatch int `json:"maxPrefixBlocksToMatch"`
	// MaxPrefixTokensToMatch, when > 0, replaces the cap with MaxPrefixTokensToMatch /
	// blockSizeTokens blocks (GIE v1.5.0). ≥ 0.
	MaxPrefixTokensToMatch int `json:"maxPrefixTokensToMatch,omitempty"`
	// LRUCapacityPerServer is each endpoint's LRU capacity in blocks (default 31250, > 0) unless
	// AutoTune takes it from the endpoint's CacheNumGPUBlocks.
	LRUCapacityPerServer int `json:"lruCapacityPerServer"`
	// Compat reverts hashing rules to upstream v1.5.0's (HashCompat). It has no JSON name: only the
	// score-parity tool sets it, in Go.
	Compat HashCompat `json:"-"`
}

// DefaultProducerParameters returns the defaults: autoTune true, blockSizeTokens 16,
// maxPrefixBlocksToMatch 256, lruCapacityPerServer 31250.
func DefaultProducerParameters() ProducerParameters {
	return ProducerParameters{
		AutoTune:               true,
		BlockSizeTokens:        DefaultBlockSizeTokens,
		MaxPrefixBlocksToMatch: DefaultMaxPrefixBlocksToMatch,
		LRUCapacityPerServer:   DefaultLRUCapacityPerServer,
	}
}

// Validate returns an error naming the first invalid field, or nil.
func (p ProducerParameters) Validate() error {
	switch {
	case p.BlockSize < 0:
		return fmt.Errorf("parameters.blockSize: must be >= 0, got %d", p.BlockSize)
	case p.BlockSize > 0 && p.BlockSizeTokens <= 0:
		return fmt.Errorf("parameters.blockSize: deprecated (%d characters); set parameters.blockSizeTokens (tokens) instead", p.BlockSize)
	case p.BlockSizeTokens < 0:
		return fmt.Errorf("parameters.blockSizeTokens: must be >= 0, got %d", p.BlockSizeTokens)
	case !p.AutoTune && p.BlockSizeTokens == 0:
		return fmt.Errorf("parameters.blockSizeTokens: must be > 0 when autoTune is false")
	case p.MaxPrefixBlocksToMatch <= 0:
		return fmt.Errorf("parameters.maxPrefixBlocksToMatch: must be > 0, got %d", p.MaxPrefixBlocksToMatch)
	case p.MaxPrefixTokensToMatch < 0:
		return fmt.Errorf("parameters.maxPrefixTokensToMatch: must be >= 0, got %d", p.MaxPrefixTokensToMatch)
	case p.LRUCapacityPerServer <= 0:
		return fmt.Errorf("parameters.lruCapacityPerServer: must be > 0, got %d", p.LRUCapacityPerServer)
	}
	return nil
}

// DecodeProducerParameters decodes raw parameters strictly over the defaults and validates them.
func DecodeProducerParameters(raw json.RawMessage) (ProducerParameters, error) {
	p := DefaultProducerParameters()
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return p, err
	}
	return p, p.Validate()
}

// RequestState is what the producer keeps in plugin state for one request between PrepareData
// and PreRequest.
type RequestState struct {
	// Hashes are the request's block hashes (package doc, "Hashing").
	Hashes []uint64
	// Matches maps Endpoint.Key() to its match length in blocks, at PrepareData time; endpoints
	// with no match are absent.
	Matches map[string]int
	// BlockSizeTokens is the block size the request was hashed with.
	BlockSizeTokens int
}

// Producer is the approx-prefix-cache-producer: a framework.PrepareDataPlugin producing
// PrefixCacheMatchInfoKey and a framework.PreRequest plugin that indexes the pick.
type Producer struct {
	typedName framework.TypedName
	params    ProducerParameters
	index     *Index
	state     *framework.PluginState
	logger    *slog.Logger
	stateKey  string
	endpoints func() []*framework.EndpointMetadata
}

var (
	_ framework.PrepareDataPlugin = (*Producer)(nil)
	_ framework.PreRequest        = (*Producer)(nil)
	_ framework.DataConsumer      = (*Producer)(nil)
)

// ProducerFactory is the framework.FactoryFunc of approx-prefix-cache-producer.
func ProducerFactory(name string, params json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	p, err := DecodeProducerParameters(params)
	if err != nil {
		return nil, err
	}
	return NewProducer(name, p, h)
}

// NewProducer builds a producer. name "" means ProducerType. h must be non-nil and give a
// PluginState; when h.Context() is non-nil the producer starts a sweeper that, every
// DefaultSweepInterval on h.Clock(), removes from the index every endpoint missing from
// h.Endpoints(), and stops when the context is done. Errors: invalid parameters (naming the
// field), nil handle or plugin state.
func NewProducer(name string, params ProducerParameters, h framework.Handle) (*Producer, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("approx-prefix-cache-producer: a framework handle is required")
	}
	if h.PluginState() == nil {
		return nil, errors.New("approx-prefix-cache-producer: the handle has no plugin state")
	}
	if name == "" {
		name = ProducerType
	}
	logger := h.Logger()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Producer{
		typedName: framework.TypedName{Type: ProducerType, Name: name},
		params:    params,
		index:     NewIndex(params.LRUCapacityPerServer),
		state:     h.PluginState(),
		logger:    logger,
		stateKey:  ProducerType + "/" + name,
		endpoints: h.Endpoints,
	}
	if params.BlockSize > 0 {
		logger.Warn("parameter blockSize is deprecated and ignored; blockSizeTokens is used",
			"plugin", p.typedName.String(), "blockSize", params.BlockSize, "blockSizeTokens", params.BlockSizeTokens)
	}
	if ctx := h.Context(); ctx != nil {
		clk := h.Clock()
		if clk == nil {
			clk = clock.RealClock{}
		}
		go p.runSweeper(ctx, clk, DefaultSweepInterval)
	}
	return p, nil
}

// TypedName returns the plugin's type and name.
func (p *Producer) TypedName() framework.TypedName { return p.typedName }

// Produces declares PrefixCacheMatchInfoKey with type *PrefixCacheMatchInfo.
func (p *Producer) Produces() map[string]any {
	return map[string]any{PrefixCacheMatchInfoKey: (*PrefixCacheMatchInfo)(nil)}
}

// Consumes declares nothing: the producer reads only metrics and the request.
func (p *Producer) Consumes() map[string]any { return map[string]any{} }

// Parameters returns the producer's parameters after defaults.
func (p *Producer) Parameters() ProducerParameters { return p.params }

// Index returns the producer's index (for tests, metrics and the equivalence suite).
func (p *Producer) Index() *Index { return p.index }

// StateKey is the plugin-state key under which the producer keeps a request's *RequestState.
func (p *Producer) StateKey() string { return p.stateKey }

// BlockSizeTokens returns the block size, in tokens, a request with these candidates is hashed
// with: with autoTune, the CacheBlockSize of the first endpoint by EndpointMetadata.Name (then
// Key) that reports one; otherwise, or when none does, blockSizeTokens.
func (p *Producer) BlockSizeTokens(endpoints []*framework.Endpoint) int {
	if !p.params.AutoTune {
		return p.params.BlockSizeTokens
	}
	var best *framework.Endpoint
	for _, ep := range endpoints {
		if ep == nil || ep.Metadata == nil || ep.Metrics == nil || ep.Metrics.CacheBlockSize <= 0 {
			continue
		}
		if best == nil || endpointLess(ep, best) {
			best = ep
		}
	}
	if best == nil {
		return p.params.BlockSizeTokens
	}
	return best.Metrics.CacheBlockSize
}

func endpointLess(a, b *framework.Endpoint) bool {
	if c := cmp.Compare(a.Metadata.Name, b.Metadata.Name); c != 0 {
		return c < 0
	}
	return a.Key() < b.Key()
}

// maxBlocks returns the cap on hashed blocks for a block size in tokens.
func (p *Producer) maxBlocks(blockSizeTokens int) int {
	if p.params.MaxPrefixTokensToMatch > 0 && blockSizeTokens > 0 {
		return p.params.MaxPrefixTokensToMatch / blockSizeTokens
	}
	return p.params.MaxPrefixBlocksToMatch
}

// PrepareRequestData hashes the request, matches it against the index, puts a
// *PrefixCacheMatchInfo on every endpoint (zero match included) and writes the request's
// *RequestState to plugin state under StateKey, so PreRequest can index the pick whether or not
// a prefix scorer runs (the fix of GIE PR #2005). A request whose input cannot be hashed gets
// TotalBlocks 0 everywhere; that is not an error. It returns an error only for a nil request or
// a cancelled context.
func (p *Producer) PrepareRequestData(ctx context.Context, req *framework.LLMRequest, endpoints []*framework.Endpoint) error {
	if req == nil {
		return errors.New("approx-prefix-cache-producer: nil request")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	blockSize := p.BlockSizeTokens(endpoints)
	hashes, err := HashRequestCompat(req, blockSize, p.maxBlocks(blockSize), p.params.Compat)
	if err != nil {
		p.logger.Debug("request not hashed for prefix matching", "plugin", p.typedName.String(),
			"requestID", req.RequestID, "reason", err)
	}
	matches := p.index.Match(hashes)
	// One backing array for the request's attributes (one allocation, not one per endpoint);
	// consumers only read them.
	infos := make([]PrefixCacheMatchInfo, len(endpoints))
	for i, ep := range endpoints {
		if ep == nil || ep.Metadata == nil {
			continue
		}
		infos[i] = PrefixCacheMatchInfo{MatchBlocks: matches[ep.Key()], TotalBlocks: len(hashes), BlockSizeTokens: blockSize}
		ep.Put(PrefixCacheMatchInfoKey, &infos[i])
	}
	if req.RequestID == "" {
		p.logger.Warn("request has no ID; its prefix state is not kept and PreRequest will not index it",
			"plugin", p.typedName.String())
		return nil
	}
	p.state.Write(req.RequestID, p.stateKey, &RequestState{Hashes: hashes, Matches: matches, BlockSizeTokens: blockSize})
	return nil
}

// PreRequest adds the request's hashes (from the state PrepareData wrote) to the primary
// profile's first target and, when present, to the first target of the "prefill" profile, then
// deletes the producer's plugin-state entry for the request — on every path, including a
// missing result or missing state (which it logs).
func (p *Producer) PreRequest(_ context.Context, req *framework.LLMRequest, result *framework.SchedulingResult) {
	if req == nil {
		return
	}
	defer p.state.DeleteKey(req.RequestID, p.stateKey)
	primary := result.Primary()
	if primary == nil || len(primary.TargetEndpoints) == 0 || primary.TargetEndpoints[0] == nil {
		return
	}
	v, ok := p.state.Read(req.RequestID, p.stateKey)
	if !ok {
		p.logger.Error("no prefix state for request; the pick is not indexed", "plugin", p.typedName.String(),
			"requestID", req.RequestID)
		return
	}
	st, ok := v.(*RequestState)
	if !ok || st == nil {
		p.logger.Error("prefix state has an unexpected type; the pick is not indexed", "plugin", p.typedName.String(),
			"requestID", req.RequestID, "type", fmt.Sprintf("%T", v))
		return
	}
	p.indexTarget(primary.TargetEndpoints[0], st.Hashes)
	if pr := result.ProfileResults[PrefillProfileName]; pr != nil && result.PrimaryProfileName != PrefillProfileName &&
		len(pr.TargetEndpoints) > 0 && pr.TargetEndpoints[0] != nil {
		p.indexTarget(pr.TargetEndpoints[0], st.Hashes)
	}
}

func (p *Producer) indexTarget(ep *framework.Endpoint, hashes []uint64) {
	if ep.Metadata == nil {
		return
	}
	capacity := p.params.LRUCapacityPerServer
	if p.params.AutoTune && ep.Metrics != nil && ep.Metrics.CacheNumGPUBlocks > 0 {
		capacity = ep.Metrics.CacheNumGPUBlocks
	}
	p.index.Add(ep.Key(), capacity, hashes)
}

// RemoveEndpoint drops an endpoint from the index (a discovery event: the endpoint left).
func (p *Producer) RemoveEndpoint(key string) { p.index.RemoveEndpoint(key) }

// SweepDeparted removes from the index every endpoint that the handle's Endpoints() no longer
// lists, and returns the removed keys, sorted. The sweeper calls it every DefaultSweepInterval.
func (p *Producer) SweepDeparted() []string {
	keep := map[string]struct{}{}
	if p.endpoints != nil {
		for _, md := range p.endpoints() {
			if md != nil {
				keep[md.Key()] = struct{}{}
			}
		}
	}
	gone := p.index.RetainOnly(keep)
	if len(gone) > 0 {
		p.logger.Debug("removed departed endpoints from the prefix index", "plugin", p.typedName.String(),
			"endpoints", slices.Clone(gone))
	}
	return gone
}

func (p *Producer) runSweeper(ctx context.Context, clk clock.WithTicker, every time.Duration) {
	t := clk.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			p.SweepDeparted()
		}
	}
}
