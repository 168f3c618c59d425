package preciseprefix

import (
	"encoding/binary"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// Tokenize appends to dst the token ids of text under llm-d-inference-sim's dummy tokenizer rule
// (pkg/tokenizer/tokenizer.go; SPEC §7): a token is one character of the punctuation set
// {}:,-.?!;@#$%^&*()+_~/\><[]="' or a run of ASCII letters, digits and '_' (a '_' that starts a
// token is punctuation), each with the whitespace (tab, newline, form feed, carriage return,
// space) that follows it; every other byte is skipped; a token's id is the FNV-32a hash of its
// text. This is the reference's own implementation of the rule.
func Tokenize(dst []uint32, text string) []uint32 {
	const (
		offset = 2166136261
		prime  = 16777619
	)
	n := len(text)
	for i := 0; i < n; {
		c := text[i]
		h := uint32(offset)
		switch {
		case isPunct(c):
			h = (h ^ uint32(c)) * prime
			i++
		case isWord(c):
			for i < n && isWord(text[i]) {
				h = (h ^ uint32(text[i])) * prime
				i++
			}
		default:
			i++
			continue
		}
		for i < n && isSpace(text[i]) {
			h = (h ^ uint32(text[i])) * prime
			i++
		}
		dst = append(dst, h)
	}
	return dst
}

var punct = func() (t [256]bool) {
	for _, c := range []byte(`{}:,-.?!;@#$%^&*()+_~/\><[]="'`) {
		t[c] = true
	}
	return t
}()

func isPunct(c byte) bool { return punct[c] }
func isWord(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

// rootKey is the parent key of a prompt's first block (package doc); lora is "" for the base
// model.
func rootKey(seed, lora, salt string, buf []byte) (uint64, []byte) {
	buf = append(buf[:0], seed...)
	buf = append(buf, 0)
	buf = append(buf, lora...)
	buf = append(buf, 0)
	buf = append(buf, salt...)
	return xxhash.Sum64(buf), buf
}

// appendKeys appends the key of every full block of ids (blockSize tokens each), chained from
// parent, to dst.
func appendKeys(dst []uint64, parent uint64, ids []uint32, blockSize int, buf []byte) ([]uint64, []byte) {
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

// endpointBlocks is one endpoint's part of the index.
type endpointBlocks struct {
	// keys maps the engine's block hash to the block's key.
	keys map[uint64]uint64
	// held counts, per key, the engine blocks holding it.
	held map[uint64]int32
}

// Index holds, per endpoint key (ip:port), the blocks its KV events say are cached. Safe for
// concurrent use.
type Index struct {
	mu       sync.RWMutex
	eps      map[string]*endpointBlocks
	adapters map[string]struct{}
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{eps: map[string]*endpointBlocks{}, adapters: map[string]struct{}{}}
}

// NoteAdapter records that name is a LoRA adapter (a BlockStored event named it).
func (x *Index) NoteAdapter(name string) {
	x.mu.RLock()
	_, ok := x.adapters[name]
	x.mu.RUnlock()
	if !ok {
		x.mu.Lock()
		x.adapters[name] = struct{}{}
		x.mu.Unlock()
	}
}

// IsAdapter reports whether an event named model as its LoRA adapter.
func (x *Index) IsAdapter(model string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.adapters[model]
	return ok
}

func (x *Index) endpointLocked(ep string) *endpointBlocks {
	e := x.eps[ep]
	if e == nil {
		e = &endpointBlocks{keys: map[uint64]uint64{}, held: map[uint64]int32{}}
		x.eps[ep] = e
	}
	return e
}

// Store records that ep cached blocks with the given engine hashes and keys (in order).
func (x *Index) Store(ep string, engineHashes, keys []uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.endpointLocked(ep)
	for i, h := range engineHashes {
		if old, ok := e.keys[h]; ok {
			if old == keys[i] {
				continue // stored again: still one block
			}
			e.release(h, old)
		}
		e.keys[h] = keys[i]
		e.held[keys[i]]++
	}
}

// ParentKey returns the key of the block ep holds under engine hash h.
func (x *Index) ParentKey(ep string, h uint64) (uint64, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e := x.eps[ep]
	if e == nil {
		return 0, false
	}
	k, ok := e.keys[h]
	return k, ok
}

func (e *endpointBlocks) release(h, key uint64) {
	delete(e.keys, h)
	if e.held[key]--; e.held[key] <= 0 {
		delete(e.held, key)
	}
}

// Remove records that ep evicted the blocks with these engine hashes; unknown hashes are ignored.
func (x *Index) Remove(ep string, engineHashes []uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.eps[ep]
	if e == nil {
		return
	}
	for _, h := range engineHashes {
		if k, ok := e.keys[h]; ok {
			e.release(h, k)
		}
	}
}

// Clear forgets every block of ep (AllBlocksCleared, an engine restart, the endpoint leaving).
func (x *Index) Clear(ep string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.eps, ep)
}

// Blocks returns how many blocks ep holds.
func (x *Index) Blocks(ep string) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if e := x.eps[ep]; e != nil {
		return len(e.keys)
	}
	return 0
}

// Match returns, for each endpoint key of eps, the number of leading keys it holds (stopping at
// its first missing one), into out (same length as eps).
func (x *Index) Match(keys []uint64, eps []string, out []int) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for i, ep := range eps {
		e := x.eps[ep]
		n := 0
		if e != nil {
			for _, k := range keys {
				if e.held[k] <= 0 {
					break
				}
				n++
			}
		}
		out[i] = n
	}
}
