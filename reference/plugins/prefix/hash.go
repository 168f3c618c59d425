package prefix

import (
	"encoding/binary"
	"errors"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/eppkit/eppkit/reference/framework"
)

// AverageCharactersPerToken converts a block size in tokens to characters: blockChars =
// blockSizeTokens × 4 (GIE v1.5.0 approximateprefix/types.go averageCharactersPerToken).
const AverageCharactersPerToken = 4

// HashCompat turns the amended rules of SPEC §2.1 and §9.1 back into upstream v1.5.0's, one field
// per rule. The zero value is the SPEC (what the reference EPP runs); V150 is v1.5.0's hashing,
// which exists only so the score-parity tool (tools/gie-v1.5.0/score-parity) can compare with the
// real module and name each difference. No config field sets it.
type HashCompat struct {
	// NoPartialBlock: the trailing partial block is not hashed, and an input shorter than one
	// block has no blocks (v1.5.0 hashing.go hashPrompt; GIE PR #2823 later hashes it).
	NoPartialBlock bool
	// ByteBlocks: text blocks are cut every blockSizeTokens×4 bytes, even inside a UTF-8
	// sequence (v1.5.0), instead of every blockSizeTokens×4 characters.
	ByteBlocks bool
	// V150Chat: chat messages are re-encoded exactly as v1.5.0 encodes them (inline image, audio
	// and video data in full; file parts, tool calls and tool definitions dropped), instead of
	// with every part by identity (package doc, "Input").
	V150Chat bool
}

// V150 is upstream v1.5.0's hashing: every rule of HashCompat reverted.
var V150 = HashCompat{NoPartialBlock: true, ByteBlocks: true, V150Chat: true}

// Input is what a request's block hashes are computed over (package doc, "Input"): text, or
// token ids (IsTokens).
type Input struct {
	// Text is the input text: a completions prompt or embeddings input as sent, or the JSON
	// re-encoding of a chat, Anthropic Messages or Responses request.
	Text string
	// TokenIDs is a token-id prompt or input; set only when IsTokens.
	TokenIDs []uint32
	// IsTokens says the input is TokenIDs (blocks of blockSizeTokens ids) rather than Text.
	IsTokens bool
}

// EstimateTokens estimates the input's length in tokens (SPEC §4.1): one token per id for
// token ids; for text, one token per CJK ideograph, kana or Hangul syllable (real tokenizers give
// them about one each) plus one per 4 other characters, rounded up. Characters are Unicode code
// points, never bytes; an invalid UTF-8 byte counts as one character.
func (in Input) EstimateTokens() int {
	if in.IsTokens {
		return len(in.TokenIDs)
	}
	cjk, other := 0, 0
	s := in.Text
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			other++
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		i += w
		if IsCJK(r) {
			cjk++
		} else {
			other++
		}
	}
	return cjk + (other+AverageCharactersPerToken-1)/AverageCharactersPerToken
}

// IsCJK reports whether r counts as one token by itself in the estimate of SPEC §4.1: a Han
// ideograph, a hiragana or katakana character, or a precomposed Hangul syllable (U+AC00–U+D7A3).
func IsCJK(r rune) bool {
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r) ||
		(r >= 0xAC00 && r <= 0xD7A3)
}

// BlockHashes returns the chained block hashes of input (SPEC §2.1), at most maxBlocks of them:
//
//	seed = xxhash64(model ‖ salt)              (salt written only when non-empty)
//	h_i  = xxhash64(block_i ‖ littleEndian64(h_{i−1})), h_{−1} = seed
//
// Text blocks are blockSizeTokens×4 characters (never split inside a UTF-8 sequence);
// token-id blocks are blockSizeTokens ids, each written as 4 little-endian bytes. The trailing
// partial block is hashed as a last, shorter block. It returns nil when the block size is ≤ 0,
// maxBlocks ≤ 0 or the input is empty.
func BlockHashes(model, salt string, input Input, blockSizeTokens, maxBlocks int) []uint64 {
	return blockHashes(model, salt, input, blockSizeTokens, maxBlocks, HashCompat{})
}

func blockHashes(model, salt string, in Input, blockSizeTokens, maxBlocks int, compat HashCompat) []uint64 {
	if blockSizeTokens <= 0 || maxBlocks <= 0 {
		return nil
	}
	d := xxhash.New()
	_, _ = d.WriteString(model)
	if salt != "" {
		_, _ = d.WriteString(salt)
	}
	prev := d.Sum64()
	var chain [8]byte
	next := func() uint64 {
		binary.LittleEndian.PutUint64(chain[:], prev)
		_, _ = d.Write(chain[:])
		prev = d.Sum64()
		return prev
	}

	if in.IsTokens {
		ids := in.TokenIDs
		n := len(ids) / blockSizeTokens
		if !compat.NoPartialBlock && len(ids)%blockSizeTokens != 0 {
			n++
		}
		n = min(n, maxBlocks)
		if n == 0 {
			return nil
		}
		out := make([]uint64, 0, n)
		var buf [4]byte
		for b := 0; b < n; b++ {
			d.Reset()
			for _, id := range ids[b*blockSizeTokens : min((b+1)*blockSizeTokens, len(ids))] {
				binary.LittleEndian.PutUint32(buf[:], id)
				_, _ = d.Write(buf[:])
			}
			out = append(out, next())
		}
		return out
	}

	s := in.Text
	blockChars := blockSizeTokens * AverageCharactersPerToken
	if len(s) == 0 {
		return nil
	}
	// A block of blockChars characters holds at least blockChars bytes, so this bounds the count
	// for the allocation; an ASCII input needs exactly this many.
	out := make([]uint64, 0, min(maxBlocks, (len(s)+blockChars-1)/blockChars))
	for i := 0; i < len(s) && len(out) < maxBlocks; {
		var end int
		if compat.ByteBlocks {
			end = min(i+blockChars, len(s))
			if compat.NoPartialBlock && end-i < blockChars {
				break // v1.5.0: no trailing partial block
			}
		} else {
			var full bool
			end, full = cutChars(s, i, blockChars)
			if compat.NoPartialBlock && !full {
				break
			}
		}
		d.Reset()
		_, _ = d.WriteString(s[i:end])
		out = append(out, next())
		i = end
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// cutChars returns the byte offset n characters after offset i in s, and whether s held n
// characters there (false: s ended first, end = len(s)). A character is one UTF-8 sequence as
// utf8.DecodeRuneInString reads it: an invalid byte is one character of its own.
func cutChars(s string, i, n int) (end int, full bool) {
	if i+n <= len(s) {
		// Fast path: an ASCII run of n bytes is n characters.
		var or byte
		for _, c := range []byte(s[i : i+n]) {
			or |= c
		}
		if or < utf8.RuneSelf {
			return i + n, true
		}
	}
	for ; n > 0; n-- {
		if i >= len(s) {
			return len(s), false
		}
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return i, true
}

// ErrNoInput is returned by RequestInput for a request without a prompt to hash: no body, or an
// API without one (framework.APIOther).
var ErrNoInput = errors.New("prefix: request has no prompt to hash")

// RequestInput returns what a request body's block hashes are computed over (package doc,
// "Input"): the completions prompt or embeddings input (text or token ids), or the JSON
// re-encoding of a chat, Anthropic Messages or Responses request with every part by identity.
// It returns ErrNoInput for a nil body or one without a prompt (APIOther), and an error naming the
// message index when a chat message's content is neither a string, null, nor an array of
// content-block objects (the request parser refuses such a body before it gets here).
func RequestInput(body *framework.LLMRequestBody) (Input, error) {
	return requestInput(body, HashCompat{})
}

func requestInput(body *framework.LLMRequestBody, compat HashCompat) (Input, error) {
	if body == nil {
		return Input{}, ErrNoInput
	}
	switch {
	case body.Completions != nil:
		c := body.Completions
		if c.TokenIDs != nil {
			return Input{TokenIDs: c.TokenIDs, IsTokens: true}, nil
		}
		return Input{Text: c.Prompt}, nil
	case body.Embeddings != nil:
		e := body.Embeddings
		if e.TokenIDs != nil {
			return Input{TokenIDs: e.TokenIDs, IsTokens: true}, nil
		}
		return Input{Text: e.Input}, nil
	case body.ChatCompletions != nil:
		b, err := encodeChat(body.ChatCompletions, compat.V150Chat)
		return Input{Text: string(b)}, err
	case body.Messages != nil:
		b, err := encodeAnthropic(body.Messages)
		return Input{Text: string(b)}, err
	case body.Responses != nil:
		b, err := encodeResponses(body.Responses)
		return Input{Text: string(b)}, err
	}
	return Input{}, ErrNoInput
}

// HashRequest is RequestInput followed by BlockHashes with the request's target model and cache
// salt. A request whose input cannot be built hashes to nil (no blocks) and the error says why.
func HashRequest(req *framework.LLMRequest, blockSizeTokens, maxBlocks int) ([]uint64, error) {
	return HashRequestCompat(req, blockSizeTokens, maxBlocks, HashCompat{})
}

// HashRequestCompat is HashRequest under the compatibility rules compat (score-parity only; the
// zero value is HashRequest).
func HashRequestCompat(req *framework.LLMRequest, blockSizeTokens, maxBlocks int, compat HashCompat) ([]uint64, error) {
	if req == nil {
		return nil, ErrNoInput
	}
	in, err := requestInput(req.Body, compat)
	if err != nil {
		return nil, err
	}
	return blockHashes(req.TargetModel, req.CacheSalt(), in, blockSizeTokens, maxBlocks, compat), nil
}
