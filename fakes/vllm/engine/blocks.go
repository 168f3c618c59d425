package engine

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// noBlock marks the end of the LRU list and an absent block.
const noBlock = int32(-1)

// rootHash is the parent hash of a prompt's first block. Like vLLM's extra keys
// (vllm/v1/core/kv_cache_utils.py generate_block_hash_extra_keys: LoRA name, cache salt) and
// llm-d-inference-sim's model name in the block key (pkg/kv-cache/kv_cache.go), it makes blocks of
// different models, adapters or salts distinct even for identical tokens. Fields are separated
// by a zero byte so that ("ab","c") and ("a","bc") differ.
func rootHash(model, lora, salt string) uint64 {
	h, _ := rootHashBuf(model, lora, salt, nil)
	return h
}

// rootHashBuf is rootHash without allocating: it lays the fields out in buf.
func rootHashBuf(model, lora, salt string, buf []byte) (uint64, []byte) {
	buf = append(buf[:0], model...)
	buf = append(buf, 0)
	buf = append(buf, lora...)
	buf = append(buf, 0)
	buf = append(buf, salt...)
	return xxhash.Sum64(buf), buf
}

// appendBlockHashes appends the chained hash of every full block of ids to dst: block i hashes
// its parent's hash and its blockSize token ids (little-endian), so equal hashes mean equal
// prefixes (vLLM vllm/v1/core/kv_cache_utils.py hash_block_tokens). The partial last block has no
// hash: only full blocks are cached (vLLM design doc "Automatic Prefix Caching").
func appendBlockHashes(dst []uint64, parent uint64, ids []uint32, blockSize int, buf []byte) ([]uint64, []byte) {
	need := 8 + 4*blockSize
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	buf = buf[:need]
	for start := 0; start+blockSize <= len(ids); start += blockSize {
		binary.LittleEndian.PutUint64(buf, parent)
		for k, id := range ids[start : start+blockSize] {
			binary.LittleEndian.PutUint32(buf[8+4*k:], id)
		}
		parent = xxhash.Sum64(buf)
		dst = append(dst, parent)
	}
	return dst, buf
}

// kvBlock is one block of the pool. A block is free (on the free stack or not yet created),
// private (held by one request, no hash), or cached (has a hash and is in byHash; when its
// reference count is 0 it is on the LRU list and may be evicted).
type kvBlock struct {
	hash       uint64
	ext        uint64 // vLLM's hash of the block, with KV events on
	hashed     bool
	ref        int32
	prev, next int32 // LRU links while ref == 0 and hashed
}

// blockPool is the KV block pool of one engine. It is not safe for concurrent use; the engine's
// mutex guards it.
type blockPool struct {
	capacity int       // blocks in the pool (KVCacheSize)
	blocks   []kvBlock // created so far; grows up to capacity
	free     []int32   // released private blocks, ready for reuse
	byHash   map[uint64]int32
	// LRU list of unreferenced cached blocks: head is the least recently released (evicted
	// first), tail the most recent.
	lruHead, lruTail int32
	lruLen           int
	used             int // blocks with ref > 0
	// events turns on the bookkeeping of KV events: evicted lists the vLLM hashes of the
	// cached blocks take evicted, stored the prompt positions acquire cached anew, since the
	// engine last read them.
	events  bool
	evicted []uint64
	stored  []int
}

func newBlockPool(capacity int) *blockPool {
	return &blockPool{
		capacity: capacity,
		byHash:   make(map[uint64]int32),
		lruHead:  noBlock,
		lruTail:  noBlock,
	}
}

// available is the number of blocks an allocation can take: never-used or released private
// blocks plus evictable cached ones.
func (p *blockPool) available() int { return p.capacity - p.used }

// cachedPrefix returns how many leading hashes of hashes are cached blocks (referenced or not).
func (p *blockPool) cachedPrefix(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := p.byHash[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// plan reports, for a request with the given full-prompt-block hashes and total block need,
// how many blocks must come from the free/evictable supply, so the caller can check fit before
// changing anything. Cached blocks with ref 0 that the request would reuse count against the
// supply too, since reusing them takes them off the LRU list.
func (p *blockPool) plan(hashes []uint64, total int) (fromSupply int) {
	fromSupply = total - len(hashes)
	for _, h := range hashes {
		idx, ok := p.byHash[h]
		if !ok || p.blocks[idx].ref == 0 {
			fromSupply++
		}
	}
	return fromSupply
}

// acquire gives a request its blocks: every hashed prompt block (reusing a cached block with the
// same hash, or taking a new one and caching it) and total − len(hashes) private blocks. It
// appends the block indices to dst (hashed first, in prompt order) and returns it. The caller
// has checked plan(hashes, total) <= available().
//
// ext, with events on, holds vLLM's hashes of the same blocks: a newly cached block keeps its
// own, and its prompt position is appended to p.stored.
func (p *blockPool) acquire(dst []int32, hashes, ext []uint64, total int) []int32 {
	// Reuse cached blocks first so that the evictions below never take a block this request is
	// about to reuse (vLLM touches computed blocks before allocating new ones).
	start := len(dst)
	for _, h := range hashes {
		if idx, ok := p.byHash[h]; ok {
			p.ref(idx)
			dst = append(dst, idx)
		} else {
			dst = append(dst, noBlock)
		}
	}
	for i, h := range hashes {
		if dst[start+i] != noBlock {
			continue
		}
		idx := p.take()
		b := &p.blocks[idx]
		b.hash, b.hashed = h, true
		p.byHash[h] = idx
		dst[start+i] = idx
		if p.events {
			b.ext = ext[i]
			p.stored = append(p.stored, i)
		}
	}
	for k := len(hashes); k < total; k++ {
		dst = append(dst, p.take())
	}
	return dst
}

// ref adds a reference to block idx, taking it off the LRU list if it was unreferenced.
func (p *blockPool) ref(idx int32) {
	b := &p.blocks[idx]
	if b.ref == 0 {
		p.lruRemove(idx)
		p.used++
	}
	b.ref++
}

// take returns a block with one reference and no hash: a never-used block, a released private
// block, or the least recently used cached block, evicted.
func (p *blockPool) take() int32 {
	var idx int32
	switch {
	case len(p.free) > 0:
		idx = p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
	case len(p.blocks) < p.capacity:
		p.blocks = append(p.blocks, kvBlock{})
		idx = int32(len(p.blocks) - 1)
	default:
		idx = p.lruHead
		if idx == noBlock {
			// Unreachable when the caller checked plan against available.
			panic("engine: KV block pool exhausted")
		}
		p.lruRemove(idx)
		delete(p.byHash, p.blocks[idx].hash)
		if p.events {
			p.evicted = append(p.evicted, p.blocks[idx].ext)
		}
	}
	p.blocks[idx] = kvBlock{ref: 1, prev: noBlock, next: noBlock}
	p.used++
	return idx
}

// release drops one reference from each of blocks, which must be a request's block list as
// acquire built it (nHashed hashed prompt blocks first). Hashed blocks whose count reaches 0 join
// the LRU tail in reverse prompt order, so a prompt's later blocks are evicted before its earlier
// ones and shared prefixes survive longest (vLLM vllm/v1/core/single_type_kv_cache_manager.py
// free: "free blocks in reverse order"). Private blocks go back to the free stack.
func (p *blockPool) release(blocks []int32, nHashed int) {
	for i := nHashed - 1; i >= 0; i-- {
		idx := blocks[i]
		b := &p.blocks[idx]
		b.ref--
		if b.ref == 0 {
			p.used--
			p.lruPush(idx)
		}
	}
	for _, idx := range blocks[nHashed:] {
		p.blocks[idx].ref = 0
		p.used--
		p.free = append(p.free, idx)
	}
}

func (p *blockPool) lruPush(idx int32) {
	b := &p.blocks[idx]
	b.prev, b.next = p.lruTail, noBlock
	if p.lruTail != noBlock {
		p.blocks[p.lruTail].next = idx
	} else {
		p.lruHead = idx
	}
	p.lruTail = idx
	p.lruLen++
}

func (p *blockPool) lruRemove(idx int32) {
	b := &p.blocks[idx]
	if b.prev != noBlock {
		p.blocks[b.prev].next = b.next
	} else {
		p.lruHead = b.next
	}
	if b.next != noBlock {
		p.blocks[b.next].prev = b.prev
	} else {
		p.lruTail = b.prev
	}
	b.prev, b.next = noBlock, noBlock
	p.lruLen--
}
