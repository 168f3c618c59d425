package engine

import (
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// simRule is llm-d-inference-sim's tokenizer rule (pkg/tokenizer/tokenizer.go) written as a
// regular expression: one punctuation character or a run of word characters, then whitespace.
// It is the oracle the hand-written scanner is checked against.
var simRule = regexp.MustCompile(`([{}:,\-.?!;@#$%^&*()+_~/\\><\[\]="']|\w+)(\s*)`)

func oracleTokens(text string) []Token {
	var out []Token
	for _, s := range simRule.FindAllString(text, -1) {
		h := fnv.New32a()
		h.Write([]byte(s))
		out = append(out, Token{Text: s, ID: h.Sum32()})
	}
	return out
}

func TestTokenize(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string
	}{
		{name: "empty", text: "", want: nil},
		{name: "only whitespace", text: " \t\n", want: nil},
		{name: "words keep trailing whitespace", text: "Hello world  ", want: []string{"Hello ", "world  "}},
		{name: "punctuation is one token per character", text: "a,b.", want: []string{"a", ",", "b", "."}},
		{name: "leading whitespace is skipped", text: "  hi", want: []string{"hi"}},
		{name: "underscore starts its own token", text: "_x y_z", want: []string{"_", "x ", "y_z"}},
		{name: "digits are word characters", text: "abc123 45", want: []string{"abc123 ", "45"}},
		{name: "unlisted symbols and non-ASCII are skipped", text: "a|b`c é d", want: []string{"a", "b", "c ", "d"}},
		{name: "quotes and brackets", text: `f("x")[0]`, want: []string{"f", "(", `"`, "x", `"`, ")", "[", "0", "]"}},
		{name: "vertical tab is not whitespace", text: "a\vb", want: []string{"a", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Tokenize(tc.text)
			var texts []string
			for _, tok := range got {
				texts = append(texts, tok.Text)
			}
			if diff := cmp.Diff(tc.want, texts); diff != "" {
				t.Errorf("Tokenize(%q) texts (-want +got):\n%s", tc.text, diff)
			}
			if diff := cmp.Diff(oracleTokens(tc.text), got); diff != "" {
				t.Errorf("Tokenize(%q) differs from the simulator's rule (-oracle +got):\n%s", tc.text, diff)
			}
		})
	}
}

func TestTokenIDIsFNV32a(t *testing.T) {
	// FNV-32a("hello ") computed independently with hash/fnv.
	h := fnv.New32a()
	h.Write([]byte("hello "))
	got := Tokenize("hello ")
	if len(got) != 1 || got[0].ID != h.Sum32() {
		t.Fatalf("Tokenize(%q) = %+v, want one token with id %d", "hello ", got, h.Sum32())
	}
}

// TestTokenizeMatchesSimulatorRule compares the scanner with the regular expression on random
// strings drawn from an alphabet that mixes every character class.
func TestTokenizeMatchesSimulatorRule(t *testing.T) {
	const seed, n = 20261130, 500
	rng := rand.New(rand.NewPCG(seed, 0))
	alphabet := []rune("aZ09_ \t\n\r\f\v{}:,-.?!;@#$%^&*()+~/\\><[]=\"'|`é世\x00")
	for i := 0; i < n; i++ {
		var b strings.Builder
		for j := rng.IntN(40); j > 0; j-- {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		text := b.String()
		if diff := cmp.Diff(oracleTokens(text), Tokenize(text)); diff != "" {
			t.Fatalf("seed %d, case %d: Tokenize(%q) differs from the simulator's rule (-oracle +got):\n%s", seed, i, text, diff)
		}
		ids := appendTokenIDs(nil, text)
		toks := Tokenize(text)
		if len(ids) != len(toks) {
			t.Fatalf("seed %d: appendTokenIDs(%q) has %d ids, Tokenize has %d tokens", seed, text, len(ids), len(toks))
		}
		for k := range ids {
			if ids[k] != toks[k].ID {
				t.Fatalf("seed %d: appendTokenIDs(%q)[%d] = %d, want %d", seed, text, k, ids[k], toks[k].ID)
			}
		}
	}
}

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", "_a_b c\t", "é|`x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if diff := cmp.Diff(oracleTokens(text), Tokenize(text)); diff != "" {
			t.Fatalf("Tokenize(%q) differs from the simulator's rule (-oracle +got):\n%s", text, diff)
		}
	})
}
