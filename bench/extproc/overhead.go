package extproc

import (
	"fmt"
	"image/color"
	"io"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// DefaultP95BoundMs is the default bound of a sustained rate in a ladder (--p95-bound).
const DefaultP95BoundMs = 50

// SustainedFraction: a rate is sustained only when the EPP decided at least this share of it.
const SustainedFraction = 0.9

// SustainedRow is one target's highest sustained rate at one pool and prompt size: the highest
// rate of the ladder at which no decision failed or was dropped, at least SustainedFraction of
// the rate was decided, and decision latency's P95 stayed within the bound. MaxRate 0 means none
// was sustained.
type SustainedRow struct {
	Target      string  `json:"target"`
	Pages       string  `json:"pages"`
	Endpoints   int     `json:"endpoints"`
	PromptBytes int     `json:"prompt_bytes"`
	MaxRate     float64 `json:"max_sustained_rate"`
	// At MaxRate: decisions/s, P95 (ms), EPP CPU per decision (ms) and RSS (bytes).
	DecisionsPerSec     float64 `json:"decisions_per_second"`
	P95Ms               float64 `json:"p95_ms"`
	EPPCPUPerDecisionMs float64 `json:"epp_cpu_per_decision_ms"`
	EPPRSSBytes         uint64  `json:"epp_rss_bytes"`
}

// Sustains reports whether c is a sustained cell under boundMs.
func Sustains(c MatrixCell, boundMs float64) bool {
	r := c.Report
	return c.Error == "" && r != nil && r.Errors == 0 && r.Dropped == 0 && r.Decisions > 0 &&
		r.LatencyMs.P95 <= boundMs && (c.Rate <= 0 || r.DecisionsPerSec >= SustainedFraction*c.Rate)
}

type cellKey struct {
	target, pages string
	n, size       int
}

// SustainedRates is every (target, pages, endpoints, prompt)'s SustainedRow, in cell order.
func SustainedRates(cells []MatrixCell, boundMs float64) []SustainedRow {
	rows := map[cellKey]*SustainedRow{}
	var order []cellKey
	for _, c := range cells {
		k := cellKey{c.Target, c.Pages, c.Endpoints, c.PromptBytes}
		row := rows[k]
		if row == nil {
			row = &SustainedRow{Target: c.Target, Pages: c.Pages, Endpoints: c.Endpoints, PromptBytes: c.PromptBytes}
			rows[k] = row
			order = append(order, k)
		}
		if Sustains(c, boundMs) && c.Rate > row.MaxRate {
			r := c.Report
			row.MaxRate, row.DecisionsPerSec, row.P95Ms = c.Rate, r.DecisionsPerSec, r.LatencyMs.P95
			row.EPPCPUPerDecisionMs, row.EPPRSSBytes = r.EPPCPUPerDecisionMs, r.EPPRSSBytes
		}
	}
	out := make([]SustainedRow, len(order))
	for i, k := range order {
		out[i] = *rows[k]
	}
	return out
}

// LLMDRouterRatios reads the reference against llm-d-router at one pool and prompt size (issue
// 34's goals): its highest sustained rate ÷ llm-d-router's, and its P95 ÷ llm-d-router's P95 at
// llm-d-router's highest sustained rate. When llm-d-router sustained no step of the ladder, the
// rate ratio is the reference's highest sustained rate ÷ the ladder's lowest rate, a lower bound
// (llm-d-router sustains less than that step; SustainedRateLowerBound), and the P95s are
// compared at the lowest rate, where llm-d-router came closest. A ratio is 0 when a side is
// unknown (the reference sustained nothing, or a cell is missing).
type LLMDRouterRatios struct {
	Pages              string  `json:"pages"`
	Endpoints          int     `json:"endpoints"`
	PromptBytes        int     `json:"prompt_bytes"`
	SustainedRateRatio float64 `json:"sustained_rate_ratio"`
	// SustainedRateLowerBound: llm-d-router sustained no step, so SustainedRateRatio is "at least".
	SustainedRateLowerBound bool    `json:"sustained_rate_ratio_is_lower_bound,omitempty"`
	LLMDRouterMaxRate       float64 `json:"llmd_router_max_sustained_rate"`
	// P95Rate is the offered rate (req/s) the P95s are compared at.
	P95Rate          float64 `json:"p95_compared_at_rate"`
	P95RatioAtItsMax float64 `json:"p95_ratio_at_llmd_router_max"`
}

// ReferenceOverLLMDRouter pairs the reference's and llm-d-router's ladders.
func ReferenceOverLLMDRouter(cells []MatrixCell, sustained []SustainedRow) []LLMDRouterRatios {
	type k3 struct {
		pages   string
		n, size int
	}
	ref, llmd := map[k3]SustainedRow{}, map[k3]SustainedRow{}
	var order []k3
	for _, s := range sustained {
		k := k3{s.Pages, s.Endpoints, s.PromptBytes}
		switch s.Target {
		case TargetReference:
			ref[k] = s
			order = append(order, k)
		case TargetLLMDRouter:
			llmd[k] = s
		}
	}
	at := func(target string, k k3, rate float64) *Report {
		for _, c := range cells {
			if c.Target == target && c.Pages == k.pages && c.Endpoints == k.n && c.PromptBytes == k.size && c.Rate == rate && c.Report != nil {
				return c.Report
			}
		}
		return nil
	}
	lowest := func(k k3) float64 {
		low := 0.0
		for _, c := range cells {
			if c.Target == TargetLLMDRouter && c.Pages == k.pages && c.Endpoints == k.n && c.PromptBytes == k.size && c.Rate > 0 && (low == 0 || c.Rate < low) {
				low = c.Rate
			}
		}
		return low
	}
	var out []LLMDRouterRatios
	for _, k := range order {
		l, ok := llmd[k]
		if !ok {
			continue
		}
		r := LLMDRouterRatios{Pages: k.pages, Endpoints: k.n, PromptBytes: k.size, LLMDRouterMaxRate: l.MaxRate, P95Rate: l.MaxRate,
			SustainedRateRatio: ratioOf(ref[k].MaxRate, l.MaxRate)}
		if l.MaxRate == 0 {
			r.P95Rate = lowest(k)
			r.SustainedRateRatio = ratioOf(ref[k].MaxRate, r.P95Rate)
			r.SustainedRateLowerBound = r.SustainedRateRatio > 0
		}
		if rr, lr := at(TargetReference, k, r.P95Rate), at(TargetLLMDRouter, k, r.P95Rate); rr != nil && lr != nil {
			r.P95RatioAtItsMax = ratioOf(rr.LatencyMs.P95, lr.LatencyMs.P95)
		}
		out = append(out, r)
	}
	return out
}

// PrintOverhead writes the ladder's results: each target's highest sustained rate, and the
// reference against llm-d-router. Nothing without a ladder.
func PrintOverhead(w io.Writer, rep *MatrixReport) {
	if len(rep.Sustained) == 0 {
		return
	}
	fmt.Fprintf(w, "\nhighest sustained rate (no failed or dropped decision, ≥ %.0f%% of the rate decided, P95 ≤ %g ms)\n", 100*SustainedFraction, rep.P95BoundMs)
	fmt.Fprintf(w, "%-11s %-9s %9s %8s %12s %12s %9s %14s %9s\n", "target", "pages", "endpoints", "prompt", "max rate/s", "decisions/s", "p95 ms", "EPP CPU ms/d", "RSS MiB")
	for _, s := range rep.Sustained {
		fmt.Fprintf(w, "%-11s %-9s %9d %8d %12.0f %12.1f %9.3f %14.3f %9.0f\n", s.Target, s.Pages, s.Endpoints, s.PromptBytes, s.MaxRate,
			s.DecisionsPerSec, s.P95Ms, s.EPPCPUPerDecisionMs, float64(s.EPPRSSBytes)/(1<<20))
	}
	if len(rep.RatiosReferenceLLMDRouter) > 0 {
		fmt.Fprintf(w, "\nreference ÷ llm-d-router  %-9s %9s %8s %18s %10s %22s\n", "pages", "endpoints", "prompt", "sustained rate", "at rate/s", "P95 ratio there")
		for _, r := range rep.RatiosReferenceLLMDRouter {
			fmt.Fprintf(w, "%-24s  %-9s %9d %8d %18s %10.0f %22.4g\n", "", r.Pages, r.Endpoints, r.PromptBytes, sustainedRatioText(r), r.P95Rate, r.P95RatioAtItsMax)
		}
		if slices.ContainsFunc(rep.RatiosReferenceLLMDRouter, func(r LLMDRouterRatios) bool { return r.SustainedRateLowerBound }) {
			fmt.Fprintln(w, "(≥: llm-d-router sustained no step; the ratio is the reference's highest sustained rate ÷ the lowest step, and the P95s are compared at the lowest step)")
		}
	}
}

// sustainedRatioText is r's sustained-rate ratio, "≥ x" when it is a lower bound, "-" when unknown.
func sustainedRatioText(r LLMDRouterRatios) string {
	switch {
	case r.SustainedRateLowerBound:
		return fmt.Sprintf("≥ %.2f", r.SustainedRateRatio)
	case r.SustainedRateRatio == 0:
		return "-"
	}
	return fmt.Sprintf("%.2f", r.SustainedRateRatio)
}

// WriteOverheadPlots draws, for every pool and prompt size, decision-latency P95 against the
// offered rate, one line per target, with the bound dashed: overhead_p95_<pages>_<n>ep_<bytes>B
// as PNG and SVG in dir.
func WriteOverheadPlots(dir string, rep *MatrixReport) ([]string, error) {
	type k3 struct {
		pages   string
		n, size int
	}
	var keys []k3
	lines := map[k3]map[string]plotter.XYs{}
	var targets []string
	for _, c := range rep.Cells {
		if c.Report == nil || c.Error != "" || c.Rate <= 0 {
			continue
		}
		k := k3{c.Pages, c.Endpoints, c.PromptBytes}
		if lines[k] == nil {
			lines[k] = map[string]plotter.XYs{}
			keys = append(keys, k)
		}
		lines[k][c.Target] = append(lines[k][c.Target], plotter.XY{X: c.Rate, Y: max(c.Report.LatencyMs.P95, 0.001)})
		if !slices.Contains(targets, c.Target) {
			targets = append(targets, c.Target)
		}
	}
	var files []string
	for _, k := range keys {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("Decision latency P95 over ext_proc, %s pages, %d endpoints, %d B prompts", k.pages, k.n, k.size)
		p.X.Label.Text = "offered rate (decisions/s)"
		p.Y.Label.Text = "P95 (ms, log scale)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top = true
		for i, t := range targets {
			pts := lines[k][t]
			if len(pts) == 0 {
				continue
			}
			l, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return files, err
			}
			l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
			p.Add(l, sc)
			p.Legend.Add(t, l)
		}
		if rep.P95BoundMs > 0 {
			lo, hi := rep.Cells[0].Rate, rep.Cells[0].Rate
			for _, c := range rep.Cells {
				if c.Rate > 0 {
					lo, hi = min(lo, c.Rate), max(hi, c.Rate)
				}
			}
			b, err := plotter.NewLine(plotter.XYs{{X: lo, Y: rep.P95BoundMs}, {X: hi, Y: rep.P95BoundMs}})
			if err != nil {
				return files, err
			}
			b.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			b.Color = color.Gray{Y: 120}
			p.Add(b)
			p.Legend.Add(fmt.Sprintf("bound %g ms", rep.P95BoundMs), b)
		}
		p.Add(plotter.NewGrid())
		for _, ext := range []string{".png", ".svg"} {
			path := filepath.Join(dir, fmt.Sprintf("overhead_p95_%s_%dep_%dB%s", k.pages, k.n, k.size, ext))
			if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
				return files, fmt.Errorf("plot %s: %w", path, err)
			}
			files = append(files, path)
		}
	}
	return files, nil
}
