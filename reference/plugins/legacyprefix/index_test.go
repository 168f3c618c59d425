package legacyprefix

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type addOp struct {
	ep       string
	capacity int
	hashes   []uint64
}

// reverseFromContents rebuilds hash → endpoints from the LRU contents.
func reverseFromContents(c map[string][]uint64) map[uint64][]string {
	out := map[uint64][]string{}
	for ep, hs := range c {
		for _, h := range hs {
			out[h] = append(out[h], ep)
		}
	}
	for h := range out {
		slices.Sort(out[h])
	}
	return out
}

func TestIndexAddEvictAndReverseMap(t *testing.T) {
	tests := []struct {
		name    string
		ops     []addOp
		removed []string
		want    map[string][]uint64
	}{
		{
			name: "under capacity keeps everything",
			ops:  []addOp{{"a:1", 4, []uint64{1, 2, 3}}},
			want: map[string][]uint64{"a:1": {1, 2, 3}},
		},
		{
			name: "one request longer than the capacity keeps its last blocks",
			ops:  []addOp{{"a:1", 2, []uint64{1, 2, 3, 4}}},
			want: map[string][]uint64{"a:1": {3, 4}},
		},
		{
			name: "re-adding refreshes recency",
			ops:  []addOp{{"a:1", 3, []uint64{1, 2, 3}}, {"a:1", 3, []uint64{1}}, {"a:1", 3, []uint64{9}}},
			want: map[string][]uint64{"a:1": {1, 3, 9}},
		},
		{
			name: "capacity is fixed at the first insert",
			ops:  []addOp{{"a:1", 2, []uint64{1}}, {"a:1", 100, []uint64{2, 3, 4}}},
			want: map[string][]uint64{"a:1": {3, 4}},
		},
		{
			// Upstream indexer.Add creates the LRU before looking at the hashes.
			name: "an empty add creates the LRU and fixes its capacity",
			ops:  []addOp{{"a:1", 1, nil}, {"b:1", 1, []uint64{}}, {"a:1", 100, []uint64{1, 2, 3}}},
			want: map[string][]uint64{"a:1": {3}, "b:1": {}},
		},
		{
			name: "endpoints evict independently",
			ops:  []addOp{{"a:1", 2, []uint64{1, 2}}, {"b:1", 3, []uint64{1, 2}}, {"a:1", 2, []uint64{5}}},
			want: map[string][]uint64{"a:1": {2, 5}, "b:1": {1, 2}},
		},
		{
			name:    "removed endpoints leave no trace",
			ops:     []addOp{{"a:1", 3, []uint64{1, 2}}, {"b:1", 3, []uint64{2, 3}}},
			removed: []string{"a:1", "never-seen:1"},
			want:    map[string][]uint64{"b:1": {2, 3}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := newIndex()
			for _, op := range tc.ops {
				ix.add(op.ep, op.capacity, op.hashes)
			}
			for _, ep := range tc.removed {
				ix.remove(ep)
			}
			got := ix.contents()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("contents (-want +got):\n%s", diff)
			}
			// The reverse map must equal the union of the LRUs, hash by hash.
			wantRev := reverseFromContents(got)
			if len(ix.holders) != len(wantRev) {
				t.Fatalf("reverse map has %d hashes, LRUs hold %d", len(ix.holders), len(wantRev))
			}
			for h, eps := range wantRev {
				if diff := cmp.Diff(eps, ix.holdersOf(h)); diff != "" {
					t.Fatalf("holders of %d (-lru +reverse):\n%s", h, diff)
				}
			}
		})
	}
}

func TestIndexMatch(t *testing.T) {
	tests := []struct {
		name   string
		ops    []addOp
		hashes []uint64
		want   map[string]int
	}{
		{name: "empty index", hashes: []uint64{1, 2}, want: map[string]int{}},
		{
			name:   "leading run per endpoint",
			ops:    []addOp{{"a:1", 10, []uint64{1, 2, 3}}, {"b:1", 10, []uint64{1}}},
			hashes: []uint64{1, 2, 3, 4},
			want:   map[string]int{"a:1": 3, "b:1": 1},
		},
		{
			name:   "walk stops at the first block nobody holds",
			ops:    []addOp{{"a:1", 10, []uint64{1, 3}}},
			hashes: []uint64{1, 2, 3},
			want:   map[string]int{"a:1": 1},
		},
		{
			// Eviction removed block 1 from a (its oldest); b still holds it, so the walk goes on
			// and a's later blocks count (upstream matchLongestPrefix counts them).
			name:   "blocks after a gap count while another endpoint bridges it",
			ops:    []addOp{{"a:1", 2, []uint64{1, 2, 3}}, {"b:1", 10, []uint64{1}}},
			hashes: []uint64{1, 2, 3},
			want:   map[string]int{"a:1": 2, "b:1": 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := newIndex()
			for _, op := range tc.ops {
				ix.add(op.ep, op.capacity, op.hashes)
			}
			if diff := cmp.Diff(tc.want, ix.match(tc.hashes)); diff != "" {
				t.Fatalf("match (-want +got):\n%s", diff)
			}
		})
	}
}
