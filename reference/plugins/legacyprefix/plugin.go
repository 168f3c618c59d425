// Package legacyprefix is `legacy-prefix-cache-scorer`, eppkit's name for the pre-split upstream
// prefix-cache scorer: one plugin that hashes the prompt, matches it against its own
// approximate index and scores inside Score, keeps its per-request state in cycle state and
// plugin state, and indexes the picked endpoint in PreRequest (SPEC §2.3).
//
// It is an independent port of the December 2025 upstream code path of
// kubernetes-sigs/gateway-api-inference-extension, directory
// pkg/epp/scheduling/framework/plugins/multi/prefix/ (plugin.go: Config, Score, PreRequest,
// matchLongestPrefix, hashPrompt, getUserInputBytes, getBlockSize, makeServer,
// CleanUpInactivePods; indexer.go: hashToPods + per-pod LRU). It shares no code with
// reference/plugins/prefix: its hashing (hash.go), index (index.go) and matching are its own, so
// that the equivalence suite (suites/equivalence) compares two implementations, not one.
//
// Deliberate divergences from the December 2025 code, each because SPEC §2 (which follows
// upstream v1.5.0 or fixes upstream) is the law for the equivalence rule:
//   - Endpoint identity is Endpoint.Key() ("ip:port"), not the pod's NamespacedName, as
//     everywhere in the eppkit framework.
//   - Chat requests are hashed over the messages re-encoded as v1.5.0's typed messages
//     (hash.go); completions over the prompt with arrays joined as v1.5.0 does.
//   - With autoTune the block size comes from the first candidate, by endpoint name (then key),
//     that reports vllm:cache_config_info{block_size}; upstream took endpoints[0] whether or not
//     it reported one.
//   - The index keeps its reverse map consistent on eviction (index.go).
//   - PreRequest indexes synchronously (upstream used a goroutine and a WaitGroup), and
//     tolerates a result without targets (upstream December 2025 indexed [0] unconditionally).
//   - PreRequest deletes only this plugin's plugin-state entry: eppkit's plugin state is shared
//     by all plugins, while upstream's monolith owned its store and deleted the whole request.
//   - Departed endpoints are purged by PurgeDeparted (a periodic sweep on the handle's clock,
//     every PurgeInterval, as upstream's CleanUpInactivePods every 2 min) and on demand by
//     RemoveEndpoint / PurgeDeparted for discovery events.
//
// Where December 2025 and v1.5.0 agree and this port follows both: the hash chain and the
// unhashed trailing partial block; the match walk that stops at the first block no endpoint in
// the whole index holds and counts, per endpoint, the walked blocks it holds (so blocks after an
// evicted one count while another endpoint bridges the gap); an endpoint's LRU created on its
// first add even with no hashes; the prefill profile's target indexed too.
//
// Differences between December 2025 and v1.5.0 that this port does NOT take from v1.5.0:
//   - A config with only the deprecated blockSize (characters) is refused, as December 2025's
//     New did; v1.5.0 defaults blockSizeTokens to 16 first, so it silently ignores blockSize.
//   - v1.5.0 moved hashing, matching and indexing into the approx-prefix-cache-producer
//     (PrepareData) and left a thin scorer; this package keeps the monolith shape on purpose.
//   - v1.5.0 adds maxPrefixTokensToMatch; the monolith has only maxPrefixBlocksToMatch.
//   - v1.5.0's makeserver sizes a new endpoint's LRU with the built-in default 31250 instead of
//     lruCapacityPerServer when autoTune supplies no num_gpu_blocks (an upstream defect); this
//     port uses lruCapacityPerServer, as December 2025 did and SPEC §2.2 says.
package legacyprefix

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/eppkit/eppkit/reference/framework"
)

// PluginType is the registered type name.
const PluginType = "legacy-prefix-cache-scorer"

// PrefillProfile is the profile name whose first target PreRequest also indexes (upstream's
// Experimental_DefaultPrefillProfile for P/D disaggregation, GIE issue #2080).
const PrefillProfile = "prefill"

// PurgeInterval is how often departed endpoints are swept from the index (upstream
// PodActiveCheckInterval).
const PurgeInterval = 2 * time.Minute

// State is what Score computes for one request and PreRequest consumes. It is written to cycle
// state and to plugin state under StateKey().
type State struct {
	// Hashes are the request's block hashes, block 0 first.
	Hashes []uint64
	// Matches maps endpoint key to its match length in blocks (absent = 0).
	Matches map[string]int
	// BlockSizeTokens is the block size the hashes were computed with, in tokens.
	BlockSizeTokens int
}

// Plugin is the legacy prefix-cache scorer. Create it with New or through the registry.
type Plugin struct {
	typed  framework.TypedName
	cfg    Config
	handle framework.Handle
	logger *slog.Logger
	idx    *index
}

var (
	_ framework.Scorer     = (*Plugin)(nil)
	_ framework.PreRequest = (*Plugin)(nil)
)

// Register adds the `legacy-prefix-cache-scorer` factory to reg. It panics when the type is
// already registered (a programming error in static registration).
func Register(reg *framework.Registry) {
	reg.MustRegister(PluginType, Factory)
}

// Factory builds the plugin from its raw `parameters` (see ParseConfig for the fields and the
// errors). When h has a context, a goroutine purges departed endpoints every PurgeInterval on
// h's clock until the context is cancelled.
func Factory(name string, params json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	cfg, err := ParseConfig(params)
	if err != nil {
		return nil, err
	}
	p := New(name, cfg, h)
	if h != nil && h.Context() != nil && h.Clock() != nil {
		go p.runPurge(h.Context())
	}
	return p, nil
}

// New returns a plugin with an already validated config. name "" means PluginType. h may be nil
// in unit tests; then plugin state is not written and nothing is purged automatically.
func New(name string, cfg Config, h framework.Handle) *Plugin {
	if name == "" {
		name = PluginType
	}
	logger := slog.New(slog.DiscardHandler)
	if h != nil && h.Logger() != nil {
		logger = h.Logger()
	}
	return &Plugin{
		typed:  framework.TypedName{Type: PluginType, Name: name},
		cfg:    cfg,
		handle: h,
		logger: logger.With("plugin", name+"/"+PluginType),
		idx:    newIndex(),
	}
}

// TypedName returns the plugin's type and instance name.
func (p *Plugin) TypedName() framework.TypedName { return p.typed }

// Config returns the effective configuration (defaults applied).
func (p *Plugin) Config() Config { return p.cfg }

// StateKey is the cycle-state and plugin-state key of this instance: "name/type".
func (p *Plugin) StateKey() string { return p.typed.String() }

// Score hashes the request, matches the hashes against the index and scores each candidate
// with matchBlocks / totalBlocks in [0,1] (0 for every candidate when the request has no full
// block). It writes the State to cycle state and to plugin state (for PreRequest). A chat body
// whose content cannot be encoded is logged and scores 0 everywhere.
func (p *Plugin) Score(_ context.Context, cycle *framework.CycleState, req *framework.LLMRequest, endpoints []*framework.Endpoint) map[string]float64 {
	bs := p.blockSizeTokens(endpoints)
	hashes, err := hashPrompt(req, bs, p.cfg.MaxPrefixBlocksToMatch)
	if err != nil {
		p.logger.Debug("prefix hashing skipped", "requestID", requestID(req), "error", err)
	}
	st := &State{Hashes: hashes, Matches: p.idx.match(hashes), BlockSizeTokens: bs}
	if cycle != nil {
		cycle.Write(p.StateKey(), st)
	}
	if p.handle != nil && p.handle.PluginState() != nil && req != nil {
		p.handle.PluginState().Write(req.RequestID, p.StateKey(), st)
	}

	scores := make(map[string]float64, len(endpoints))
	total := len(hashes)
	for _, ep := range endpoints {
		key := ep.Key()
		if total == 0 {
			scores[key] = 0
			continue
		}
		scores[key] = float64(st.Matches[key]) / float64(total)
	}
	return scores
}

// PreRequest adds the request's hashes to the index of the primary profile's first target and,
// when a `prefill` profile picked one, of that target too; then it deletes its plugin-state
// entry. Indexing is synchronous: the index reflects the request when PreRequest returns.
// Without a State from Score (Score did not run) nothing is indexed.
func (p *Plugin) PreRequest(_ context.Context, req *framework.LLMRequest, result *framework.SchedulingResult) {
	if req == nil || p.handle == nil || p.handle.PluginState() == nil {
		return
	}
	ps := p.handle.PluginState()
	defer ps.DeleteKey(req.RequestID, p.StateKey())
	v, ok := ps.Read(req.RequestID, p.StateKey())
	if !ok {
		p.logger.Debug("no prefix state for request; nothing indexed", "requestID", req.RequestID)
		return
	}
	st, ok := v.(*State)
	if !ok {
		p.logger.Error("prefix state has an unexpected type; nothing indexed", "requestID", req.RequestID, "type", fmt.Sprintf("%T", v))
		return
	}
	for _, ep := range indexTargets(result) {
		p.idx.add(ep.Key(), p.capacityFor(ep), st.Hashes)
	}
}

// indexTargets returns the endpoints PreRequest indexes: the primary profile's first target,
// then the prefill profile's first target when present.
func indexTargets(result *framework.SchedulingResult) []*framework.Endpoint {
	if result == nil {
		return nil
	}
	var out []*framework.Endpoint
	if pr := result.Primary(); pr != nil && len(pr.TargetEndpoints) > 0 && pr.TargetEndpoints[0] != nil {
		out = append(out, pr.TargetEndpoints[0])
	}
	if pf, ok := result.ProfileResults[PrefillProfile]; ok && pf != nil && len(pf.TargetEndpoints) > 0 && pf.TargetEndpoints[0] != nil {
		out = append(out, pf.TargetEndpoints[0])
	}
	return out
}

// capacityFor is the LRU capacity a new endpoint gets: its num_gpu_blocks with autoTune when it
// reports one, else lruCapacityPerServer (upstream makeServer, December 2025).
func (p *Plugin) capacityFor(ep *framework.Endpoint) int {
	if p.cfg.AutoTune && ep.Metrics != nil && ep.Metrics.CacheNumGPUBlocks > 0 {
		return ep.Metrics.CacheNumGPUBlocks
	}
	return p.cfg.LRUCapacityPerServer
}

// blockSizeTokens is the configured block size, or with autoTune the block_size reported by
// the first candidate by endpoint name (ties by key) that reports one (SPEC §2.1).
func (p *Plugin) blockSizeTokens(endpoints []*framework.Endpoint) int {
	if !p.cfg.AutoTune {
		return p.cfg.BlockSizeTokens
	}
	var best *framework.Endpoint
	for _, ep := range endpoints {
		if ep == nil || ep.Metrics == nil || ep.Metrics.CacheBlockSize <= 0 {
			continue
		}
		if best == nil || ep.Metadata.Name < best.Metadata.Name ||
			(ep.Metadata.Name == best.Metadata.Name && ep.Key() < best.Key()) {
			best = ep
		}
	}
	if best == nil {
		return p.cfg.BlockSizeTokens
	}
	return best.Metrics.CacheBlockSize
}

// RemoveEndpoint forgets everything the index holds for an endpoint key ("ip:port"). Call it
// on a discovery event that removed the endpoint from the pool.
func (p *Plugin) RemoveEndpoint(key string) { p.idx.remove(key) }

// PurgeDeparted removes from the index every endpoint that is no longer in the pool
// (Handle.Endpoints) and returns their keys, sorted. With no handle it does nothing.
func (p *Plugin) PurgeDeparted() []string {
	if p.handle == nil {
		return nil
	}
	live := map[string]struct{}{}
	for _, md := range p.handle.Endpoints() {
		if md != nil {
			live[md.Key()] = struct{}{}
		}
	}
	var gone []string
	for _, ep := range p.idx.endpoints() {
		if _, ok := live[ep]; !ok {
			p.idx.remove(ep)
			gone = append(gone, ep)
		}
	}
	if len(gone) > 0 {
		p.logger.Debug("purged departed endpoints from the prefix index", "endpoints", gone)
	}
	return gone
}

func (p *Plugin) runPurge(ctx context.Context) {
	t := p.handle.Clock().NewTicker(PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			p.PurgeDeparted()
		}
	}
}

// IndexContents returns, for tests, the block hashes the index holds per endpoint key, each
// list sorted ascending. An endpoint indexed with no hashes maps to an empty list.
func (p *Plugin) IndexContents() map[string][]uint64 { return p.idx.contents() }

// IndexedEndpoints returns, for tests, the endpoint keys the index has an LRU for, sorted.
func (p *Plugin) IndexedEndpoints() []string { return p.idx.endpoints() }

// IndexSize returns the number of (endpoint, block hash) entries in the index.
func (p *Plugin) IndexSize() int { return p.idx.size() }

// Holders returns, for tests, the endpoint keys the reverse map lists for a block hash, sorted.
func (p *Plugin) Holders(hash uint64) []string { return p.idx.holdersOf(hash) }

// HashRequest returns, for tests and tools, the block hashes Score would compute for req with
// the given block size in tokens and this plugin's maxPrefixBlocksToMatch.
func (p *Plugin) HashRequest(req *framework.LLMRequest, blockSizeTokens int) ([]uint64, error) {
	return hashPrompt(req, blockSizeTokens, p.cfg.MaxPrefixBlocksToMatch)
}

func requestID(req *framework.LLMRequest) string {
	if req == nil {
		return ""
	}
	return req.RequestID
}
