package simepp

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/bench/sim"
	"github.com/eppkit/eppkit/fakes/vllm/engine"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
)

func config(seed int64, fleet int, rate float64, d time.Duration) sim.Config {
	return sim.Config{Spec: bench.Spec{Name: bench.WorkloadSharedPrefix, Seed: seed, Groups: 12, PromptsPerGroup: 4, SystemPromptLen: 256,
		QuestionLen: 32, OutputLen: 8}, Steps: []bench.Step{{Rate: rate, Duration: d}}, FleetSize: fleet, KVCacheSize: 1024,
		MaxModelLen: 1024, Seed: seed}
}

func loadConfig(t *testing.T, name string) *framework.EndpointPickerConfig {
	t.Helper()
	if name == "" {
		return nil
	}
	cfg, err := LoadConfigFile(filepath.Join("..", "..", "manifests", "epp-configs", name))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func simulate(t *testing.T, cfg sim.Config, p sim.Picker) *sim.Result {
	t.Helper()
	res, err := sim.Run(context.Background(), cfg, p)
	if err != nil {
		t.Fatalf("seed %d: %v", cfg.Seed, err)
	}
	return res
}

// TestReferenceIsDeterministic: the reference EPP driven in process (default profile, and
// predicted latency with its in-process predictor retraining in the background) makes the same
// decisions in two runs of a seed, and other decisions with another seed.
func TestReferenceIsDeterministic(t *testing.T) {
	for _, c := range []struct{ policy, file string }{{"reference", ""}, {"predicted-latency", "predicted-latency.yaml"}} {
		const seed = 13
		cfg := config(seed, 4, 40, 15*time.Second)
		a := simulate(t, cfg, New(Options{Name: c.policy, Config: loadConfig(t, c.file)}))
		b := simulate(t, cfg, New(Options{Name: c.policy, Config: loadConfig(t, c.file)}))
		if d := cmp.Diff(a.Outcomes, b.Outcomes); d != "" {
			t.Errorf("%s, seed %d: two runs differ (-first +second):\n%s", c.policy, seed, d)
		}
		other := config(seed+1, 4, 40, 15*time.Second)
		if o := simulate(t, other, New(Options{Name: c.policy, Config: loadConfig(t, c.file)})); cmp.Equal(a.Outcomes, o.Outcomes) {
			t.Errorf("%s: seeds %d and %d gave the same outcomes", c.policy, seed, seed+1)
		}
	}
}

// TestPredictedLatencyLearnsFromTheResponses: the response phase reaches the plugins as it does
// over ext_proc — the producer sees a streamed response, its first token and its usage — so every
// completed request becomes a training entry, the predictor gets ready and predicts.
func TestPredictedLatencyLearnsFromTheResponses(t *testing.T) {
	const seed = 17
	p := New(Options{Name: "predicted-latency", Config: loadConfig(t, "predicted-latency.yaml")})
	res := simulate(t, config(seed, 4, 40, 15*time.Second), p)
	pl, ok := p.Runtime().Plugin(latency.ProducerType)
	if !ok {
		t.Fatal("no predicted-latency-producer in the runtime")
	}
	prod := pl.(*latency.Producer)
	st := prod.Stats()
	if st.TrainingEntries != int64(res.Overall.Completed) || st.TrainingErrors != 0 {
		t.Errorf("seed %d: %d training entries (%d refused) for %d completed requests", seed, st.TrainingEntries, st.TrainingErrors, res.Overall.Completed)
	}
	if !prod.PredictorReady() || st.Predicted == 0 {
		t.Errorf("seed %d: predictor ready %v, %d requests predicted of %d", seed, prod.PredictorReady(), st.Predicted, st.Predicted+st.Unpredicted)
	}
	// The flights report the producer's predictions back, so the result compares them with the
	// outcomes per endpoint.
	predicted := 0
	for _, row := range res.Predictions {
		predicted += row.Predicted
		if row.Predicted > 0 && !(row.MeanPredictedTTFTMs > 0) {
			t.Errorf("seed %d: %s: %d predictions with mean %v ms", seed, row.Endpoint, row.Predicted, row.MeanPredictedTTFTMs)
		}
	}
	if predicted == 0 || int64(predicted) > st.Predicted {
		t.Errorf("seed %d: %d predictions compared with outcomes, producer predicted %d requests", seed, predicted, st.Predicted)
	}
	for _, ep := range sim.Fleet(4, nil) {
		if n, tokens := prod.InFlight(ep.Key()); n != 0 || tokens != 0 {
			t.Errorf("seed %d: %s still has %d requests and %d prompt tokens in flight after the run", seed, ep.Key(), n, tokens)
		}
	}
}

// TestReferenceKeepsPrefixesTogether: the reference's default profile (prefix 3, queue 2, KV 2)
// caches a larger share of prompt tokens than round-robin on the same requests.
func TestReferenceKeepsPrefixesTogether(t *testing.T) {
	const seed = 19
	cfg := config(seed, 4, 20, 20*time.Second)
	cfg.Spec.Groups = 100 // 1,600 blocks of system prompts: more than one endpoint's 1,024
	rr := simulate(t, cfg, sim.NewRoundRobin())
	ref := simulate(t, cfg, New(Options{Name: "reference"}))
	if ref.Overall.CachedTokenFraction < rr.Overall.CachedTokenFraction+0.1 || ref.Overall.Failed != 0 {
		t.Errorf("seed %d: reference cached %.2f (%d failed), round-robin %.2f; want at least 0.1 more", seed,
			ref.Overall.CachedTokenFraction, ref.Overall.Failed, rr.Overall.CachedTokenFraction)
	}
	if ref.Decisions.N != len(ref.Outcomes) || ref.Decisions.CPUMeanUs <= 0 {
		t.Errorf("decision cost %+v for %d requests", ref.Decisions, len(ref.Outcomes))
	}
}

// TestMetricsSourceStaleness: the scraped metrics are converted as the data layer extracts the
// fake's /metrics and are stale, as the data layer judges, when never scraped or older than the
// stale threshold.
func TestMetricsSourceStaleness(t *testing.T) {
	clk := sim.NewClock()
	env := &sim.Env{Clock: clk, Endpoints: sim.Fleet(2, nil), StaleThreshold: time.Second}
	m := newMetricsSource(env)
	key := env.Endpoints[0].Key()
	if fm, stale := m.Read(key); fm != nil || !stale || !m.Stale(env.Endpoints[1].Key()) || m.Metrics(key) != nil {
		t.Fatalf("never scraped: Read = %v, %v; want nil, stale", fm, stale)
	}
	if _, stale := m.Read("10.0.0.9:1"); !stale {
		t.Error("an unknown endpoint is not stale")
	}
	clk.Set(sim.Epoch.Add(time.Second))
	m.store(0, engine.Stats{Running: 3, Waiting: 2, KVUsage: 1.0000001, RunningLoRAs: []string{"a"}, WaitingLoRAs: []string{"a", "b"},
		MaxLoras: 2, BlockSize: 16, NumGPUBlocks: 1024})
	fm, stale := m.Read(key)
	want := &framework.Metrics{WaitingQueueSize: 2, RunningRequests: 3, KVCacheUsage: 1, ActiveModels: map[string]struct{}{"a": {}},
		WaitingModels: map[string]struct{}{"b": {}}, MaxActiveModels: 2, CacheBlockSize: 16, CacheNumGPUBlocks: 1024,
		UpdateTime: sim.Epoch.Add(time.Second)}
	if stale || !cmp.Equal(fm, want) {
		t.Errorf("fresh scrape: stale %v, %s", stale, cmp.Diff(want, fm))
	}
	clk.Set(sim.Epoch.Add(2 * time.Second)) // exactly the threshold old: still fresh
	if m.Stale(key) {
		t.Error("metrics exactly StaleThreshold old are stale; the data layer calls them fresh")
	}
	clk.Set(sim.Epoch.Add(2*time.Second + time.Nanosecond))
	if !m.Stale(key) {
		t.Error("metrics older than StaleThreshold are not stale")
	}
	if c := m.Metrics(key); c == fm || !cmp.Equal(c, fm) {
		t.Error("Metrics must return a copy of the last scrape")
	}
}
