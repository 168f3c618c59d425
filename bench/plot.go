package bench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WriteOutputs writes results.json, vllm_<target>.json (VLLMJSON) and the plots (PNG and SVG) for results into dir:
// ttft_cdf (TTFT CDF per target at step cmpStep, or over the whole run when cmpStep < 0),
// ladder_throughput and ladder_p90_ttft (output throughput and p90 TTFT per ladder step and
// target), with --goodput ladder_goodput (good requests/s per step), with an SLO mix
// ladder_slo_attainment (the interactive class's attainment per step), and endpoints_<target> (requests per endpoint per second, by send time). It returns
// the files written.
func WriteOutputs(dir string, results []*Result, cmpStep int) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	jsonPath := filepath.Join(dir, "results.json")
	b, err := json.MarshalIndent(results, "", " ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	files = append(files, jsonPath)
	for _, r := range results {
		rate := 0.0
		if len(r.Steps) == 1 {
			rate = r.Steps[0].Rate
		}
		v, err := json.MarshalIndent(VLLMJSON(r, rate, []float64{50, 90, 95, 99}), "", " ")
		if err != nil {
			return files, err
		}
		path := filepath.Join(dir, "vllm_"+fileName(r.Target)+".json")
		if err := os.WriteFile(path, append(v, '\n'), 0o644); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	save := func(p *plot.Plot, name string, w, h vg.Length) error {
		for _, ext := range []string{".png", ".svg"} {
			path := filepath.Join(dir, name+ext)
			if err := p.Save(w, h, path); err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
			files = append(files, path)
		}
		return nil
	}
	// TTFT CDF per target.
	title := "TTFT CDF (whole run)"
	if cmpStep >= 0 && len(results) > 0 && cmpStep < len(results[0].Steps) {
		title = fmt.Sprintf("TTFT CDF at %.2f req/s (step %d)", results[0].Steps[cmpStep].Rate, cmpStep)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "TTFT (ms, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YPosition = draw.PosBottom
	curves := 0
	for i, r := range results {
		var xs []float64
		for _, o := range r.Outcomes {
			if o.OK() && (cmpStep < 0 || o.Step == cmpStep) {
				xs = append(xs, math.Max(o.TTFTMs, 0.01))
			}
		}
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		pts := make(plotter.XYs, len(xs))
		for j, x := range xs {
			pts[j] = plotter.XY{X: x, Y: float64(j+1) / float64(len(xs))}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return files, err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 7)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(r.Target, l)
		curves++
	}
	if o := firstOracle(results); o != nil && len(o.PerRequestMs) > 0 {
		// The oracle's per-request bounds over the same requests, for reference.
		xs := slices.Clone(o.PerRequestMs)
		slices.Sort(xs)
		pts := make(plotter.XYs, len(xs))
		for j, x := range xs {
			pts[j] = plotter.XY{X: math.Max(x, 0.01), Y: float64(j+1) / float64(len(xs))}
		}
		if l, err := plotter.NewLine(pts); err == nil {
			l.Color = color.Gray{Y: 120}
			l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(l)
			p.Legend.Add("oracle bound (whole run)", l)
			curves++
		}
	}
	if curves == 0 {
		// No request succeeded (and no oracle bound): an empty plot, with an axis range a log
		// scale accepts (gonum's LogScale panics on the empty range 0..0).
		p.Title.Text += ": no successful requests"
		p.X.Min, p.X.Max = 1, 1000
		p.Y.Min, p.Y.Max = 0, 1
	}
	p.Add(plotter.NewGrid())
	if err := save(p, "ttft_cdf", 8*vg.Inch, 5*vg.Inch); err != nil {
		return files, err
	}
	// Ladder plots; goodput and the interactive class's SLO attainment when the run has them.
	type ladderPlot struct {
		name, title, y string
		v              func(StepResult) float64
	}
	ladders := []ladderPlot{
		{"ladder_throughput", "Output token throughput across the rate ladder", "output tokens/s", func(s StepResult) float64 { return s.Metrics.OutputThroughput }},
		{"ladder_p90_ttft", "p90 TTFT across the rate ladder", "p90 TTFT (ms)", func(s StepResult) float64 { return s.Metrics.TTFT.Percentiles["p90"] }},
	}
	if len(results) > 0 && results[0].Goodput != nil {
		ladders = append(ladders, ladderPlot{"ladder_goodput", fmt.Sprintf("Request goodput (%s) across the rate ladder", results[0].Goodput.SLOs),
			"good requests/s", func(s StepResult) float64 {
				if s.Goodput == nil {
					return 0
				}
				return s.Goodput.PerSecond
			}})
	}
	if len(results) > 0 && len(results[0].Classes) > 0 {
		ladders = append(ladders, ladderPlot{"ladder_slo_attainment", "SLO attainment of the interactive requests across the rate ladder",
			"interactive requests meeting their SLO (%)", func(s StepResult) float64 {
				for _, c := range s.Classes {
					if c.Class == ClassInteractive && c.Attainment >= 0 {
						return 100 * c.Attainment
					}
				}
				return 0
			}})
	}
	for _, lp := range ladders {
		p := plot.New()
		p.Title.Text = lp.title
		p.X.Label.Text = "offered rate (req/s)"
		p.Y.Label.Text = lp.y
		p.Legend.Top, p.Legend.Left = true, true
		for i, r := range results {
			pts := make(plotter.XYs, len(r.Steps))
			for j, s := range r.Steps {
				pts[j] = plotter.XY{X: s.Rate, Y: lp.v(s)}
			}
			l, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return files, err
			}
			l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
			sc.Shape = plotutil.Shape(i)
			p.Add(l, sc)
			p.Legend.Add(r.Target, l, sc)
		}
		p.Add(plotter.NewGrid())
		if err := save(p, lp.name, 7*vg.Inch, 4.5*vg.Inch); err != nil {
			return files, err
		}
	}
	// Requests per endpoint over time, one plot per target.
	for _, r := range results {
		p := plot.New()
		p.Title.Text = "Requests per endpoint per second: " + r.Target
		p.X.Label.Text = "send time (s)"
		p.Y.Label.Text = "requests/s"
		counts := map[string]map[int]int{}
		maxSec := 0
		for _, o := range r.Outcomes {
			if o.Endpoint == "" {
				continue
			}
			if counts[o.Endpoint] == nil {
				counts[o.Endpoint] = map[int]int{}
			}
			sec := int(o.SentMs / 1000)
			counts[o.Endpoint][sec]++
			maxSec = max(maxSec, sec)
		}
		names := make([]string, 0, len(counts))
		for n := range counts {
			names = append(names, n)
		}
		sort.Strings(names)
		for i, n := range names {
			pts := make(plotter.XYs, maxSec+1)
			for s := 0; s <= maxSec; s++ {
				pts[s] = plotter.XY{X: float64(s), Y: float64(counts[n][s])}
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return files, err
			}
			l.Color = plotutil.Color(i)
			l.Dashes = plotutil.Dashes(i)
			p.Add(l)
			p.Legend.Add(n, l)
		}
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
		if err := save(p, "endpoints_"+fileName(r.Target), 8*vg.Inch, 4*vg.Inch); err != nil {
			return files, err
		}
	}
	return files, nil
}

func firstOracle(results []*Result) *Oracle {
	for _, r := range results {
		if r.Oracle != nil {
			return r.Oracle
		}
	}
	return nil
}

// fileName turns a target label into a file-name part.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
			return r
		}
		return '-'
	}, s)
}
