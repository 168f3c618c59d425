package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// TestBlockLRUMatchesSimpleLRU drives one endpoint of an Index (its blockLRU, with the slots the
// reverse map keeps) and golang-lru's simplelru.LRU (what the index used before) with the same
// seeded random Adds of one to four hashes, for several capacities, and requires the same keys in
// the same order (oldest first; so the same evictions) after every Add, and the reverse map to
// stay equal to the LRU.
func TestBlockLRUMatchesSimpleLRU(t *testing.T) {
	const seed = 99
	const ep = "10.0.0.1:8000"
	r := rand.New(rand.NewPCG(seed, 0))
	for _, capacity := range []int{1, 2, 3, 7, 64} {
		var evictedRef []uint64
		ref, err := simplelru.NewLRU[uint64, struct{}](capacity, func(h uint64, _ struct{}) { evictedRef = append(evictedRef, h) })
		if err != nil {
			t.Fatal(err)
		}
		ix := NewIndex(capacity)
		for op := range 5000 {
			hs := make([]uint64, 1+r.IntN(4))
			for i := range hs {
				hs[i] = r.Uint64N(uint64(2*capacity + 3))
			}
			evictedRef = evictedRef[:0]
			for _, h := range hs {
				ref.Add(h, struct{}{})
			}
			ix.Add(ep, 0, hs)
			after := keysOf(ix, ep)
			if len(after) != ref.Len() || !slices.Equal(after, ref.Keys()) {
				t.Fatalf("seed %d capacity %d op %d: Add(%v): keys %v, simplelru %v (it evicted %v)", seed, capacity, op, hs, after, ref.Keys(), evictedRef)
			}
			checkConsistent(t, ix)
		}
	}
}

// keysOf returns endpoint's hashes in LRU order, oldest first.
func keysOf(ix *Index, endpoint string) []uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	l, ok := ix.lrus[endpoint]
	if !ok {
		return nil
	}
	return l.Keys()
}
