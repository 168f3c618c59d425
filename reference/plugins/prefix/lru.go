package prefix

// blockLRU is one endpoint's LRU of block hashes, with the behaviour of
// github.com/hashicorp/golang-lru/v2/simplelru.LRU as Index used it (adding a present hash moves
// it to the front; adding a new hash to a full LRU evicts the least recently used one; Keys lists
// oldest first), but pointer-free and without a lookup map of its own: entries live in one slice
// linked by int32 positions (slots), and which slot holds a hash is kept by the caller — Index
// stores each holder's slot next to its id in the reverse map, so one probe of that map answers
// both "does this endpoint hold h" and "where", instead of a second probe of a per-endpoint map
// (that second map was a third of Index.Add's cost). The eviction callback is replaced by
// insert's results. Not safe for concurrent use (Index locks).
type blockLRU struct {
	capacity int
	entries  []lruEntry // grows up to capacity; a full LRU reuses the evicted entry's slot
	head     int32      // most recently used, -1 when empty
	tail     int32      // least recently used, -1 when empty
}

type lruEntry struct {
	hash       uint64
	prev, next int32 // towards head / towards tail; -1 at the ends
}

// newBlockLRU returns an empty LRU holding at most capacity hashes (capacity ≥ 1).
func newBlockLRU(capacity int) *blockLRU {
	return &blockLRU{capacity: capacity, head: -1, tail: -1}
}

// Len returns the number of hashes held. Every slot in entries is in use: slots are only ever
// added (up to capacity) or reused by insert.
func (l *blockLRU) Len() int { return len(l.entries) }

// insert adds h, which the caller knows is absent, as the most recently used hash and returns its
// slot. When the LRU is full, the least recently used hash is removed first (its slot is reused)
// and returned with evicted true; the caller must forget that hash's slot.
func (l *blockLRU) insert(h uint64) (slot int32, old uint64, evicted bool) {
	if len(l.entries) < l.capacity {
		slot = int32(len(l.entries))
		l.entries = append(l.entries, lruEntry{})
	} else {
		// Full: reuse the least recently used entry's slot (simplelru inserts, then evicts the
		// oldest; the oldest is never h, so the outcome is the same).
		slot = l.tail
		old, evicted = l.entries[slot].hash, true
		l.unlink(slot)
	}
	l.entries[slot] = lruEntry{hash: h, prev: -1, next: l.head}
	if l.head >= 0 {
		l.entries[l.head].prev = slot
	}
	l.head = slot
	if l.tail < 0 {
		l.tail = slot
	}
	return slot, old, evicted
}

// touch makes the hash in slot the most recently used.
func (l *blockLRU) touch(slot int32) {
	if l.head == slot {
		return
	}
	l.unlink(slot)
	l.entries[slot].prev, l.entries[slot].next = -1, l.head
	if l.head >= 0 {
		l.entries[l.head].prev = slot
	}
	l.head = slot
	if l.tail < 0 {
		l.tail = slot
	}
}

// unlink takes entry i out of the list (its slot stays allocated).
func (l *blockLRU) unlink(i int32) {
	e := l.entries[i]
	if e.prev >= 0 {
		l.entries[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next >= 0 {
		l.entries[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
}

// Keys returns the hashes held, least recently used first.
func (l *blockLRU) Keys() []uint64 {
	out := make([]uint64, 0, len(l.entries))
	for i := l.tail; i >= 0; i = l.entries[i].prev {
		out = append(out, l.entries[i].hash)
	}
	return out
}
