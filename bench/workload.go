// Package bench is eppkit's serving benchmark: seeded workloads generated in process (random,
// shared-prefix, prefix-repetition, multi-lora, sharegpt), an open-loop load generator that
// streams requests through the gateway stand-in (fakes/gateway) to a fake vLLM fleet behind an
// EPP, results in the layout of `vllm bench serve` (vLLM vllm/benchmarks/serve.py) plus a JSON
// file, per-endpoint tables and plots, policy comparisons on fresh fleets with the frozen
// latency profile of SPEC §7, and an oracle lower bound on mean TTFT computed from the fake's
// latency model.
//
// Token counts: prompts are built from lower-case words each followed by one space, so that the
// fake vLLM's tokenizer (llm-d-inference-sim's dummy tokenizer: a run of word characters with
// its trailing whitespace is one token; fakes/vllm/engine.Tokenize) counts exactly one token per
// word. Lengths in this package are in those tokens unless they say characters.
package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
)

// Request is one benchmark request: a completion prompt and how many tokens to generate.
type Request struct {
	// ID is the request's index in the workload, from 0.
	ID int `json:"id"`
	// Prompt is the completion prompt.
	Prompt string `json:"prompt"`
	// PromptTokens is the prompt's length in fake-vLLM tokens (engine.Tokenize).
	PromptTokens int `json:"prompt_tokens"`
	// OutputTokens is max_tokens (the fake generates exactly this many; vLLM's ignore_eos).
	OutputTokens int `json:"output_tokens"`
	// Model is the request's "model": "" means the base model, else a LoRA adapter name.
	Model string `json:"model,omitempty"`
	// Group is the shared-prefix group (shared-prefix, prefix-repetition), else -1.
	Group int `json:"group"`
	// SLO, when set, marks an interactive request: the load generator sends its objectives as
	// the x-slo-ttft-ms and x-slo-tpot-ms headers (SPEC §5's latency SLO headers) and the result
	// reports its class's SLO attainment. nil is a batch request without SLOs.
	SLO *SLOs `json:"slo,omitempty"`
}

// Request classes of an SLO mix (Spec.SLOFraction).
const (
	// ClassInteractive is the requests that carry SLO headers.
	ClassInteractive = "interactive"
	// ClassBatch is the requests without SLOs.
	ClassBatch = "batch"
)

// Class is the request's class: ClassInteractive with an SLO, else ClassBatch.
func (r *Request) Class() string {
	if r.SLO != nil {
		return ClassInteractive
	}
	return ClassBatch
}

// Headers are the request headers the load generator adds for r: x-slo-ttft-ms and
// x-slo-tpot-ms with its SLO's objectives in milliseconds (only those set), none for a batch
// request. The fleet simulation hands the same headers to the EPP it drives.
func (r *Request) Headers() map[string]string {
	if r.SLO == nil {
		return nil
	}
	h := map[string]string{}
	if r.SLO.TTFTMs > 0 {
		h[HeaderTTFTSLO] = trimFloat(r.SLO.TTFTMs)
	}
	if r.SLO.TPOTMs > 0 {
		h[HeaderTPOTSLO] = trimFloat(r.SLO.TPOTMs)
	}
	return h
}

// The latency SLO request headers (SPEC §5; GIE's predicted-latency plugins read the same names).
const (
	HeaderTTFTSLO = "x-slo-ttft-ms"
	HeaderTPOTSLO = "x-slo-tpot-ms"
)

// Workload names.
const (
	WorkloadRandom           = "random"
	WorkloadSharedPrefix     = "shared-prefix"
	WorkloadPrefixRepetition = "prefix-repetition"
	WorkloadMultiLoRA        = "multi-lora"
	WorkloadShareGPT         = "sharegpt"
)

// maxDistinctTokens bounds the text a generator keeps in memory (about 4 bytes per token).
const maxDistinctTokens = 50_000_000

// WorkloadNames lists the generators, in documentation order.
var WorkloadNames = []string{WorkloadRandom, WorkloadSharedPrefix, WorkloadPrefixRepetition, WorkloadMultiLoRA, WorkloadShareGPT}

// Spec selects and parameterises a workload. Zero fields take the defaults of DefaultSpec.
// Lengths are in tokens.
type Spec struct {
	// Name is one of WorkloadNames.
	Name string `json:"name"`
	// Seed seeds every random choice; equal specs give equal requests.
	Seed int64 `json:"seed"`

	// random: input and output lengths are uniform in [len×(1−RangeRatio), len×(1+RangeRatio)]
	// (vLLM's --random-input-len, --random-output-len, --random-range-ratio). shared-prefix:
	// each question's length and each request's output length are drawn the same way (the
	// "question_len=30 +/- 9, output_len=1000 +/- 300" of the predicted-latency study's scenarios,
	// llm-d blog 2026-03-13 "Predicted-Latency Based Scheduling for LLMs"); 0, its default, keeps
	// them fixed.
	InputLen   int     `json:"input_len,omitempty"`
	OutputLen  int     `json:"output_len,omitempty"`
	RangeRatio float64 `json:"range_ratio,omitempty"`

	// shared-prefix (inference-perf's data.shared_prefix): Groups system prompts of
	// SystemPromptLen tokens, PromptsPerGroup distinct questions of QuestionLen tokens each, and
	// OutputLen output tokens. Requests draw a (group, question) pair uniformly at random. With
	// MultiTurn, each draw of a pair is the next turn of that conversation: the prompt grows by
	// the previous turns' questions and a stand-in answer of OutputLen tokens.
	Groups          int  `json:"groups,omitempty"`
	PromptsPerGroup int  `json:"prompts_per_group,omitempty"`
	SystemPromptLen int  `json:"system_prompt_len,omitempty"`
	QuestionLen     int  `json:"question_len,omitempty"`
	MultiTurn       bool `json:"multi_turn,omitempty"`

	// prefix-repetition (vLLM's --dataset-name prefix_repetition): NumPrefixes prefixes of
	// PrefixLen tokens, each followed by a fresh suffix of SuffixLen tokens.
	NumPrefixes int `json:"num_prefixes,omitempty"`
	PrefixLen   int `json:"prefix_len,omitempty"`
	SuffixLen   int `json:"suffix_len,omitempty"`

	// multi-lora: random prompts, each for one of Adapters (uniformly; "" in the list is the
	// base model). The fleet decides which adapters exist; the CLI fills this from it.
	Adapters []string `json:"adapters,omitempty"`

	// sharegpt: a local JSON file in the ShareGPT layout ([{"conversations": [{"from": "human",
	// "value": ...}, {"from": "gpt", "value": ...}]}]); the first human turn is the prompt and the
	// first gpt turn's length in words is the output length (capped by MaxOutputLen).
	Path         string `json:"path,omitempty"`
	MaxOutputLen int    `json:"max_output_len,omitempty"`

	// Any workload: SLOFraction of the requests (each drawn independently, from a random stream
	// of its own so that the prompts do not change with the mix) are interactive and carry SLO
	// (only its ttft and tpot objectives: they are the ones with request headers); the rest are
	// batch requests without SLOs. 0 (the default) is every request batch.
	SLOFraction float64 `json:"slo_fraction,omitempty"`
	SLO         SLOs    `json:"slo,omitempty"`
}

// DefaultSpec returns the defaults of workload name.
//
// shared-prefix defaults are upstream's high-cache shared-prefix benchmark scaled to a 2-core
// machine with a 2-endpoint fake fleet: GIE benchmarking/prefix-cache-aware/high-cache-values.yaml
// runs num_groups 256, num_prompts_per_group 16, system_prompt_len 2048, question_len 256,
// output_len 256 (llm-d guides/inference-scheduling runs 150 × 5, 6000 / 1200 / 1000). eppkit
// keeps 16 prompts per group and the 2048-token system prompt, and scales groups to 32, the
// question to 128 tokens and the output to 32 tokens, so that the prefix working set (32 × 2048
// tokens) exceeds one endpoint's KV cache (DefaultKVCacheSize) but fits the fleet's, and the
// per-token streaming cost stays within the machine.
func DefaultSpec(name string) Spec {
	s := Spec{Name: name, Seed: 1}
	switch name {
	case WorkloadRandom, WorkloadMultiLoRA:
		s.InputLen, s.OutputLen, s.RangeRatio = 512, 32, 0.5
	case WorkloadSharedPrefix:
		s.Groups, s.PromptsPerGroup, s.SystemPromptLen, s.QuestionLen, s.OutputLen = 32, 16, 2048, 128, 32
	case WorkloadPrefixRepetition:
		s.NumPrefixes, s.PrefixLen, s.SuffixLen, s.OutputLen = 8, 1024, 128, 32
	case WorkloadShareGPT:
		s.MaxOutputLen = 128
	}
	return s
}

// withDefaults fills zero fields from DefaultSpec(s.Name).
func (s Spec) withDefaults() Spec {
	d := DefaultSpec(s.Name)
	fill := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&s.InputLen, d.InputLen)
	fill(&s.OutputLen, d.OutputLen)
	fill(&s.Groups, d.Groups)
	fill(&s.PromptsPerGroup, d.PromptsPerGroup)
	fill(&s.SystemPromptLen, d.SystemPromptLen)
	fill(&s.QuestionLen, d.QuestionLen)
	fill(&s.NumPrefixes, d.NumPrefixes)
	fill(&s.PrefixLen, d.PrefixLen)
	fill(&s.SuffixLen, d.SuffixLen)
	fill(&s.MaxOutputLen, d.MaxOutputLen)
	if s.RangeRatio == 0 {
		s.RangeRatio = d.RangeRatio
	}
	return s
}

// Validate checks the fields the named workload uses; errors name the field.
func (s Spec) Validate() error {
	pos := func(name string, v int) error {
		if v < 1 {
			return fmt.Errorf("workload %s: %s must be at least 1, got %d", s.Name, name, v)
		}
		if v > 1<<20 {
			return fmt.Errorf("workload %s: %s must be at most %d, got %d", s.Name, name, 1<<20, v)
		}
		return nil
	}
	if s.SLOFraction < 0 || s.SLOFraction > 1 || math.IsNaN(s.SLOFraction) {
		return fmt.Errorf("workload %s: slo_fraction must be in [0,1], got %v", s.Name, s.SLOFraction)
	}
	if s.SLOFraction > 0 && s.SLO.TTFTMs <= 0 && s.SLO.TPOTMs <= 0 {
		return fmt.Errorf("workload %s: slo_fraction %v needs an slo with ttft or tpot (the objectives that have request headers)", s.Name, s.SLOFraction)
	}
	if s.SLO.E2ELMs > 0 {
		return fmt.Errorf("workload %s: slo: e2el has no request header; use ttft and tpot", s.Name)
	}
	switch s.Name {
	case WorkloadRandom, WorkloadMultiLoRA:
		if err := errors.Join(pos("input_len", s.InputLen), pos("output_len", s.OutputLen)); err != nil {
			return err
		}
		if s.RangeRatio < 0 || s.RangeRatio >= 1 || math.IsNaN(s.RangeRatio) {
			return fmt.Errorf("workload %s: range_ratio must be in [0,1), got %v", s.Name, s.RangeRatio)
		}
		if s.Name == WorkloadMultiLoRA && len(s.Adapters) == 0 {
			return fmt.Errorf("workload %s: adapters must not be empty", s.Name)
		}
	case WorkloadSharedPrefix:
		if err := errors.Join(pos("groups", s.Groups), pos("prompts_per_group", s.PromptsPerGroup),
			pos("system_prompt_len", s.SystemPromptLen), pos("question_len", s.QuestionLen), pos("output_len", s.OutputLen)); err != nil {
			return err
		}
		if s.RangeRatio < 0 || s.RangeRatio >= 1 || math.IsNaN(s.RangeRatio) {
			return fmt.Errorf("workload %s: range_ratio must be in [0,1), got %v", s.Name, s.RangeRatio)
		}
		if t := int64(s.Groups) * (int64(s.SystemPromptLen) + int64(s.PromptsPerGroup)*int64(s.QuestionLen)); t > maxDistinctTokens {
			return fmt.Errorf("workload %s: groups × (system_prompt_len + prompts_per_group × question_len) = %d tokens, more than %d", s.Name, t, maxDistinctTokens)
		}
	case WorkloadPrefixRepetition:
		if err := errors.Join(pos("num_prefixes", s.NumPrefixes), pos("prefix_len", s.PrefixLen),
			pos("suffix_len", s.SuffixLen), pos("output_len", s.OutputLen)); err != nil {
			return err
		}
		if t := int64(s.NumPrefixes) * int64(s.PrefixLen); t > maxDistinctTokens {
			return fmt.Errorf("workload %s: num_prefixes × prefix_len = %d tokens, more than %d", s.Name, t, maxDistinctTokens)
		}
	case WorkloadShareGPT:
		if s.Path == "" {
			return fmt.Errorf("workload %s: path (a local ShareGPT-layout JSON file) is required", s.Name)
		}
		return pos("max_output_len", s.MaxOutputLen)
	default:
		return fmt.Errorf("workload: unknown name %q (have %s)", s.Name, strings.Join(WorkloadNames, ", "))
	}
	return nil
}

// Generate returns n requests of the workload. Equal specs give equal requests. Errors name the
// bad field (or, for sharegpt, the file problem).
func Generate(spec Spec, n int) ([]Request, error) {
	if n < 0 {
		return nil, fmt.Errorf("workload: number of requests must not be negative, got %d", n)
	}
	g, err := NewGenerator(spec)
	if err != nil {
		return nil, err
	}
	out := make([]Request, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out, nil
}

// Generator produces a workload's requests one at a time, in order: the i-th call of Next
// returns what Generate's i-th request is, so a consumer that needs one request at a time (the
// fleet simulation sends 100,000 requests of 8 KiB prompts) keeps only the workload's text (system
// prompts, questions, prefixes) in memory instead of every prompt. Not safe for concurrent use.
type Generator struct {
	spec Spec
	rng  *rand.Rand
	n    int
	next func() Request
	// sloRNG draws the SLO mix apart from rng, so the prompts are the same with any mix.
	sloRNG *rand.Rand

	// shared-prefix
	systems      []string
	questions    [][]string
	questionLens [][]int
	history      map[[2]int]*strings.Builder
	histTokens   map[[2]int]int
	lastOutput   map[[2]int]int
	// prefix-repetition
	prefixes []string
	// sharegpt
	pool []Request
}

// NewGenerator validates spec (zero fields take DefaultSpec's values) and draws the workload's
// fixed text. Errors name the bad field (or, for sharegpt, the file problem).
func NewGenerator(spec Spec) (*Generator, error) {
	spec = spec.withDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	g := &Generator{spec: spec, rng: rand.New(rand.NewPCG(uint64(spec.Seed), 0x6570706b6974)), // "eppkit"
		sloRNG: rand.New(rand.NewPCG(uint64(spec.Seed), 0x736c6f))} // "slo"
	switch spec.Name {
	case WorkloadRandom, WorkloadMultiLoRA:
		g.next = g.nextRandom
	case WorkloadSharedPrefix:
		g.initSharedPrefix()
		g.next = g.nextSharedPrefix
	case WorkloadPrefixRepetition:
		g.prefixes = make([]string, spec.NumPrefixes)
		for i := range g.prefixes {
			g.prefixes[i] = fmt.Sprintf("prefix%d ", i) + words(g.rng, spec.PrefixLen-1)
		}
		g.next = g.nextPrefixRepetition
	case WorkloadShareGPT:
		pool, err := shareGPTPool(g.rng, spec)
		if err != nil {
			return nil, err
		}
		g.pool = pool
		g.next = func() Request { return g.pool[g.n%len(g.pool)] }
	}
	return g, nil
}

// Spec returns the spec after defaults.
func (g *Generator) Spec() Spec { return g.spec }

// Next returns the next request; its ID is its index from 0.
func (g *Generator) Next() Request {
	r := g.next()
	r.ID = g.n
	g.n++
	r.SLO = nil
	if g.spec.SLOFraction > 0 && g.sloRNG.Float64() < g.spec.SLOFraction {
		slo := g.spec.SLO
		r.SLO = &slo
	}
	return r
}

// uniformLen draws a length uniform in [l×(1−r), l×(1+r)], at least 1.
func uniformLen(rng *rand.Rand, l int, r float64) int {
	lo := int(math.Floor(float64(l) * (1 - r)))
	hi := int(math.Ceil(float64(l) * (1 + r)))
	lo = max(lo, 1)
	if hi <= lo {
		return lo
	}
	return lo + rng.IntN(hi-lo+1)
}

func (g *Generator) nextRandom() Request {
	s, rng := &g.spec, g.rng
	in := uniformLen(rng, s.InputLen, s.RangeRatio)
	r := Request{Prompt: words(rng, in), PromptTokens: in, OutputTokens: uniformLen(rng, s.OutputLen, s.RangeRatio), Group: -1}
	if len(s.Adapters) > 0 {
		r.Model = s.Adapters[rng.IntN(len(s.Adapters))]
	}
	return r
}

func (g *Generator) initSharedPrefix() {
	s, rng := &g.spec, g.rng
	g.systems = make([]string, s.Groups)
	g.questions = make([][]string, s.Groups)
	g.questionLens = make([][]int, s.Groups)
	for i := range g.systems {
		// A group tag first, so that no two groups share even their first block by chance.
		g.systems[i] = fmt.Sprintf("group%d ", i) + words(rng, s.SystemPromptLen-1)
		g.questions[i] = make([]string, s.PromptsPerGroup)
		g.questionLens[i] = make([]int, s.PromptsPerGroup)
		for q := range g.questions[i] {
			// uniformLen draws nothing when RangeRatio is 0, so fixed lengths keep the
			// requests of earlier versions.
			g.questionLens[i][q] = uniformLen(rng, s.QuestionLen, s.RangeRatio)
			g.questions[i][q] = words(rng, g.questionLens[i][q])
		}
	}
	// Multi-turn conversation state per (group, question): the accumulated history and the
	// output length of the conversation's last turn.
	g.history = map[[2]int]*strings.Builder{}
	g.histTokens = map[[2]int]int{}
	g.lastOutput = map[[2]int]int{}
}

func (g *Generator) nextSharedPrefix() Request {
	s, rng := &g.spec, g.rng
	grp, q := rng.IntN(s.Groups), rng.IntN(s.PromptsPerGroup)
	prompt := g.systems[grp] + g.questions[grp][q]
	tokens := s.SystemPromptLen + g.questionLens[grp][q]
	output := uniformLen(rng, s.OutputLen, s.RangeRatio)
	if s.MultiTurn {
		k := [2]int{grp, q}
		h := g.history[k]
		if h == nil {
			h = &strings.Builder{}
			h.WriteString(prompt)
			g.history[k] = h
			g.histTokens[k] = tokens
		} else {
			// Previous turn's stand-in answer (as long as that turn's output), then a new
			// question.
			ql := uniformLen(rng, s.QuestionLen, s.RangeRatio)
			h.WriteString(words(rng, g.lastOutput[k]))
			h.WriteString(words(rng, ql))
			g.histTokens[k] += g.lastOutput[k] + ql
		}
		g.lastOutput[k] = output
		prompt, tokens = h.String(), g.histTokens[k]
	}
	return Request{Prompt: prompt, PromptTokens: tokens, OutputTokens: output, Group: grp}
}

func (g *Generator) nextPrefixRepetition() Request {
	s, rng := &g.spec, g.rng
	p := rng.IntN(s.NumPrefixes)
	return Request{Prompt: g.prefixes[p] + words(rng, s.SuffixLen), PromptTokens: s.PrefixLen + s.SuffixLen,
		OutputTokens: s.OutputLen, Group: p}
}

// WriteJSONL writes one Request per line.
func WriteJSONL(w io.Writer, reqs []Request) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range reqs {
		if err := enc.Encode(&reqs[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ReadJSONL reads requests written by WriteJSONL (or by hand: "prompt" and "output_tokens" are
// required; "prompt_tokens" is recomputed when 0). Errors name the line and the field.
func ReadJSONL(r io.Reader) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64<<20)
	var out []Request
	line := 0
	for sc.Scan() {
		line++
		b := strings.TrimSpace(sc.Text())
		if b == "" {
			continue
		}
		var req Request
		req.Group = -1
		dec := json.NewDecoder(strings.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, fmt.Errorf("workload JSONL line %d: %w", line, err)
		}
		if req.Prompt == "" {
			return nil, fmt.Errorf("workload JSONL line %d: prompt must not be empty", line)
		}
		if req.OutputTokens < 1 {
			return nil, fmt.Errorf("workload JSONL line %d: output_tokens must be at least 1, got %d", line, req.OutputTokens)
		}
		if req.SLO != nil && (req.SLO.E2ELMs != 0 || !(req.SLO.TTFTMs > 0 || req.SLO.TPOTMs > 0) || req.SLO.TTFTMs < 0 || req.SLO.TPOTMs < 0) {
			return nil, fmt.Errorf("workload JSONL line %d: slo needs a positive ttft_ms or tpot_ms and no e2el_ms (only those have request headers), got %+v", line, *req.SLO)
		}
		if req.PromptTokens <= 0 {
			req.PromptTokens = CountTokens(req.Prompt)
		}
		req.ID = len(out)
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("workload JSONL: %w", err)
	}
	return out, nil
}

// ReadJSONLFile reads a JSONL workload file.
func ReadJSONLFile(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload file: %w", err)
	}
	defer f.Close()
	return ReadJSONL(f)
}
