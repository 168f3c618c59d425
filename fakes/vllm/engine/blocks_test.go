package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func hashesOf(t *testing.T, root uint64, ids []uint32, bs int) []uint64 {
	t.Helper()
	h, _ := appendBlockHashes(nil, root, ids, bs, nil)
	return h
}

func seqIDs(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func TestBlockHashesAreChained(t *testing.T) {
	const bs = 8
	root := rootHash("m", "", "")
	a := hashesOf(t, root, seqIDs(0, 3*bs+5), bs)
	if len(a) != 3 {
		t.Fatalf("got %d hashes for 3 full blocks + 5 tokens, want 3 (partial block has no hash)", len(a))
	}
	// Same first block, different second block: first hash equal, the rest differ.
	ids := seqIDs(0, 3*bs)
	ids[bs] = 9999
	b := hashesOf(t, root, ids, bs)
	if a[0] != b[0] || a[1] == b[1] || a[2] == b[2] {
		t.Errorf("hashes %x vs %x: want equal first, different second and third (chained)", a, b)
	}
	tests := []struct {
		name              string
		model, lora, salt string
	}{
		{"other model", "m2", "", ""},
		{"adapter", "m", "lora-a", ""},
		{"salt", "m", "", "s"},
		{"field boundary", "m\x00", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := hashesOf(t, rootHash(tc.model, tc.lora, tc.salt), seqIDs(0, 3*bs), bs)
			for i := range c {
				if c[i] == a[i] {
					t.Errorf("block %d hash equal to the base model's: the root must separate %s", i, tc.name)
				}
			}
		})
	}
}

// poolState is a comparable view of a pool for go-cmp.
type poolState struct {
	Used, LRU, Cached int
	LRUOrder          []uint64
}

func stateOf(p *blockPool) poolState {
	st := poolState{Used: p.used, LRU: p.lruLen, Cached: len(p.byHash)}
	for i := p.lruHead; i != noBlock; i = p.blocks[i].next {
		st.LRUOrder = append(st.LRUOrder, p.blocks[i].hash)
	}
	return st
}

func TestBlockPoolAcquireRelease(t *testing.T) {
	const bs = 4
	p := newBlockPool(10)
	root := rootHash("m", "", "")
	h := hashesOf(t, root, seqIDs(0, 3*bs), bs) // 3 hashed blocks

	if got := p.plan(h, 5); got != 5 {
		t.Fatalf("plan on empty pool = %d, want 5", got)
	}
	a := p.acquire(nil, h, nil, 5) // 3 hashed + 2 private
	if diff := cmp.Diff(poolState{Used: 5, Cached: 3}, stateOf(p)); diff != "" {
		t.Fatalf("after acquire (-want +got):\n%s", diff)
	}
	// A second request with the same prefix shares the 3 hashed blocks.
	if got := p.plan(h, 4); got != 1 {
		t.Fatalf("plan for a sharing request = %d, want 1 (only its private block)", got)
	}
	b := p.acquire(nil, h, nil, 4)
	if diff := cmp.Diff(a[:3], b[:3]); diff != "" {
		t.Fatalf("shared blocks differ (-a +b):\n%s", diff)
	}
	if diff := cmp.Diff(poolState{Used: 6, Cached: 3}, stateOf(p)); diff != "" {
		t.Fatalf("after shared acquire (-want +got):\n%s", diff)
	}
	p.release(a, 3)
	if diff := cmp.Diff(poolState{Used: 4, Cached: 3}, stateOf(p)); diff != "" {
		t.Fatalf("after first release, hashed blocks still held by b (-want +got):\n%s", diff)
	}
	p.release(b, 3)
	// Released in reverse prompt order: the last block is evicted first.
	want := poolState{Used: 0, LRU: 3, Cached: 3, LRUOrder: []uint64{h[2], h[1], h[0]}}
	if diff := cmp.Diff(want, stateOf(p)); diff != "" {
		t.Fatalf("after both releases (-want +got):\n%s", diff)
	}
	// Reusing cached unreferenced blocks takes them from the supply.
	if got := p.plan(h[:2], 2); got != 2 {
		t.Fatalf("plan reusing 2 unreferenced cached blocks = %d, want 2", got)
	}
}

func TestBlockPoolLRUEviction(t *testing.T) {
	const bs = 4
	p := newBlockPool(4)
	root := rootHash("m", "", "")
	old := hashesOf(t, root, seqIDs(0, bs), bs)       // 1 block, released first
	newer := hashesOf(t, root, seqIDs(100, bs), bs)   // 1 block, released second
	running := hashesOf(t, root, seqIDs(200, bs), bs) // 1 block, held

	r1 := p.acquire(nil, old, nil, 1)
	r2 := p.acquire(nil, newer, nil, 1)
	held := p.acquire(nil, running, nil, 1)
	p.release(r1, 1)
	p.release(r2, 1)
	if got := p.available(); got != 3 {
		t.Fatalf("available = %d, want 3 (1 never used + 2 evictable)", got)
	}

	// A 2-block private request: the never-used block, then the oldest unreferenced one.
	x := p.acquire(nil, nil, nil, 2)
	if _, ok := p.byHash[old[0]]; ok {
		t.Errorf("oldest unreferenced block %x still cached, want it evicted", old[0])
	}
	if _, ok := p.byHash[newer[0]]; !ok {
		t.Errorf("newer unreferenced block %x evicted, want the oldest evicted first", newer[0])
	}
	// One more block: the newer one goes; the running request's block never does.
	y := p.acquire(nil, nil, nil, 1)
	if _, ok := p.byHash[newer[0]]; ok {
		t.Errorf("block %x still cached after the pool ran out of older ones", newer[0])
	}
	if idx, ok := p.byHash[running[0]]; !ok || p.blocks[idx].ref != 1 {
		t.Fatalf("running request's block evicted or its count changed (cached=%v)", ok)
	}
	if got := p.available(); got != 0 {
		t.Fatalf("available = %d, want 0", got)
	}
	if got := p.plan(nil, 1); got <= p.available() {
		t.Fatalf("plan(1) = %d fits in %d available: the held block would be evictable", got, p.available())
	}
	p.release(x, 0)
	p.release(y, 0)
	p.release(held, 1)
	if diff := cmp.Diff(poolState{LRU: 1, Cached: 1, LRUOrder: []uint64{running[0]}}, stateOf(p)); diff != "" {
		t.Fatalf("final state (-want +got):\n%s", diff)
	}
}

func TestCachedPrefixStopsAtFirstMiss(t *testing.T) {
	const bs = 4
	p := newBlockPool(16)
	root := rootHash("m", "", "")
	h := hashesOf(t, root, seqIDs(0, 4*bs), bs)
	a := p.acquire(nil, []uint64{h[0], h[1]}, nil, 2)
	b := p.acquire(nil, []uint64{h[3]}, nil, 1) // pretend block 3 survived while block 2 did not
	_ = a
	_ = b
	if got := p.cachedPrefix(h); got != 2 {
		t.Errorf("cachedPrefix = %d, want 2 (contiguous leading blocks only)", got)
	}
}
