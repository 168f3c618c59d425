package prefix

import (
	"slices"
	"sync"
)

// DefaultLRUCapacityPerServer is the default number of block hashes the index keeps per endpoint
// (GIE v1.5.0 approximateprefix/types.go defaultLRUCapacityPerServer: 31,250 blocks ≈ 500K tokens
// of a Llama-3-8B KV cache on an H100 at 16 tokens per block).
const DefaultLRUCapacityPerServer = 31250

// Index is the approximate view of which endpoint holds which prefix block (SPEC §2.2): per
// endpoint (identified by Endpoint.Key(), "ip:port") an LRU of block hashes, and a reverse map
// hash → endpoints that the LRUs' eviction callbacks keep equal to the union of the LRUs.
// Indexing is synchronous: when Add returns, Match sees the hashes. Safe for concurrent use.
//
// Inside, endpoints are small integer ids and the reverse map holds, inline in its map value,
// the ids of a hash's holders and the slot each holder's LRU keeps it in (up to inlineHolders of
// them; a hash held by more endpoints keeps them in a small overflow map): a request adds one
// entry per block and the index holds up to capacity × endpoints of them, so the reverse map has
// no pointer for the garbage collector to scan and no allocation per hash, and one probe of it
// tells Add whether the endpoint holds the hash and where. The per-endpoint LRUs are blockLRU,
// which behaves as golang-lru's simplelru.LRU did here (a differential test checks it) but is
// pointer-free too: with simplelru's list element per entry, a full index kept millions of
// pointers live and the collector's marking of them was the largest cost of a decision.
type Index struct {
	defaultCapacity int

	mu      sync.RWMutex
	lrus    map[string]*blockLRU
	caps    map[string]int
	ids     map[string]int32 // endpoint key → id, for every endpoint with an LRU
	names   []string         // id → endpoint key ("" for a free id)
	free    []int32          // ids of removed endpoints, reused by the next new endpoint
	holders map[uint64]holderSet
	// overflow holds the holders of every hash whose holderSet has n > inlineHolders.
	overflow map[uint64][]holderRef
}

// inlineHolders is how many holders a hash's reverse-map value holds inline. With 3 the value is
// 28 bytes; a hash held by more endpoints (a shared system prompt) is rare enough that its
// holders go to Index.overflow.
const inlineHolders = 3

// holderSet is the reverse-map value of one hash: the number of endpoints holding it and, when
// n ≤ inlineHolders, their ids with, at the same index, the slot of the hash in that endpoint's
// LRU (in no particular order). Pointer-free, so the map is not scanned by the garbage collector.
type holderSet struct {
	n     int32
	ids   [inlineHolders]int32
	slots [inlineHolders]int32
}

// holderRef is one holder of a hash in Index.overflow: the endpoint's id and the hash's slot in
// its LRU.
type holderRef struct {
	id, slot int32
}

// holdersLocked returns a new slice of the ids holding h (nil when none). Only the diagnostic
// views (Holders, ReverseMap) use it; Add and Match read the holder sets in place.
func (ix *Index) holdersLocked(h uint64) []int32 {
	v, ok := ix.holders[h]
	if !ok {
		return nil
	}
	if v.n <= inlineHolders {
		return slices.Clone(v.ids[:v.n])
	}
	ids := make([]int32, 0, len(ix.overflow[h]))
	for _, r := range ix.overflow[h] {
		ids = append(ids, r.id)
	}
	return ids
}

// slotOf returns the slot of h in endpoint id's LRU when id holds h; v is ix.holders[h].
func (ix *Index) slotOf(h uint64, v holderSet, id int32) (int32, bool) {
	if v.n <= inlineHolders {
		for i := range v.n {
			if v.ids[i] == id {
				return v.slots[i], true
			}
		}
		return 0, false
	}
	for _, r := range ix.overflow[h] {
		if r.id == id {
			return r.slot, true
		}
	}
	return 0, false
}

// addHolderLocked records that endpoint id holds h (which it did not) in slot of its LRU; v is
// ix.holders[h] as read before any change to the index since.
func (ix *Index) addHolderLocked(h uint64, v holderSet, id, slot int32) {
	switch {
	case v.n < inlineHolders:
		v.ids[v.n], v.slots[v.n] = id, slot
	case v.n == inlineHolders:
		set := make([]holderRef, 0, 2*inlineHolders)
		for i := range v.ids {
			set = append(set, holderRef{v.ids[i], v.slots[i]})
		}
		ix.overflow[h] = append(set, holderRef{id, slot})
		v.ids, v.slots = [inlineHolders]int32{}, [inlineHolders]int32{}
	default:
		ix.overflow[h] = append(ix.overflow[h], holderRef{id, slot})
	}
	v.n++
	ix.holders[h] = v
}

// NewIndex returns an empty index whose endpoints get defaultCapacity entries unless Add is given
// a capacity. defaultCapacity ≤ 0 means DefaultLRUCapacityPerServer.
func NewIndex(defaultCapacity int) *Index {
	if defaultCapacity <= 0 {
		defaultCapacity = DefaultLRUCapacityPerServer
	}
	return &Index{
		defaultCapacity: defaultCapacity,
		lrus:            map[string]*blockLRU{},
		caps:            map[string]int{},
		ids:             map[string]int32{},
		holders:         map[uint64]holderSet{},
		overflow:        map[uint64][]holderRef{},
	}
}

// idLocked returns endpoint's id, assigning one (a free one first) when it has none.
func (ix *Index) idLocked(endpoint string) int32 {
	if id, ok := ix.ids[endpoint]; ok {
		return id
	}
	var id int32
	if n := len(ix.free); n > 0 {
		id, ix.free = ix.free[n-1], ix.free[:n-1]
		ix.names[id] = endpoint
	} else {
		id = int32(len(ix.names))
		ix.names = append(ix.names, endpoint)
	}
	ix.ids[endpoint] = id
	return id
}

// Add records that endpoint holds hashes, inserting them in order (so block 0 is the least
// recently used of the request and is evicted first, as in GIE v1.5.0). capacity is used only
// when this is the endpoint's first Add (≤ 0 means the index default); afterwards the
// endpoint's capacity stays fixed. As in GIE v1.5.0 indexer.Add, the first Add creates the
// endpoint's LRU even when hashes is empty.
func (ix *Index) Add(endpoint string, capacity int, hashes []uint64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	l, ok := ix.lrus[endpoint]
	id := ix.idLocked(endpoint)
	if !ok {
		if capacity <= 0 {
			capacity = ix.defaultCapacity
		}
		l = newBlockLRU(capacity)
		ix.lrus[endpoint] = l
		ix.caps[endpoint] = capacity
	}
	for _, h := range hashes {
		v := ix.holders[h]
		if slot, held := ix.slotOf(h, v, id); held {
			l.touch(slot)
			continue
		}
		slot, old, evicted := l.insert(h)
		if evicted {
			// The least recently used hash (never h: h was not in this LRU) leaves the reverse
			// map too, so both stay equal. Its entry is another key, so v is still current.
			ix.dropHolderLocked(old, id)
		}
		ix.addHolderLocked(h, v, id, slot)
	}
}

// dropHolderLocked removes endpoint id from the holders of h. Called with ix.mu held, for every
// hash an LRU evicts (Add) or drops (RemoveEndpoint).
func (ix *Index) dropHolderLocked(h uint64, id int32) {
	v, ok := ix.holders[h]
	if !ok {
		return
	}
	if v.n <= inlineHolders {
		i := slices.Index(v.ids[:v.n], id)
		if i < 0 {
			return
		}
		if v.n == 1 {
			delete(ix.holders, h)
			return
		}
		v.n--
		v.ids[i], v.ids[v.n] = v.ids[v.n], 0
		v.slots[i], v.slots[v.n] = v.slots[v.n], 0
		ix.holders[h] = v
		return
	}
	set := ix.overflow[h]
	i := slices.IndexFunc(set, func(r holderRef) bool { return r.id == id })
	if i < 0 {
		return
	}
	set[i] = set[len(set)-1]
	set = set[:len(set)-1]
	v.n = int32(len(set))
	if len(set) <= inlineHolders {
		for j, r := range set {
			v.ids[j], v.slots[j] = r.id, r.slot
		}
		delete(ix.overflow, h)
	} else {
		ix.overflow[h] = set
	}
	ix.holders[h] = v
}

// Match returns, for every endpoint holding at least one of the leading blocks, its match length
// in blocks: walking hashes from block 0 and stopping at the first hash no endpoint in the whole
// index holds, the number of hashes before that point the endpoint holds (GIE v1.5.0
// matchLongestPrefix). Endpoints with no match are absent from the map.
func (ix *Index) Match(hashes []uint64) map[string]int {
	res := map[string]int{}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var counts []int32 // by id, allocated at the first held block
	var touched []int32
	count := func(id int32) {
		if counts[id] == 0 {
			touched = append(touched, id)
		}
		counts[id]++
	}
	for _, h := range hashes {
		v, ok := ix.holders[h]
		if !ok {
			break
		}
		if counts == nil {
			counts = make([]int32, len(ix.names))
		}
		if v.n <= inlineHolders {
			for _, id := range v.ids[:v.n] {
				count(id)
			}
			continue
		}
		for _, r := range ix.overflow[h] {
			count(r.id)
		}
	}
	for _, id := range touched {
		res[ix.names[id]] = int(counts[id])
	}
	return res
}

// MatchLen returns Match(hashes)[endpoint].
func (ix *Index) MatchLen(hashes []uint64, endpoint string) int {
	n := 0
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	id, known := ix.ids[endpoint]
	for _, h := range hashes {
		v, ok := ix.holders[h]
		if !ok {
			break
		}
		if _, held := ix.slotOf(h, v, id); known && held {
			n++
		}
	}
	return n
}

// RemoveEndpoint forgets an endpoint: its LRU and every reverse-map entry that names it.
// Removing an unknown endpoint is a no-op.
func (ix *Index) RemoveEndpoint(endpoint string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	l, ok := ix.lrus[endpoint]
	if !ok {
		return
	}
	id := ix.ids[endpoint] // every endpoint with an LRU has an id
	for _, e := range l.entries {
		ix.dropHolderLocked(e.hash, id)
	}
	delete(ix.lrus, endpoint)
	delete(ix.caps, endpoint)
	if id, ok := ix.ids[endpoint]; ok {
		delete(ix.ids, endpoint)
		ix.names[id] = ""
		ix.free = append(ix.free, id)
	}
}

// RetainOnly removes every endpoint not in keep and returns the removed keys, sorted.
func (ix *Index) RetainOnly(keep map[string]struct{}) []string {
	var gone []string
	for _, ep := range ix.Endpoints() {
		if _, ok := keep[ep]; !ok {
			gone = append(gone, ep)
		}
	}
	for _, ep := range gone {
		ix.RemoveEndpoint(ep)
	}
	return gone
}

// Endpoints returns the keys of the endpoints the index tracks, sorted.
func (ix *Index) Endpoints() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]string, 0, len(ix.lrus))
	for ep := range ix.lrus {
		out = append(out, ep)
	}
	slices.Sort(out)
	return out
}

// Capacity returns the LRU capacity (in blocks) fixed for endpoint at its first insert, and
// whether the index tracks the endpoint.
func (ix *Index) Capacity(endpoint string) (int, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	c, ok := ix.caps[endpoint]
	return c, ok
}

// Contents returns a copy of every tracked endpoint's block hashes, each list sorted ascending;
// an endpoint whose LRU is empty maps to an empty, non-nil slice. Meant for tests and the
// equivalence suite.
func (ix *Index) Contents() map[string][]uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make(map[string][]uint64, len(ix.lrus))
	for ep, l := range ix.lrus {
		keys := l.Keys()
		if keys == nil {
			keys = []uint64{}
		}
		slices.Sort(keys)
		out[ep] = keys
	}
	return out
}

// Holders returns the endpoints that hold hash h according to the reverse map, sorted.
func (ix *Index) Holders(h uint64) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	set := ix.holdersLocked(h)
	out := make([]string, 0, len(set))
	for _, id := range set {
		out = append(out, ix.names[id])
	}
	slices.Sort(out)
	return out
}

// ReverseMap returns a copy of the reverse map hash → endpoints (each list sorted). With
// Contents it lets tests check that the two views agree.
func (ix *Index) ReverseMap() map[uint64][]string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make(map[uint64][]string, len(ix.holders))
	for h := range ix.holders {
		set := ix.holdersLocked(h)
		eps := make([]string, 0, len(set))
		for _, id := range set {
			eps = append(eps, ix.names[id])
		}
		slices.Sort(eps)
		out[h] = eps
	}
	return out
}

// Size returns the total number of (endpoint, hash) entries over all LRUs.
func (ix *Index) Size() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	n := 0
	for _, l := range ix.lrus {
		n += l.Len()
	}
	return n
}

// Flush is a barrier for callers written against an asynchronous index. Indexing here is
// synchronous, so it returns at once; after any Add has returned its hashes are visible.
func (ix *Index) Flush() {}
