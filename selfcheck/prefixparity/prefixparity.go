// Package prefixparity is `eppkit interop prefix-parity` (make interop-prefix-parity): the
// reference EPP and llm-d-router v0.10.0, each with approximate prefix-cache scoring and nothing
// else, are given the same request history and then asked to score the same requests; their
// per-endpoint scores (envoy.lb / x-gateway-destination-endpoint-scores, both with
// --emit-endpoint-scores) are compared request by request, and every difference is attributed to
// a named rule, or reported as unexplained (reports/interop/prefix-parity).
//
// It is black-box on both sides: llm-d-router is a binary built from its source snapshot
// (`eppkit tools build llmd-router`), never a library. Each EPP runs in a harness of its own (a
// fresh fake vLLM fleet of four endpoints on the static source, one after the other) and sees the
// same seeded workload.
//
// # How a trial runs
//
// A trial is one prompt P of one request kind (Class). Each endpoint j is given a share of P
// (none, a quarter, a half, three quarters or all of it, cut at a character that falls inside a
// block): the share is sent once with the subset hint [j], so the EPP picks j and records the
// share's blocks there (both EPPs record at pick time, in PreRequest). Before the probe, each
// share is sent again with the hint [j] until its score on j is 1 (every block of the share is
// indexed on j; llm-d-router indexes asynchronously): re-sending the same share records nothing
// new. The probe is P followed by words no trial uses, with no hint: its scores on the four
// endpoints are what is compared. A probe records its blocks where it is picked, but no later
// trial shares a block with it.
//
// Both EPPs are configured alike: approx-prefix-cache-producer with autoTune false and
// blockSizeTokens 64 (llm-d-router raises any smaller size to 64: pkg/epp/framework/plugins/
// requestcontrol/dataproducer/approximateprefix/plugin.go, minBlockSizeTokens), prefix-cache-scorer
// of weight 1 and max-score-picker, so a published score is the prefix score
// matchedBlocks / totalBlocks.
package prefixparity

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/conformance/target"
	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/internal/toolcache"
)

// ScoresKey is the dynamic-metadata key, in namespace envoy.lb, of the per-endpoint scores both
// EPPs publish with --emit-endpoint-scores (llm-d-router v0.10.0 pkg/epp/metadata/consts.go,
// DestinationEndpointScoresKey).
const ScoresKey = "x-gateway-destination-endpoint-scores"

// fleetSize is the number of endpoints of each run's fleet.
const fleetSize = 4

// Class is one kind of request the check sends, with what it expects of the two EPPs' scores.
type Class struct {
	// Name names the class in the report (e.g. "completions-text").
	Name string
	// SameScores is true when the two EPPs must publish the same scores for this kind of
	// request; a difference then is unexplained and fails the check.
	SameScores bool
	// Rule says why the scores agree, or names the difference and where each side decides it.
	Rule string
}

// Classes are the request kinds, in report order.
var Classes = []Class{
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

// Options configure Run; each field names the `eppkit interop prefix-parity` flag it mirrors.
type Options struct {
	// LLMDRouter is llm-d-router v0.10.0's EPP binary (--llmd-router; "" = `eppkit tools path
	// llmd-router epp`).
	LLMDRouter string
	// Eppkit is the eppkit binary that runs the reference EPP ("" = this executable).
	Eppkit string
	// LogDir receives each run's harness and EPP logs and their configs (--log-dir; required).
	LogDir string
	// Report, when set, receives the Markdown summary (--report).
	Report string
	// Trials is the number of trials per class (--trials, ≥ 1).
	Trials int
	// Seed seeds the workload and the fakes (--seed; 0 = from the clock).
	Seed int64
	// Timeout bounds the whole check (--timeout).
	Timeout time.Duration
	// Out receives progress lines and the verdict; Logger the harnesses' logs (nil discards each).
	Out    io.Writer
	Logger *slog.Logger
}

// Trial is one class's prompt history and probe, with each EPP's scores of the probe by endpoint
// index (0..fleetSize-1).
type Trial struct {
	Class string
	// Index is the trial's number within its class (its prompt's text derives from it).
	Index int
	// Shares are the fraction of the prompt each endpoint was given (0 = none).
	Shares [fleetSize]float64
	// Scores are the probe's scores by endpoint index: [0] the reference, [1] llm-d-router.
	Scores [2][fleetSize]float64
}

// Differs reports whether the two EPPs' scores of the probe differ on any endpoint (beyond 1e-9).
func (t Trial) Differs() bool {
	for j := range fleetSize {
		if math.Abs(t.Scores[0][j]-t.Scores[1][j]) > 1e-9 {
			return true
		}
	}
	return false
}

// BestDiffers reports whether the endpoints with the highest score (all of them, on a tie) differ
// between the two EPPs: whether the difference can change the pick.
func (t Trial) BestDiffers() bool {
	best := func(s [fleetSize]float64) (set [fleetSize]bool) {
		top := slices.Max(s[:])
		for j, v := range s {
			set[j] = math.Abs(v-top) <= 1e-9
		}
		return set
	}
	return best(t.Scores[0]) != best(t.Scores[1])
}

// Run runs the check. Its error is a *conformance.ExitError: ExitTestFailed when a class whose
// scores must agree shows a difference, ExitHarness when a harness or EPP could not start or an
// EPP published no scores, ExitBadOptions for an invalid option.
func Run(ctx context.Context, o Options) error {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	bad := func(format string, a ...any) error {
		return &conformance.ExitError{Code: conformance.ExitBadOptions, Err: fmt.Errorf(format, a...)}
	}
	harnessErr := func(format string, a ...any) error {
		return &conformance.ExitError{Code: conformance.ExitHarness, Err: fmt.Errorf(format, a...)}
	}
	if o.Trials < 1 {
		return bad("--trials must be ≥ 1, got %d", o.Trials)
	}
	if o.LogDir == "" {
		return bad("--log-dir: required")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.LLMDRouter == "" {
		p, err := toolcache.Path("llmd-router", "epp")
		if err != nil {
			return harnessErr("%v", err)
		}
		o.LLMDRouter = p
	}
	if _, err := os.Stat(o.LLMDRouter); err != nil {
		return harnessErr("--llmd-router: %v", err)
	}
	if o.Eppkit == "" {
		exe, err := os.Executable()
		if err != nil {
			return harnessErr("%v", err)
		}
		o.Eppkit = exe
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano() % 1_000_000_000
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	fmt.Fprintf(out, "prefix parity: %d trials per class, %d classes, seed %d\n", o.Trials, len(Classes), o.Seed)

	var scores [2][]Trial
	for side, name := range []string{"reference", "llm-d-router"} {
		trials, err := runSide(ctx, o, side, out)
		if err != nil {
			return harnessErr("%s: %v (seed %d)", name, err, o.Seed)
		}
		scores[side] = trials
	}
	trials := scores[0]
	for i := range trials {
		trials[i].Scores[1] = scores[1][i].Scores[1]
	}
	summary, unexplained := Summarize(trials, o)
	fmt.Fprint(out, summary)
	if o.Report != "" {
		if err := os.MkdirAll(filepath.Dir(o.Report), 0o755); err != nil {
			return harnessErr("%v", err)
		}
		if err := os.WriteFile(o.Report, []byte(summary), 0o644); err != nil {
			return harnessErr("%v", err)
		}
	}
	if unexplained > 0 {
		return &conformance.ExitError{Code: conformance.ExitTestFailed,
			Err: fmt.Errorf("%d trial(s) of classes whose scores must agree differ (seed %d)", unexplained, o.Seed)}
	}
	return nil
}

// runSide starts a harness with one EPP (side 0 the reference, 1 llm-d-router) and runs every
// trial against it; the trials' Scores[side] are set.
func runSide(ctx context.Context, o Options, side int, out io.Writer) ([]Trial, error) {
	name := []string{"reference", "llmd-router"}[side]
	dir, err := filepath.Abs(filepath.Join(o.LogDir, name))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := harness.FreePorts(1)
	if err != nil {
		return nil, err
	}
	var endpoints []string
	for i := 1; i <= fleetSize; i++ {
		endpoints = append(endpoints, fmt.Sprintf("%s%d:%d", fleet.DefaultIPPrefix, i, ports[0]))
	}
	configFile := filepath.Join(dir, "epp-config.yaml")
	var tmpl string
	switch side {
	case 0:
		if err := os.WriteFile(configFile, []byte(referenceConfig), 0o644); err != nil {
			return nil, err
		}
		tmpl = target.ReferenceCommand
	case 1:
		epFile := filepath.Join(dir, "endpoints.yaml")
		var b strings.Builder
		b.WriteString("endpoints:\n")
		for i, ep := range endpoints {
			host, port, _ := strings.Cut(ep, ":")
			fmt.Fprintf(&b, "- name: ep%d\n  address: %q\n  port: %q\n", i, host, port)
		}
		if err := os.WriteFile(epFile, []byte(b.String()), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(configFile, []byte(fmt.Sprintf(llmdRouterConfig, epFile)), 0o644); err != nil {
			return nil, err
		}
		// Flags: pkg/epp/server/options.go of its source; --pool-name only labels metrics in
		// file-discovery mode (Validate requires it).
		tmpl = "exec " + conformance.ShellQuote(o.LLMDRouter) + " --pool-name eppkit-pool --secure-serving=false --metrics-endpoint-auth=false " +
			"--tracing=false --drain-timeout=0s --emit-endpoint-scores --config-file {{.ConfigFile}} " +
			"--grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}"
	}
	tgt, err := target.NewCommandTarget(name, tmpl)
	if err != nil {
		return nil, err
	}
	src, err := conformance.NewEndpointSource("static")
	if err != nil {
		return nil, err
	}
	suite, err := harness.Start(ctx, harness.Config{Target: tgt, Source: src, ConfigFile: configFile, LogDir: dir,
		Seed: o.Seed, FleetSize: fleetSize, FleetPort: ports[0], Eppkit: o.Eppkit, NoPredictorSidecar: true, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("the harness could not start: %v", err)
	}
	defer suite.Close()
	if got := suite.Endpoints(); !slices.Equal(got, endpoints) {
		return nil, fmt.Errorf("the fleet is at %v, not %v (the check needs loopback aliases on %s0/24)", got, endpoints, fleet.DefaultIPPrefix)
	}
	fmt.Fprintf(out, "%s ready: ext_proc %s, fleet %v\n", name, suite.TargetAddress, endpoints)
	c, err := extprocclient.Dial(suite.TargetAddress, suite.TargetTLS)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	w := &worker{ctx: ctx, c: c, model: suite.ModelName, endpoints: endpoints, seed: o.Seed}
	trials := Workload(o.Seed, o.Trials)
	for i := range trials {
		if err := w.run(&trials[i], side); err != nil {
			return nil, fmt.Errorf("trial %d (%s): %v", i, trials[i].Class, err)
		}
	}
	return trials, nil
}

// referenceConfig is the reference's EndpointPickerConfig for the check.
const referenceConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters:
    autoTune: false
    blockSizeTokens: 64
- type: prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
    weight: 1
  - pluginRef: max-score-picker
`

// llmdRouterConfig is llm-d-router's, with its file-discovery plugin (%s: the endpoints file;
// pkg/epp/framework/plugins/datalayer/discovery/file/README.md).
const llmdRouterConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters:
    autoTune: false
    blockSizeTokens: 64
- type: prefix-cache-scorer
- type: max-score-picker
- type: file-discovery
  parameters:
    path: %s
dataLayer:
  discovery:
    pluginRef: file-discovery
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
    weight: 1
  - pluginRef: max-score-picker
`

// Workload returns the trials of a check: n per class, in class order, each with its shares
// drawn from seed (the same trials for both EPPs).
func Workload(seed int64, n int) []Trial {
	r := rand.New(rand.NewPCG(uint64(seed), 0x70726566))
	fractions := []float64{0, 0.25, 0.5, 0.75, 1}
	var out []Trial
	for _, cl := range Classes {
		for i := range n {
			t := Trial{Class: cl.Name, Index: i}
			for j := range fleetSize {
				t.Shares[j] = fractions[r.IntN(len(fractions))]
			}
			out = append(out, t)
		}
	}
	return out
}

// worker sends a trial's requests to one EPP.
type worker struct {
	ctx       context.Context
	c         *extprocclient.Client
	model     string
	endpoints []string
	seed      int64
}

// request is one request of a trial: its path and body.
type request struct {
	path string
	body []byte
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
			if f := t.Shares[j]; f > 0 {
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
			if f := t.Shares[j]; f > 0 {
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
			if f := t.Shares[j]; f > 0 {
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
			if f := t.Shares[j]; f > 0 {
				// A share is the conversation's first turns (a multi-turn chat's history).
				q := chat(msgs[:max(1, int(f*float64(len(msgs))))])
				shares[j] = &q
			}
		}
		probe = chat(append(slices.Clone(msgs), map[string]string{"role": "user", "content": tail}))
	}
	return shares, probe
}

// run sends trial t to the EPP and records the probe's scores as t.Scores[side].
func (w *worker) run(t *Trial, side int) error {
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
	s, err := w.send(probe, nil)
	if err != nil {
		return fmt.Errorf("the probe: %v", err)
	}
	for j, ep := range w.endpoints {
		v, ok := s[ep]
		if !ok {
			return fmt.Errorf("the probe's scores %v name no %s", s, ep)
		}
		t.Scores[side][j] = v
	}
	return nil
}

// classSeed is a stream number per class, from its name (FNV-1a).
func classSeed(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return h
}

// send sends q on a stream of its own, with the subset hint when hint is non-nil, and returns the
// pick's published scores by endpoint. A refusal, a pick outside the hint or missing scores is an
// error.
func (w *worker) send(q request, hint []string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	st, err := w.c.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	d, err := st.Exchange(ctx, extprocclient.Request{
		Headers:    extprocclient.RequestHeaders("POST", q.path, "eppkit-prefix-parity", q.body, map[string]string{"content-type": "application/json"}),
		Body:       q.body,
		SubsetHint: hint,
	})
	if err != nil {
		return nil, err
	}
	if d.Immediate != nil {
		return nil, fmt.Errorf("refused with %d: %s", d.Immediate.Status, strings.TrimSpace(string(d.Immediate.Body)))
	}
	if hint != nil && d.Pick() != hint[0] {
		return nil, fmt.Errorf("picked %q outside the subset hint %v", d.Pick(), hint)
	}
	return Scores(d.DynamicMetadata)
}

// Scores reads envoy.lb / ScoresKey from a pick's dynamic metadata: endpoint (ip:port) → score.
// The error says what is missing or malformed.
func Scores(md *structpb.Struct) (map[string]float64, error) {
	ns := md.GetFields()[extprocclient.DestinationNamespace].GetStructValue()
	v, ok := ns.GetFields()[ScoresKey]
	if !ok {
		return nil, fmt.Errorf("the pick's dynamic metadata has no %s/%s (run the EPP with --emit-endpoint-scores)", extprocclient.DestinationNamespace, ScoresKey)
	}
	st := v.GetStructValue()
	if st == nil {
		return nil, fmt.Errorf("%s is not a struct", ScoresKey)
	}
	out := map[string]float64{}
	for k, e := range st.GetFields() {
		n, ok := e.GetKind().(*structpb.Value_NumberValue)
		if !ok {
			return nil, fmt.Errorf("%s[%s] is not a number", ScoresKey, k)
		}
		out[k] = n.NumberValue
	}
	return out, nil
}

// Summarize renders the Markdown summary of the compared trials and counts the trials of classes
// whose scores must agree that differ (unexplained differences).
func Summarize(trials []Trial, o Options) (string, int) {
	var b strings.Builder
	b.WriteString("# Prefix-score parity: the reference EPP and llm-d-router v0.10.0\n\n")
	b.WriteString("Generated by `make interop-prefix-parity` (`eppkit interop prefix-parity`, selfcheck/prefixparity); do not edit by hand.\n\n")
	fmt.Fprintf(&b, "Both EPPs score with approx-prefix-cache-producer (autoTune false, blockSizeTokens 64), prefix-cache-scorer and max-score-picker only, "+
		"each on a fresh fleet of %d fake vLLM endpoints (static source; llm-d-router through its file-discovery plugin), and publish their scores "+
		"with --emit-endpoint-scores. A trial gives each endpoint a share of one prompt (none, ¼, ½, ¾ or all of it, sent with the subset hint of that endpoint "+
		"until it scores 1 there), then sends the whole prompt with a fresh tail, unhinted: the probe's four scores are compared. "+
		"%d trials per class, seed %d.\n\n", fleetSize, o.Trials, o.Seed)
	b.WriteString("| Class | Trials | Scores differ | Best endpoint differs | Largest difference | Must agree | Verdict | Why |\n|---|---|---|---|---|---|---|---|\n")
	unexplained := 0
	for _, cl := range Classes {
		n, diff, bestDiff, largest := 0, 0, 0, 0.0
		for _, t := range trials {
			if t.Class != cl.Name {
				continue
			}
			n++
			if t.Differs() {
				diff++
			}
			if t.BestDiffers() {
				bestDiff++
			}
			for j := range fleetSize {
				largest = max(largest, math.Abs(t.Scores[0][j]-t.Scores[1][j]))
			}
		}
		verdict := "agree"
		switch {
		case cl.SameScores && diff > 0:
			verdict = "**UNEXPLAINED**"
			unexplained += diff
		case !cl.SameScores && diff > 0:
			verdict = "differ, as the rule says"
		case !cl.SameScores:
			verdict = "no difference seen (the rule predicts one)"
		}
		must := "yes"
		if !cl.SameScores {
			must = "no"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.4f | %s | %s | %s |\n", cl.Name, n, diff, bestDiff, largest, must, verdict, conformance.MarkdownCell(cl.Rule))
	}
	b.WriteString("\n## Trials that differ\n\nScores by endpoint (ep0..ep3), the reference first; shares are the fraction of the prompt each endpoint held.\n\n")
	b.WriteString("| Class | Trial | Shares | Reference | llm-d-router |\n|---|---|---|---|---|\n")
	shown := 0
	for _, t := range trials {
		if !t.Differs() || shown >= 24 {
			continue
		}
		shown++
		fmt.Fprintf(&b, "| %s | %d | %v | %s | %s |\n", t.Class, t.Index, t.Shares, fmtScores(t.Scores[0]), fmtScores(t.Scores[1]))
	}
	if shown == 0 {
		b.WriteString("| — | | | | |\n")
	}
	fmt.Fprintf(&b, "\n**%d unexplained difference(s).**\n", unexplained)
	return b.String(), unexplained
}

func fmtScores(s [fleetSize]float64) string {
	parts := make([]string, fleetSize)
	for j, v := range s {
		parts[j] = fmt.Sprintf("%.4f", v)
	}
	return strings.Join(parts, " ")
}

// asciiWords and mixedWords are the vocabularies of the prompts: ASCII words, and words with
// two- and three-byte UTF-8 characters (Latin accents, CJK, Hangul).
var (
	asciiWords = strings.Fields("endpoint picker gateway request prefix cache block token model server queue load score filter " +
		"profile handler weight route stream chunk header metadata pool replica decode prefill latency budget signal window")
	mixedWords = strings.Fields("café naïve résumé 東京 推論 模型 요청 서버 캐시 gateway 端点 選択 préfixe κλειδί ключ")
)
