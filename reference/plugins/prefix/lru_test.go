package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// TestBlockLRUMatchesSimpleLRU drives blockLRU and golang-lru's simplelru.LRU (what the index
// used before) with the same seeded random Adds, for several capacities, and requires the same
// evictions, lengths and key order (oldest first) after every Add.
func TestBlockLRUMatchesSimpleLRU(t *testing.T) {
	const seed = 99
	r := rand.New(rand.NewPCG(seed, 0))
	for _, capacity := range []int{1, 2, 3, 7, 64} {
		var evictedRef []uint64
		ref, err := simplelru.NewLRU[uint64, struct{}](capacity, func(h uint64, _ struct{}) { evictedRef = append(evictedRef, h) })
		if err != nil {
			t.Fatal(err)
		}
		l := newBlockLRU(capacity)
		for op := range 5000 {
			h := r.Uint64N(uint64(2*capacity + 3))
			evictedRef = evictedRef[:0]
			ref.Add(h, struct{}{})
			old, evicted := l.add(h)
			var got []uint64
			if evicted {
				got = []uint64{old}
			}
			if !slices.Equal(got, evictedRef) {
				t.Fatalf("seed %d capacity %d op %d: add(%d) evicted %v, simplelru evicted %v", seed, capacity, op, h, got, evictedRef)
			}
			if l.Len() != ref.Len() || !slices.Equal(l.Keys(), ref.Keys()) {
				t.Fatalf("seed %d capacity %d op %d: keys %v, simplelru %v", seed, capacity, op, l.Keys(), ref.Keys())
			}
		}
	}
}
