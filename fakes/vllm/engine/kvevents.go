package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"time"
)

// KV-cache events: what a vLLM engine reports when blocks enter or leave its prefix cache
// (vLLM vllm/distributed/kv_events.py: BlockStored, BlockRemoved, AllBlocksCleared, batched per
// scheduler step in a KVEventBatch). The engine produces them when Config.KVEvents is set; the
// wire encoding and the ZMQ publisher are fakes/vllm/kvevents'.

// KVEventType is the kind of one KV-cache event (the tag of vLLM's KVCacheEvent union).
type KVEventType string

// The three event kinds, named as vLLM's classes (the msgpack union tag).
const (
	// BlockStored: full prompt blocks entered the prefix cache (vLLM block_pool.py
	// cache_full_blocks).
	BlockStored KVEventType = "BlockStored"
	// BlockRemoved: a cached block was evicted to make room (vLLM block_pool.py
	// _maybe_evict_cached_block: one event per evicted block).
	BlockRemoved KVEventType = "BlockRemoved"
	// AllBlocksCleared: the prefix cache was reset (vLLM block_pool.py reset_prefix_cache).
	AllBlocksCleared KVEventType = "AllBlocksCleared"
)

// KVEvent is one KV-cache event. Block hashes are vLLM's external block hashes
// (ExternalBlockHash as an int: the low 64 bits of the block's sha256_cbor digest, see
// VLLMBlockHasher), never the engine's internal xxhash keys.
type KVEvent struct {
	// Type is the event kind.
	Type KVEventType
	// BlockHashes are the stored blocks, in prompt order (BlockStored), or the one evicted
	// block (BlockRemoved); empty for AllBlocksCleared.
	BlockHashes []uint64
	// ParentHash is the hash of the block before the first stored one; HasParent is false for a
	// run that starts at the prompt's first block (vLLM's parent_block_hash None).
	ParentHash uint64
	HasParent  bool
	// TokenIDs are the stored blocks' tokens, len(BlockHashes) × BlockSize of them
	// (BlockStored only). The slice is shared with the engine: read it, never modify it.
	TokenIDs []uint32
	// BlockSize is the block size in tokens (BlockStored only).
	BlockSize int
	// LoRAName is the request's adapter ("" for the base model); LoRAID its adapter id
	// (Request.LoRAID, 0 for none). BlockStored only.
	LoRAName string
	LoRAID   int
	// ExtraKeys holds each stored block's extra hash keys (LoRA name, then the cache salt on the
	// prompt's first block, vLLM generate_block_hash_extra_keys), nil for a block with none; nil
	// when no stored block has any.
	ExtraKeys [][]string
}

// KVEventBatch is the events of one engine step, in the order they happened (evictions
// before the stores that needed the room, as in vLLM's allocate-then-cache order).
type KVEventBatch struct {
	// At is the engine-clock time of the step (vLLM's KVEventBatch.ts is the wall time of
	// publishing).
	At time.Time
	// Events are the step's events, never empty.
	Events []KVEvent
}

// VLLMBlockHasher computes block hashes exactly as vLLM's prefix cache does with
// --prefix-caching-hash-algo sha256_cbor (vllm/v1/core/kv_cache_utils.py hash_block_tokens and
// vllm/utils/hashing.py sha256_cbor):
//
//	hash(block) = SHA-256(CBOR_canonical([parent, (token ids…), extra_keys]))
//
// where parent is the previous block's 32-byte digest, or NONE_HASH for the first block;
// NONE_HASH = SHA-256(CBOR_canonical(seed)) with the seed string (vLLM init_none_hash with
// PYTHONHASHSEED set; vLLM uses 32 random bytes when it is unset, which no consumer can
// reproduce); extra_keys is a CBOR array of the LoRA name and, on the prompt's first block only,
// the cache salt, or CBOR null when there are none (vLLM generate_block_hash_extra_keys). The
// model name is not part of the hash: one vLLM engine serves one model. The external hash is
// the digest's low 64 bits, big-endian (vLLM maybe_convert_block_hash with
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, its default).
type VLLMBlockHasher struct {
	none [sha256.Size]byte
	buf  []byte
}

// NewVLLMBlockHasher returns a hasher whose NONE_HASH comes from seed (vLLM's PYTHONHASHSEED).
func NewVLLMBlockHasher(seed string) *VLLMBlockHasher {
	h := &VLLMBlockHasher{}
	h.buf = cborText(h.buf[:0], seed)
	h.none = sha256.Sum256(h.buf)
	return h
}

// NoneHash is the parent digest of a prompt's first block.
func (h *VLLMBlockHasher) NoneHash() [sha256.Size]byte { return h.none }

// Append appends the external hash of every full block of ids (blockSize tokens each) to dst
// and returns it. lora is the adapter name ("" for none); salt the cache salt ("" for none).
func (h *VLLMBlockHasher) Append(dst []uint64, ids []uint32, blockSize int, lora, salt string) []uint64 {
	parent := h.none
	for start := 0; start+blockSize <= len(ids); start += blockSize {
		b := h.buf[:0]
		b = cborHead(b, 4, 3) // [parent, tokens, extra_keys]
		b = cborHead(b, 2, sha256.Size)
		b = append(b, parent[:]...)
		b = cborHead(b, 4, uint64(blockSize))
		for _, id := range ids[start : start+blockSize] {
			b = cborHead(b, 0, uint64(id))
		}
		extra := extraKeys(start/blockSize, lora, salt)
		if extra == nil {
			b = append(b, 0xf6) // null
		} else {
			b = cborHead(b, 4, uint64(len(extra)))
			for _, k := range extra {
				b = cborText(b, k)
			}
		}
		h.buf = b
		parent = sha256.Sum256(b)
		dst = append(dst, binary.BigEndian.Uint64(parent[sha256.Size-8:]))
	}
	return dst
}

// extraKeys is the extra hash keys of block i of a prompt (see VLLMBlockHasher), nil for none.
func extraKeys(i int, lora, salt string) []string {
	var k []string
	if lora != "" {
		k = append(k, lora)
	}
	if salt != "" && i == 0 {
		k = append(k, salt)
	}
	return k
}

// cborHead appends a CBOR item head of major type major with argument n in its shortest form
// (RFC 8949 §3 and §4.2.1 "preferred serialization", which cbor2's canonical mode writes).
func cborHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= 0xff:
		return append(b, m|24, byte(n))
	case n <= 0xffff:
		return append(b, m|25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		return append(b, m|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, m|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// cborText appends s as a CBOR text string.
func cborText(b []byte, s string) []byte {
	b = cborHead(b, 3, uint64(len(s)))
	return append(b, s...)
}

// ErrPrefixCacheInUse: ResetPrefixCache was called while requests hold blocks (vLLM's
// reset_prefix_cache refuses then too: "Failed to reset prefix cache because some blocks are not
// freed yet").
var ErrPrefixCacheInUse = errors.New("engine: cannot reset the prefix cache while running requests hold blocks")

// publishAdmissionLocked hands Config.KVEvents the events of s's admission: one BlockRemoved per
// block evicted to make room, then one BlockStored per run of consecutive prompt blocks cached
// anew (usually one run, after the cached prefix), whose parent is the block before the run.
func (e *Engine) publishAdmissionLocked(s *Sequence, t time.Duration) {
	p := e.pool
	if len(p.evicted) == 0 && len(p.stored) == 0 {
		return
	}
	bs := e.cfg.BlockSize
	evs := make([]KVEvent, 0, len(p.evicted)+1)
	for _, h := range p.evicted {
		evs = append(evs, KVEvent{Type: BlockRemoved, BlockHashes: []uint64{h}})
	}
	for i := 0; i < len(p.stored); {
		j := i
		for j+1 < len(p.stored) && p.stored[j+1] == p.stored[j]+1 {
			j++
		}
		first, last := p.stored[i], p.stored[j]
		ev := KVEvent{Type: BlockStored, BlockHashes: s.ext[first : last+1 : last+1],
			TokenIDs: s.ids[first*bs : (last+1)*bs : (last+1)*bs], BlockSize: bs,
			LoRAName: s.req.LoRA, LoRAID: s.req.LoRAID}
		if first > 0 {
			ev.ParentHash, ev.HasParent = s.ext[first-1], true
		}
		if s.req.LoRA != "" || (s.req.CacheSalt != "" && first == 0) {
			ev.ExtraKeys = make([][]string, last-first+1)
			for k := range ev.ExtraKeys {
				ev.ExtraKeys[k] = extraKeys(first+k, s.req.LoRA, s.req.CacheSalt)
			}
		}
		evs = append(evs, ev)
		i = j + 1
	}
	p.evicted, p.stored = p.evicted[:0], p.stored[:0]
	e.cfg.KVEvents(KVEventBatch{At: e.start.Add(t), Events: evs})
}

// ResetPrefixCache empties the prefix cache, as vLLM's POST /reset_prefix_cache does: every
// cached block is forgotten and, with Config.KVEvents, an AllBlocksCleared event is published.
// It returns ErrPrefixCacheInUse, changing nothing, while running requests hold blocks.
func (e *Engine) ResetPrefixCache() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked(e.now())
	if e.closed {
		return ErrEngineClosed
	}
	p := e.pool
	if p.used > 0 {
		return ErrPrefixCacheInUse
	}
	p.free = p.free[:0]
	for i := range p.blocks {
		p.blocks[i] = kvBlock{prev: noBlock, next: noBlock}
		p.free = append(p.free, int32(i))
	}
	clear(p.byHash)
	p.lruHead, p.lruTail, p.lruLen = noBlock, noBlock, 0
	if p.events {
		e.cfg.KVEvents(KVEventBatch{At: e.start.Add(e.now()), Events: []KVEvent{{Type: AllBlocksCleared}}})
	}
	return nil
}

// CachedBlockHashes returns vLLM's hashes (VLLMBlockHasher) of every block in the prefix cache,
// in no particular order: the set a subscriber that applied every event holds. Empty unless
// Config.KVEvents is set.
func (e *Engine) CachedBlockHashes() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.pool.events {
		return nil
	}
	out := make([]uint64, 0, len(e.pool.byHash))
	for _, idx := range e.pool.byHash {
		out = append(out, e.pool.blocks[idx].ext)
	}
	return out
}
