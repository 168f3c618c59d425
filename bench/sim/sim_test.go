package sim

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// smallSpec is a shared-prefix workload small enough for unit tests.
func smallSpec(seed int64) bench.Spec {
	return bench.Spec{Name: bench.WorkloadSharedPrefix, Seed: seed, Groups: 4, PromptsPerGroup: 4, SystemPromptLen: 256,
		QuestionLen: 32, OutputLen: 4}
}

func smallConfig(seed int64, fleet int, steps ...bench.Step) Config {
	return Config{Spec: smallSpec(seed), Steps: steps, FleetSize: fleet, KVCacheSize: 1024, MaxModelLen: 1024, Seed: seed}
}

func simulate(t *testing.T, cfg Config, p Picker) *Result {
	t.Helper()
	res, err := Run(context.Background(), cfg, p)
	if err != nil {
		t.Fatalf("seed %d: Run: %v", cfg.Seed, err)
	}
	return res
}

// TestArrivalsAreTheLoadGenerators: the simulated requests are bench.Generate's, sent at
// bench.Arrivals' times (same seed, same ladder, same burstiness), each in its ladder step.
func TestArrivalsAreTheLoadGenerators(t *testing.T) {
	const seed = 11
	steps := []bench.Step{{Rate: 5, Duration: 4 * time.Second}, {Rate: 20, Duration: 2 * time.Second}}
	cfg := smallConfig(seed, 2, steps...)
	cfg.Burstiness = 0.5
	res := simulate(t, cfg, NewRoundRobin())
	arr, err := bench.Arrivals(steps, 0.5, seed)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := bench.Generate(smallSpec(seed), len(arr))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outcomes) != len(arr) || len(arr) < 20 {
		t.Fatalf("seed %d: %d outcomes for %d arrivals (want equal, at least 20)", seed, len(res.Outcomes), len(arr))
	}
	for i, o := range res.Outcomes {
		a := arr[i]
		if o.ScheduledMs != ms(a.At) || o.SentMs != ms(a.At) || o.Step != a.Step || o.ID != reqs[i].ID ||
			o.PromptTokens != reqs[i].PromptTokens || o.OutputTokens != reqs[i].OutputTokens || !o.OK() {
			t.Fatalf("seed %d: outcome %d = %+v; want sent at %v in step %d, request %+v", seed, i, o, a.At, a.Step, reqs[i])
		}
		if want := "conformance-" + string(rune('0'+i%2)); o.Endpoint != want {
			t.Fatalf("seed %d: round-robin sent request %d to %s, want %s", seed, i, o.Endpoint, want)
		}
	}
	if res.Steps[1].Metrics.Completed <= res.Steps[0].Metrics.Completed/2 {
		t.Errorf("seed %d: step 1 (20 req/s for 2 s) has %d requests, step 0 (5 req/s for 4 s) %d", seed,
			res.Steps[1].Metrics.Completed, res.Steps[0].Metrics.Completed)
	}
}

// TestLoneRequestsMeetTheOracleBoundExactly: on one endpoint with requests that never overlap,
// every TTFT is the fake's prefill of its uncached tokens at load factor 1, which is what
// bench.OracleBound charges: the event loop processes every token at its exact due time.
func TestLoneRequestsMeetTheOracleBoundExactly(t *testing.T) {
	const seed = 5
	// Gamma shape 100: gaps of 2 s ± 0.2 s, far longer than a request (≈ 0.2 s).
	cfg := smallConfig(seed, 1, bench.Step{Rate: 0.5, Duration: 60 * time.Second})
	cfg.Burstiness = 100
	res := simulate(t, cfg, NewRoundRobin())
	reqs, err := bench.Generate(smallSpec(seed), len(res.Outcomes))
	if err != nil {
		t.Fatal(err)
	}
	o, err := bench.OracleBound(reqs, bench.FrozenLatencyModel())
	if err != nil {
		t.Fatal(err)
	}
	for i, out := range res.Outcomes {
		if math.Abs(out.TTFTMs-o.PerRequestMs[i]) > 1e-6 {
			t.Fatalf("seed %d: request %d TTFT %.6f ms, oracle bound %.6f ms", seed, i, out.TTFTMs, o.PerRequestMs[i])
		}
	}
	if o.CachedTokenFraction == 0 || math.Abs(res.Overall.CachedTokenFraction-o.CachedTokenFraction) > 1e-9 {
		t.Errorf("seed %d: cached share %v, oracle's %v", seed, res.Overall.CachedTokenFraction, o.CachedTokenFraction)
	}
}

// stalenessProbe is a picker that records what it sees of the metrics.
type stalenessProbe struct {
	env      *Env
	lastAt   []time.Time
	lastSeen []engine.Stats
	scrapes  [][]time.Duration
	ages     []time.Duration
	lagging  int
	mismatch []string
	n        int
}

func (p *stalenessProbe) Name() string { return "probe" }
func (p *stalenessProbe) Close()       {}
func (p *stalenessProbe) Start(env *Env) error {
	p.env = env
	p.lastAt = make([]time.Time, len(env.Endpoints))
	p.lastSeen = make([]engine.Stats, len(env.Endpoints))
	p.scrapes = make([][]time.Duration, len(env.Endpoints))
	return nil
}
func (p *stalenessProbe) Scraped(i int, s engine.Stats) {
	if exact := p.env.Exact(i); s.Running != exact.Running || s.Waiting != exact.Waiting || s.KVUsage != exact.KVUsage {
		p.mismatch = append(p.mismatch, "scrape differs from the engine at the same instant")
	}
	p.lastAt[i], p.lastSeen[i] = p.env.Clock.Now(), s
	p.scrapes[i] = append(p.scrapes[i], p.env.Clock.Elapsed())
}
func (p *stalenessProbe) Pick(*Request) (int, Flight, error) {
	for i := range p.lastAt {
		if p.lastAt[i].IsZero() {
			continue
		}
		p.ages = append(p.ages, p.env.Clock.Since(p.lastAt[i]))
		if p.lastSeen[i].Running != p.env.Exact(i).Running {
			p.lagging++
		}
	}
	i := p.n % len(p.lastAt)
	p.n++
	return i, noFlight{}, nil
}

// TestMetricsAreAsStaleAsTheScrapeInterval: every endpoint is scraped exactly every refresh
// interval at its own phase, a scrape reads the engine as it is at that instant, and a decision
// sees metrics between 0 and one interval old — uniformly, so on average half an interval — and
// therefore sometimes behind the engine.
func TestMetricsAreAsStaleAsTheScrapeInterval(t *testing.T) {
	const seed = 3
	interval := 200 * time.Millisecond
	cfg := smallConfig(seed, 4, bench.Step{Rate: 40, Duration: 30 * time.Second})
	cfg.RefreshInterval, cfg.StaleThreshold = interval, time.Second
	p := &stalenessProbe{}
	simulate(t, cfg, p)
	if len(p.mismatch) > 0 {
		t.Fatalf("seed %d: %d scrapes: %s", seed, len(p.mismatch), p.mismatch[0])
	}
	phases := map[time.Duration]bool{}
	for i, ts := range p.scrapes {
		if len(ts) < 100 || ts[0] >= interval {
			t.Fatalf("seed %d: endpoint %d: %d scrapes, first at %v (want ≥ 100, first within %v)", seed, i, len(ts), ts[0], interval)
		}
		phases[ts[0]] = true
		for k := 1; k < len(ts); k++ {
			if ts[k]-ts[k-1] != interval {
				t.Fatalf("seed %d: endpoint %d scraped at %v then %v, want every %v", seed, i, ts[k-1], ts[k], interval)
			}
		}
	}
	if len(phases) < 2 {
		t.Errorf("seed %d: every endpoint scraped at the same phase %v", seed, phases)
	}
	var sum time.Duration
	for _, a := range p.ages {
		if a < 0 || a >= interval {
			t.Fatalf("seed %d: a decision saw metrics %v old, want in [0, %v)", seed, a, interval)
		}
		sum += a
	}
	// n ≈ 4,800 ages uniform on [0, 200 ms): the mean's standard deviation is about 0.8 ms, so
	// [80, 120] ms is ±25 standard deviations (false-failure probability far below 1e-9).
	n := len(p.ages)
	avg := sum / time.Duration(n)
	if n < 4000 || avg < 80*time.Millisecond || avg > 120*time.Millisecond {
		t.Errorf("seed %d: n=%d decisions, mean metrics age %v, want about %v (interval/2)", seed, n, avg, interval/2)
	}
	if p.lagging == 0 {
		t.Errorf("seed %d: in %d reads the scraped running count never lagged the engine; metrics are not stale", seed, n)
	}
}

// TestDeterministic: the same config and seed give the same outcomes, decision for decision, for
// the baselines; another seed gives other outcomes.
func TestDeterministic(t *testing.T) {
	for _, newPicker := range []func() Picker{func() Picker { return NewRoundRobin() }, func() Picker { return NewOracle() }} {
		const seed = 7
		cfg := smallConfig(seed, 3, bench.Step{Rate: 30, Duration: 10 * time.Second})
		a, b := simulate(t, cfg, newPicker()), simulate(t, cfg, newPicker())
		name := a.Target
		if d := cmp.Diff(a.Outcomes, b.Outcomes); d != "" {
			t.Errorf("%s, seed %d: two runs differ (-first +second):\n%s", name, seed, d)
		}
		if d := cmp.Diff(a.Samples, b.Samples); d != "" {
			t.Errorf("%s, seed %d: monitor samples differ:\n%s", name, seed, d)
		}
		cfg2 := smallConfig(seed+1, 3, bench.Step{Rate: 30, Duration: 10 * time.Second})
		if c := simulate(t, cfg2, newPicker()); cmp.Equal(a.Outcomes, c.Outcomes) {
			t.Errorf("%s: seeds %d and %d gave the same outcomes", name, seed, seed+1)
		}
	}
}

// TestOracleUsesTheCache: the oracle keeps prefix groups where they are cached, so it caches a
// larger share of prompt tokens than round-robin on the same requests, and no request waits.
func TestOracleUsesTheCache(t *testing.T) {
	const seed = 9
	cfg := smallConfig(seed, 4, bench.Step{Rate: 20, Duration: 20 * time.Second})
	cfg.Spec.Groups = 16
	rr, or := simulate(t, cfg, NewRoundRobin()), simulate(t, cfg, NewOracle())
	if or.Overall.CachedTokenFraction <= rr.Overall.CachedTokenFraction || or.Overall.TTFT.Mean >= rr.Overall.TTFT.Mean {
		t.Errorf("seed %d: oracle cached %.2f, mean TTFT %.1f ms; round-robin %.2f, %.1f ms", seed,
			or.Overall.CachedTokenFraction, or.Overall.TTFT.Mean, rr.Overall.CachedTokenFraction, rr.Overall.TTFT.Mean)
	}
}

func TestSlowProfileIsSlower(t *testing.T) {
	const seed = 2
	cfg := smallConfig(seed, 2, bench.Step{Rate: 2, Duration: 20 * time.Second})
	cfg.Profiles = []string{bench.ProfileDefault, bench.ProfileSlow}
	res := simulate(t, cfg, NewRoundRobin())
	for _, e := range res.Endpoints {
		if want := map[string]string{"conformance-0": bench.ProfileDefault, "conformance-1": bench.ProfileSlow}[e.Name]; e.Profile != want {
			t.Errorf("per-endpoint row %s: profile %q, want %q", e.Name, e.Profile, want)
		}
	}
	if res.Profiles[bench.ProfileDefault] != 1 || res.Profiles[bench.ProfileSlow] != 1 {
		t.Fatalf("profiles %v, want one of each", res.Profiles)
	}
	var fast, slow []float64
	for _, o := range res.Outcomes {
		for _, g := range o.ITLMs {
			if o.Endpoint == "conformance-0" {
				fast = append(fast, g)
			} else {
				slow = append(slow, g)
			}
		}
	}
	// ITL 12 ms (sd 2) against 24 ms (sd 2) at light load: n ≈ 60 gaps each, means far apart.
	f, s := mean(fast), mean(slow)
	if len(fast) < 30 || s < 1.7*f {
		t.Errorf("seed %d: mean ITL fast %.1f ms (n=%d), slow %.1f ms (n=%d); want slow ≈ 2× fast", seed, f, len(fast), s, len(slow))
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.FleetSize = MaxFleetSize + 1 }, "fleet size"},
		{func(c *Config) { c.RefreshInterval, c.StaleThreshold = time.Second, time.Millisecond }, "--stale-threshold"},
		{func(c *Config) { c.Profiles = []string{"fast"} }, "--fleet-profiles"},
		{func(c *Config) { c.Steps = nil }, "rate ladder"},
		{func(c *Config) { c.Spec.Groups = -1 }, "groups"},
	} {
		cfg := smallConfig(1, 2, bench.Step{Rate: 1, Duration: time.Second})
		tc.mutate(&cfg)
		if _, err := Run(context.Background(), cfg, NewRoundRobin()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run error = %v, want one naming %q", err, tc.want)
		}
	}
}

// TestSweepReplicatesSmallFleets: a cell whose fleet cannot give MinRequests measured requests in
// one run is replicated with other seeds, and only the measured step (after the warm-up) counts.
func TestSweepReplicatesSmallFleets(t *testing.T) {
	base := smallConfig(4, 1, bench.Step{Rate: 1, Duration: time.Second})
	base.Goodput = bench.SLOs{TTFTMs: 500}
	s, err := RunSweep(context.Background(), SweepConfig{Base: base, FleetSizes: []int{1, 4}, Policies: []string{PolicyRoundRobin},
		NewPicker: func(string) (Picker, error) { return NewRoundRobin(), nil }, RatePerEndpoint: 5, Warmup: time.Second,
		Duration: 4 * time.Second, GroupsPerEndpoint: 2, MinRequests: 60})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rows) != 2 {
		t.Fatalf("rows %+v", s.Rows)
	}
	// 5 req/s × 4 s ≈ 20 measured requests per run on 1 endpoint: 3 replicas; 80 on 4: 1.
	if s.Rows[0].Replicas != 3 || s.Rows[1].Replicas != 1 {
		t.Errorf("replicas %d and %d, want 3 and 1", s.Rows[0].Replicas, s.Rows[1].Replicas)
	}
	for _, r := range s.Rows {
		if r.Requests < 40 || r.Requests > 130 || r.GoodputFraction <= 0 || r.GoodputFraction > 1 || r.OutputThroughputPerEndpoint <= 0 {
			t.Errorf("row %+v", r)
		}
	}
}

func TestValidateErrors(t *testing.T) {
	real := &bench.Result{Overall: bench.Metrics{TTFT: bench.Dist{Mean: 100, Median: 80, Percentiles: map[string]float64{"p90": 200}},
		OutputThroughput: 500, CachedTokenFraction: 0.9}, EngineTTFTMs: 80}
	simulated := &Result{Result: &bench.Result{Overall: bench.Metrics{TTFT: bench.Dist{Mean: 90, Median: 100, Percentiles: map[string]float64{"p90": 200}},
		OutputThroughput: 500, CachedTokenFraction: 0.8}, EngineTTFTMs: 90}}
	rows := Validate("p", real, simulated)
	want := []float64{-0.10, 0.25, 0, 0, -1.0 / 9, 0.125}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	real.EngineTTFTMs = -1 // no histograms read: no row inside the fakes
	if n := len(Validate("p", real, simulated)); n != len(want)-1 {
		t.Errorf("without the fakes' TTFT: %d rows, want %d", n, len(want)-1)
	}
	for i, r := range rows {
		if math.Abs(r.Error-want[i]) > 1e-9 || r.Within != (math.Abs(want[i]) <= ValidationTolerance) {
			t.Errorf("%s: error %v within %v, want %v", r.Metric, r.Error, r.Within, want[i])
		}
	}
}

// TestInWindowCountsTokensInsideTheMeasuredWindow: throughput over the measured window counts the
// tokens generated in it (from the recorded gaps, or spread evenly without them) and the requests
// that end in it, and nothing of failed requests.
func TestInWindowCountsTokensInsideTheMeasuredWindow(t *testing.T) {
	outs := []bench.Outcome{
		// Tokens at 1100, 1600, 2100: two in [1000, 2000); ends at 2100, after the window.
		{SentMs: 900, TTFTMs: 200, E2EMs: 1200, OutputTokens: 3, ITLMs: []float64{500, 500}, Status: 200},
		// First token at 100 (before), 4 more evenly over (100, 1500]: 500/1400 of them inside;
		// ends inside.
		{SentMs: 0, TTFTMs: 100, E2EMs: 1500, OutputTokens: 5, Status: 200},
		// Failed: nothing counts.
		{SentMs: 1200, TTFTMs: 10, E2EMs: 20, OutputTokens: 2, Status: 500, Error: "HTTP 500"},
		// After the window.
		{SentMs: 2500, TTFTMs: 10, E2EMs: 20, OutputTokens: 2, ITLMs: []float64{10}, Status: 200},
	}
	tokens, finished := inWindow(outs, 1000, 1000)
	if want := 2 + 4*500.0/1400; math.Abs(tokens-want) > 1e-9 || finished != 1 {
		t.Errorf("inWindow = %v tokens, %d finished; want %v, 1", tokens, finished, want)
	}
}

// TestSweepThroughputIsTheMeasuredWindows: well below saturation, what the fleet finishes and
// generates per second in the measured window is what arrives in it. The shared-prefix requests
// all have OutputLen (4) tokens, so output tokens/s per endpoint is 4 × the measured requests ÷
// (window × endpoints × replicas) and requests/s the measured requests over the same. The two
// differ only at the window's edges (a request lasts ≈ 0.1 s against a 20 s window, 1 request in
// flight at a time on average), so 2% is several times that gap; seeded, so the test is
// deterministic.
func TestSweepThroughputIsTheMeasuredWindows(t *testing.T) {
	base := smallConfig(6, 1, bench.Step{Rate: 1, Duration: time.Second})
	s, err := RunSweep(context.Background(), SweepConfig{Base: base, FleetSizes: []int{4}, Policies: []string{PolicyRoundRobin},
		NewPicker: func(string) (Picker, error) { return NewRoundRobin(), nil }, RatePerEndpoint: 5, Warmup: 2 * time.Second,
		Duration: 20 * time.Second, MinRequests: 1000})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Rows[0]
	perEndpointS := 20 * 4 * float64(r.Replicas)
	arrived := float64(r.Requests) / perEndpointS
	if r.Replicas != 3 || r.Requests < 900 || r.Failed != 0 {
		t.Fatalf("row %+v: want 3 replicas of ≈ 400 requests, none failed", r)
	}
	if got, want := r.OutputThroughputPerEndpoint, 4*arrived; math.Abs(got/want-1) > 0.02 {
		t.Errorf("output throughput %.3f tok/s per endpoint, want %.3f (4 × %d requests ÷ %.0f endpoint-seconds) within 2%%", got, want, r.Requests, perEndpointS)
	}
	if got := r.RequestThroughputPerEndpoint; math.Abs(got/arrived-1) > 0.02 {
		t.Errorf("request throughput %.3f req/s per endpoint, want %.3f within 2%%", got, arrived)
	}
}
