package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// referenceHash is vLLM's sha256_cbor block hash computed with a CBOR library in canonical
// mode instead of VLLMBlockHasher's hand-written encoding: the check that the two agree.
func referenceHash(t *testing.T, em cbor.EncMode, parent []byte, tokens []uint32, extra []string) [32]byte {
	t.Helper()
	var ex any // nil: CBOR null
	if extra != nil {
		ex = extra
	}
	b, err := em.Marshal([]any{parent, tokens, ex})
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestVLLMBlockHasherMatchesCanonicalCBOR(t *testing.T) {
	em, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for _, tc := range []struct {
		seed, lora, salt string
		bs               int
	}{{"0", "", "", 16}, {"", "", "", 8}, {"42", "adapter-a", "", 16}, {"42", "", "salty", 32}, {"x", "a", "s", 64}} {
		ids := make([]uint32, 3*tc.bs+5)
		for i := range ids {
			ids[i] = rng.Uint32() >> uint(rng.IntN(32)) // ids of every CBOR width
		}
		got := NewVLLMBlockHasher(tc.seed).Append(nil, ids, tc.bs, tc.lora, tc.salt)
		seedCBOR, _ := em.Marshal(tc.seed)
		parent := sha256.Sum256(seedCBOR)
		if NewVLLMBlockHasher(tc.seed).NoneHash() != parent {
			t.Fatalf("seed %q: NONE_HASH differs from sha256(cbor(seed))", tc.seed)
		}
		if len(got) != 3 {
			t.Fatalf("%d hashes for 3 full blocks and a partial one", len(got))
		}
		for i := range 3 {
			var extra []string
			if tc.lora != "" {
				extra = append(extra, tc.lora)
			}
			if tc.salt != "" && i == 0 {
				extra = append(extra, tc.salt)
			}
			want := referenceHash(t, em, parent[:], ids[i*tc.bs:(i+1)*tc.bs], extra)
			if got[i] != binary.BigEndian.Uint64(want[24:]) {
				t.Fatalf("%+v block %d: hash %x, want the low 64 bits of %x", tc, i, got[i], want)
			}
			parent = want
		}
	}
}

// TestKVEventsReplayToPool: applying every published event, in order, to an index of vLLM
// hashes gives exactly the blocks cached in the pool after every step, through stores,
// evictions, shared prefixes, LoRA and salted prompts and a reset; stores name their parent and
// carry their tokens.
func TestKVEventsReplayToPool(t *testing.T) {
	var batches []KVEventBatch
	e, _ := newTestEngine(t, func(c *Config) {
		c.KVCacheSize = 24 // small: evictions happen
		c.MaxModelLen = 128
		c.BlockSize = 8
		c.KVEvents = func(b KVEventBatch) { batches = append(batches, b) }
		c.KVEventsHashSeed = "1234"
	})
	index := map[uint64]bool{}
	applied := 0
	check := func(step string) {
		t.Helper()
		for ; applied < len(batches); applied++ {
			for _, ev := range batches[applied].Events {
				switch ev.Type {
				case BlockStored:
					if len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
						t.Fatalf("%s: stored %d blocks with %d tokens", step, len(ev.BlockHashes), len(ev.TokenIDs))
					}
					if ev.HasParent && !index[ev.ParentHash] {
						t.Fatalf("%s: stored blocks whose parent %x is not cached", step, ev.ParentHash)
					}
					for _, h := range ev.BlockHashes {
						index[h] = true
					}
				case BlockRemoved:
					for _, h := range ev.BlockHashes {
						if !index[h] {
							t.Fatalf("%s: removed %x, never stored", step, h)
						}
						delete(index, h)
					}
				case AllBlocksCleared:
					clear(index)
				}
			}
		}
		want := map[uint64]bool{}
		e.mu.Lock()
		for _, idx := range e.pool.byHash {
			want[e.pool.blocks[idx].ext] = true
		}
		e.mu.Unlock()
		if !mapsEqual(index, want) {
			t.Fatalf("%s: the events say %d blocks are cached, the pool holds %d", step, len(index), len(want))
		}
	}
	rng := rand.New(rand.NewPCG(3, 5))
	prefixes := []string{words("a", 0, 40), words("b", 0, 40), words("c", 0, 40)}
	for i := range 60 {
		r := Request{ID: "r", Prompt: prefixes[rng.IntN(3)] + words("t", i, rng.IntN(30)), MaxTokens: 1}
		switch i % 5 {
		case 1:
			r.LoRA, r.LoRAID = "lora-x", 1
		case 2:
			r.CacheSalt = "salt"
		}
		s := submit(t, e, r)
		mustNext(t, s) // prefilled (zero latency): the blocks are cached
		s.Close()
		check("request")
	}
	count := map[KVEventType]int{}
	for _, b := range batches {
		for _, ev := range b.Events {
			count[ev.Type]++
		}
	}
	if count[BlockStored] == 0 || count[BlockRemoved] == 0 || len(index) == 0 {
		t.Fatalf("events %v: the workload must store and evict", count)
	}
	if err := e.ResetPrefixCache(); err != nil {
		t.Fatal(err)
	}
	check("reset")
	if len(index) != 0 || batches[len(batches)-1].Events[0].Type != AllBlocksCleared {
		t.Fatalf("after a reset: %d blocks, last event %v", len(index), batches[len(batches)-1].Events)
	}
}

func mapsEqual(a, b map[uint64]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// TestKVEventsStoredShape: a prompt's first admission stores its full blocks in one event with
// no parent; a second prompt sharing two blocks stores the rest with the second block as parent;
// LoRA requests carry their name, id and extra keys.
func TestKVEventsStoredShape(t *testing.T) {
	var batches []KVEventBatch
	e, _ := newTestEngine(t, func(c *Config) {
		c.BlockSize = 8
		c.KVEvents = func(b KVEventBatch) { batches = append(batches, b) }
	})
	p := words("p", 0, 8*3+2)
	mustNext(t, submit(t, e, Request{Prompt: p}))
	if len(batches) != 1 || len(batches[0].Events) != 1 {
		t.Fatalf("batches %+v, want one store", batches)
	}
	first := batches[0].Events[0]
	if first.Type != BlockStored || len(first.BlockHashes) != 3 || first.HasParent || first.BlockSize != 8 || first.LoRAID != 0 || first.ExtraKeys != nil {
		t.Fatalf("first store %+v", first)
	}
	want := NewVLLMBlockHasher("").Append(nil, appendTokenIDs(nil, p), 8, "", "")
	if !slices.Equal(first.BlockHashes, want) || !slices.Equal(first.TokenIDs, appendTokenIDs(nil, p)[:24]) {
		t.Fatalf("hashes or tokens differ from vLLM's for the prompt")
	}
	mustNext(t, submit(t, e, Request{Prompt: words("p", 0, 16) + words("q", 0, 16)}))
	second := batches[1].Events[0]
	if !second.HasParent || second.ParentHash != want[1] || len(second.BlockHashes) != 2 {
		t.Fatalf("second store %+v, want 2 blocks after parent %x", second, want[1])
	}
	mustNext(t, submit(t, e, Request{Prompt: words("l", 0, 16), LoRA: "ad", LoRAID: 3}))
	l := batches[2].Events[0]
	if l.LoRAName != "ad" || l.LoRAID != 3 || len(l.ExtraKeys) != 2 || !slices.Equal(l.ExtraKeys[1], []string{"ad"}) {
		t.Fatalf("LoRA store %+v", l)
	}
}

func TestResetPrefixCacheRefusedWhileRunning(t *testing.T) {
	e, _ := newTestEngine(t, func(c *Config) { c.InterTokenLatency = 1e9 })
	s := submit(t, e, Request{Prompt: words("r", 0, 40), MaxTokens: 5})
	mustNext(t, s)
	if err := e.ResetPrefixCache(); err != ErrPrefixCacheInUse {
		t.Fatalf("reset while running: %v", err)
	}
	s.Close()
	if err := e.ResetPrefixCache(); err != nil {
		t.Fatalf("reset when idle: %v", err)
	}
	if e.CachedPrefixTokens(HashPrompt(Request{Model: "m", Prompt: words("r", 0, 40)}, 16)) != 0 {
		t.Fatal("a reset cache still holds the prompt")
	}
}
