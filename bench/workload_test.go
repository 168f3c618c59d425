package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestGenerateIsSeededAndCountsTokens(t *testing.T) {
	for _, name := range []string{WorkloadRandom, WorkloadSharedPrefix, WorkloadPrefixRepetition, WorkloadMultiLoRA} {
		t.Run(name, func(t *testing.T) {
			spec := DefaultSpec(name)
			spec.Seed = 42
			if name == WorkloadMultiLoRA {
				spec.Adapters = []string{"", "a", "b"}
			}
			if name == WorkloadSharedPrefix {
				spec.SystemPromptLen, spec.QuestionLen = 200, 20
			}
			a, err := Generate(spec, 50)
			if err != nil {
				t.Fatalf("seed %d: %v", spec.Seed, err)
			}
			b, _ := Generate(spec, 50)
			if d := cmp.Diff(a, b); d != "" {
				t.Fatalf("seed %d: equal specs gave different requests (-a +b):\n%s", spec.Seed, d)
			}
			spec.Seed = 43
			c, _ := Generate(spec, 50)
			if cmp.Equal(a, c) {
				t.Fatalf("seeds 42 and 43 gave equal requests")
			}
			for i, r := range a {
				if r.ID != i {
					t.Errorf("request %d has ID %d", i, r.ID)
				}
				if got := CountTokens(r.Prompt); got != r.PromptTokens {
					t.Errorf("seed 42 request %d: PromptTokens %d, the fake's tokenizer counts %d", i, r.PromptTokens, got)
				}
				if r.OutputTokens < 1 {
					t.Errorf("request %d: OutputTokens %d", i, r.OutputTokens)
				}
			}
		})
	}
}

func TestRandomLengthsStayInRange(t *testing.T) {
	spec := Spec{Name: WorkloadRandom, Seed: 7, InputLen: 100, OutputLen: 20, RangeRatio: 0.25}
	reqs, err := Generate(spec, 500)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, r := range reqs {
		if r.PromptTokens < 75 || r.PromptTokens > 125 || r.OutputTokens < 15 || r.OutputTokens > 25 {
			t.Fatalf("seed 7: lengths %d/%d outside 100±25 / 20±5", r.PromptTokens, r.OutputTokens)
		}
		sum += float64(r.PromptTokens)
	}
	// n = 500 draws uniform on [75,125] (sd ≈ 14.7): the mean is within 4 standard errors (2.6) of 100.
	if mean := sum / 500; math.Abs(mean-100) > 2.7 {
		t.Fatalf("seed 7: mean input length %.1f, want 100 ± 2.7 (n=500, 4 standard errors)", mean)
	}
}

func TestSharedPrefixGroupsShareExactlyTheSystemPrompt(t *testing.T) {
	spec := Spec{Name: WorkloadSharedPrefix, Seed: 3, Groups: 4, PromptsPerGroup: 3, SystemPromptLen: 64, QuestionLen: 16, OutputLen: 8}
	reqs, err := Generate(spec, 200)
	if err != nil {
		t.Fatal(err)
	}
	seenGroups := map[int]bool{}
	distinct := map[string]bool{}
	for _, r := range reqs {
		if r.Group < 0 || r.Group >= 4 {
			t.Fatalf("group %d out of range", r.Group)
		}
		seenGroups[r.Group] = true
		distinct[r.Prompt] = true
		if r.PromptTokens != 80 || r.OutputTokens != 8 {
			t.Fatalf("prompt %d / output %d tokens, want 80 / 8", r.PromptTokens, r.OutputTokens)
		}
	}
	if len(seenGroups) != 4 || len(distinct) != 12 {
		t.Fatalf("seed 3, n=200: %d groups and %d distinct prompts, want 4 and 12", len(seenGroups), len(distinct))
	}
	for _, a := range reqs {
		for _, b := range reqs {
			common := commonTokens(a.Prompt, b.Prompt)
			switch {
			case a.Prompt == b.Prompt:
			case a.Group == b.Group && common < 64:
				t.Fatalf("same group shares %d tokens, want ≥ 64", common)
			case a.Group != b.Group && common != 0:
				t.Fatalf("groups %d and %d share %d leading tokens, want 0", a.Group, b.Group, common)
			}
		}
	}
}

func TestSharedPrefixMultiTurnGrows(t *testing.T) {
	spec := Spec{Name: WorkloadSharedPrefix, Seed: 5, Groups: 1, PromptsPerGroup: 1, SystemPromptLen: 32, QuestionLen: 8, OutputLen: 4, MultiTurn: true}
	reqs, err := Generate(spec, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		if want := 40 + i*12; r.PromptTokens != want || CountTokens(r.Prompt) != want {
			t.Fatalf("turn %d: %d tokens (tokenizer %d), want %d", i, r.PromptTokens, CountTokens(r.Prompt), want)
		}
		if i > 0 && !strings.HasPrefix(r.Prompt, reqs[i-1].Prompt) {
			t.Fatalf("turn %d does not extend turn %d", i, i-1)
		}
	}
}

// With RangeRatio, shared-prefix questions and outputs vary within len×(1±r), multi-turn prompts
// grow by the previous turn's output and a new question, and the token counts stay exact.
func TestSharedPrefixRangeRatioVariesLengths(t *testing.T) {
	spec := Spec{Name: WorkloadSharedPrefix, Seed: 11, Groups: 2, PromptsPerGroup: 4, SystemPromptLen: 40, QuestionLen: 20,
		OutputLen: 50, RangeRatio: 0.3, MultiTurn: true}
	reqs, err := Generate(spec, 300)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[int]bool{}
	lastPrompt := map[string]string{} // first question → the conversation's latest prompt
	for i, r := range reqs {
		if r.OutputTokens < 35 || r.OutputTokens > 65 {
			t.Fatalf("seed 11, request %d: output %d tokens, want within 50×(1±0.3)", i, r.OutputTokens)
		}
		outputs[r.OutputTokens] = true
		if n := CountTokens(r.Prompt); n != r.PromptTokens {
			t.Fatalf("seed 11, request %d: PromptTokens %d, tokenizer %d", i, r.PromptTokens, n)
		}
		// The first turn is the system prompt (40) and one question of 14–26 tokens.
		words := strings.Fields(r.Prompt)
		key := strings.Join(words[:40], " ")
		if prev, ok := lastPrompt[key+words[40]]; ok && !strings.HasPrefix(r.Prompt, prev) {
			t.Fatalf("seed 11, request %d does not extend its conversation", i)
		}
		lastPrompt[key+words[40]] = r.Prompt
	}
	// 300 draws uniform over 31 lengths: all equal has probability far below 1e-100.
	if len(outputs) < 10 {
		t.Fatalf("seed 11: only %d distinct output lengths in 300 requests", len(outputs))
	}
	if _, err := Generate(Spec{Name: WorkloadSharedPrefix, Seed: 1, RangeRatio: 1}, 1); err == nil || !strings.Contains(err.Error(), "range_ratio") {
		t.Fatalf("range_ratio 1 accepted for shared-prefix: %v", err)
	}
}

func TestMultiLoRAUsesTheAdapters(t *testing.T) {
	reqs, err := Generate(Spec{Name: WorkloadMultiLoRA, Seed: 9, Adapters: []string{"x", "y"}}, 100)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, r := range reqs {
		n[r.Model]++
	}
	if n["x"]+n["y"] != 100 || n["x"] == 0 || n["y"] == 0 {
		t.Fatalf("seed 9: adapter counts %v, want both of x and y and nothing else", n)
	}
}

func TestShareGPTFromLocalFile(t *testing.T) {
	reqs, err := Generate(Spec{Name: WorkloadShareGPT, Seed: 1, Path: "testdata/sharegpt_small.json", MaxOutputLen: 10}, 5)
	if err != nil {
		t.Fatal(err)
	}
	prompts := map[string]bool{}
	for _, r := range reqs {
		prompts[r.Prompt] = true
		if r.OutputTokens > 10 || r.OutputTokens < 4 {
			t.Errorf("output tokens %d, want 4–10 (capped)", r.OutputTokens)
		}
	}
	// a1 and d4 are usable; b2's prompt is under 4 tokens and c3 has one turn.
	want := map[string]bool{
		"How do I bake sourdough bread at home with a simple starter?":  true,
		"Explain what an endpoint picker does in an inference gateway.": true,
	}
	if d := cmp.Diff(want, prompts); d != "" {
		t.Fatalf("prompts (-want +got):\n%s", d)
	}
	if _, err := Generate(Spec{Name: WorkloadShareGPT, Path: "testdata/missing.json"}, 1); err == nil || !strings.Contains(err.Error(), "path") {
		t.Fatalf("missing file: err %v, want one naming path", err)
	}
}

func TestSpecValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Name: "nope"}, "unknown name"},
		{Spec{Name: WorkloadRandom, InputLen: -1, OutputLen: 1}, "input_len"},
		{Spec{Name: WorkloadRandom, InputLen: 1, OutputLen: 1, RangeRatio: 1}, "range_ratio"},
		{Spec{Name: WorkloadSharedPrefix, Groups: 0, PromptsPerGroup: 1, SystemPromptLen: 1, QuestionLen: 1, OutputLen: 1}, "groups"},
		{Spec{Name: WorkloadPrefixRepetition, NumPrefixes: 1, PrefixLen: 1, SuffixLen: 0, OutputLen: 1}, "suffix_len"},
		{Spec{Name: WorkloadMultiLoRA, InputLen: 1, OutputLen: 1}, "adapters"},
		{Spec{Name: WorkloadShareGPT, MaxOutputLen: 1}, "path"},
		{Spec{Name: WorkloadSharedPrefix, Groups: 1 << 20, PromptsPerGroup: 1 << 20, SystemPromptLen: 1, QuestionLen: 1, OutputLen: 1}, "more than"},
		{Spec{Name: WorkloadPrefixRepetition, NumPrefixes: 1 << 20, PrefixLen: 1 << 20, SuffixLen: 1, OutputLen: 1}, "more than"},
	} {
		err := tc.spec.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want one containing %q", tc.spec, err, tc.want)
		}
	}
}

func TestJSONLRoundTripAndErrors(t *testing.T) {
	reqs, err := Generate(Spec{Name: WorkloadMultiLoRA, Seed: 2, Adapters: []string{"a", ""}, InputLen: 10, OutputLen: 3,
		SLOFraction: 0.5, SLO: SLOs{TTFTMs: 300}}, 7)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, reqs); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(reqs, back); d != "" {
		t.Fatalf("round trip (-want +got):\n%s", d)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"prompt":"a b c ","output_tokens":0}`, "line 1: output_tokens"},
		{"\n" + `{"prompt":"","output_tokens":3}`, "line 2: prompt"},
		{`{"prompt":"x","output_tokens":3,"bogus":1}`, "line 1"},
		{`not json`, "line 1"},
		{`{"prompt":"x","output_tokens":3,"slo":{"e2el_ms":5}}`, "line 1: slo needs a positive ttft_ms or tpot_ms"},
		{`{"prompt":"x","output_tokens":3,"slo":{}}`, "line 1: slo needs"},
	} {
		if _, err := ReadJSONL(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want one containing %q", tc.in, err, tc.want)
		}
	}
	got, err := ReadJSONL(strings.NewReader(`{"prompt":"one two three ","output_tokens":4}`))
	if err != nil || got[0].PromptTokens != 3 || got[0].Group != -1 {
		t.Fatalf("hand-written line: %+v, %v; want 3 prompt tokens counted and group -1", got, err)
	}
}

func TestArrivalsRateAndBurstiness(t *testing.T) {
	for _, tc := range []struct {
		burstiness float64
		wantCV     float64
	}{{1, 1}, {4, 0.5}, {0.25, 2}} {
		arr, err := Arrivals([]Step{{Rate: 100, Duration: 100 * time.Second}}, tc.burstiness, 11)
		if err != nil {
			t.Fatal(err)
		}
		// The count is about rate × duration = 10,000; for Poisson its sd is 100, for gamma
		// arrivals sd ≈ 100 × CV. Allow 5 sd.
		if n := float64(len(arr)); math.Abs(n-10000) > 5*100*tc.wantCV {
			t.Errorf("seed 11 burstiness %v: %v arrivals in 100 s at 100/s, want 10000 ± %v", tc.burstiness, n, 5*100*tc.wantCV)
		}
		var gaps []float64
		prev := time.Duration(0)
		for _, a := range arr {
			if a.At < prev {
				t.Fatalf("arrivals out of order")
			}
			gaps = append(gaps, (a.At - prev).Seconds())
			prev = a.At
		}
		d := Summarise(gaps, nil)
		// Gamma(shape k) gaps have coefficient of variation 1/√k; with n ≈ 10,000 the estimate is
		// within 10% of it.
		if cv := d.Std / d.Mean; math.Abs(cv-tc.wantCV) > 0.1*tc.wantCV {
			t.Errorf("seed 11 burstiness %v: gap CV %.3f, want %.2f ± 10%% (n=%d)", tc.burstiness, cv, tc.wantCV, len(gaps))
		}
	}
}

func TestArrivalsFollowTheLadder(t *testing.T) {
	steps, err := ParseLadder("2, 8", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]Step{{2, 10 * time.Second}, {8, 10 * time.Second}}, steps); d != "" {
		t.Fatalf("ParseLadder (-want +got):\n%s", d)
	}
	arr, err := Arrivals(steps, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	count := [2]int{}
	for _, a := range arr {
		lo := time.Duration(a.Step) * 10 * time.Second
		if a.At < lo || a.At >= lo+10*time.Second {
			t.Fatalf("arrival at %v is outside step %d", a.At, a.Step)
		}
		count[a.Step]++
	}
	// Poisson counts with means 20 and 80: 20 ± 5√20 and 80 ± 5√80.
	if math.Abs(float64(count[0])-20) > 22.4 || math.Abs(float64(count[1])-80) > 44.8 {
		t.Fatalf("seed 4: step counts %v, want about 20 and 80", count)
	}
	for _, bad := range []string{"", "0", "-1", "x", "4,,8", "NaN", "Inf"} {
		if _, err := ParseLadder(bad, time.Second); err == nil || !strings.Contains(err.Error(), "--rate") {
			t.Errorf("ParseLadder(%q): err %v, want one naming --rate", bad, err)
		}
	}
	if _, err := ParseLadder("1", 0); err == nil || !strings.Contains(err.Error(), "--duration") {
		t.Errorf("zero duration: err %v", err)
	}
	if _, err := Arrivals(steps, 0, 1); err == nil || !strings.Contains(err.Error(), "--burstiness") {
		t.Errorf("burstiness 0: err %v", err)
	}
}

// commonTokens counts the leading tokens two prompts share.
func commonTokens(a, b string) int {
	ta, tb := tokenTexts(a), tokenTexts(b)
	n := 0
	for n < len(ta) && n < len(tb) && ta[n] == tb[n] {
		n++
	}
	return n
}

func tokenTexts(s string) []string {
	return strings.SplitAfter(strings.TrimSuffix(s, " "), " ")
}
