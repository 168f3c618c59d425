package engine

// Token is one token of the simulator's dummy tokenizer.
type Token struct {
	// Text is the token's text: one punctuation character or a run of ASCII word characters,
	// followed by the whitespace after it (so joining every Text of a prompt gives the prompt
	// back, less any characters the tokenizer skips).
	Text string
	// ID is the FNV-32a hash of Text.
	ID uint32
}

// charClass bits for ASCII bytes.
const (
	classPunct = 1 << iota
	classWord
	classSpace
)

// asciiClass classifies the bytes the tokenizer's rule names; every other byte (control
// characters, '|', '`', and all bytes of non-ASCII UTF-8 sequences) is skipped.
var asciiClass = func() (t [256]uint8) {
	// The punctuation set of llm-d-inference-sim's dummy tokenizer
	// (pkg/tokenizer/tokenizer.go, newBaseTokenizer).
	for _, c := range `{}:,-.?!;@#$%^&*()+_~/\><[]="'` {
		t[c] |= classPunct
	}
	for c := '0'; c <= '9'; c++ {
		t[c] |= classWord
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] |= classWord
		t[c-'a'+'A'] |= classWord
	}
	t['_'] |= classWord
	// RE2's \s: tab, newline, form feed, carriage return, space.
	for _, c := range "\t\n\f\r " {
		t[c] |= classSpace
	}
	return t
}()

// FNV-32a parameters (hash/fnv), inlined so that tokenizing does not allocate a hasher.
const (
	fnv32Offset = 2166136261
	fnv32Prime  = 16777619
)

func fnv32a(s string) uint32 {
	h := uint32(fnv32Offset)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= fnv32Prime
	}
	return h
}

// scanTokens calls emit with the [start, end) byte range of every token of text, in order.
//
// The rule is llm-d-inference-sim's dummy tokenizer (pkg/tokenizer/tokenizer.go): the regular
// expression `(P|\w+)(\s*)` applied leftmost-first, where P is one character of the punctuation
// set above. Because the punctuation alternative is tried first, '_' at the start of a token is a
// token of its own, while '_' inside a word belongs to the word.
func scanTokens(text string, emit func(start, end int)) {
	n := len(text)
	for i := 0; i < n; {
		c := asciiClass[text[i]]
		start := i
		switch {
		case c&classPunct != 0:
			i++
		case c&classWord != 0:
			i++
			for i < n && asciiClass[text[i]]&classWord != 0 {
				i++
			}
		default:
			i++
			continue
		}
		for i < n && asciiClass[text[i]]&classSpace != 0 {
			i++
		}
		emit(start, i)
	}
}

// Tokenize splits text with the simulator's dummy tokenizer and returns its tokens in order
// (nil for text with no token). Token texts are substrings of text.
//
// Source: llm-d-inference-sim pkg/tokenizer/tokenizer.go (SimpleTokenizer): a token is one
// punctuation character or a run of word characters, each with its trailing whitespace; the
// token id is FNV-32a of the token text.
func Tokenize(text string) []Token {
	var out []Token
	scanTokens(text, func(start, end int) {
		s := text[start:end]
		out = append(out, Token{Text: s, ID: fnv32a(s)})
	})
	return out
}

// appendTokenIDs appends the token ids of text to dst and returns the extended slice. It is
// scanTokens and fnv32a fused into one pass, for the engine's hot path; the tests check it
// against Tokenize.
func appendTokenIDs(dst []uint32, text string) []uint32 {
	n := len(text)
	for i := 0; i < n; {
		c := asciiClass[text[i]]
		if c&(classPunct|classWord) == 0 {
			i++
			continue
		}
		h := (uint32(fnv32Offset) ^ uint32(text[i])) * fnv32Prime
		i++
		if c&classPunct == 0 {
			for i < n && asciiClass[text[i]]&classWord != 0 {
				h = (h ^ uint32(text[i])) * fnv32Prime
				i++
			}
		}
		for i < n && asciiClass[text[i]]&classSpace != 0 {
			h = (h ^ uint32(text[i])) * fnv32Prime
			i++
		}
		dst = append(dst, h)
	}
	return dst
}
