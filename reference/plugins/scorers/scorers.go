// Package scorers holds the load and LoRA scorers of the reference EPP (SPEC §3), ported in our
// own words from GIE v1.5.0 (sigs.k8s.io/gateway-api-inference-extension@v1.5.0, commit
// df9f8909fe06fe2dfd4a6fc0bd0c01a0acabf849), pkg/epp/framework/plugins/scheduling/scorer/:
// queuedepth/queue.go, runningrequests/runningrequest.go, kvcacheutilization/kvcache_utilization.go
// and loraaffinity/lora_affinity.go. None takes parameters; given parameters must be an empty
// JSON object (strict decoding).
//
// Every scorer returns a score in [0,1] for every endpoint it is given, keyed by Endpoint.Key().
// An endpoint that was never scraped has zero metrics (framework.NewEndpoint).
package scorers

import (
	"context"
	"encoding/json"
	"math"

	"github.com/eppkit/eppkit/reference/framework"
)

// Plugin types (upstream names).
const (
	QueueScorerType           = "queue-scorer"
	RunningRequestsScorerType = "running-requests-size-scorer"
	KVCacheScorerType         = "kv-cache-utilization-scorer"
	LoRAAffinityScorerType    = "lora-affinity-scorer"
)

// noParams is the (empty) parameter object of these scorers.
type noParams struct{}

// Register adds the four scorers to reg. It returns the first registration error.
func Register(reg *framework.Registry) error {
	for _, f := range []struct {
		typ   string
		build func(name string) framework.Plugin
	}{
		{QueueScorerType, func(n string) framework.Plugin { return NewQueueScorer(n) }},
		{RunningRequestsScorerType, func(n string) framework.Plugin { return NewRunningRequestsScorer(n) }},
		{KVCacheScorerType, func(n string) framework.Plugin { return NewKVCacheScorer(n) }},
		{LoRAAffinityScorerType, func(n string) framework.Plugin { return NewLoRAAffinityScorer(n) }},
	} {
		if err := reg.Register(f.typ, Factory(f.build)); err != nil {
			return err
		}
	}
	return nil
}

// Factory adapts a parameterless constructor to a framework.FactoryFunc that rejects any
// parameter (strict decoding into an empty object).
func Factory(build func(name string) framework.Plugin) framework.FactoryFunc {
	return func(name string, params json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
		if err := framework.DecodeParameters(params, &noParams{}); err != nil {
			return nil, err
		}
		return build(name), nil
	}
}

func queueSize(m *framework.Metrics) int   { return m.WaitingQueueSize }
func runningSize(m *framework.Metrics) int { return m.RunningRequests }

func typed(typ, name string) framework.TypedName {
	if name == "" {
		name = typ
	}
	return framework.TypedName{Type: typ, Name: name}
}

func metricsOf(ep *framework.Endpoint) *framework.Metrics {
	if ep.Metrics == nil {
		return &framework.Metrics{}
	}
	return ep.Metrics
}

// MinMaxScorer scores (max − v)/(max − min) of one integer metric over the candidates, so the
// smallest value scores 1 and the largest 0; when every candidate has the same value all score 1.
// It backs queue-scorer (v = waiting queue size) and running-requests-size-scorer (v = running
// requests).
type MinMaxScorer struct {
	typedName framework.TypedName
	metric    func(*framework.Metrics) int
}

var _ framework.IndexedScorer = (*MinMaxScorer)(nil)

func newMinMax(typ, name string, metric func(*framework.Metrics) int) *MinMaxScorer {
	return &MinMaxScorer{typedName: typed(typ, name), metric: metric}
}

// NewQueueScorer returns a queue-scorer (name "" means the type).
func NewQueueScorer(name string) *MinMaxScorer { return newMinMax(QueueScorerType, name, queueSize) }

// NewRunningRequestsScorer returns a running-requests-size-scorer (name "" means the type).
func NewRunningRequestsScorer(name string) *MinMaxScorer {
	return newMinMax(RunningRequestsScorerType, name, runningSize)
}

// TypedName returns the plugin's type and name.
func (s *MinMaxScorer) TypedName() framework.TypedName { return s.typedName }

// Score returns the min-max normalised inverse of the metric per endpoint key.
func (s *MinMaxScorer) Score(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint) map[string]float64 {
	out := make(map[string]float64, len(endpoints))
	lo, hi := s.bounds(endpoints)
	for _, ep := range endpoints {
		out[ep.Key()] = s.score(ep, lo, hi)
	}
	return out
}

// ScoreIndexed writes Score's value for endpoints[i] into out[i] (framework.IndexedScorer).
func (s *MinMaxScorer) ScoreIndexed(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint, out []float64) {
	lo, hi := s.bounds(endpoints)
	for i, ep := range endpoints {
		out[i] = s.score(ep, lo, hi)
	}
}

// bounds returns the smallest and largest metric value over endpoints.
func (s *MinMaxScorer) bounds(endpoints []*framework.Endpoint) (lo, hi int) {
	lo, hi = math.MaxInt, math.MinInt
	for _, ep := range endpoints {
		v := s.metric(metricsOf(ep))
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// score is one endpoint's score given the bounds: 1 when they are equal.
func (s *MinMaxScorer) score(ep *framework.Endpoint, lo, hi int) float64 {
	if hi == lo {
		return 1
	}
	return float64(hi-s.metric(metricsOf(ep))) / float64(hi-lo)
}

// KVCacheScorer is kv-cache-utilization-scorer: 1 − KVCacheUsage, clamped to [0,1] (a usage
// outside [0,1] or NaN is clamped first: NaN counts as full).
type KVCacheScorer struct{ typedName framework.TypedName }

var _ framework.IndexedScorer = (*KVCacheScorer)(nil)

// NewKVCacheScorer returns a kv-cache-utilization-scorer (name "" means the type).
func NewKVCacheScorer(name string) *KVCacheScorer {
	return &KVCacheScorer{typedName: typed(KVCacheScorerType, name)}
}

// TypedName returns the plugin's type and name.
func (s *KVCacheScorer) TypedName() framework.TypedName { return s.typedName }

// Score returns 1 − KV-cache usage per endpoint key.
func (s *KVCacheScorer) Score(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint) map[string]float64 {
	out := make(map[string]float64, len(endpoints))
	for _, ep := range endpoints {
		out[ep.Key()] = kvScore(ep)
	}
	return out
}

// ScoreIndexed writes Score's value for endpoints[i] into out[i] (framework.IndexedScorer).
func (s *KVCacheScorer) ScoreIndexed(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest, endpoints []*framework.Endpoint, out []float64) {
	for i, ep := range endpoints {
		out[i] = kvScore(ep)
	}
}

// kvScore is 1 − KVCacheUsage clamped to [0,1], NaN usage counting as full.
func kvScore(ep *framework.Endpoint) float64 {
	u := metricsOf(ep).KVCacheUsage
	if math.IsNaN(u) {
		u = 1
	}
	return 1 - min(max(u, 0), 1)
}

// LoRAAffinityScorer is lora-affinity-scorer (GIE v1.5.0 loraaffinity/lora_affinity.go), for the
// request's target model (an adapter name after rewrite):
//
//	1.0  the adapter is running on the endpoint (in ActiveModels)
//	0.8  otherwise, the endpoint has a free adapter slot: len(ActiveModels) + len(WaitingModels) < MaxActiveModels
//	0.6  otherwise, the adapter is waiting on the endpoint (in WaitingModels)
//	0    otherwise (no slot, or MaxActiveModels unknown = 0)
type LoRAAffinityScorer struct{ typedName framework.TypedName }

var _ framework.IndexedScorer = (*LoRAAffinityScorer)(nil)

// NewLoRAAffinityScorer returns a lora-affinity-scorer (name "" means the type).
func NewLoRAAffinityScorer(name string) *LoRAAffinityScorer {
	return &LoRAAffinityScorer{typedName: typed(LoRAAffinityScorerType, name)}
}

// TypedName returns the plugin's type and name.
func (s *LoRAAffinityScorer) TypedName() framework.TypedName { return s.typedName }

// Score returns the LoRA affinity tier per endpoint key.
func (s *LoRAAffinityScorer) Score(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest, endpoints []*framework.Endpoint) map[string]float64 {
	model := ""
	if req != nil {
		model = req.TargetModel
	}
	out := make(map[string]float64, len(endpoints))
	for _, ep := range endpoints {
		out[ep.Key()] = LoRAAffinity(metricsOf(ep), model)
	}
	return out
}

// ScoreIndexed writes Score's value for endpoints[i] into out[i] (framework.IndexedScorer).
func (s *LoRAAffinityScorer) ScoreIndexed(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest, endpoints []*framework.Endpoint, out []float64) {
	model := ""
	if req != nil {
		model = req.TargetModel
	}
	for i, ep := range endpoints {
		out[i] = LoRAAffinity(metricsOf(ep), model)
	}
}

// LoRAAffinity returns the lora-affinity-scorer tier of one endpoint's metrics for a model.
func LoRAAffinity(m *framework.Metrics, model string) float64 {
	_, running := m.ActiveModels[model]
	_, waiting := m.WaitingModels[model]
	switch {
	case running:
		return 1
	case HasFreeLoRASlot(m):
		return 0.8
	case waiting:
		return 0.6
	}
	return 0
}

// HasFreeLoRASlot reports len(ActiveModels) + len(WaitingModels) < MaxActiveModels.
func HasFreeLoRASlot(m *framework.Metrics) bool {
	return len(m.ActiveModels)+len(m.WaitingModels) < m.MaxActiveModels
}
