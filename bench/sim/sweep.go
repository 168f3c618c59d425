package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/eppkit/eppkit/bench"
)

// Defaults of SweepConfig (`eppkit bench simulate compare`).
const (
	// DefaultRatePerEndpoint is the offered load per endpoint (req/s): about three quarters of
	// what round-robin sustains on the default shared-prefix workload on 2 endpoints (≈13 req/s
	// per endpoint). From 8 endpoints on, with DefaultGroupsPerEndpoint, a cache-oblivious
	// policy's endpoints see more system prompts than they can cache and this load overloads
	// them (docs/bench.md, the measured sweep).
	DefaultRatePerEndpoint = 10.0
	// DefaultSweepWarmup and DefaultSweepDuration are the virtual time of the warm-up step (not
	// measured: caches fill, the predictor trains) and of the measured step, at every fleet size.
	DefaultSweepWarmup   = 3 * time.Second
	DefaultSweepDuration = 7 * time.Second
	// DefaultGroupsPerEndpoint scales the shared-prefix workload with the fleet: 8 system prompts
	// per endpoint (16 on the default 2-endpoint fleet), so that cache pressure per endpoint is
	// the same at every size and a prefix group is reused about as often.
	DefaultGroupsPerEndpoint = 8
	// DefaultMinRequests is the least number of measured requests per cell: smaller fleets run
	// independent replicas (other seeds) of the same experiment until they have that many.
	DefaultMinRequests = 20000
)

// SweepConfig configures RunSweep: every policy at every fleet size, at a fixed load per endpoint.
type SweepConfig struct {
	// Base is every cell's simulation config; RunSweep sets its FleetSize, Steps (a warm-up step
	// and a measured step at RatePerEndpoint × fleet size), the seeds of each replica and, with
	// GroupsPerEndpoint, the shared-prefix workload's Groups.
	Base Config
	// FleetSizes and Policies are the cells, run size by size, policies in order.
	FleetSizes []int
	Policies   []string
	// NewPicker returns a fresh picker of a policy for each run.
	NewPicker func(policy string) (Picker, error)
	// RatePerEndpoint is the offered load per endpoint (req/s); Warmup and Duration the virtual
	// time of the unmeasured warm-up and of the measured step.
	RatePerEndpoint   float64
	Warmup, Duration  time.Duration
	GroupsPerEndpoint int
	// MinRequests is the least number of measured requests per cell (replicas make it up).
	MinRequests int
	// Log receives one line per run; nil discards.
	Log io.Writer
	// InferencePerfDir, when set, receives the inference-perf report of each cell's first
	// replica (warm-up stage 0, measured stage 1) under inference-perf/<policy>-<size>/.
	InferencePerfDir string
}

// SweepRow is one cell: a policy at a fleet size. Latencies are over the measured step's
// requests of every replica; throughputs are per endpoint, averaged over replicas.
type SweepRow struct {
	Policy    string `json:"policy"`
	FleetSize int    `json:"fleet_size"`
	// Replicas is the number of independent runs pooled; Requests and Failed count the measured
	// requests.
	Replicas int `json:"replicas"`
	Requests int `json:"requests"`
	Failed   int `json:"failed"`
	// TTFT (ms).
	MeanTTFTMs float64 `json:"mean_ttft_ms"`
	P50TTFTMs  float64 `json:"p50_ttft_ms"`
	P90TTFTMs  float64 `json:"p90_ttft_ms"`
	P99TTFTMs  float64 `json:"p99_ttft_ms"`
	MeanTPOTMs float64 `json:"mean_tpot_ms"`
	// OutputThroughputPerEndpoint is output tokens/s per endpoint and RequestThroughputPerEndpoint
	// completed requests/s per endpoint, both over the measured window: the tokens generated and
	// the requests finished inside it (by every request, warm-up ones included), ÷ its length.
	// vLLM's duration (first send to the last end of a response) would let one straggler's
	// drain set the throughput of the whole fleet.
	OutputThroughputPerEndpoint  float64 `json:"output_throughput_per_endpoint"`
	RequestThroughputPerEndpoint float64 `json:"request_throughput_per_endpoint"`
	// GoodputPerEndpoint is good requests/s per endpoint: the measured requests that meet every
	// SLO (bench.Goodput with the sweep's SLOs; 0 without SLOs) ÷ the measured window, which
	// is vLLM's goodput with the arrival window as the duration; GoodputFraction is good ÷
	// measured requests.
	GoodputPerEndpoint float64 `json:"goodput_per_endpoint"`
	GoodputFraction    float64 `json:"goodput_fraction"`
	// CachedFraction is cached ÷ prompt tokens of the measured requests.
	CachedFraction float64 `json:"cached_fraction"`
	// LoadImbalance is the busiest endpoint's measured requests ÷ the mean per endpoint,
	// averaged over replicas (1 = perfectly even).
	LoadImbalance float64 `json:"load_imbalance"`
	// Decisions is the real CPU time per decision over every replica's decisions.
	Decisions DecisionCost `json:"decisions"`
	// WallSeconds is the real time of the cell's runs; VirtualSeconds their simulated time;
	// Events their events.
	WallSeconds    float64 `json:"wall_seconds"`
	VirtualSeconds float64 `json:"virtual_seconds"`
	Events         int64   `json:"events"`
}

// Sweep is the outcome of RunSweep.
type Sweep struct {
	// Simulated is always true.
	Simulated bool `json:"simulated"`
	// The experiment: load per endpoint, warm-up and measured virtual time, groups per endpoint
	// (0: the workload's own), the workload, SLOs of goodput, seed.
	RatePerEndpoint   float64    `json:"rate_per_endpoint"`
	WarmupSeconds     float64    `json:"warmup_seconds"`
	DurationSeconds   float64    `json:"duration_seconds"`
	GroupsPerEndpoint int        `json:"groups_per_endpoint"`
	Workload          bench.Spec `json:"workload"`
	Goodput           bench.SLOs `json:"goodput"`
	Seed              int64      `json:"seed"`
	RefreshIntervalMs float64    `json:"refresh_interval_ms"`
	Rows              []SweepRow `json:"rows"`
	// Skipped maps "policy@size" to why it did not run.
	Skipped map[string]string `json:"skipped,omitempty"`
	// Interrupted is true when the context ended first; Rows hold the cells that finished.
	Interrupted bool `json:"interrupted,omitempty"`
}

// RunSweep runs every cell. A picker that fails to start is recorded in Skipped; ctx ending stops
// the sweep and returns the cells that finished, marked Interrupted, with ctx's error.
func RunSweep(ctx context.Context, cfg SweepConfig) (*Sweep, error) {
	if cfg.RatePerEndpoint == 0 {
		cfg.RatePerEndpoint = DefaultRatePerEndpoint
	}
	if cfg.Duration == 0 {
		cfg.Duration = DefaultSweepDuration
	}
	if cfg.MinRequests == 0 {
		cfg.MinRequests = DefaultMinRequests
	}
	switch {
	case !(cfg.RatePerEndpoint > 0) || math.IsInf(cfg.RatePerEndpoint, 0):
		return nil, fmt.Errorf("--rate-per-endpoint must be a positive number of requests per second, got %v", cfg.RatePerEndpoint)
	case cfg.Warmup < 0 || cfg.Duration < 0:
		return nil, fmt.Errorf("--warmup and --duration must not be negative, got %v and %v", cfg.Warmup, cfg.Duration)
	case len(cfg.FleetSizes) == 0 || len(cfg.Policies) == 0:
		return nil, errors.New("sim: a sweep needs fleet sizes and policies")
	case cfg.GroupsPerEndpoint < 0:
		return nil, fmt.Errorf("--groups-per-endpoint must not be negative, got %d", cfg.GroupsPerEndpoint)
	}
	for _, n := range cfg.FleetSizes {
		if n < 1 || n > MaxFleetSize {
			return nil, fmt.Errorf("--endpoints: %d is not a fleet size in [1,%d]", n, MaxFleetSize)
		}
	}
	s := &Sweep{Simulated: true, RatePerEndpoint: cfg.RatePerEndpoint, WarmupSeconds: cfg.Warmup.Seconds(),
		DurationSeconds: cfg.Duration.Seconds(), GroupsPerEndpoint: cfg.GroupsPerEndpoint, Workload: cfg.Base.Spec,
		Goodput: cfg.Base.Goodput, Seed: cfg.Base.Seed, Skipped: map[string]string{}}
	s.RefreshIntervalMs = ms(cfg.Base.RefreshInterval)
	if s.RefreshIntervalMs == 0 {
		s.RefreshIntervalMs = ms(DefaultRefreshInterval)
	}
	for _, n := range cfg.FleetSizes {
		for _, policy := range cfg.Policies {
			row, err := runCell(ctx, cfg, n, policy)
			if ctx.Err() != nil {
				s.Interrupted = true
				return s, ctx.Err()
			}
			if err != nil {
				s.Skipped[policy+"@"+strconv.Itoa(n)] = err.Error()
				if cfg.Log != nil {
					fmt.Fprintf(cfg.Log, "== %s on %d endpoints: skipped: %v\n", policy, n, err)
				}
				continue
			}
			s.Rows = append(s.Rows, *row)
		}
	}
	return s, nil
}

// runCell runs one policy at one fleet size, replicated until MinRequests measured requests.
func runCell(ctx context.Context, cfg SweepConfig, n int, policy string) (*SweepRow, error) {
	rate := cfg.RatePerEndpoint * float64(n)
	var steps []bench.Step
	if cfg.Warmup > 0 {
		steps = append(steps, bench.Step{Rate: rate, Duration: cfg.Warmup})
	}
	steps = append(steps, bench.Step{Rate: rate, Duration: cfg.Duration})
	measured := len(steps) - 1
	perReplica := rate * cfg.Duration.Seconds()
	replicas := max(1, int(math.Ceil(float64(cfg.MinRequests)/perReplica)))
	row := &SweepRow{Policy: policy, FleetSize: n, Replicas: replicas}
	var pooled []bench.Outcome
	var cpu []float64
	var wall []float64
	var outTput, reqTput, imbalance, durations float64
	for k := range replicas {
		c := cfg.Base
		c.FleetSize, c.Steps, c.Progress = n, steps, nil
		c.Seed = cfg.Base.Seed + int64(k)*MaxFleetSize
		c.Spec.Seed = cfg.Base.Spec.Seed + int64(k)
		if cfg.GroupsPerEndpoint > 0 && c.Spec.Name == bench.WorkloadSharedPrefix {
			c.Spec.Groups = cfg.GroupsPerEndpoint * n
		}
		p, err := cfg.NewPicker(policy)
		if err != nil {
			return nil, err
		}
		res, err := Run(ctx, c, p)
		if err != nil {
			return nil, err
		}
		if k == 0 && cfg.InferencePerfDir != "" {
			named := *res
			br := *res.Result
			br.Target = fmt.Sprintf("%s-%d", policy, n)
			named.Result = &br
			if _, err := WriteInferencePerf(cfg.InferencePerfDir, c, &named); err != nil {
				return nil, err
			}
		}
		winMs := cfg.Duration.Seconds() * 1000
		tokens, finished := inWindow(res.Outcomes, cfg.Warmup.Seconds()*1000, winMs)
		outTput += tokens / cfg.Duration.Seconds()
		reqTput += float64(finished) / cfg.Duration.Seconds()
		durations += cfg.Duration.Seconds()
		perEndpoint := map[string]int{}
		for _, o := range res.Outcomes {
			if o.Step == measured {
				pooled = append(pooled, o)
				if o.Endpoint != "" {
					perEndpoint[o.Endpoint]++
				}
			}
		}
		busiest := 0
		total := 0
		for _, c := range perEndpoint {
			busiest = max(busiest, c)
			total += c
		}
		if total > 0 {
			imbalance += float64(busiest) / (float64(total) / float64(n))
		}
		cpu = append(cpu, res.DecisionCPUUs...)
		wall = append(wall, res.Decisions.WallMeanUs)
		row.WallSeconds += res.WallSeconds
		row.VirtualSeconds += res.VirtualSeconds
		row.Events += res.Events
		if cfg.Log != nil && (k == 0 || k == replicas-1) {
			fmt.Fprintf(cfg.Log, "== %s on %d endpoints: replica %d/%d, %d requests, %.1f s virtual in %.1f s wall, load average %s\n",
				policy, n, k+1, replicas, len(res.Outcomes), res.VirtualSeconds, res.WallSeconds, bench.LoadAverage())
		}
	}
	m := bench.ComputeMetrics(pooled, []float64{50, 90, 99})
	row.Requests, row.Failed = len(pooled), m.Failed
	row.MeanTTFTMs, row.P50TTFTMs, row.P90TTFTMs, row.P99TTFTMs = m.TTFT.Mean, m.TTFT.Median, m.TTFT.Percentiles["p90"], m.TTFT.Percentiles["p99"]
	row.MeanTPOTMs = m.TPOT.Mean
	row.CachedFraction = m.CachedTokenFraction
	r := float64(replicas)
	row.OutputThroughputPerEndpoint = outTput / r / float64(n)
	row.RequestThroughputPerEndpoint = reqTput / r / float64(n)
	row.LoadImbalance = imbalance / r
	if cfg.Base.Goodput.Set() && durations > 0 {
		good, _ := bench.Goodput(pooled, cfg.Base.Goodput, 1)
		row.GoodputPerEndpoint = float64(good) / durations / float64(n)
		if len(pooled) > 0 {
			row.GoodputFraction = float64(good) / float64(len(pooled))
		}
	}
	row.Decisions = decisionCost(cpu, nil)
	row.Decisions.WallMeanUs = mean(wall)
	return row, nil
}

// inWindow counts the output tokens generated and the requests finished in the window of
// lengthMs from startMs (ms from the start of the run) over every completed outcome: the first
// token at its TTFT, each later one after its inter-token gap (ITLMs; evenly spread to the end
// of the response when the gaps are not recorded).
func inWindow(outs []bench.Outcome, startMs, lengthMs float64) (tokens float64, finished int) {
	endMs := startMs + lengthMs
	in := func(t float64) bool { return t >= startMs && t < endMs }
	for i := range outs {
		o := &outs[i]
		if !o.OK() {
			continue
		}
		first, last := o.SentMs+o.TTFTMs, o.SentMs+o.E2EMs
		if in(last) {
			finished++
		}
		if last < startMs || first >= endMs {
			continue
		}
		if in(first) {
			tokens++
		}
		rest := o.OutputTokens - 1
		switch {
		case rest <= 0:
		case len(o.ITLMs) == rest:
			t := first
			for _, gap := range o.ITLMs {
				if t += gap; in(t) {
					tokens++
				}
			}
		default:
			// rest tokens evenly over (first, last]: the share of that span inside the window.
			if span := last - first; span > 0 {
				tokens += float64(rest) * max(0, min(last, endMs)-max(first, startMs)) / span
			} else if in(last) {
				tokens += float64(rest)
			}
		}
	}
	return tokens, finished
}

// PrintSweep writes the sweep's table, one line per cell.
func PrintSweep(w io.Writer, s *Sweep) {
	fmt.Fprintf(w, "SIMULATED sweep (virtual time): %.1f req/s per endpoint, %.0f s warm-up then %.0f s measured at every fleet size",
		s.RatePerEndpoint, s.WarmupSeconds, s.DurationSeconds)
	if s.GroupsPerEndpoint > 0 && s.Workload.Name == bench.WorkloadSharedPrefix {
		fmt.Fprintf(w, ", %s workload with %d system prompts per endpoint", s.Workload.Name, s.GroupsPerEndpoint)
	} else {
		fmt.Fprintf(w, ", %s workload", s.Workload.Name)
	}
	fmt.Fprintf(w, ", metrics scraped every %.0f ms, seed %d.\n", s.RefreshIntervalMs, s.Seed)
	if s.Goodput.Set() {
		fmt.Fprintf(w, "Goodput: requests meeting every SLO of %q (vllm bench serve --goodput), per endpoint per second.\n", s.Goodput.String())
	}
	fmt.Fprintln(w, "Throughputs are per endpoint; decision CPU is real CPU time on this machine per scheduling decision (context only).")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "endpoints\tpolicy\treplicas\trequests\tfailed\tmean TTFT (ms)\tp50 TTFT (ms)\tp90 TTFT (ms)\tp99 TTFT (ms)\tmean TPOT (ms)\toutput tok/s/ep\tgoodput req/s/ep\tgood\tcached\tmax/mean load\tCPU/decision µs\tp99 µs\twall s\t")
	for _, r := range s.Rows {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.0f%%\t%.0f%%\t%.2f\t%.1f\t%.1f\t%.1f\t\n",
			r.FleetSize, r.Policy, r.Replicas, r.Requests, r.Failed, r.MeanTTFTMs, r.P50TTFTMs, r.P90TTFTMs, r.P99TTFTMs, r.MeanTPOTMs,
			r.OutputThroughputPerEndpoint, r.GoodputPerEndpoint, 100*r.GoodputFraction, 100*r.CachedFraction, r.LoadImbalance,
			r.Decisions.CPUMeanUs, r.Decisions.CPUP99Us, r.WallSeconds)
	}
	_ = tw.Flush()
	keys := make([]string, 0, len(s.Skipped))
	for k := range s.Skipped {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "skipped %s: %s\n", k, s.Skipped[k])
	}
	if s.Interrupted {
		fmt.Fprintln(w, "INTERRUPTED (Ctrl-C or SIGTERM): the table covers only the cells that finished")
	}
}

// WriteSweepOutputs writes sweep.json and the plots against fleet size (PNG and SVG):
// fleet_p90_ttft, fleet_throughput (output tokens/s per endpoint), fleet_goodput (good requests/s
// per endpoint, with SLOs), fleet_decision_cpu (CPU µs per decision, log scale), and fleet.png with
// all four. It returns the files written.
func WriteSweepOutputs(dir string, s *Sweep) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	b, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "sweep.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	files = append(files, path)
	specs := []struct {
		name, title, y string
		log            bool
		v              func(SweepRow) float64
	}{
		{"fleet_p90_ttft", "p90 TTFT vs fleet size", "p90 TTFT (ms, log scale)", true, func(r SweepRow) float64 { return r.P90TTFTMs }},
		{"fleet_throughput", "Output throughput per endpoint", "output tokens/s per endpoint", false, func(r SweepRow) float64 { return r.OutputThroughputPerEndpoint }},
		{"fleet_goodput", "Goodput per endpoint (" + s.Goodput.String() + ")", "good requests/s per endpoint", false, func(r SweepRow) float64 { return r.GoodputPerEndpoint }},
		{"fleet_decision_cpu", "Real CPU time per decision", "µs per scheduling decision (log scale)", true, func(r SweepRow) float64 { return r.Decisions.CPUMeanUs }},
	}
	var all []*plot.Plot
	for _, sp := range specs {
		if sp.name == "fleet_goodput" && !s.Goodput.Set() {
			continue
		}
		p, err := s.fleetPlot(sp.title, sp.y, sp.log, sp.v)
		if err != nil {
			return files, err
		}
		all = append(all, p)
		for _, ext := range []string{".png", ".svg"} {
			path := filepath.Join(dir, sp.name+ext)
			if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
				return files, fmt.Errorf("plot %s: %w", path, err)
			}
			files = append(files, path)
		}
	}
	// All of them on one page, two by two.
	const cols = 2
	rows := (len(all) + cols - 1) / cols
	img := vgimg.New(14*vg.Inch, vg.Length(rows)*4.5*vg.Inch)
	dc := draw.New(img)
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
		for j := range grid[i] {
			if k := i*cols + j; k < len(all) {
				grid[i][j] = all[k]
			}
		}
	}
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, t, dc)
	for i := range grid {
		for j := range grid[i] {
			if grid[i][j] != nil {
				grid[i][j].Draw(canvases[i][j])
			}
		}
	}
	path = filepath.Join(dir, "fleet.png")
	f, err := os.Create(path)
	if err != nil {
		return files, err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return files, err
	}
	if err := f.Close(); err != nil {
		return files, err
	}
	return append(files, path), nil
}

// fleetPlot draws one value per policy against fleet size (log2 x axis).
func (s *Sweep) fleetPlot(title, ylabel string, logY bool, v func(SweepRow) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title + " (simulated, " + strconv.FormatFloat(s.RatePerEndpoint, 'f', -1, 64) + " req/s per endpoint)"
	p.X.Label.Text = "endpoints (log scale)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	var sizes []float64
	var policies []string
	for _, r := range s.Rows {
		if !slices.Contains(sizes, float64(r.FleetSize)) {
			sizes = append(sizes, float64(r.FleetSize))
		}
		if !slices.Contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
	}
	slices.Sort(sizes)
	p.X.Tick.Marker = sizeTicks(sizes)
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top, p.Legend.Left = true, true
	top := 0.0
	for i, policy := range policies {
		var pts plotter.XYs
		for _, r := range s.Rows {
			if r.Policy == policy {
				y := v(r)
				if logY {
					y = math.Max(y, 0.01)
				}
				pts = append(pts, plotter.XY{X: float64(r.FleetSize), Y: y})
				top = math.Max(top, y)
			}
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		sc.Shape = plotutil.Shape(i)
		p.Add(l, sc)
		p.Legend.Add(policy, l, sc)
	}
	p.Add(plotter.NewGrid())
	// Headroom above the lines for the legend (top left).
	if logY {
		p.Y.Max = math.Max(p.Y.Max, top*8)
	} else {
		p.Y.Min = math.Min(p.Y.Min, 0)
		p.Y.Max = math.Max(p.Y.Max, top*1.45)
	}
	return p, nil
}

// sizeTicks labels the fleet sizes of a sweep on a log axis.
type sizeTicks []float64

func (t sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, v := range t {
		if v >= lo && v <= hi {
			out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
	}
	return out
}
