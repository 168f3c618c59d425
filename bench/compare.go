package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/eppkit/eppkit/conformance/harness"
)

// TargetRoundRobin names the baseline: the gateway stand-in without an EPP.
const TargetRoundRobin = "round-robin"

// CompareTarget is one policy of a comparison.
type CompareTarget struct {
	// Name labels the policy in the table.
	Name string
	// Target and Source start its EPP; a nil Target is the round-robin gateway.
	Target harness.Target
	Source harness.EndpointSource
	// ConfigFile is its EndpointPickerConfig ("" = the EPP's default).
	ConfigFile string
}

// CompareRow is one policy's line of the comparison table. Ratios are against the baseline (the
// first result, round-robin), at the comparison step.
type CompareRow struct {
	Target string `json:"target"`
	// At the comparison step: TTFT (ms), output throughput (tok/s), failed requests, machine CPU
	// (%) and whether the step is valid (CPU < 80%).
	MeanTTFTMs       float64 `json:"mean_ttft_ms"`
	P50TTFTMs        float64 `json:"p50_ttft_ms"`
	P90TTFTMs        float64 `json:"p90_ttft_ms"`
	OutputThroughput float64 `json:"output_throughput"`
	Failed           int     `json:"failed"`
	CPUPercent       float64 `json:"cpu_percent"`
	Valid            bool    `json:"valid"`
	CachedFraction   float64 `json:"cached_fraction"`
	// EngineTTFTMs is the fakes' own mean TTFT at the step (-1 unknown); MeanTTFTMs minus it is
	// the time requests spent outside the engines (client, gateway, EPP, machine scheduling).
	EngineTTFTMs float64 `json:"engine_ttft_ms"`
	// P90Speedup is baseline p90 TTFT ÷ this p90 TTFT (> 1 is better); ThroughputRatio is this
	// output throughput ÷ the baseline's; OracleRatio is this mean TTFT ÷ the oracle bound's mean.
	P90Speedup      float64 `json:"p90_speedup"`
	ThroughputRatio float64 `json:"throughput_ratio"`
	OracleRatio     float64 `json:"oracle_ratio"`
	// MaxSustainedRate is the highest sustained ladder rate (0 = none), MaxSustainedValid whether
	// that step's CPU reading was valid too; MaxSustainedThroughput is its output throughput and
	// MaxSustainedRatio that ÷ the baseline's.
	// MaxSustainedP50TTFTMs is that step's median TTFT (ms): issue 6's predicted-latency target
	// compares policies on it.
	MaxSustainedRate       float64 `json:"max_sustained_rate"`
	MaxSustainedP50TTFTMs  float64 `json:"max_sustained_p50_ttft_ms"`
	MaxSustainedValid      bool    `json:"max_sustained_valid"`
	MaxSustainedThroughput float64 `json:"max_sustained_throughput"`
	MaxSustainedRatio      float64 `json:"max_sustained_ratio"`
	// At the comparison step, with --goodput: good requests/s (-1 without SLOs) and that ÷ the
	// baseline's (GoodputRatio, -1 when either has none or the baseline's is 0). With an SLO mix:
	// the interactive class's SLO attainment in [0,1] and p50 TTFT (ms), -1 each without a mix,
	// and InteractiveP50Reduction = 1 − this p50 ÷ the baseline's (0.3 is 30% lower; negative
	// is higher), meaningful only when both p50s are known.
	Goodput                 float64 `json:"goodput"`
	GoodputRatio            float64 `json:"goodput_ratio"`
	InteractiveAttainment   float64 `json:"interactive_attainment"`
	InteractiveP50TTFTMs    float64 `json:"interactive_p50_ttft_ms"`
	InteractiveP50Reduction float64 `json:"interactive_p50_reduction"`
}

// Comparison is the outcome of Compare.
type Comparison struct {
	// Results are per policy, in order; the first is the baseline.
	Results []*Result `json:"results"`
	// Step is the comparison step: the highest step the baseline sustains with a valid CPU
	// reading, else the highest step it sustains, else step 0. StepReason says which.
	Step       int          `json:"step"`
	StepReason string       `json:"step_reason"`
	Rows       []CompareRow `json:"rows"`
	// Skipped maps a policy to why it did not run.
	Skipped map[string]string `json:"skipped,omitempty"`
	// Interrupted is true when the context ended (Ctrl-C or SIGTERM) before every policy
	// finished: Results and Rows then cover only the policies that finished, InterruptedDuring
	// is the policy that was running (its partial result is dropped) and NotRun lists it and the
	// policies after it, in order.
	Interrupted       bool     `json:"interrupted,omitempty"`
	InterruptedDuring string   `json:"interrupted_during,omitempty"`
	NotRun            []string `json:"not_run,omitempty"`
}

// Compare runs cfg against each target in turn, each on a fresh environment (fleet, source, EPP,
// gateway) with the same plan, and builds the table. A target that fails to start or dies is
// recorded in Skipped and the others still run; only ctx ending stops the comparison: Compare
// then returns the comparison of the policies that finished, marked Interrupted, with ctx's
// error.
func Compare(ctx context.Context, cfg RunConfig, targets []CompareTarget, log io.Writer) (*Comparison, error) {
	c := &Comparison{Skipped: map[string]string{}}
	for i, t := range targets {
		rc := cfg
		rc.Env.Name, rc.Env.Target, rc.Env.Source, rc.Env.ConfigFile = t.Name, t.Target, t.Source, t.ConfigFile
		if rc.Env.LogDir != "" {
			rc.Env.LogDir = rc.Env.LogDir + "/" + fileName(t.Name)
		}
		if log != nil {
			fmt.Fprintf(log, "== %s: fresh fleet of %d, load average %s\n", t.Name, max(rc.Env.FleetSize, 1), LoadAverage())
		}
		r, err := Run(ctx, rc)
		if ctx.Err() != nil {
			c.Interrupted, c.InterruptedDuring = true, t.Name
			for _, n := range targets[i:] {
				c.NotRun = append(c.NotRun, n.Name)
			}
			if log != nil {
				fmt.Fprintf(log, "== %s: interrupted; not run: %v\n", t.Name, c.NotRun)
			}
			c.build()
			return c, ctx.Err()
		}
		if err != nil {
			c.Skipped[t.Name] = err.Error()
			if log != nil {
				fmt.Fprintf(log, "== %s: skipped: %v\n", t.Name, err)
			}
			continue
		}
		c.Results = append(c.Results, r)
	}
	c.build()
	return c, nil
}

// build chooses the comparison step and fills Rows.
func (c *Comparison) build() {
	c.Rows = nil
	if len(c.Results) == 0 {
		return
	}
	base := c.Results[0]
	c.Step, c.StepReason = 0, "the baseline sustains no step; step 0 is used"
	for i := len(base.Steps) - 1; i >= 0; i-- {
		if base.Steps[i].Sustained && base.Steps[i].Valid {
			c.Step, c.StepReason = i, "the highest step the baseline sustains with CPU under 80%"
			break
		}
	}
	if c.StepReason != "the highest step the baseline sustains with CPU under 80%" {
		for i := len(base.Steps) - 1; i >= 0; i-- {
			if base.Steps[i].Sustained {
				c.Step, c.StepReason = i, "the highest step the baseline sustains (its CPU reading is not under 80%: not a valid step)"
				break
			}
		}
	}
	for _, r := range c.Results {
		row := CompareRow{Target: r.Target, Goodput: -1, GoodputRatio: -1, InteractiveAttainment: -1, InteractiveP50TTFTMs: -1}
		if c.Step < len(r.Steps) {
			s := r.Steps[c.Step]
			if s.Goodput != nil {
				row.Goodput = s.Goodput.PerSecond
			}
			for _, cl := range s.Classes {
				if cl.Class == ClassInteractive {
					row.InteractiveAttainment, row.InteractiveP50TTFTMs = cl.Attainment, cl.P50TTFTMs
				}
			}
			row.MeanTTFTMs, row.P50TTFTMs, row.P90TTFTMs = s.Metrics.TTFT.Mean, s.Metrics.TTFT.Median, s.Metrics.TTFT.Percentiles["p90"]
			row.OutputThroughput, row.Failed, row.CPUPercent, row.Valid = s.Metrics.OutputThroughput, s.Metrics.Failed, s.CPUPercent, s.Valid
			row.CachedFraction, row.OracleRatio, row.EngineTTFTMs = s.Metrics.CachedTokenFraction, s.OracleRatio, s.EngineTTFTMs
		}
		for i := len(r.Steps) - 1; i >= 0; i-- {
			if r.Steps[i].Sustained {
				row.MaxSustainedRate, row.MaxSustainedThroughput = r.Steps[i].Rate, r.Steps[i].Metrics.OutputThroughput
				row.MaxSustainedP50TTFTMs = r.Steps[i].Metrics.TTFT.Median
				row.MaxSustainedValid = r.Steps[i].Valid
				break
			}
		}
		c.Rows = append(c.Rows, row)
	}
	b := c.Rows[0]
	for i := range c.Rows {
		r := &c.Rows[i]
		if r.P90TTFTMs > 0 {
			r.P90Speedup = b.P90TTFTMs / r.P90TTFTMs
		}
		if b.OutputThroughput > 0 {
			r.ThroughputRatio = r.OutputThroughput / b.OutputThroughput
		}
		if b.MaxSustainedThroughput > 0 {
			r.MaxSustainedRatio = r.MaxSustainedThroughput / b.MaxSustainedThroughput
		}
		if b.Goodput > 0 && r.Goodput >= 0 {
			r.GoodputRatio = r.Goodput / b.Goodput
		}
		r.InteractiveP50Reduction = 0
		if b.InteractiveP50TTFTMs > 0 && r.InteractiveP50TTFTMs >= 0 {
			r.InteractiveP50Reduction = 1 - r.InteractiveP50TTFTMs/b.InteractiveP50TTFTMs
		}
	}
}

// PrintComparison writes the comparison table.
func PrintComparison(w io.Writer, c *Comparison) {
	if len(c.Results) == 0 {
		fmt.Fprintln(w, "no policy ran")
		if line := c.InterruptionLine(); line != "" {
			fmt.Fprintln(w, line)
		}
		return
	}
	s := c.Results[0].Steps[c.Step]
	fmt.Fprintf(w, "Comparison at step %d (%.2f req/s, %.0f s): %s.\n", c.Step, s.Rate, s.DurationS, c.StepReason)
	fmt.Fprintf(w, "Ratios are against %s; p90 speedup = its p90 TTFT ÷ the policy's; oracle = mean TTFT ÷ the oracle bound (%.1f ms).\n",
		c.Results[0].Target, s.OracleMeanTTFTMs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tmean TTFT (ms)\tfake TTFT (ms)\tp50 TTFT (ms)\tp90 TTFT (ms)\tp90 speedup\toutput tok/s\tthroughput ratio\toracle ratio\tcached\tfailed\tCPU %\tvalid\tmax sustained (req/s)\tvalid\tits p50 TTFT (ms)\tits tok/s\tratio\t")
	for _, r := range c.Rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%.1f\t%.1f\t%.2fx\t%.1f\t%.2fx\t%.2fx\t%.0f%%\t%d\t%s\t%s\t%.2f\t%s\t%.1f\t%.1f\t%.2fx\t\n", r.Target, r.MeanTTFTMs, msString(r.EngineTTFTMs), r.P50TTFTMs, r.P90TTFTMs,
			r.P90Speedup, r.OutputThroughput, r.ThroughputRatio, r.OracleRatio, 100*r.CachedFraction, r.Failed, cpuString(r.CPUPercent),
			yesNo(r.Valid), r.MaxSustainedRate, yesNo(r.MaxSustainedValid), r.MaxSustainedP50TTFTMs, r.MaxSustainedThroughput, r.MaxSustainedRatio)
	}
	_ = tw.Flush()
	printGoodputComparison(w, c)
	for name, why := range c.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", name, why)
	}
	if line := c.InterruptionLine(); line != "" {
		fmt.Fprintln(w, line)
	}
}

// InterruptionLine says which policies an interrupted comparison did not run, "" when it was not
// interrupted.
func (c *Comparison) InterruptionLine() string {
	if !c.Interrupted {
		return ""
	}
	return fmt.Sprintf("INTERRUPTED (Ctrl-C or SIGTERM) during %s: not run: %s; the table covers only the %d policies that finished",
		c.InterruptedDuring, strings.Join(c.NotRun, ", "), len(c.Results))
}

// printGoodputComparison writes the goodput and SLO-attainment table of the comparison step
// when the runs had --goodput or an SLO mix: ratios against the baseline (the first policy).
func printGoodputComparison(w io.Writer, c *Comparison) {
	shown := false
	for _, r := range c.Rows {
		shown = shown || r.Goodput >= 0 || r.InteractiveAttainment >= 0
	}
	if !shown {
		return
	}
	slos := ""
	if g := c.Results[0].Goodput; g != nil {
		slos = " (--goodput " + g.SLOs.String() + ")"
	}
	fmt.Fprintf(w, "\nGoodput%s and the interactive class's SLO attainment at step %d; ratios against %s:\n", slos, c.Step, c.Results[0].Target)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tgoodput (req/s)\tgoodput ratio\tinteractive SLO attainment\tinteractive p50 TTFT (ms)\tp50 lower by\t")
	num := func(v float64, f string) string {
		if v < 0 {
			return "n/a"
		}
		return fmt.Sprintf(f, v)
	}
	for _, r := range c.Rows {
		red := "n/a"
		if r.InteractiveP50TTFTMs >= 0 && c.Rows[0].InteractiveP50TTFTMs > 0 {
			red = fmt.Sprintf("%.1f%%", 100*r.InteractiveP50Reduction)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Target, num(r.Goodput, "%.2f"), num(r.GoodputRatio, "%.2fx"),
			num(100*r.InteractiveAttainment, "%.1f%%"), num(r.InteractiveP50TTFTMs, "%.1f"), red)
	}
	_ = tw.Flush()
}
