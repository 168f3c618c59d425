package profiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

// Names of disagg-profile-handler (llm-d/llm-d-inference-scheduler
// pkg/plugins/profile/disagg_profile_handler.go and pkg/common: the header).
const (
	DisaggProfileHandlerType = "disagg-profile-handler"
	// PrefillerHostPortHeader carries the prefill pick ("ip:port") to the decode server's
	// sidecar, which runs the prefill there first.
	PrefillerHostPortHeader = "x-prefiller-host-port"
	DefaultDecodeProfile    = "decode"
	DefaultPrefillProfile   = "prefill"
)

// DisaggParameters are the parameters of disagg-profile-handler.
type DisaggParameters struct {
	// DecodeProfile always runs and is the primary profile (default "decode").
	DecodeProfile string `json:"decodeProfile"`
	// PrefillProfile runs when the prompt's uncached part is long (default "prefill"). When the
	// config has no such profile, the handler is decode-only.
	PrefillProfile string `json:"prefillProfile"`
	// NonCachedTokens: the prefill profile runs when the prompt tokens not cached on the decode
	// pick exceed it (default 0, ≥ 0). In llm-d this is the prefix-based-pd-decider's parameter.
	NonCachedTokens int `json:"nonCachedTokens"`
}

// DisaggProfileHandler is disagg-profile-handler [upstream, llm-d] (SPEC §3): round 1 runs the
// decode profile; when it picked an endpoint and the prompt tokens not cached there (input
// tokens, characters/4 of the hashed input, minus its PrefixCacheMatchInfo MatchBlocks ×
// BlockSizeTokens; all of them without the attribute) exceed NonCachedTokens, round 2 runs the
// prefill profile. The result's primary profile is decode; a prefill pick is added with its
// address in the request header x-prefiller-host-port. A prefill profile that finds no endpoint
// leaves the request decode-only (as llm-d).
//
// Difference from llm-d: its decider runs prefill when the uncached tokens are ≥ the threshold
// (and always when the threshold is 0); SPEC §3 says "exceeds", so eppkit uses >.
type DisaggProfileHandler struct {
	typedName framework.TypedName
	params    DisaggParameters
}

var (
	_ framework.ProfileHandler = (*DisaggProfileHandler)(nil)
	_ framework.DataConsumer   = (*DisaggProfileHandler)(nil)
)

// NewDisaggProfileHandler returns the handler; errors name the field.
func NewDisaggProfileHandler(name string, params DisaggParameters) (*DisaggProfileHandler, error) {
	switch {
	case params.DecodeProfile == "":
		return nil, errors.New("parameters.decodeProfile: must not be empty")
	case params.PrefillProfile == "":
		return nil, errors.New("parameters.prefillProfile: must not be empty")
	case params.PrefillProfile == params.DecodeProfile:
		return nil, fmt.Errorf("parameters.prefillProfile: must differ from decodeProfile (both %q)", params.DecodeProfile)
	case params.NonCachedTokens < 0:
		return nil, fmt.Errorf("parameters.nonCachedTokens: must be >= 0, got %d", params.NonCachedTokens)
	}
	if name == "" {
		name = DisaggProfileHandlerType
	}
	return &DisaggProfileHandler{typedName: framework.TypedName{Type: DisaggProfileHandlerType, Name: name}, params: params}, nil
}

func disaggFactory(name string, raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	p := DisaggParameters{DecodeProfile: DefaultDecodeProfile, PrefillProfile: DefaultPrefillProfile}
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return nil, err
	}
	return NewDisaggProfileHandler(name, p)
}

// TypedName returns the plugin's type and name.
func (h *DisaggProfileHandler) TypedName() framework.TypedName { return h.typedName }

// Consumes declares prefix.PrefixCacheMatchInfoKey (the decode pick's cached prefix).
func (h *DisaggProfileHandler) Consumes() map[string]any {
	return map[string]any{prefix.PrefixCacheMatchInfoKey: (*prefix.PrefixCacheMatchInfo)(nil)}
}

// UncachedTokens returns the prompt tokens of req not cached on ep (never negative).
func UncachedTokens(req *framework.LLMRequest, ep *framework.Endpoint) int {
	total := latency.InputTokens(req)
	if ep == nil {
		return total
	}
	info, ok := framework.AttributeAs[*prefix.PrefixCacheMatchInfo](ep, prefix.PrefixCacheMatchInfoKey)
	if !ok || info == nil || info.MatchBlocks <= 0 || info.BlockSizeTokens <= 0 {
		return total
	}
	return max(0, total-info.MatchBlocks*info.BlockSizeTokens)
}

// Pick runs decode, then prefill when needed (see DisaggProfileHandler).
func (h *DisaggProfileHandler) Pick(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest,
	profiles map[string]*framework.SchedulerProfile, results map[string]*framework.ProfileRunResult) map[string]*framework.SchedulerProfile {
	none := map[string]*framework.SchedulerProfile{}
	decode, ran := results[h.params.DecodeProfile]
	if !ran {
		if p, ok := profiles[h.params.DecodeProfile]; ok {
			return map[string]*framework.SchedulerProfile{h.params.DecodeProfile: p}
		}
		return none
	}
	if decode == nil || len(decode.TargetEndpoints) == 0 {
		return none
	}
	prefill, ok := profiles[h.params.PrefillProfile]
	if _, done := results[h.params.PrefillProfile]; !ok || done {
		return none
	}
	if UncachedTokens(req, decode.TargetEndpoints[0]) > h.params.NonCachedTokens {
		return map[string]*framework.SchedulerProfile{h.params.PrefillProfile: prefill}
	}
	return none
}

// ProcessResults returns decode as the primary profile, plus the prefill result and header when
// prefill ran and picked an endpoint. It fails when the decode profile is not configured or
// found no endpoint.
func (h *DisaggProfileHandler) ProcessResults(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest,
	results map[string]*framework.ProfileRunResult) (*framework.SchedulingResult, error) {
	decode, ran := results[h.params.DecodeProfile]
	if !ran {
		return nil, fmt.Errorf("%s: profile %q did not run (is it configured?)", DisaggProfileHandlerType, h.params.DecodeProfile)
	}
	if decode == nil || len(decode.TargetEndpoints) == 0 {
		return nil, fmt.Errorf("profile %q found no endpoint", h.params.DecodeProfile)
	}
	res := &framework.SchedulingResult{PrimaryProfileName: h.params.DecodeProfile,
		ProfileResults: map[string]*framework.ProfileRunResult{h.params.DecodeProfile: decode}}
	if pr := results[h.params.PrefillProfile]; pr != nil && len(pr.TargetEndpoints) > 0 && pr.TargetEndpoints[0] != nil {
		res.ProfileResults[h.params.PrefillProfile] = pr
		res.RequestHeaders = map[string]string{PrefillerHostPortHeader: pr.TargetEndpoints[0].Key()}
	}
	return res, nil
}
