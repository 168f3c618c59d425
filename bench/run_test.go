package bench

import (
	"context"
	"testing"
	"time"
)

// smallRunConfig is the tests' small real run with seed: a 2-endpoint fleet of 1,024 blocks and a
// 1,024-token context, 3 s of a 4-group shared-prefix workload (64-token system prompts, 4 output
// tokens) at 4 req/s, round-robin unless the caller sets a target.
func smallRunConfig(seed int64) RunConfig {
	spec := Spec{Name: WorkloadSharedPrefix, Seed: seed, Groups: 2, PromptsPerGroup: 2, SystemPromptLen: 64, QuestionLen: 8, OutputLen: 4}
	return RunConfig{Spec: spec, Steps: []Step{{Rate: 4, Duration: 3 * time.Second}},
		Env: EnvConfig{Name: TargetRoundRobin, Seed: seed, FleetSize: 2, KVCacheSize: 1024, MaxModelLen: 1024}}
}

// lastTokenMs is when o's last token arrived, ms after sending: its TTFT plus every gap.
func lastTokenMs(o Outcome) float64 {
	last := o.TTFTMs
	for _, g := range o.ITLMs {
		last += g
	}
	return last
}

// TestRunRoundRobinEndToEnd runs the whole pipeline without an EPP: a 2-endpoint fleet with the
// frozen profile, the round-robin gateway over HTTP, 3 s of shared-prefix traffic at 4 req/s.
func TestRunRoundRobinEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, smallRunConfig(21))
	if err != nil {
		t.Fatalf("seed 21: %v", err)
	}
	m := r.Overall
	if m.Completed < 3 || m.Failed != 0 {
		t.Fatalf("seed 21: %d completed, %d failed; want ≥ 3 (Poisson mean 12) and 0", m.Completed, m.Failed)
	}
	if m.TotalOutputTokens != 4*m.Completed {
		t.Fatalf("%d output tokens for %d requests of 4", m.TotalOutputTokens, m.Completed)
	}
	// The frozen profile bounds every stream from below whatever the machine's load: no token
	// before the 30 ms prefill overhead, and the 3 later tokens at least 0.3 × 12 ms apart (the
	// jitter clamp). Client-side gaps themselves are not asserted: a starved client reads several
	// chunks at once (vLLM's client sees the same).
	for _, o := range r.Outcomes {
		if last := lastTokenMs(o); o.TTFTMs < 30 || last < 30+3*3.6 {
			t.Fatalf("seed 21 request %d: TTFT %.1f ms, last token at %.1f ms; the fake cannot be faster than 30 and %.1f ms",
				o.ID, o.TTFTMs, last, 30+3*3.6)
		}
	}
	if len(r.Endpoints) != 2 {
		t.Fatalf("endpoints %+v, want both members", r.Endpoints)
	}
	for _, e := range r.Endpoints {
		if e.Requests == 0 || e.Share < 0.3 {
			t.Fatalf("round-robin left endpoint %s with %d requests (share %.2f)", e.Name, e.Requests, e.Share)
		}
	}
	if r.Oracle == nil || r.OracleRatio < 1 {
		t.Fatalf("oracle %+v ratio %v: measured mean TTFT must not beat the lower bound", r.Oracle, r.OracleRatio)
	}
	// The fakes' own TTFT histograms cover every request (a last sample follows the run), and an
	// engine's TTFT never exceeds what the client saw.
	if r.EngineTTFTMs < 30 || r.EngineTTFTMs > r.Overall.TTFT.Mean+0.5 {
		t.Fatalf("engine mean TTFT %.1f ms, client mean %.1f ms: want 30 ≤ engine ≤ client", r.EngineTTFTMs, r.Overall.TTFT.Mean)
	}
	if len(r.Samples) < 2 {
		t.Fatalf("%d monitor samples", len(r.Samples))
	}
}

// TestRunHeterogeneousFleet: with profiles default and slow, each per-endpoint row names its
// profile and the slow endpoint's streams obey the slow profile's lower bounds (60 ms prefill
// overhead, later tokens at least 0.3 × 24 ms apart), which hold whatever the machine's load.
func TestRunHeterogeneousFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := smallRunConfig(22)
	cfg.Env.Profiles = []string{ProfileDefault, ProfileSlow}
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("seed 22: %v", err)
	}
	want := map[string]string{"conformance-0": ProfileDefault, "conformance-1": ProfileSlow}
	for _, e := range r.Endpoints {
		if e.Profile != want[e.Name] {
			t.Errorf("seed 22: endpoint %s has profile %q, want %q", e.Name, e.Profile, want[e.Name])
		}
	}
	slow := 0
	for _, o := range r.Outcomes {
		if o.Endpoint != "conformance-1" || !o.OK() {
			continue
		}
		slow++
		if last := lastTokenMs(o); o.TTFTMs < 60 || last < 60+3*7.2 {
			t.Errorf("seed 22 request %d on the slow endpoint: TTFT %.1f ms, last token at %.1f ms; the slow profile cannot be faster than 60 and %.1f ms",
				o.ID, o.TTFTMs, last, 60+3*7.2)
		}
	}
	if slow == 0 {
		t.Fatalf("seed 22: round-robin sent nothing to the slow endpoint: %+v", r.Endpoints)
	}
}
