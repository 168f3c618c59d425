package latency

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/eppkit/eppkit/reference/framework"
)

// ColdKVThreshold is the KV-cache use below which an endpoint counts as cold for the admitter
// (predictions for it are unreliable): 2% (upstream latencyslo/plugin.go).
const ColdKVThreshold = 0.02

// Admitter is latency-slo-admitter (SPEC §4.3): it refuses a sheddable request (priority < 0)
// that carries an SLO with an error wrapping framework.ErrShed (429) when candidates have
// predictions and none can meet the SLO, none is idle, and none is cold. An endpoint is idle
// when neither this EPP (dispatched requests) nor its metrics (running requests) show a request
// on it, and cold when its KV-cache use is below 2%. Requests with priority ≥ 0, without SLO
// headers, or without predictions (fail open) are always admitted. A malformed SLO header is
// an error wrapping framework.ErrBadRequest.
type Admitter struct{ typedName framework.TypedName }

var (
	_ framework.Admitter     = (*Admitter)(nil)
	_ framework.DataConsumer = (*Admitter)(nil)
)

type noParams struct{}

// NewAdmitter returns the admitter.
func NewAdmitter(name string) *Admitter { return &Admitter{typedName: typed(AdmitterType, name)} }

func admitterFactory(name string, raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	if err := framework.DecodeParameters(raw, &noParams{}); err != nil {
		return nil, err
	}
	return NewAdmitter(name), nil
}

// TypedName returns the plugin's type and name.
func (a *Admitter) TypedName() framework.TypedName { return a.typedName }

// Consumes declares LatencyPredictionInfoKey.
func (a *Admitter) Consumes() map[string]any {
	return map[string]any{LatencyPredictionInfoKey: (*LatencyPredictionInfo)(nil)}
}

// AdmitRequest applies the rule of Admitter.
func (a *Admitter) AdmitRequest(_ context.Context, req *framework.LLMRequest, endpoints []*framework.Endpoint) error {
	if req == nil || req.Priority >= 0 {
		return nil
	}
	slo, err := ParseSLO(req)
	if err != nil {
		return err
	}
	if !slo.Any() {
		return nil
	}
	predicted := false
	for _, ep := range endpoints {
		if ep == nil {
			continue
		}
		m := ep.Metrics
		if m == nil {
			m = &framework.Metrics{}
		}
		info := predictionOf(ep)
		dispatched := 0
		if info != nil {
			predicted = true
			dispatched = info.DispatchedRequests
		}
		switch {
		case info.Valid():
			return nil
		case dispatched == 0 && m.RunningRequests == 0:
			return nil
		case m.KVCacheUsage < ColdKVThreshold:
			return nil
		}
	}
	if !predicted {
		return nil
	}
	return fmt.Errorf("sheddable request (priority %d) refused: no endpoint is predicted to meet its SLO (ttft %v ms, tpot %v ms), none is idle and none is cold: %w",
		req.Priority, sloText(slo.HasTTFT, slo.TTFT), sloText(slo.HasTPOT, slo.TPOT), framework.ErrShed)
}

func sloText(has bool, v float64) string {
	if !has {
		return "none"
	}
	return fmt.Sprintf("%g", v)
}
