// Package profiles holds the reference EPP's profile handlers (SPEC §3).
package profiles

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/eppkit/eppkit/reference/framework"
)

// SingleProfileHandlerType is the upstream type name.
const SingleProfileHandlerType = "single-profile-handler"

// SingleProfileHandler is single-profile-handler (GIE v1.5.0
// pkg/epp/framework/plugins/scheduling/profile/single_profile_handler.go): in the first round it
// runs every configured profile (the config is expected to have exactly one), then stops;
// ProcessResults makes the only result the primary one.
//
// ProcessResults errors (unwrapped, so the runtime maps them by SPEC §5.3: ErrShed when the
// profile's filters removed every endpoint, ErrInternal otherwise):
//   - not exactly one profile result;
//   - the profile found no endpoint (its result is nil or has no target).
type SingleProfileHandler struct{ typedName framework.TypedName }

var _ framework.ProfileHandler = (*SingleProfileHandler)(nil)

type noParams struct{}

// Register adds single-profile-handler, latency-fallback-profile-handler and
// disagg-profile-handler to reg. It returns the first registration error.
func Register(reg *framework.Registry) error {
	if err := reg.Register(SingleProfileHandlerType, func(name string, params json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
		if err := framework.DecodeParameters(params, &noParams{}); err != nil {
			return nil, err
		}
		return NewSingleProfileHandler(name), nil
	}); err != nil {
		return err
	}
	if err := reg.Register(LatencyFallbackProfileHandlerType, fallbackFactory); err != nil {
		return err
	}
	return reg.Register(DisaggProfileHandlerType, disaggFactory)
}

// NewSingleProfileHandler returns the handler (name "" means the type).
func NewSingleProfileHandler(name string) *SingleProfileHandler {
	if name == "" {
		name = SingleProfileHandlerType
	}
	return &SingleProfileHandler{typedName: framework.TypedName{Type: SingleProfileHandlerType, Name: name}}
}

// TypedName returns the plugin's type and name.
func (h *SingleProfileHandler) TypedName() framework.TypedName { return h.typedName }

// Pick returns every profile in the first round and none once results exist.
func (h *SingleProfileHandler) Pick(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest,
	profiles map[string]*framework.SchedulerProfile, results map[string]*framework.ProfileRunResult) map[string]*framework.SchedulerProfile {
	if len(results) > 0 {
		return map[string]*framework.SchedulerProfile{}
	}
	return profiles
}

// ProcessResults returns the single result as the primary profile (see SingleProfileHandler for
// the errors).
func (h *SingleProfileHandler) ProcessResults(_ context.Context, _ *framework.CycleState, _ *framework.LLMRequest,
	results map[string]*framework.ProfileRunResult) (*framework.SchedulingResult, error) {
	if len(results) != 1 {
		names := make([]string, 0, len(results))
		for n := range results {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("%s needs exactly one profile result, got %d %v", SingleProfileHandlerType, len(results), names)
	}
	for name, r := range results {
		if r == nil || len(r.TargetEndpoints) == 0 {
			return nil, fmt.Errorf("profile %q found no endpoint", name)
		}
		return &framework.SchedulingResult{ProfileResults: results, PrimaryProfileName: name}, nil
	}
	return nil, nil // unreachable: len(results) == 1
}
