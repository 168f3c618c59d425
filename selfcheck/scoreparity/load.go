package scoreparity

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/eppkit/eppkit/conformance/harness"
)

// loadQueueThresholdTokens is token-load-scorer's queueThresholdTokens in the token-load study:
// small enough that a few held requests move the score by tenths (upstream's default, 4,194,304,
// would move it by millionths).
const loadQueueThresholdTokens = 16384

// TokenLoad is the token-load study (`eppkit interop token-load-parity`): inflight-load-producer
// and token-load-scorer (queueThresholdTokens 16384; llm-d-router v0.10.0
// scheduling/scorer/tokenload/token_load.go, requestcontrol/dataproducer/inflightload/), with
// approx-prefix-cache-producer as in the prefix study feeding the uncached-token count. A trial
// holds 0 to 3 requests in flight on each endpoint (sent with its subset hint over an ext_proc
// stream left open: both EPPs count a request in flight from PreRequest until its stream ends
// or its response starts), then sends a probe unhinted and compares its scores,
// 1 − min(in-flight tokens + the probe's uncached tokens, T) / T per endpoint. Every prompt is
// unique, so nothing is cached and a request's tokens are its prompt's blocks × 64.
var TokenLoad = &Study{
	Name:  "token-load",
	Title: "Token-load parity: the reference EPP and llm-d-router v0.10.0",
	About: "Both EPPs score with inflight-load-producer and token-load-scorer (queueThresholdTokens 16384), approx-prefix-cache-producer " +
		"(autoTune false, blockSizeTokens 64) feeding the uncached-token count, and max-score-picker. A trial holds 0–3 requests in flight on each " +
		"endpoint (sent with that endpoint's subset hint over an ext_proc stream left open), then sends a probe unhinted and compares its four scores; " +
		"the held streams are then ended and the next trial waits until every endpoint scores alike again. Scores are compared relative to the probe's best score: " +
		"the probe's own uncached tokens, the same on every endpoint (no prompt is shared), cancel. They differ in absolute terms — llm-d-router counts the probe's own tokens as " +
		"its raw input estimate (bytes/4), the reference as its uncached blocks × 64: the inflight-load-producer declares PrefixCacheMatchInfo an optional input, " +
		"and llm-d-router orders data producers by required inputs only (datalayer/data_graph.go buildDAG), so in its Produce the prefix match is not there yet " +
		"(in PreRequest, for the requests it holds in flight, it is, and those agree). The absolute scores are in the table of trials that differ.",
	Reference:  config(loadPlugins("token-load-scorer", fmt.Sprintf("queueThresholdTokens: %d", loadQueueThresholdTokens)), "token-load-scorer", false),
	LLMDRouter: config(loadPlugins("token-load-scorer", fmt.Sprintf("queueThresholdTokens: %d", loadQueueThresholdTokens)), "token-load-scorer", true),
	Classes:    tokenLoadClasses,
	Workload:   func(seed int64, n int) []Trial { return loadWorkload(tokenLoadClasses, seed, n) },
	run:        runLoadTrial,
	SetupLabel: "held requests",
	Relative:   true,
}

// ActiveRequest is the active-request study (part of `eppkit interop token-load-parity`): the
// same producer and trials with active-request-scorer (llm-d-router v0.10.0
// scheduling/scorer/activerequest/active_request.go: 1 for an idle endpoint, else
// (maxCount − count) / maxCount over the candidates).
var ActiveRequest = &Study{
	Name:  "active-request",
	Title: "Active-request parity: the reference EPP and llm-d-router v0.10.0",
	About: "Both EPPs score with inflight-load-producer, active-request-scorer (defaults) and max-score-picker, approx-prefix-cache-producer as in " +
		"the token-load study. A trial holds 0–3 requests in flight on each endpoint, then sends a probe unhinted and compares its four scores.",
	Reference:  config(loadPlugins("active-request-scorer", ""), "active-request-scorer", false),
	LLMDRouter: config(loadPlugins("active-request-scorer", ""), "active-request-scorer", true),
	Classes:    activeRequestClasses,
	Workload:   func(seed int64, n int) []Trial { return loadWorkload(activeRequestClasses, seed, n) },
	run:        runLoadTrial,
	SetupLabel: "held requests",
}

var tokenLoadClasses = []Class{
	{Name: "load-completions-text", SameScores: true,
		Rule: "completions of ASCII text: a request's in-flight tokens are its uncached tokens, (totalBlocks − matchedBlocks) × 64 + what lies past " +
			"the indexed blocks (llm-d-router inflightload/producer.go, uncachedInputTokens; the reference the same), and both count the same blocks"},
	{Name: "load-chat", SameScores: false,
		Rule: "chat: the block count comes from each side's chat encoding, which differ (the prefix study's chat rule), so the in-flight tokens do"},
	{Name: "load-completions-non-ascii", SameScores: false,
		Rule: "text outside ASCII: block counts differ as in the prefix study (256 bytes against 256 code points per block), so the in-flight tokens do"},
}

var activeRequestClasses = []Class{
	{Name: "active-requests", SameScores: true,
		Rule: "both count requests in flight per endpoint from PreRequest until the stream ends and score (maxCount − count) / maxCount, 1 when idle"},
}

// loadPlugins are a load study's plugins besides the picker: the prefix producer, the in-flight
// load producer and scorer with its parameters (params: one YAML line, "" for none).
func loadPlugins(scorer, params string) string {
	p := approxProducer + "- type: inflight-load-producer\n- type: " + scorer + "\n"
	if params != "" {
		p += "  parameters:\n    " + params + "\n"
	}
	return p
}

// loadWorkload returns n trials per class: each endpoint holds 0 to 3 requests.
func loadWorkload(classes []Class, seed int64, n int) []Trial {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6c6f6164))
	var out []Trial
	for _, cl := range classes {
		for i := range n {
			t := Trial{Class: cl.Name, Index: i}
			for j := range fleetSize {
				t.Setup[j] = float64(r.IntN(4))
			}
			out = append(out, t)
		}
	}
	return out
}

// loadRequest builds request k of trial t (k = -1: the probe): a unique prompt of its class, 100
// to 900 words (the probe 60).
func loadRequest(t Trial, seed int64, k int, model string) request {
	r := rand.New(rand.NewPCG(uint64(seed)^uint64(t.Index)*0x9e3779b97f4a7c15^uint64(k+2)*0xbf58476d1ce4e5b9, classSeed(t.Class)))
	n := 60
	if k >= 0 {
		n = 100 + r.IntN(800)
	}
	vocab := asciiWords
	if t.Class == "load-completions-non-ascii" {
		vocab = mixedWords
	}
	ws := make([]string, n)
	for i := range ws {
		ws[i] = vocab[r.IntN(len(vocab))]
	}
	text := fmt.Sprintf("load trial %d/%d of %s: %s", t.Index, k, t.Class, strings.Join(ws, " "))
	var body []byte
	path := "/v1/completions"
	if t.Class == "load-chat" {
		path = "/v1/chat/completions"
		body, _ = json.Marshal(map[string]any{"model": model, "max_tokens": 1, "messages": []map[string]string{
			{"role": "system", "content": "be brief"}, {"role": "user", "content": text}}})
	} else {
		body, _ = json.Marshal(map[string]any{"model": model, "max_tokens": 1, "prompt": text})
	}
	return request{path: path, body: body}
}

// runLoadTrial waits until the EPP sees no load (a probe scores every endpoint alike), holds
// t.Setup[j] requests on each endpoint j, sends the probe, records its scores as t.Scores[side]
// and ends the held streams.
func runLoadTrial(w *worker, t *Trial, side int) error {
	var last map[string]float64
	checks := 0
	err := harness.Eventually(5*time.Second, 20*time.Millisecond, 2, func() error {
		// Each check's prompt is its own: a repeated one would match where the last was picked.
		checks++
		idle := request{path: "/v1/completions"}
		idle.body, _ = json.Marshal(map[string]any{"model": w.model, "max_tokens": 1,
			"prompt": fmt.Sprintf("idle check %d of trial %d of %s", checks, t.Index, t.Class)})
		s, err := w.send(idle, nil)
		if err != nil {
			return err
		}
		last = s
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, ep := range w.endpoints {
			lo, hi = min(lo, s[ep]), max(hi, s[ep])
		}
		if hi-lo > 1e-9 {
			return fmt.Errorf("endpoints still score apart (in flight from the last trial): %v", s)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("waiting for no load: %v (scores %v)", err, last)
	}
	var hs []held
	defer func() {
		for _, h := range hs {
			h.release()
		}
	}()
	k := 0
	for j, ep := range w.endpoints {
		for range int(t.Setup[j]) {
			h, _, err := w.hold(loadRequest(*t, w.seed, k, w.model), []string{ep})
			if err != nil {
				return fmt.Errorf("holding request %d on %s: %v", k, ep, err)
			}
			hs = append(hs, h)
			k++
		}
	}
	return w.probe(loadRequest(*t, w.seed, -1, w.model), t, side)
}
