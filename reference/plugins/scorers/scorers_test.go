package scorers

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
)

func eps(ms ...*framework.Metrics) []*framework.Endpoint {
	out := make([]*framework.Endpoint, len(ms))
	for i, m := range ms {
		out[i] = framework.NewEndpoint(&framework.EndpointMetadata{Name: fmt.Sprintf("p%d", i), Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000}, m)
	}
	return out
}

func scoresOf(t *testing.T, s framework.Scorer, req *framework.LLMRequest, endpoints []*framework.Endpoint) []float64 {
	t.Helper()
	m := s.Score(context.Background(), framework.NewCycleState(), req, endpoints)
	if len(m) != len(endpoints) {
		t.Fatalf("%d scores for %d endpoints", len(m), len(endpoints))
	}
	out := make([]float64, len(endpoints))
	for i, ep := range endpoints {
		v, ok := m[ep.Key()]
		if !ok || math.IsNaN(v) || v < 0 || v > 1 {
			t.Fatalf("endpoint %s: score %v (present %v) outside [0,1]", ep.Key(), v, ok)
		}
		out[i] = v
	}
	return out
}

func TestMinMaxScorers(t *testing.T) {
	tests := []struct {
		name   string
		values []int
		want   []float64
	}{
		{"spread", []int{0, 5, 10}, []float64{1, 0.5, 0}},
		{"all equal", []int{3, 3, 3}, []float64{1, 1, 1}},
		{"single", []int{7}, []float64{1}},
		{"two", []int{4, 2}, []float64{0, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := make([]*framework.Metrics, len(tc.values))
			r := make([]*framework.Metrics, len(tc.values))
			for i, v := range tc.values {
				q[i] = &framework.Metrics{WaitingQueueSize: v, RunningRequests: 100 - i}
				r[i] = &framework.Metrics{RunningRequests: v, WaitingQueueSize: 100 - i}
			}
			if diff := cmp.Diff(tc.want, scoresOf(t, NewQueueScorer(""), nil, eps(q...))); diff != "" {
				t.Errorf("queue-scorer (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, scoresOf(t, NewRunningRequestsScorer(""), nil, eps(r...))); diff != "" {
				t.Errorf("running-requests-size-scorer (-want +got):\n%s", diff)
			}
		})
	}
	if got := NewQueueScorer("").Score(context.Background(), nil, nil, nil); len(got) != 0 {
		t.Fatalf("no endpoints: %v", got)
	}
}

func TestKVCacheScorer(t *testing.T) {
	got := scoresOf(t, NewKVCacheScorer("kv"), nil, eps(
		&framework.Metrics{KVCacheUsage: 0}, &framework.Metrics{KVCacheUsage: 0.25}, &framework.Metrics{KVCacheUsage: 1},
		&framework.Metrics{KVCacheUsage: 1.5}, &framework.Metrics{KVCacheUsage: -0.5}, &framework.Metrics{KVCacheUsage: math.NaN()}, nil))
	if diff := cmp.Diff([]float64{1, 0.75, 0, 0, 1, 0, 1}, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestLoRAAffinityScorer(t *testing.T) {
	set := func(names ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, n := range names {
			m[n] = struct{}{}
		}
		return m
	}
	tests := []struct {
		name string
		m    *framework.Metrics
		want float64
	}{
		{"running", &framework.Metrics{ActiveModels: set("sql-lora", "x", "y"), MaxActiveModels: 3}, 1},
		{"running beats full", &framework.Metrics{ActiveModels: set("sql-lora"), WaitingModels: set("a", "b"), MaxActiveModels: 1}, 1},
		{"free slot", &framework.Metrics{ActiveModels: set("x"), MaxActiveModels: 2}, 0.8},
		{"free slot beats waiting", &framework.Metrics{WaitingModels: set("sql-lora"), MaxActiveModels: 2}, 0.8},
		{"waiting, no slot", &framework.Metrics{ActiveModels: set("x"), WaitingModels: set("sql-lora"), MaxActiveModels: 2}, 0.6},
		{"full", &framework.Metrics{ActiveModels: set("x", "y"), MaxActiveModels: 2}, 0},
		{"max unknown", &framework.Metrics{}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := scoresOf(t, NewLoRAAffinityScorer(""), &framework.LLMRequest{TargetModel: "sql-lora"}, eps(tc.m))
			if got[0] != tc.want {
				t.Fatalf("score = %v, want %v", got[0], tc.want)
			}
		})
	}
}

func TestRegisterAndParameters(t *testing.T) {
	reg := framework.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{QueueScorerType, RunningRequestsScorerType, KVCacheScorerType, LoRAAffinityScorerType} {
		f, ok := reg.Factory(typ)
		if !ok {
			t.Fatalf("%s not registered", typ)
		}
		p, err := f("", nil, nil)
		if err != nil || p.TypedName() != (framework.TypedName{Type: typ, Name: typ}) {
			t.Fatalf("%s: %v %v", typ, p, err)
		}
		p, err = f("mine", json.RawMessage(`{}`), nil)
		if err != nil || p.TypedName().Name != "mine" {
			t.Fatalf("%s named: %v %v", typ, p, err)
		}
		if _, err := f("x", json.RawMessage(`{"weight":2}`), nil); err == nil {
			t.Fatalf("%s accepted an unknown parameter", typ)
		}
	}
}

// TestScoreIndexedMatchesScore checks, on seeded random pools, that every scorer's ScoreIndexed
// writes exactly the value Score maps each endpoint's key to (framework.IndexedScorer's contract).
func TestScoreIndexedMatchesScore(t *testing.T) {
	const seed = 20261201
	rng := rand.New(rand.NewPCG(seed, 1))
	for trial := range 200 {
		n := 1 + rng.IntN(40)
		ms := make([]*framework.Metrics, n)
		for i := range ms {
			if rng.IntN(10) == 0 {
				continue // never scraped
			}
			m := &framework.Metrics{WaitingQueueSize: rng.IntN(6), RunningRequests: rng.IntN(9),
				KVCacheUsage: rng.Float64()*1.4 - 0.2, MaxActiveModels: rng.IntN(3)}
			if rng.IntN(20) == 0 {
				m.KVCacheUsage = math.NaN()
			}
			if rng.IntN(3) == 0 {
				m.ActiveModels = map[string]struct{}{"a": {}}
			}
			if rng.IntN(3) == 0 {
				m.WaitingModels = map[string]struct{}{"a": {}, "b": {}}
			}
			ms[i] = m
		}
		endpoints := eps(ms...)
		req := &framework.LLMRequest{TargetModel: []string{"a", "b", "c"}[rng.IntN(3)]}
		for _, s := range []framework.IndexedScorer{NewQueueScorer(""), NewRunningRequestsScorer(""),
			NewKVCacheScorer(""), NewLoRAAffinityScorer("")} {
			m := s.Score(context.Background(), framework.NewCycleState(), req, endpoints)
			got := make([]float64, n)
			s.ScoreIndexed(context.Background(), framework.NewCycleState(), req, endpoints, got)
			for i, ep := range endpoints {
				if want := m[ep.Key()]; got[i] != want {
					t.Fatalf("seed %d trial %d: %s: endpoint %d: ScoreIndexed %v, Score %v", seed, trial, s.TypedName(), i, got[i], want)
				}
			}
		}
	}
}
