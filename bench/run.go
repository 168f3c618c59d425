package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/eppkit/eppkit/conformance/harness"
)

// RunConfig configures Run: one target, one workload, one ladder.
type RunConfig struct {
	// Env starts the target (fleet, source, EPP or round-robin gateway).
	Env EnvConfig
	// Spec is the workload; Requests, when set, replaces generation (a JSONL import) and is
	// cycled when shorter than the arrivals.
	Spec     Spec
	Requests []Request
	// Steps is the rate ladder; Burstiness the gamma shape (1 = Poisson); MaxConcurrency the cap
	// (0 = none).
	Steps          []Step
	Burstiness     float64
	MaxConcurrency int
	// Percentiles are extra percentiles for the metrics (vLLM's --metric-percentiles).
	Percentiles []float64
	// Goodput are the SLOs of goodput (vLLM's --goodput); none set means no goodput.
	Goodput SLOs
	// Progress receives the progress bar; nil shows none.
	Progress io.Writer
	Logger   *slog.Logger
}

// Plan is the requests and send times of a run; equal configs give equal plans, so every target of
// a comparison sees the same traffic.
type Plan struct {
	Requests []Request
	Arrivals []Arrival
	Oracle   Oracle
}

// MakePlan draws the arrivals and generates (or cycles) the requests, and computes the oracle.
func MakePlan(cfg RunConfig, adapters []string) (*Plan, error) {
	arr, err := Arrivals(cfg.Steps, cfg.Burstiness, cfg.Spec.Seed)
	if err != nil {
		return nil, err
	}
	var reqs []Request
	if len(cfg.Requests) > 0 {
		for i := range arr {
			r := cfg.Requests[i%len(cfg.Requests)]
			r.ID = i
			reqs = append(reqs, r)
		}
	} else {
		spec := cfg.Spec
		if spec.Name == WorkloadMultiLoRA && len(spec.Adapters) == 0 {
			spec.Adapters = adapters
		}
		if reqs, err = Generate(spec, len(arr)); err != nil {
			return nil, err
		}
	}
	o, err := OracleBound(reqs, FrozenLatencyModel())
	if err != nil {
		return nil, err
	}
	return &Plan{Requests: reqs, Arrivals: arr, Oracle: o}, nil
}

// Run starts the environment, sends the plan through the gateway, stops the environment and
// returns the result. Harness errors are returned as they are (*harness.Error).
func Run(ctx context.Context, cfg RunConfig) (*Result, error) {
	if cfg.Burstiness == 0 {
		cfg.Burstiness = 1
	}
	if cfg.Env.FleetSize == 0 {
		cfg.Env.FleetSize = DefaultFleetSize
	}
	plan, err := MakePlan(cfg, AdapterNames(cfg.Env.FleetSize))
	if err != nil {
		return nil, err
	}
	loadStart := LoadAverage()
	env, err := StartEnv(ctx, cfg.Env)
	if err != nil {
		return nil, err
	}
	defer env.Close()
	mon := &Monitor{Endpoints: env.MetricsURLs()}
	started := time.Now()
	load, err := RunLoad(ctx, LoadConfig{BaseURL: env.URL, Model: harness.DefaultModelName, Requests: plan.Requests,
		Arrivals: plan.Arrivals, MaxConcurrency: cfg.MaxConcurrency, Progress: cfg.Progress,
		Description: fmt.Sprintf("%-18s", cfg.Env.Name), Monitor: mon})
	if err != nil {
		return nil, err
	}
	if exitErr := env.Suite.TargetExited(); exitErr != nil { // nil for the round-robin baseline
		return nil, exitErr
	}
	r := BuildResult(cfg.Env.Name, cfg.Spec, cfg.Steps, load, cfg.Percentiles)
	SetEndpointProfiles(r, env.Profiles)
	SetGoodput(r, cfg.Goodput)
	r.Burstiness, r.MaxConcurrency, r.StartedAt = cfg.Burstiness, cfg.MaxConcurrency, started
	r.LoadAvgStart, r.LoadAvgEnd = loadStart, LoadAverage()
	o := plan.Oracle
	r.Oracle = &o
	if o.MeanTTFTMs > 0 {
		r.OracleRatio = r.Overall.TTFT.Mean / o.MeanTTFTMs
	}
	for i := range r.Steps {
		var sum float64
		n := 0
		for j, a := range plan.Arrivals {
			if a.Step == i {
				sum += o.PerRequestMs[j]
				n++
			}
		}
		if n > 0 {
			r.Steps[i].OracleMeanTTFTMs = sum / float64(n)
			if r.Steps[i].OracleMeanTTFTMs > 0 {
				r.Steps[i].OracleRatio = r.Steps[i].Metrics.TTFT.Mean / r.Steps[i].OracleMeanTTFTMs
			}
		}
	}
	return r, nil
}
