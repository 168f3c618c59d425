package framework

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime/debug"
	"sort"
)

// ClampScore maps a scorer's raw score into [0,1]: NaN → 0, below 0 → 0, above 1 → 1 (±Inf
// included). The scheduler applies it to every score before weighting (SPEC §1).
func ClampScore(v float64) float64 {
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v >= 1:
		return 1
	}
	return v
}

// RunScheduling runs the scheduling phase for one request (SPEC §1): the profile handler loop
// (Pick → run each returned profile in name order → until Pick returns none, at most
// MaxSchedulingRounds rounds), then the handler's ProcessResults.
//
// Each profile runs its filters in order (no endpoint left → that profile's result is nil and the
// handler decides), sums every scorer's scores clamped to [0,1] (NaN or missing → 0) times the
// scorer's weight, and lets the picker choose.
//
// Errors (SPEC §5.3): no endpoints → ErrNoEndpoints; the handler fails after some profile filtered
// every endpoint out → ErrFilteredOut (an ErrShed); a handler error that already wraps one of the typed errors keeps
// it; any other failure (handler error, no primary target, too many rounds, a panicking plugin)
// → ErrInternal. The handler's own error stays in the chain.
func (r *Runtime) RunScheduling(ctx context.Context, req *LLMRequest, endpoints []*Endpoint) (res *SchedulingResult, err error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("scheduling: %w", ErrNoEndpoints)
	}
	defer func() {
		if v := recover(); v != nil {
			r.logger.Error("scheduling panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("scheduling: a plugin panicked: %v: %w", v, ErrInternal)
		}
	}()
	cycle := NewCycleState()
	results := map[string]*ProfileRunResult{}
	filteredOut := false
	handlerName := r.handler.TypedName()
	for round := 0; ; round++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("scheduling: %w", err)
		}
		picked := r.handler.Pick(ctx, cycle, req, maps.Clone(r.profiles), maps.Clone(results))
		if len(picked) == 0 {
			break
		}
		if round >= MaxSchedulingRounds {
			return nil, fmt.Errorf("scheduling: profile handler %s still picks profiles after %d rounds: %w",
				handlerName, MaxSchedulingRounds, ErrInternal)
		}
		names := make([]string, 0, len(picked))
		for name := range picked {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			prof := picked[name]
			if prof == nil || prof.Picker == nil {
				return nil, fmt.Errorf("scheduling: profile handler %s picked profile %q without a picker: %w",
					handlerName, name, ErrInternal)
			}
			pr, out := runProfile(ctx, cycle, req, prof, endpoints, r.timed)
			filteredOut = filteredOut || out
			results[name] = pr
		}
	}

	res, err = r.handler.ProcessResults(ctx, cycle, req, results)
	if err == nil && (res == nil || res.Primary() == nil || len(res.Primary().TargetEndpoints) == 0) {
		err = errors.New("the result has no target endpoint for the primary profile")
	}
	if err != nil {
		switch {
		case errors.Is(err, ErrShed), errors.Is(err, ErrBadRequest), errors.Is(err, ErrNoEndpoints), errors.Is(err, ErrInternal):
			return nil, fmt.Errorf("scheduling: profile handler %s: %w", handlerName, err)
		case filteredOut:
			return nil, fmt.Errorf("scheduling: profile handler %s: %w: %w", handlerName, err, ErrFilteredOut)
		default:
			return nil, fmt.Errorf("scheduling: profile handler %s: %w: %w", handlerName, err, ErrInternal)
		}
	}
	return res, nil
}

// runProfile runs one profile. It returns a nil result when the filters left no endpoint
// (filteredOut = true) or the picker chose none.
// timed is Runtime.timed.
func runProfile(ctx context.Context, cycle *CycleState, req *LLMRequest, prof *SchedulerProfile,
	endpoints []*Endpoint, timed func(Plugin, string) func()) (res *ProfileRunResult, filteredOut bool) {
	candidates := endpoints
	for _, f := range prof.Filters {
		stop := timed(f, "Filter")
		candidates = f.Filter(ctx, cycle, req, candidates)
		stop()
		if len(candidates) == 0 {
			return nil, true
		}
	}
	// totals and, behind it in the same allocation, the IndexedScorer output shared by the
	// profile's scorers.
	totals := make([]float64, len(candidates), 2*len(candidates))
	var scratch []float64
	distinct := -1 // whether the candidates' keys are distinct: -1 unknown, 0 no, 1 yes
	for _, ws := range prof.Scorers {
		if is, ok := ws.Scorer.(IndexedScorer); ok {
			if distinct < 0 {
				distinct = 0
				if distinctKeys(candidates) {
					distinct = 1
				}
			}
			if distinct == 1 {
				if scratch == nil {
					scratch = totals[len(totals):cap(totals)] // zeroed by make
				} else {
					clear(scratch)
				}
				stop := timed(ws.Scorer, "Scorer")
				is.ScoreIndexed(ctx, cycle, req, candidates, scratch)
				stop()
				for i, v := range scratch {
					totals[i] += ClampScore(v) * ws.Weight
				}
				continue
			}
		}
		stop := timed(ws.Scorer, "Scorer")
		scores := ws.Score(ctx, cycle, req, candidates)
		stop()
		for i, e := range candidates {
			totals[i] += ClampScore(scores[e.Key()]) * ws.Weight
		}
	}
	scored := make([]ScoredEndpoint, len(candidates))
	for i, e := range candidates {
		scored[i] = ScoredEndpoint{Endpoint: e, Score: totals[i]}
	}
	stop := timed(prof.Picker, "Picker")
	pr := prof.Picker.Pick(ctx, cycle, scored)
	stop()
	if pr == nil || len(pr.TargetEndpoints) == 0 {
		return nil, false
	}
	pr.Candidates = scored
	return pr, false
}

// distinctKeys reports whether no two endpoints share a Key(). The pool reaches the scheduler
// sorted by key (discovery sorts it; filters keep the order), so a strictly increasing run proves
// it in one pass; any other order is checked with a set.
// A nil endpoint or one without a key counts as a duplicate, so such a list keeps the map path.
func distinctKeys(endpoints []*Endpoint) bool {
	for _, e := range endpoints {
		if e == nil || (e.key == "" && e.Metadata == nil) {
			return false
		}
	}
	for i := 1; i < len(endpoints); i++ {
		if endpoints[i-1].Key() >= endpoints[i].Key() {
			seen := make(map[string]struct{}, len(endpoints))
			for _, e := range endpoints {
				if _, dup := seen[e.Key()]; dup {
					return false
				}
				seen[e.Key()] = struct{}{}
			}
			return true
		}
	}
	return true
}
