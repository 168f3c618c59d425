package sim

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/eppkit/eppkit/bench"
)

// ValidationTolerance is the relative error the simulation aims to stay within on every
// validated metric (issue 22: 15%).
const ValidationTolerance = 0.15

// ValidationRow compares one metric of one policy between a real-time run and a simulated one.
type ValidationRow struct {
	Policy string `json:"policy"`
	// Metric names the metric and its unit: "mean TTFT (ms)", "p50 TTFT (ms)", "p90 TTFT (ms)",
	// "output throughput (tok/s)", "cached share of prompt tokens (%)", and, when the real run
	// read the fakes' histograms, "mean TTFT inside the fakes (ms)": the engines' own TTFT, which
	// leaves out the client, the gateway and the EPP that the simulation does not model.
	Metric    string  `json:"metric"`
	Real      float64 `json:"real"`
	Simulated float64 `json:"simulated"`
	// Error is (Simulated − Real) ÷ Real; Within is |Error| ≤ ValidationTolerance.
	Error  float64 `json:"error"`
	Within bool    `json:"within"`
}

// Validate compares a real-time run (eppkit bench) and a simulation of the same workload,
// arrivals and seeds, over the whole run.
func Validate(policy string, real *bench.Result, simulated *Result) []ValidationRow {
	r, s := real.Overall, simulated.Overall
	rows := []ValidationRow{
		{Metric: "mean TTFT (ms)", Real: r.TTFT.Mean, Simulated: s.TTFT.Mean},
		{Metric: "p50 TTFT (ms)", Real: r.TTFT.Median, Simulated: s.TTFT.Median},
		{Metric: "p90 TTFT (ms)", Real: r.TTFT.Percentiles["p90"], Simulated: s.TTFT.Percentiles["p90"]},
		{Metric: "output throughput (tok/s)", Real: r.OutputThroughput, Simulated: s.OutputThroughput},
		{Metric: "cached share of prompt tokens (%)", Real: 100 * r.CachedTokenFraction, Simulated: 100 * s.CachedTokenFraction},
	}
	if real.EngineTTFTMs >= 0 && simulated.EngineTTFTMs >= 0 {
		rows = append(rows, ValidationRow{Metric: "mean TTFT inside the fakes (ms)", Real: real.EngineTTFTMs, Simulated: simulated.EngineTTFTMs})
	}
	for i := range rows {
		rows[i].Policy = policy
		if rows[i].Real != 0 {
			rows[i].Error = (rows[i].Simulated - rows[i].Real) / rows[i].Real
		} else if rows[i].Simulated != 0 {
			rows[i].Error = math.Inf(1)
		}
		rows[i].Within = math.Abs(rows[i].Error) <= ValidationTolerance
	}
	return rows
}

// PrintValidation writes the validation table and a summary line.
func PrintValidation(w io.Writer, rows []ValidationRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tmetric\treal\tsimulated\terror\twithin 15%\t")
	out := 0
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%+.1f%%\t%s\t\n", r.Policy, r.Metric, r.Real, r.Simulated, 100*r.Error, yesNo(r.Within))
		if !r.Within {
			out++
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d of %d comparisons within %.0f%%\n", len(rows)-out, len(rows), 100*ValidationTolerance)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}
