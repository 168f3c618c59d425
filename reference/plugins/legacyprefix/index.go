package legacyprefix

import (
	"slices"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// index is the approximate prefix-cache index of the legacy scorer (SPEC §2.2): for each
// endpoint (keyed by Endpoint.Key(), "ip:port") an LRU of the block hashes that were routed to
// it, and a reverse map block hash → endpoints holding it. Safe for concurrent use.
//
// Ported from upstream multi/prefix/indexer.go (December 2025: hashToPods + podToLRU with a
// per-pod eviction callback). Divergence, deliberate: upstream first adds every hash of a
// request to the LRU and only then records all of them in the reverse map, so a hash evicted
// during the same Add (request longer than the capacity) stays in the reverse map forever. Here
// each hash is inserted into the LRU and the reverse map together, so the reverse map always
// equals the union of the LRUs, as SPEC §2.2 requires.
type index struct {
	mu         sync.RWMutex
	byEndpoint map[string]*simplelru.LRU[uint64, struct{}]
	holders    map[uint64]map[string]struct{}
}

func newIndex() *index {
	return &index{
		byEndpoint: map[string]*simplelru.LRU[uint64, struct{}]{},
		holders:    map[uint64]map[string]struct{}{},
	}
}

// add records hashes, in order, as held by endpoint. The endpoint's LRU is created on its first
// add — even when hashes is empty, as upstream's indexer.Add does (December 2025 and v1.5.0) —
// with the given capacity (block hashes, ≥ 1), which stays fixed from then on. Re-adding a held
// hash refreshes its recency; when the LRU is full the least recently added hash is evicted and
// the endpoint leaves that hash's holders.
func (ix *index) add(endpoint string, capacity int, hashes []uint64) {
	if capacity < 1 {
		capacity = 1
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	cache, ok := ix.byEndpoint[endpoint]
	if !ok {
		// NewLRU only fails for a size < 1, which was ruled out above.
		cache, _ = simplelru.NewLRU(capacity, func(h uint64, _ struct{}) { ix.dropHolder(h, endpoint) })
		ix.byEndpoint[endpoint] = cache
	}
	for _, h := range hashes {
		cache.Add(h, struct{}{})
		set := ix.holders[h]
		if set == nil {
			set = map[string]struct{}{}
			ix.holders[h] = set
		}
		set[endpoint] = struct{}{}
	}
}

// dropHolder removes endpoint from the holders of h. The caller holds ix.mu.
func (ix *index) dropHolder(h uint64, endpoint string) {
	set := ix.holders[h]
	delete(set, endpoint)
	if len(set) == 0 {
		delete(ix.holders, h)
	}
}

// match returns, for every endpoint, how many of the request's leading blocks it holds
// (upstream matchLongestPrefix): blocks are walked from block 0 and the walk stops at the
// first block that no endpoint in the whole index holds; every endpoint holding a walked block
// gets one more. Endpoints with no match are absent from the result.
func (ix *index) match(hashes []uint64) map[string]int {
	res := map[string]int{}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for _, h := range hashes {
		set := ix.holders[h]
		if len(set) == 0 {
			break
		}
		for ep := range set {
			res[ep]++
		}
	}
	return res
}

// remove forgets an endpoint: its LRU and its place in the reverse map.
func (ix *index) remove(endpoint string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	cache, ok := ix.byEndpoint[endpoint]
	if !ok {
		return
	}
	for _, h := range cache.Keys() {
		ix.dropHolder(h, endpoint)
	}
	delete(ix.byEndpoint, endpoint)
}

// endpoints returns the keys of every endpoint that has an LRU, sorted.
func (ix *index) endpoints() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]string, 0, len(ix.byEndpoint))
	for ep := range ix.byEndpoint {
		out = append(out, ep)
	}
	slices.Sort(out)
	return out
}

// contents returns each endpoint's held hashes, sorted ascending. An endpoint whose LRU exists
// but is empty maps to an empty, non-nil slice.
func (ix *index) contents() map[string][]uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make(map[string][]uint64, len(ix.byEndpoint))
	for ep, cache := range ix.byEndpoint {
		keys := cache.Keys()
		if keys == nil {
			keys = []uint64{}
		}
		slices.Sort(keys)
		out[ep] = keys
	}
	return out
}

// holdersOf returns the endpoints holding h, sorted.
func (ix *index) holdersOf(h uint64) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]string, 0, len(ix.holders[h]))
	for ep := range ix.holders[h] {
		out = append(out, ep)
	}
	slices.Sort(out)
	return out
}

// size returns the number of (endpoint, hash) entries.
func (ix *index) size() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	n := 0
	for _, cache := range ix.byEndpoint {
		n += cache.Len()
	}
	return n
}
