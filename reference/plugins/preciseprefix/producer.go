package preciseprefix

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

// reconcileInterval is how often the producer compares its subscribers with the pool's
// endpoints (Handle.Endpoints) to start new ones and stop those of departed endpoints.
const reconcileInterval = time.Second

// MatchInfoKey is the data key a precise producer named name writes its
// *prefix.PrefixCacheMatchInfo under: "PrefixCacheMatchInfo/<name>" (upstream qualifies the key
// by the producer's name, and prefix-cache-scorer's prefixMatchInfoProducerName selects it).
func MatchInfoKey(name string) string { return prefix.MatchInfoKeyFor(name) }

// Producer is the precise-prefix-cache-producer (package doc).
type Producer struct {
	typedName framework.TypedName
	params    Parameters
	key       string
	index     *Index
	log       *slog.Logger
	clk       clock.WithTicker
	ctx       context.Context
	endpoints func() []*framework.EndpointMetadata

	mu   sync.Mutex
	subs map[string]*subscriber // by endpoint key

	scratch sync.Pool
}

type scratch struct {
	ids  []uint32
	keys []uint64
	buf  []byte
	eps  []string
	n    []int
}

var _ framework.PrepareDataPlugin = (*Producer)(nil)

// Factory is the framework.FactoryFunc of precise-prefix-cache-producer.
func Factory(name string, raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	p, err := DecodeParameters(raw)
	if err != nil {
		return nil, err
	}
	return New(name, p, h)
}

// Register adds precise-prefix-cache-producer to reg.
func Register(reg *framework.Registry) error { return reg.Register(PluginType, Factory) }

// New builds a producer (name "" means PluginType). With h.Context() set it reconciles its
// subscribers with h.Endpoints() every second until the context ends, when every subscriber
// stops; without a context subscribers start only for request candidates and stop on Close.
func New(name string, params Parameters, h framework.Handle) (*Producer, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New(PluginType + ": a framework handle is required")
	}
	if name == "" {
		name = PluginType
	}
	log := h.Logger()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	clk := h.Clock()
	if clk == nil {
		clk = clock.RealClock{}
	}
	ctx := h.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	p := &Producer{typedName: framework.TypedName{Type: PluginType, Name: name}, params: params,
		key: MatchInfoKey(name), index: NewIndex(), log: log.With("plugin", PluginType+"/"+name), clk: clk, ctx: ctx,
		endpoints: h.Endpoints, subs: map[string]*subscriber{}}
	p.scratch.New = func() any { return &scratch{} }
	if len(params.IndexerConfig) > 0 {
		p.log.Warn("parameters.indexerConfig is accepted and ignored: the reference's index is in memory")
	}
	if h.Context() != nil {
		go p.reconcileLoop()
	}
	return p, nil
}

// TypedName returns the plugin's type and name.
func (p *Producer) TypedName() framework.TypedName { return p.typedName }

// Produces declares MatchInfoKey(name) with type *prefix.PrefixCacheMatchInfo.
func (p *Producer) Produces() map[string]any {
	return map[string]any{p.key: (*prefix.PrefixCacheMatchInfo)(nil)}
}

// Consumes declares nothing.
func (p *Producer) Consumes() map[string]any { return map[string]any{} }

// Index is the producer's block index (tests read it).
func (p *Producer) Index() *Index { return p.index }

// Key is the data key the producer writes.
func (p *Producer) Key() string { return p.key }

// Subscribed returns the endpoint keys the producer follows.
func (p *Producer) Subscribed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.subs))
	for k := range p.subs {
		out = append(out, k)
	}
	return out
}

// rankIndex is the data-parallel rank of an endpoint named "<pod>-rank-<i>", else 0.
func rankIndex(md *framework.EndpointMetadata) int {
	_, r, ok := strings.Cut(md.Name, "-rank-")
	if !ok {
		return 0
	}
	i, err := strconv.Atoi(r)
	if err != nil || i < 0 {
		return 0
	}
	return i
}

// ensure starts the subscriber of md unless it has one.
func (p *Producer) ensure(md *framework.EndpointMetadata) {
	if md == nil || md.Address == "" {
		return
	}
	key := md.Key()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.subs[key]; ok || p.ctx.Err() != nil {
		return
	}
	pd := p.params.KVEventsConfig.PodDiscoveryConfig
	rank := rankIndex(md)
	s := &subscriber{ep: key, endpoint: "tcp://" + net.JoinHostPort(md.Address, strconv.Itoa(pd.SocketPort+rank)),
		topicFilter: p.params.KVEventsConfig.TopicFilter, seed: p.params.TokenProcessorConfig.HashSeed,
		index: p.index, log: p.log, clk: p.clk, done: make(chan struct{})}
	if pd.ReplaySocketPort > 0 {
		s.replay = "tcp://" + net.JoinHostPort(md.Address, strconv.Itoa(pd.ReplaySocketPort+rank))
	}
	ctx, cancel := context.WithCancel(p.ctx)
	s.cancel = cancel
	p.subs[key] = s
	go s.run(ctx)
}

// stop ends the subscriber of key and forgets its blocks.
func (p *Producer) stop(key string) {
	p.mu.Lock()
	s := p.subs[key]
	delete(p.subs, key)
	p.mu.Unlock()
	if s != nil {
		s.cancel()
		<-s.done
	}
	p.index.Clear(key)
}

// Reconcile subscribes to every endpoint h.Endpoints() lists and drops the others.
func (p *Producer) Reconcile() {
	if p.endpoints == nil {
		return
	}
	keep := map[string]bool{}
	for _, md := range p.endpoints() {
		if md == nil {
			continue
		}
		keep[md.Key()] = true
		p.ensure(md)
	}
	for _, k := range p.Subscribed() {
		if !keep[k] {
			p.stop(k)
		}
	}
}

func (p *Producer) reconcileLoop() {
	t := p.clk.NewTicker(reconcileInterval)
	defer t.Stop()
	p.Reconcile()
	for {
		select {
		case <-p.ctx.Done():
			p.Close()
			return
		case <-t.C():
			p.Reconcile()
		}
	}
}

// Close stops every subscriber.
func (p *Producer) Close() {
	for _, k := range p.Subscribed() {
		p.stop(k)
	}
}

// requestTokens returns the token ids of a request the producer can key: a completions prompt,
// as text (Tokenize) or token ids; ok is false for other APIs.
func requestTokens(req *framework.LLMRequest, dst []uint32) (ids []uint32, salt string, ok bool) {
	if req.Body == nil || req.Body.Completions == nil {
		return dst, "", false
	}
	c := req.Body.Completions
	if c.TokenIDs != nil {
		return append(dst, c.TokenIDs...), c.CacheSalt, true
	}
	return Tokenize(dst, c.Prompt), c.CacheSalt, true
}

// PrepareRequestData keys the request's full blocks and puts a *prefix.PrefixCacheMatchInfo
// on every candidate (MatchBlocks = the leading blocks the endpoint's events say it holds); a
// request it cannot key gets TotalBlocks 0. It starts the subscribers of candidates it does not
// follow yet. Errors: a nil request or a cancelled context.
func (p *Producer) PrepareRequestData(ctx context.Context, req *framework.LLMRequest, endpoints []*framework.Endpoint) error {
	if req == nil {
		return errors.New(PluginType + ": nil request")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sc := p.scratch.Get().(*scratch)
	defer p.scratch.Put(sc)
	bs := p.params.TokenProcessorConfig.BlockSizeTokens
	sc.keys = sc.keys[:0]
	ids, salt, ok := requestTokens(req, sc.ids[:0])
	sc.ids = ids
	if ok {
		var root uint64
		lora := "" // the base model: one engine serves one, its blocks carry no adapter
		if p.index.IsAdapter(req.TargetModel) {
			lora = req.TargetModel
		}
		root, sc.buf = rootKey(p.params.TokenProcessorConfig.HashSeed, lora, salt, sc.buf)
		sc.keys, sc.buf = appendKeys(sc.keys, root, ids, bs, sc.buf)
	}
	sc.eps = sc.eps[:0]
	for _, ep := range endpoints {
		key := ""
		if ep != nil && ep.Metadata != nil {
			key = ep.Key()
		}
		sc.eps = append(sc.eps, key)
	}
	if cap(sc.n) < len(endpoints) {
		sc.n = make([]int, len(endpoints))
	}
	sc.n = sc.n[:len(endpoints)]
	p.index.Match(sc.keys, sc.eps, sc.n)
	infos := make([]prefix.PrefixCacheMatchInfo, len(endpoints))
	var missing []*framework.EndpointMetadata
	p.mu.Lock()
	for i, ep := range endpoints {
		if sc.eps[i] == "" {
			continue
		}
		infos[i] = prefix.PrefixCacheMatchInfo{MatchBlocks: sc.n[i], TotalBlocks: len(sc.keys), BlockSizeTokens: bs}
		ep.Put(p.key, &infos[i])
		if _, ok := p.subs[sc.eps[i]]; !ok {
			missing = append(missing, ep.Metadata)
		}
	}
	p.mu.Unlock()
	for _, md := range missing {
		p.ensure(md)
	}
	return nil
}
