package prefix

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// checkConsistent fails when the reverse map is not exactly the union of the LRUs.
func checkConsistent(t *testing.T, ix *Index) {
	t.Helper()
	want := map[uint64][]string{}
	for ep, hs := range ix.Contents() {
		for _, h := range hs {
			want[h] = append(want[h], ep)
		}
	}
	for h := range want {
		sort.Strings(want[h])
	}
	if diff := cmp.Diff(want, ix.ReverseMap()); diff != "" {
		t.Fatalf("reverse map disagrees with the LRUs (-lru union +reverse):\n%s", diff)
	}
}

func TestIndexEviction(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		adds     [][]uint64 // successive Add calls on endpoint "a"
		want     []uint64
	}{
		{"under capacity", 5, [][]uint64{{1, 2, 3}}, []uint64{1, 2, 3}},
		{"one request longer than capacity keeps its tail", 3, [][]uint64{{1, 2, 3, 4, 5}}, []uint64{3, 4, 5}},
		{"oldest request evicted first", 4, [][]uint64{{1, 2}, {3, 4}, {5, 6}}, []uint64{3, 4, 5, 6}},
		{"re-adding refreshes recency", 3, [][]uint64{{1, 2, 3}, {1}, {4}}, []uint64{1, 3, 4}},
		{"capacity one", 1, [][]uint64{{7, 8, 9}}, []uint64{9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := NewIndex(99)
			for _, hs := range tc.adds {
				ix.Add("a", tc.capacity, hs)
				ix.Add("b", 100, hs) // a second endpoint shares every hash; it must survive a's evictions
			}
			if diff := cmp.Diff(tc.want, ix.Contents()["a"]); diff != "" {
				t.Fatalf("contents of a (-want +got):\n%s", diff)
			}
			checkConsistent(t, ix)
			for _, hs := range tc.adds {
				for _, h := range hs {
					if got := ix.Holders(h); len(got) == 0 || got[len(got)-1] != "b" {
						t.Fatalf("hash %d lost its other holder b: %v", h, got)
					}
				}
			}
		})
	}
}

func TestIndexCapacityFixedAtFirstInsert(t *testing.T) {
	ix := NewIndex(0)
	ix.Add("a", 2, nil) // no hashes: still the first Add, fixes the capacity (as v1.5.0)
	if c, ok := ix.Capacity("a"); !ok || c != 2 {
		t.Fatalf("empty first Add: capacity %d, tracked %v", c, ok)
	}
	if got, ok := ix.Contents()["a"]; !ok || got == nil || len(got) != 0 {
		t.Fatalf("empty LRU contents = %#v, %v; want empty non-nil", got, ok)
	}
	ix.Add("a", 9, []uint64{1})
	ix.Add("a", 50, []uint64{2, 3})
	if c, _ := ix.Capacity("a"); c != 2 {
		t.Fatalf("capacity = %d, want 2 (fixed at first insert)", c)
	}
	if diff := cmp.Diff([]uint64{2, 3}, ix.Contents()["a"]); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	ix.Add("b", 0, []uint64{1})
	if c, _ := ix.Capacity("b"); c != DefaultLRUCapacityPerServer {
		t.Fatalf("default capacity = %d, want %d", c, DefaultLRUCapacityPerServer)
	}
}

func TestIndexRemoveEndpoint(t *testing.T) {
	ix := NewIndex(10)
	ix.Add("a", 0, []uint64{1, 2, 3})
	ix.Add("b", 0, []uint64{2, 3, 4})
	ix.Add("c", 0, []uint64{9})
	ix.RemoveEndpoint("a")
	ix.RemoveEndpoint("nope")
	checkConsistent(t, ix)
	if got := ix.Holders(1); len(got) != 0 {
		t.Fatalf("hash 1 still held by %v", got)
	}
	if diff := cmp.Diff([]string{"b"}, ix.Holders(2)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	gone := ix.RetainOnly(map[string]struct{}{"b": {}})
	if diff := cmp.Diff([]string{"c"}, gone); diff != "" {
		t.Fatalf("RetainOnly removed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"b"}, ix.Endpoints()); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
	checkConsistent(t, ix)
	if ix.Size() != 3 {
		t.Fatalf("size = %d, want 3", ix.Size())
	}
}

// TestIndexMatchGlobalStop checks the match rule: walk from block 0, stop at the first block no
// endpoint in the whole index holds (candidates or not), count per endpoint the blocks it holds.
func TestIndexMatchGlobalStop(t *testing.T) {
	query := []uint64{10, 11, 12, 13, 14}
	tests := []struct {
		name  string
		holds map[string][]uint64
		want  map[string]int
	}{
		{"empty index", nil, map[string]int{}},
		{"leading runs", map[string][]uint64{"a": {10, 11, 12}, "b": {10}}, map[string]int{"a": 3, "b": 1}},
		{"block 0 unheld stops everything", map[string][]uint64{"a": {11, 12, 13}}, map[string]int{}},
		{"another endpoint bridges a's gap", map[string][]uint64{"a": {10, 12}, "b": {11}}, map[string]int{"a": 2, "b": 1}},
		{"stop at first globally unheld block", map[string][]uint64{"a": {10, 11, 13, 14}, "b": {10}}, map[string]int{"a": 2, "b": 1}},
		{"full match", map[string][]uint64{"a": query}, map[string]int{"a": 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := NewIndex(100)
			for ep, hs := range tc.holds {
				ix.Add(ep, 0, hs)
			}
			got := ix.Match(query)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("Match (-want +got):\n%s", diff)
			}
			for _, ep := range []string{"a", "b", "z"} {
				if ml := ix.MatchLen(query, ep); ml != tc.want[ep] {
					t.Fatalf("MatchLen(%s) = %d, want %d", ep, ml, tc.want[ep])
				}
			}
		})
	}
}

// TestIndexMatchAfterOverflowingAdd pins SPEC §2.2 where GIE v1.5.0 differs (defect D2 of
// reports/interop/score-parity.md): upstream's indexer.Add (approximateprefix/indexer.go) puts a
// request's hashes in the endpoint's LRU first and in hashToPods afterwards, so the hashes its LRU
// evicted within that same Add stay listed as held ("ghosts"). Here a (capacity 2) is given four
// blocks and keeps only 12 and 13; b holds 11–13. Upstream v1.5.0 would match a 4 and b 3 blocks,
// the ghost 10 keeping its whole-index walk going; eppkit holds exactly what the LRUs hold, so
// nobody holds block 0 and nothing matches. Found by score-parity seed 1796066399037593604.
func TestIndexMatchAfterOverflowingAdd(t *testing.T) {
	query := []uint64{10, 11, 12, 13}
	ix := NewIndex(100)
	ix.Add("a", 2, query)
	ix.Add("b", 100, query[1:])
	checkConsistent(t, ix)
	if got := ix.Holders(10); len(got) != 0 {
		t.Fatalf("block 10, evicted from a's LRU within the Add that inserted it, still has holders %v", got)
	}
	if got := ix.Match(query); len(got) != 0 {
		t.Fatalf("Match(%v) = %v, want no match: no endpoint holds block 0", query, got)
	}
	if diff := cmp.Diff(map[string]int{"a": 2, "b": 3}, ix.Match(query[1:])); diff != "" {
		t.Fatalf("Match from block 1 (-want +got):\n%s", diff)
	}
}

func TestIndexConcurrent(t *testing.T) {
	ix := NewIndex(64)
	seed := uint64(7)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			ep := fmt.Sprintf("10.0.0.%d:8000", w%3)
			for i := 0; i < 500; i++ {
				hs := []uint64{r.Uint64N(200), r.Uint64N(200), r.Uint64N(200)}
				switch r.IntN(4) {
				case 0:
					ix.RemoveEndpoint(ep)
				case 1:
					ix.Match(hs)
				default:
					ix.Add(ep, 0, hs)
				}
			}
		}(w)
	}
	wg.Wait()
	checkConsistent(t, ix)
}

// TestIndexReverseMapRandomOps drives the index with seeded random Adds and Removes over 8
// endpoints and 24 hashes, so hashes move between the inline and overflow forms of the reverse
// map many times; after every op each endpoint's LRU must hold the keys of a golang-lru
// simplelru.LRU given the same Adds, in the same order (so the slots the reverse map keeps point
// at the right entries), the reverse map must equal the union of the LRUs, Match must equal a
// model computed from Contents, and the overflow map must hold exactly the hashes with more than
// inlineHolders holders.
func TestIndexReverseMapRandomOps(t *testing.T) {
	const seed = 4242
	r := rand.New(rand.NewPCG(seed, 0))
	ix := NewIndex(6)
	models := map[string]*simplelru.LRU[uint64, struct{}]{}
	for op := range 3000 {
		ep := fmt.Sprintf("10.0.0.%d:8000", r.IntN(8))
		if r.IntN(25) == 0 {
			ix.RemoveEndpoint(ep)
			delete(models, ep)
		} else {
			hs := make([]uint64, 1+r.IntN(5))
			for i := range hs {
				hs[i] = r.Uint64N(24)
			}
			ix.Add(ep, 0, hs)
			m, ok := models[ep]
			if !ok {
				m, _ = simplelru.NewLRU[uint64, struct{}](6, nil)
				models[ep] = m
			}
			for _, h := range hs {
				m.Add(h, struct{}{})
			}
		}
		for e, m := range models {
			if got := keysOf(ix, e); !slices.Equal(got, m.Keys()) {
				t.Fatalf("seed %d op %d: %s holds %v (oldest first), simplelru %v", seed, op, e, got, m.Keys())
			}
		}
		checkConsistent(t, ix)
		for h, v := range ix.holders {
			if _, over := ix.overflow[h]; over != (v.n > inlineHolders) || (over && int(v.n) != len(ix.overflow[h])) {
				t.Fatalf("seed %d op %d: hash %d: n %d, overflow %v", seed, op, h, v.n, ix.overflow[h])
			}
		}
		if len(ix.overflow) > len(ix.holders) {
			t.Fatalf("seed %d op %d: %d overflow entries for %d hashes", seed, op, len(ix.overflow), len(ix.holders))
		}
		query := []uint64{r.Uint64N(24), r.Uint64N(24), r.Uint64N(24), r.Uint64N(24)}
		want := map[string]int{}
		rev := ix.ReverseMap()
		for _, h := range query {
			if len(rev[h]) == 0 {
				break
			}
			for _, e := range rev[h] {
				want[e]++
			}
		}
		if diff := cmp.Diff(want, ix.Match(query)); diff != "" {
			t.Fatalf("seed %d op %d: Match(%v) (-model +got):\n%s", seed, op, query, diff)
		}
		for e, n := range want {
			if got := ix.MatchLen(query, e); got != n {
				t.Fatalf("seed %d op %d: MatchLen(%v, %s) = %d, want %d", seed, op, query, e, got, n)
			}
		}
	}
}
