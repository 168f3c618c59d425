package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SLOs are the per-request service-level objectives that define goodput, in milliseconds; 0
// means not set. They are vLLM's `vllm bench serve --goodput` objectives: "ttft", "tpot" and
// "e2el" (vllm/benchmarks/serve.py, parse_goodput and check_goodput_args).
type SLOs struct {
	TTFTMs float64 `json:"ttft_ms,omitempty"`
	TPOTMs float64 `json:"tpot_ms,omitempty"`
	E2ELMs float64 `json:"e2el_ms,omitempty"`
}

// ParseGoodput parses --goodput: KEY:VALUE pairs separated by spaces or commas ("ttft:500
// tpot:50"), keys ttft, tpot and e2el, values positive milliseconds, each key at most once. ""
// gives no SLO. Errors name --goodput and the pair.
func ParseGoodput(s string) (SLOs, error) {
	var out SLOs
	seen := map[string]bool{}
	for _, pair := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		key, val, ok := strings.Cut(pair, ":")
		if !ok {
			return SLOs{}, fmt.Errorf("--goodput %q: %q is not KEY:VALUE (keys ttft, tpot, e2el; values in ms)", s, pair)
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return SLOs{}, fmt.Errorf("--goodput %q: %s must be a positive number of milliseconds, got %q", s, key, val)
		}
		if seen[key] {
			return SLOs{}, fmt.Errorf("--goodput %q: %s given twice", s, key)
		}
		seen[key] = true
		switch key {
		case "ttft":
			out.TTFTMs = v
		case "tpot":
			out.TPOTMs = v
		case "e2el":
			out.E2ELMs = v
		default:
			return SLOs{}, fmt.Errorf("--goodput %q: unknown metric %q (have ttft, tpot, e2el)", s, key)
		}
	}
	return out, nil
}

// Set reports whether any SLO is set.
func (s SLOs) Set() bool { return s.TTFTMs > 0 || s.TPOTMs > 0 || s.E2ELMs > 0 }

// String is the --goodput form of s ("ttft:500 tpot:50"), "" when none is set.
func (s SLOs) String() string {
	var parts []string
	for _, p := range []struct {
		k string
		v float64
	}{{"ttft", s.TTFTMs}, {"tpot", s.TPOTMs}, {"e2el", s.E2ELMs}} {
		if p.v > 0 {
			parts = append(parts, p.k+":"+trimFloat(p.v))
		}
	}
	return strings.Join(parts, " ")
}

// Meets reports whether o counts towards goodput: it completed (Outcome.OK) and meets every set
// SLO, each metric at most its objective. TPOT is (E2E − TTFT)/(output tokens − 1), and 0 for a
// single output token, as vLLM feeds it to goodput (calculate_metrics: all_tpots).
func (s SLOs) Meets(o *Outcome) bool {
	if !o.OK() {
		return false
	}
	if s.TTFTMs > 0 && o.TTFTMs > s.TTFTMs {
		return false
	}
	if s.TPOTMs > 0 {
		tpot := 0.0
		if o.OutputTokens > 1 {
			tpot = (o.E2EMs - o.TTFTMs) / float64(o.OutputTokens-1)
		}
		if tpot > s.TPOTMs {
			return false
		}
	}
	return !(s.E2ELMs > 0 && o.E2EMs > s.E2ELMs)
}

// Goodput counts the outcomes that meet every SLO and divides by durationS, the benchmark's
// duration in seconds (Metrics.DurationS), as vLLM's request_goodput: good requests per second.
// It returns 0, 0 when no SLO is set or durationS is not positive.
func Goodput(outs []Outcome, s SLOs, durationS float64) (good int, perSecond float64) {
	if !s.Set() {
		return 0, 0
	}
	for i := range outs {
		if s.Meets(&outs[i]) {
			good++
		}
	}
	if durationS > 0 {
		perSecond = float64(good) / durationS
	}
	return good, perSecond
}
