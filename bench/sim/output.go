package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/internal/percentile"
)

// MaxEndpointRows is the largest fleet whose per-endpoint table is printed row by row (and whose
// per-endpoint plot draws one line per endpoint); larger fleets get a summary of the rows.
const MaxEndpointRows = 16

// PrintResult writes a simulated run as `eppkit bench` writes a real one — the vllm bench serve
// block (with "Request goodput (req/s):" when SLOs are set), the ladder table and the
// per-endpoint table (a summary beyond MaxEndpointRows endpoints) — under a SIMULATED header,
// then the picker's CPU time per decision and the simulation's own cost.
func PrintResult(w io.Writer, r *Result, o bench.BlockOptions) {
	fmt.Fprintf(w, "SIMULATED (virtual time, not a real run): policy %s, %d endpoints (%s), metrics scraped every %.0f ms, stale after %.0f ms, seed %d\n",
		r.Target, r.FleetSize, bench.ProfileSummary(r.Profiles), r.RefreshIntervalMs, r.StaleThresholdMs, r.Seed)
	if r.Goodput != nil {
		g := r.Goodput.PerSecond
		o.Goodput = &g
	}
	bench.PrintServingBlock(w, r.Overall, o)
	bench.PrintGoodput(w, r.Result)
	fmt.Fprintln(w)
	bench.PrintSteps(w, r.Result)
	fmt.Fprintln(w)
	if len(r.Endpoints) <= MaxEndpointRows {
		bench.PrintEndpoints(w, r.Result)
	} else {
		PrintEndpointSummary(w, r.Result)
	}
	PrintPredictions(w, r.Predictions)
	d := r.Decisions
	fmt.Fprintf(w, "\nscheduling decisions (real time on this machine): %d, CPU per decision mean %.1f µs (p50 %.1f, p99 %.1f), wall mean %.1f µs\n",
		d.N, d.CPUMeanUs, d.CPUP50Us, d.CPUP99Us, d.WallMeanUs)
	speed := 0.0
	if r.WallSeconds > 0 {
		speed = r.VirtualSeconds / r.WallSeconds
	}
	fmt.Fprintf(w, "simulation: %.1f s of virtual time in %.1f s of wall time (%.2fx real time), %d events\n",
		r.VirtualSeconds, r.WallSeconds, speed, r.Events)
}

// PrintEndpointSummary writes the per-endpoint table of a large fleet as quantiles over the
// endpoints: requests, share, cached tokens, the engine's prefix hit rate, mean TTFT, median and
// max waiting.
func PrintEndpointSummary(w io.Writer, r *bench.Result) {
	cols := []struct {
		name string
		f    func(e bench.EndpointRow) float64
		pct  bool
	}{
		{"requests", func(e bench.EndpointRow) float64 { return float64(e.Requests) }, false},
		{"share", func(e bench.EndpointRow) float64 { return e.Share }, true},
		{"cached tokens (usage)", func(e bench.EndpointRow) float64 { return e.CachedTokenFraction }, true},
		{"engine prefix hit rate", func(e bench.EndpointRow) float64 { return e.EngineHitRate }, true},
		{"mean TTFT (ms)", func(e bench.EndpointRow) float64 { return e.MeanTTFTMs }, false},
		{"median waiting", func(e bench.EndpointRow) float64 { return e.MedianWaiting }, false},
		{"max waiting", func(e bench.EndpointRow) float64 { return e.MaxWaiting }, false},
	}
	fmt.Fprintf(w, "per-endpoint table of %d endpoints (every row is in results.json), quantiles over the endpoints:\n", len(r.Endpoints))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, c := range cols {
		fmt.Fprintf(tw, "%s\t", c.name)
	}
	fmt.Fprintln(tw)
	for _, q := range []struct {
		name string
		p    float64
	}{{"min", 0}, {"p10", 10}, {"median", 50}, {"p90", 90}, {"max", 100}} {
		fmt.Fprintf(tw, "%s\t", q.name)
		for _, c := range cols {
			xs := make([]float64, len(r.Endpoints))
			for i, e := range r.Endpoints {
				xs[i] = c.f(e)
			}
			v := percentile.Of(xs, q.p)
			if c.pct {
				fmt.Fprintf(tw, "%.1f%%\t", 100*v)
			} else {
				fmt.Fprintf(tw, "%.1f\t", v)
			}
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// WriteOutputs writes a simulated run into dir as `eppkit bench` writes a real one:
// results.json (this Result, outcomes and samples included), vllm_<policy>.json and the plots
// of bench.WriteOutputs (ttft_cdf, ladder_throughput, ladder_p90_ttft, endpoints_<policy>). A
// fleet larger than MaxEndpointRows gets endpoint_load (requests per endpoint, sorted) instead of
// endpoints_<policy>. It returns the files written.
func WriteOutputs(dir string, r *Result) ([]string, error) {
	// The plots' legends and the vllm_*.json file say the run was simulated.
	c := *r.Result
	c.Target += " (simulated)"
	br := &c
	large := r.FleetSize > MaxEndpointRows
	if large {
		// The bench's per-endpoint plot draws a line per endpoint; give it none.
		c.Outcomes = slices.Clone(br.Outcomes)
		for i := range c.Outcomes {
			c.Outcomes[i].Endpoint = ""
		}
	}
	files, err := bench.WriteOutputs(dir, []*bench.Result{br}, -1)
	if err != nil {
		return files, err
	}
	if large {
		var kept []string
		for _, f := range files {
			if strings.HasPrefix(filepath.Base(f), "endpoints_") {
				_ = os.Remove(f)
				continue
			}
			kept = append(kept, f)
		}
		files = kept
		more, err := endpointLoadPlot(dir, br)
		files = append(files, more...)
		if err != nil {
			return files, err
		}
	}
	// results.json again, with the simulation's fields (bench.WriteOutputs wrote the bench's).
	path := filepath.Join(dir, "results.json")
	b, err := json.MarshalIndent([]*Result{r}, "", " ")
	if err != nil {
		return files, err
	}
	return files, os.WriteFile(path, append(b, '\n'), 0o644)
}

// endpointLoadPlot draws requests per endpoint, endpoints sorted by load.
func endpointLoadPlot(dir string, r *bench.Result) ([]string, error) {
	counts := make([]float64, len(r.Endpoints))
	for i, e := range r.Endpoints {
		counts[i] = float64(e.Requests)
	}
	sort.Float64s(counts)
	pts := make(plotter.XYs, len(counts))
	for i, c := range counts {
		pts[i] = plotter.XY{X: float64(i), Y: c}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Requests per endpoint (sorted), %s, %d endpoints", r.Target, len(counts))
	p.X.Label.Text = "endpoint rank"
	p.Y.Label.Text = "requests"
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	p.Add(l, plotter.NewGrid())
	var files []string
	for _, ext := range []string{".png", ".svg"} {
		path := filepath.Join(dir, "endpoint_load"+ext)
		if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
			return files, fmt.Errorf("plot %s: %w", path, err)
		}
		files = append(files, path)
	}
	return files, nil
}
