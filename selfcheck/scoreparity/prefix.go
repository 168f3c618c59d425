package scoreparity

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/eppkit/eppkit/conformance/harness"
)

// prefixClasses are the prefix study's request kinds.
// Prefix is the prefix-score study (`eppkit interop prefix-parity`): approximate prefix scoring
// only. A trial gives each endpoint j a share of one prompt P (none, a quarter, a half, three
// quarters or all of it, cut at a character that falls inside a block), sent once with the subset
// hint [j] so the EPP picks j and records the share's blocks there (both record at pick time, in
// PreRequest), then again until its score on j is 1 (llm-d-router indexes asynchronously;
// re-sending the same share records nothing new). The probe is P with a tail no trial uses, sent
// unhinted. Both run approx-prefix-cache-producer with autoTune false and blockSizeTokens 64
// (llm-d-router raises any smaller size to 64: approximateprefix/plugin.go, minBlockSizeTokens),
// prefix-cache-scorer of weight 1 and max-score-picker, so a published score is matchedBlocks /
// totalBlocks.
var Prefix = &Study{
	Name:  "prefix",
	Title: "Prefix-score parity: the reference EPP and llm-d-router v0.10.0",
	About: "Both EPPs score with approx-prefix-cache-producer (autoTune false, blockSizeTokens 64), prefix-cache-scorer and max-score-picker only. " +
		"A trial gives each endpoint a share of one prompt (none, ¼, ½, ¾ or all of it, sent with the subset hint of that endpoint until it scores 1 there), " +
		"then sends the whole prompt with a fresh tail, unhinted: the probe's four scores are compared.",
	Reference:  config(prefixPlugins, "prefix-cache-scorer", false),
	LLMDRouter: config(prefixPlugins, "prefix-cache-scorer", true),
	Classes:    prefixClasses,
	Workload:   prefixWorkload,
	run:        runPrefixTrial,
	SetupLabel: "shares",
}

var prefixClasses = []Class{
	{Name: "completions-text", SameScores: true,
		Rule: "a completions prompt of ASCII text: both cut its bytes into blocks of blockSizeTokens×4 bytes and hash the trailing partial block " +
			"(llm-d-router: dataproducer/tokenizer/estimate.go packs 4 bytes per pseudo-token, prefixhash/hashing.go getKVCacheBlocksFromTokens; " +
			"the reference: reference/plugins/prefix, SPEC §2.1)"},
	{Name: "completions-token-ids", SameScores: true,
		Rule: "a completions prompt of token ids: both cut the ids into blocks of blockSizeTokens ids"},
	{Name: "completions-cache-salt", SameScores: true,
		Rule: "cache_salt seeds the hash chain on both sides (seed = xxhash64(model ‖ salt)), so a share stored under another salt never matches"},
	{Name: "completions-prompt-list", SameScores: false,
		Rule: "a completions prompt list: llm-d-router hashes each string as a chain of its own and sums matches and totals over the strings " +
			"(estimate.go PerPromptTokens; approximateprefix producer); the reference hashes the strings joined by one space, as GIE v1.5.0 " +
			"(Prompt.PlainText) — the totals differ"},
	{Name: "chat", SameScores: false,
		Rule: "chat messages: llm-d-router hashes each message's role and content bytes with no separator (estimate.go); the reference hashes " +
			"json.Marshal of the messages, as GIE v1.5.0 hashing.go getUserInputBytes — the encodings, so the block counts, differ"},
	{Name: "completions-non-ascii", SameScores: false,
		Rule: "text outside ASCII: llm-d-router's blocks are blockSizeTokens×4 bytes (bytes packed as uint32 pseudo-tokens); the reference's are " +
			"blockSizeTokens×4 Unicode code points (SPEC §2.1), so a three-byte character moves every boundary after it"},
}

// prefixPlugins are the prefix study's plugins besides the picker.
const prefixPlugins = approxProducer + `- type: prefix-cache-scorer
`

// prefixWorkload returns the prefix study's trials: n per class, in class order, each with its
// shares drawn from seed.
func prefixWorkload(seed int64, n int) []Trial {
	r := rand.New(rand.NewPCG(uint64(seed), 0x70726566))
	fractions := []float64{0, 0.25, 0.5, 0.75, 1}
	var out []Trial
	for _, cl := range prefixClasses {
		for i := range n {
			t := Trial{Class: cl.Name, Index: i}
			for j := range fleetSize {
				t.Setup[j] = fractions[r.IntN(len(fractions))]
			}
			out = append(out, t)
		}
	}
	return out
}

// trialRequests builds the requests of trial t: each endpoint's share and the probe. The text
// derives from the seed, the trial's index and its class, so both EPPs see the same bytes.
func trialRequests(t Trial, seed int64, model string) (shares [fleetSize]*request, probe request) {
	index := t.Index
	r := rand.New(rand.NewPCG(uint64(seed)^uint64(index)*0x9e3779b97f4a7c15, classSeed(t.Class)))
	word := func(vocab []string) string { return vocab[r.IntN(len(vocab))] }
	text := func(vocab []string, n int) string {
		ws := make([]string, n)
		for i := range ws {
			ws[i] = word(vocab)
		}
		return strings.Join(ws, " ")
	}
	marker := fmt.Sprintf("trial %d of %s:", index, t.Class)
	cut := func(s string, f float64) string {
		rs := []rune(s)
		return string(rs[:int(f*float64(len(rs)))])
	}
	completions := func(prompt any, extra map[string]any) request {
		m := map[string]any{"model": model, "prompt": prompt, "max_tokens": 1}
		maps.Copy(m, extra)
		b, _ := json.Marshal(m)
		return request{path: "/v1/completions", body: b}
	}
	tail := "probe " + text(asciiWords, 40)
	switch t.Class {
	case "completions-text", "completions-non-ascii", "completions-cache-salt":
		vocab := asciiWords
		if t.Class == "completions-non-ascii" {
			vocab = mixedWords
		}
		p := marker + " " + text(vocab, 600)
		for j := range fleetSize {
			if f := t.Setup[j]; f > 0 {
				var extra map[string]any
				if t.Class == "completions-cache-salt" {
					// Odd endpoints hold their share under another salt: no match there.
					extra = map[string]any{"cache_salt": []string{"salt-a", "salt-b"}[j%2]}
				}
				q := completions(cut(p, f), extra)
				shares[j] = &q
			}
		}
		var extra map[string]any
		if t.Class == "completions-cache-salt" {
			extra = map[string]any{"cache_salt": "salt-a"}
		}
		probe = completions(p+" "+tail, extra)
	case "completions-token-ids":
		ids := make([]int, 1200)
		for i := range ids {
			ids[i] = 1000 + r.IntN(30000)
		}
		ids[0] = index
		for j := range fleetSize {
			if f := t.Setup[j]; f > 0 {
				q := completions(ids[:int(f*float64(len(ids)))], nil)
				shares[j] = &q
			}
		}
		probeIDs := append(slices.Clone(ids), 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26)
		probe = completions(probeIDs, nil)
	case "completions-prompt-list":
		list := []string{marker + " " + text(asciiWords, 300), text(asciiWords, 300)}
		joined := strings.Join(list, " ")
		for j := range fleetSize {
			if f := t.Setup[j]; f > 0 {
				// A share is a prefix of the list's joined text, sent as a list of its first
				// string and the rest (the shape of the probe).
				s := cut(joined, f)
				var l []string
				if len(s) <= len(list[0]) {
					l = []string{s}
				} else {
					l = []string{list[0], strings.TrimPrefix(s[len(list[0]):], " ")}
				}
				q := completions(l, nil)
				shares[j] = &q
			}
		}
		probe = completions([]string{list[0], list[1] + " " + tail}, nil)
	case "chat":
		var msgs []map[string]string
		for i := range 8 {
			role := []string{"user", "assistant"}[i%2]
			content := text(asciiWords, 80)
			if i == 0 {
				content = marker + " " + content
			}
			msgs = append(msgs, map[string]string{"role": role, "content": content})
		}
		chat := func(m []map[string]string) request {
			b, _ := json.Marshal(map[string]any{"model": model, "messages": m, "max_tokens": 1})
			return request{path: "/v1/chat/completions", body: b}
		}
		for j := range fleetSize {
			if f := t.Setup[j]; f > 0 {
				// A share is the conversation's first turns (a multi-turn chat's history).
				q := chat(msgs[:max(1, int(f*float64(len(msgs))))])
				shares[j] = &q
			}
		}
		probe = chat(append(slices.Clone(msgs), map[string]string{"role": "user", "content": tail}))
	}
	return shares, probe
}

// runPrefixTrial sends trial t to the EPP and records the probe's scores as t.Scores[side].
func runPrefixTrial(w *worker, t *Trial, side int) error {
	shares, probe := trialRequests(*t, w.seed, w.model)
	for j, q := range shares {
		if q == nil {
			continue
		}
		if _, err := w.send(*q, []string{w.endpoints[j]}); err != nil {
			return fmt.Errorf("the share of %s: %v", w.endpoints[j], err)
		}
	}
	for j, q := range shares {
		if q == nil {
			continue
		}
		ep := w.endpoints[j]
		var last map[string]float64
		err := harness.Eventually(5*time.Second, 20*time.Millisecond, 1, func() error {
			s, err := w.send(*q, []string{ep})
			if err != nil {
				return err
			}
			last = s
			if s[ep] != 1 {
				return fmt.Errorf("the share sent again with the hint [%s] scores %v there, not 1 (not yet indexed)", ep, s[ep])
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%v (scores %v)", err, last)
		}
	}
	return w.probe(probe, t, side)
}

// asciiWords and mixedWords are the vocabularies of the prompts: ASCII words, and words with
// two- and three-byte UTF-8 characters (Latin accents, CJK, Hangul).
var (
	asciiWords = strings.Fields("endpoint picker gateway request prefix cache block token model server queue load score filter " +
		"profile handler weight route stream chunk header metadata pool replica decode prefill latency budget signal window")
	mixedWords = strings.Fields("café naïve résumé 東京 推論 模型 요청 서버 캐시 gateway 端点 選択 préfixe κλειδί ключ")
)
