package prefix

// blockLRU is one endpoint's LRU of block hashes, with the behaviour of
// github.com/hashicorp/golang-lru/v2/simplelru.LRU as Index used it (Add moves a present hash to
// the front; adding a new hash to a full LRU evicts the least recently used one; Keys lists
// oldest first), but pointer-free: entries live in one slice linked by int32 positions and the
// lookup map is map[uint64]int32, so an index of millions of entries gives the garbage collector
// nothing to scan and costs no allocation per entry. The eviction callback is replaced by add's
// results; Index removes the evicted hash from its reverse map. Not safe for concurrent use
// (Index locks).
type blockLRU struct {
	capacity int
	pos      map[uint64]int32 // hash → index in entries
	entries  []lruEntry       // grows up to capacity; a full LRU reuses the evicted entry's slot
	head     int32            // most recently used, -1 when empty
	tail     int32            // least recently used, -1 when empty
}

type lruEntry struct {
	hash       uint64
	prev, next int32 // towards head / towards tail; -1 at the ends
}

// newBlockLRU returns an empty LRU holding at most capacity hashes (capacity ≥ 1).
func newBlockLRU(capacity int) *blockLRU {
	return &blockLRU{capacity: capacity, pos: map[uint64]int32{}, head: -1, tail: -1}
}

// Len returns the number of hashes held.
func (l *blockLRU) Len() int { return len(l.pos) }

// add makes h the most recently used hash, inserting it when absent. When the insert overflows
// the capacity, the least recently used hash is removed and returned with evicted true.
func (l *blockLRU) add(h uint64) (old uint64, evicted bool) {
	if i, ok := l.pos[h]; ok {
		l.moveToFront(i)
		return 0, false
	}
	var i int32
	if len(l.entries) < l.capacity {
		i = int32(len(l.entries))
		l.entries = append(l.entries, lruEntry{})
	} else {
		// Full: reuse the least recently used entry's slot (simplelru inserts, then evicts the
		// oldest; the oldest is never h, so the outcome is the same).
		i = l.tail
		old, evicted = l.entries[i].hash, true
		l.unlink(i)
		delete(l.pos, old)
	}
	l.entries[i] = lruEntry{hash: h, prev: -1, next: l.head}
	if l.head >= 0 {
		l.entries[l.head].prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
	l.pos[h] = i
	return old, evicted
}

func (l *blockLRU) moveToFront(i int32) {
	if l.head == i {
		return
	}
	l.unlink(i)
	l.entries[i].prev, l.entries[i].next = -1, l.head
	if l.head >= 0 {
		l.entries[l.head].prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
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
	out := make([]uint64, 0, len(l.pos))
	for i := l.tail; i >= 0; i = l.entries[i].prev {
		out = append(out, l.entries[i].hash)
	}
	return out
}
