package profiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
)

// LatencyFallbackProfileHandlerType is eppkit's handler that switches between a
// predicted-latency profile and a fallback profile (a name upstream never used).
const LatencyFallbackProfileHandlerType = "latency-fallback-profile-handler"

// ReadinessSource reports whether the latency predictor is ready. latency.Producer implements
// it (PredictorReady).
type ReadinessSource interface {
	PredictorReady() bool
}

// FallbackParameters are the parameters of latency-fallback-profile-handler.
type FallbackParameters struct {
	// PrimaryProfile runs while the predictor is ready (default "predicted-latency").
	PrimaryProfile string `json:"primaryProfile"`
	// FallbackProfile runs while it is not (default "default").
	FallbackProfile string `json:"fallbackProfile"`
	// FallbackWithoutSLO also sends requests without x-slo-ttft-ms / x-slo-tpot-ms headers to
	// the fallback profile (default false).
	FallbackWithoutSLO bool `json:"fallbackWithoutSLO"`
	// PredictorPlugin names the plugin whose PredictorReady decides (default
	// "predicted-latency-producer", the name a default-created producer gets).
	PredictorPlugin string `json:"predictorPlugin"`
}

// DefaultFallbackParameters returns the defaults.
func DefaultFallbackParameters() FallbackParameters {
	return FallbackParameters{PrimaryProfile: "predicted-latency", FallbackProfile: "default", PredictorPlugin: latency.ProducerType}
}

// Validate returns an error naming the first invalid field.
func (p FallbackParameters) Validate() error {
	switch {
	case p.PrimaryProfile == "":
		return errors.New("parameters.primaryProfile: must not be empty")
	case p.FallbackProfile == "":
		return errors.New("parameters.fallbackProfile: must not be empty")
	case p.PrimaryProfile == p.FallbackProfile:
		return fmt.Errorf("parameters.fallbackProfile: must differ from primaryProfile (both %q)", p.PrimaryProfile)
	case p.PredictorPlugin == "":
		return errors.New("parameters.predictorPlugin: must not be empty")
	}
	return nil
}

// LatencyFallbackProfileHandler is latency-fallback-profile-handler [eppkit] (SPEC §3): each
// request runs exactly one profile — PrimaryProfile when the predictor is ready, FallbackProfile
// while it is not (so a cold or failed predictor never routes by its prior), and, with
// FallbackWithoutSLO, FallbackProfile for requests without SLO headers too. The profile that
// ran is the primary profile of the result (x-eppkit-profile names it).
//
// The readiness source is looked up by name (PredictorPlugin) on first use, because the
// producer may be built after the handler. A missing or wrong plugin is logged once and counts
// as "not ready".
//
// ProcessResults errors (unwrapped, so the runtime maps them: ErrShed when the profile's
// filters removed every endpoint, ErrInternal otherwise): no profile ran (one of the two
// profiles is not configured), or the profile found no endpoint.
type LatencyFallbackProfileHandler struct {
	typedName framework.TypedName
	params    FallbackParameters
	lookup    func(name string) (framework.Plugin, bool)
	logger    *slog.Logger

	once  sync.Once
	ready func() bool
}

var _ framework.ProfileHandler = (*LatencyFallbackProfileHandler)(nil)

// NewLatencyFallbackProfileHandler returns the handler. ready, when non-nil, is the readiness
// source; nil looks up params.PredictorPlugin through h on first use.
func NewLatencyFallbackProfileHandler(name string, params FallbackParameters, ready func() bool, h framework.Handle) (*LatencyFallbackProfileHandler, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = LatencyFallbackProfileHandlerType
	}
	hd := &LatencyFallbackProfileHandler{typedName: framework.TypedName{Type: LatencyFallbackProfileHandlerType, Name: name},
		params: params, ready: ready, logger: slog.New(slog.DiscardHandler)}
	if h != nil {
		hd.lookup = h.Plugin
		if l := h.Logger(); l != nil {
			hd.logger = l
		}
	}
	return hd, nil
}

func fallbackFactory(name string, raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	p := DefaultFallbackParameters()
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return nil, err
	}
	return NewLatencyFallbackProfileHandler(name, p, nil, h)
}

// TypedName returns the plugin's type and name.
func (h *LatencyFallbackProfileHandler) TypedName() framework.TypedName { return h.typedName }

// Ready reports whether the predictor is ready (false when the source cannot be found).
func (h *LatencyFallbackProfileHandler) Ready() bool {
	h.once.Do(func() {
		if h.ready != nil {
			return
		}
		h.ready = func() bool { return false }
		if h.lookup == nil {
			h.logger.Error("no plugin lookup; the fallback profile always runs")
			return
		}
		p, ok := h.lookup(h.params.PredictorPlugin)
		if !ok {
			h.logger.Error("parameters.predictorPlugin: no such plugin; the fallback profile always runs",
				"predictorPlugin", h.params.PredictorPlugin)
			return
		}
		rs, ok := p.(ReadinessSource)
		if !ok {
			h.logger.Error("parameters.predictorPlugin: the plugin does not report predictor readiness; the fallback profile always runs",
				"predictorPlugin", p.TypedName().String())
			return
		}
		h.ready = rs.PredictorReady
	})
	return h.ready()
}

// Choose returns the profile a request runs (see LatencyFallbackProfileHandler).
func (h *LatencyFallbackProfileHandler) Choose(req *framework.LLMRequest) string {
	if !h.Ready() {
		return h.params.FallbackProfile
	}
	if h.params.FallbackWithoutSLO && !hasSLOHeader(req) {
		return h.params.FallbackProfile
	}
	return h.params.PrimaryProfile
}

func hasSLOHeader(req *framework.LLMRequest) bool {
	if req == nil {
		return false
	}
	ttft, _, _ := framework.RequestHeader(req.Headers, latency.HeaderTTFTSLO)
	tpot, _, _ := framework.RequestHeader(req.Headers, latency.HeaderTPOTSLO)
	return strings.TrimSpace(ttft) != "" || strings.TrimSpace(tpot) != ""
}

// Pick returns the chosen profile in the first round, nothing once it ran or when it is not
// configured.
func (h *LatencyFallbackProfileHandler) Pick(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest,
	profiles map[string]*framework.SchedulerProfile, results map[string]*framework.ProfileRunResult) map[string]*framework.SchedulerProfile {
	if len(results) > 0 {
		return map[string]*framework.SchedulerProfile{}
	}
	name := h.Choose(req)
	prof, ok := profiles[name]
	if !ok {
		return map[string]*framework.SchedulerProfile{}
	}
	return map[string]*framework.SchedulerProfile{name: prof}
}

// ProcessResults makes the profile that ran the primary one.
func (h *LatencyFallbackProfileHandler) ProcessResults(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest,
	results map[string]*framework.ProfileRunResult) (*framework.SchedulingResult, error) {
	if len(results) != 1 {
		names := make([]string, 0, len(results))
		for n := range results {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("%s needs exactly one profile result, got %d %v (are profiles %q and %q both configured?)",
			LatencyFallbackProfileHandlerType, len(results), names, h.params.PrimaryProfile, h.params.FallbackProfile)
	}
	for name, r := range results {
		if r == nil || len(r.TargetEndpoints) == 0 {
			return nil, fmt.Errorf("profile %q found no endpoint", name)
		}
		return &framework.SchedulingResult{ProfileResults: results, PrimaryProfileName: name}, nil
	}
	return nil, nil // unreachable
}
