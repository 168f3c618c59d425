package bench

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/eppkit/eppkit/internal/percentile"
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
func ParseGoodput(s string) (SLOs, error) { return ParseSLOs("--goodput", s) }

// ParseSLOs parses SLOs in --goodput's form given to flag (--goodput, --slo); errors name flag
// and the pair.
func ParseSLOs(flag, s string) (SLOs, error) {
	var out SLOs
	seen := map[string]bool{}
	for _, pair := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		key, val, ok := strings.Cut(pair, ":")
		if !ok {
			return SLOs{}, fmt.Errorf("%s %q: %q is not KEY:VALUE (keys ttft, tpot, e2el; values in ms)", flag, s, pair)
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return SLOs{}, fmt.Errorf("%s %q: %s must be a positive number of milliseconds, got %q", flag, s, key, val)
		}
		if seen[key] {
			return SLOs{}, fmt.Errorf("%s %q: %s given twice", flag, s, key)
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
			return SLOs{}, fmt.Errorf("%s %q: unknown metric %q (have ttft, tpot, e2el)", flag, s, key)
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

// GoodputResult is a run's (or a step's) goodput under the SLOs of --goodput.
type GoodputResult struct {
	SLOs SLOs `json:"slos"`
	// Good is the outcomes that meet every SLO (SLOs.Meets); PerSecond is Good ÷ the duration
	// (vLLM's request_goodput); Fraction is Good ÷ every outcome, in [0,1].
	Good      int     `json:"good"`
	PerSecond float64 `json:"per_second"`
	Fraction  float64 `json:"fraction"`
}

// ComputeGoodput is Goodput as a GoodputResult, nil when no SLO is set.
func ComputeGoodput(outs []Outcome, s SLOs, durationS float64) *GoodputResult {
	if !s.Set() {
		return nil
	}
	good, rate := Goodput(outs, s, durationS)
	g := &GoodputResult{SLOs: s, Good: good, PerSecond: rate}
	if len(outs) > 0 {
		g.Fraction = float64(good) / float64(len(outs))
	}
	return g
}

// ClassResult is the SLO attainment of one request class of an SLO mix (Spec.SLOFraction).
type ClassResult struct {
	// Class is ClassInteractive or ClassBatch.
	Class string `json:"class"`
	// Requests is the class's outcomes; Met those that meet their SLO: an interactive request
	// its own (Outcome.SLO), a batch request the --goodput SLOs. Attainment is Met ÷ Requests,
	// in [0,1], or -1 when the class has no SLO to meet (batch without --goodput).
	Requests   int     `json:"requests"`
	Met        int     `json:"met"`
	Attainment float64 `json:"attainment"`
	// P50TTFTMs and P90TTFTMs are over the class's completed requests (percentile.Of), ms.
	P50TTFTMs float64 `json:"p50_ttft_ms"`
	P90TTFTMs float64 `json:"p90_ttft_ms"`
}

// SLOClasses is the per-class SLO attainment of outs, interactive first, nil when no outcome is
// interactive (the run had no SLO mix). goodput are the --goodput SLOs that batch requests are
// held to (none set: their attainment is -1).
func SLOClasses(outs []Outcome, goodput SLOs) []ClassResult {
	var inter, batch []Outcome
	for _, o := range outs {
		if o.SLO != nil {
			inter = append(inter, o)
		} else {
			batch = append(batch, o)
		}
	}
	if len(inter) == 0 {
		return nil
	}
	class := func(name string, outs []Outcome, slo func(*Outcome) *SLOs) ClassResult {
		c := ClassResult{Class: name, Requests: len(outs), Attainment: -1}
		var ttft []float64
		for i := range outs {
			o := &outs[i]
			if o.OK() {
				ttft = append(ttft, o.TTFTMs)
			}
			if s := slo(o); s != nil && s.Meets(o) {
				c.Met++
			}
		}
		if len(outs) > 0 && (name == ClassInteractive || goodput.Set()) {
			c.Attainment = float64(c.Met) / float64(len(outs))
		}
		c.P50TTFTMs, c.P90TTFTMs = percentile.Of(ttft, 50), percentile.Of(ttft, 90)
		return c
	}
	out := []ClassResult{class(ClassInteractive, inter, func(o *Outcome) *SLOs { return o.SLO })}
	if len(batch) > 0 {
		out = append(out, class(ClassBatch, batch, func(*Outcome) *SLOs {
			if goodput.Set() {
				return &goodput
			}
			return nil
		}))
	}
	return out
}

// PrintClasses writes the per-class SLO attainment table of an SLO mix; nothing without one.
func PrintClasses(w io.Writer, classes []ClassResult, goodput SLOs) {
	if len(classes) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "class\tSLOs\trequests\tmet\tSLO attainment\tp50 TTFT (ms)\tp90 TTFT (ms)\t")
	for _, c := range classes {
		slo, att := "its headers", "n/a"
		if c.Class == ClassBatch {
			slo = "--goodput " + goodput.String()
			if !goodput.Set() {
				slo = "none"
			}
		}
		if c.Attainment >= 0 {
			att = fmt.Sprintf("%.1f%%", 100*c.Attainment)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.1f\t%.1f\t\n", c.Class, slo, c.Requests, c.Met, att, c.P50TTFTMs, c.P90TTFTMs)
	}
	_ = tw.Flush()
}

// PrintGoodput writes the goodput line under the --goodput SLOs and the per-class SLO attainment
// table of an SLO mix, each only when the run has it.
func PrintGoodput(w io.Writer, r *Result) {
	var slos SLOs
	if g := r.Goodput; g != nil {
		slos = g.SLOs
		fmt.Fprintf(w, "goodput (SLOs %s): %d of %d requests (%.1f%%), %.2f req/s\n", g.SLOs, g.Good, len(r.Outcomes), 100*g.Fraction, g.PerSecond)
	}
	if len(r.Classes) > 0 {
		fmt.Fprintln(w)
		PrintClasses(w, r.Classes, slos)
	}
}
