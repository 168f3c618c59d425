// Package pickers holds the reference EPP's pickers (SPEC §3), ported in our own words from GIE
// v1.5.0 (sigs.k8s.io/gateway-api-inference-extension@v1.5.0, commit
// df9f8909fe06fe2dfd4a6fc0bd0c01a0acabf849), pkg/epp/framework/plugins/scheduling/picker/:
// max_score_picker.go, random_picker.go, weighted_random_picker.go, common.go.
//
// Every picker takes the parameter maxNumOfEndpoints (default 1): the result holds up to that many
// endpoints, the first is the pick and the rest are ordered fallbacks. Randomness comes from a
// per-instance *rand.Rand (PCG) seeded from Handle.Seed() and the instance name (so two pickers of
// one EPP draw different streams, each reproducible) and guarded by a mutex — v1.5.0 used one
// package-level source seeded from the wall clock. Pickers never modify the slice they are given.
package pickers

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/eppkit/eppkit/reference/framework"
)

// Plugin types (upstream names).
const (
	MaxScorePickerType       = "max-score-picker"
	RandomPickerType         = "random-picker"
	WeightedRandomPickerType = "weighted-random-picker"
	// DefaultMaxNumOfEndpoints is the default of maxNumOfEndpoints.
	DefaultMaxNumOfEndpoints = 1
)

// Parameters are the pickers' `parameters`.
type Parameters struct {
	// MaxNumOfEndpoints is how many endpoints the result holds at most (pick + fallbacks). 0 means
	// the default 1 (as upstream treats an unset value); negative is an error.
	MaxNumOfEndpoints int `json:"maxNumOfEndpoints"`
}

func decodeParameters(raw json.RawMessage) (int, error) {
	p := Parameters{MaxNumOfEndpoints: DefaultMaxNumOfEndpoints}
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return 0, err
	}
	if p.MaxNumOfEndpoints < 0 {
		return 0, fmt.Errorf("parameters.maxNumOfEndpoints: must be >= 1, got %d", p.MaxNumOfEndpoints)
	}
	if p.MaxNumOfEndpoints == 0 {
		p.MaxNumOfEndpoints = DefaultMaxNumOfEndpoints
	}
	return p.MaxNumOfEndpoints, nil
}

// Register adds the three pickers to reg. It returns the first registration error.
func Register(reg *framework.Registry) error {
	for _, f := range []struct {
		typ   string
		build func(name string, n int, seed int64) framework.Plugin
	}{
		{MaxScorePickerType, func(name string, n int, seed int64) framework.Plugin { return NewMaxScorePicker(name, n, seed) }},
		{RandomPickerType, func(name string, n int, seed int64) framework.Plugin { return NewRandomPicker(name, n, seed) }},
		{WeightedRandomPickerType, func(name string, n int, seed int64) framework.Plugin { return NewWeightedRandomPicker(name, n, seed) }},
	} {
		build := f.build
		if err := reg.Register(f.typ, func(name string, params json.RawMessage, h framework.Handle) (framework.Plugin, error) {
			n, err := decodeParameters(params)
			if err != nil {
				return nil, err
			}
			var seed int64
			if h != nil {
				seed = h.Seed()
			}
			return build(name, n, seed), nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// lockedRand is a seeded random source safe for concurrent use.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand(seed int64, name string) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(uint64(seed), xxhash.Sum64String(name)))}
}

func (l *lockedRand) shuffle(s []framework.ScoredEndpoint) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.r.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
}

// float64Open returns a uniform float in (0,1).
func (l *lockedRand) float64Open() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if u := l.r.Float64(); u > 0 {
			return u
		}
	}
}

type base struct {
	typedName framework.TypedName
	max       int
	rnd       *lockedRand
}

func newBase(typ, name string, maxNum int, seed int64) base {
	if name == "" {
		name = typ
	}
	if maxNum <= 0 {
		maxNum = DefaultMaxNumOfEndpoints
	}
	return base{typedName: framework.TypedName{Type: typ, Name: name}, max: maxNum, rnd: newLockedRand(seed, name)}
}

// TypedName returns the plugin's type and name.
func (b *base) TypedName() framework.TypedName { return b.typedName }

// MaxNumOfEndpoints returns the configured result size.
func (b *base) MaxNumOfEndpoints() int { return b.max }

func (b *base) result(s []framework.ScoredEndpoint) *framework.ProfileRunResult {
	n := min(b.max, len(s))
	out := make([]*framework.Endpoint, n)
	for i := range n {
		out[i] = s[i].Endpoint
	}
	return &framework.ProfileRunResult{TargetEndpoints: out}
}

// candidates copies the scored endpoints, dropping nil endpoints.
func candidates(scored []framework.ScoredEndpoint) []framework.ScoredEndpoint {
	out := make([]framework.ScoredEndpoint, 0, len(scored))
	for _, s := range scored {
		if s.Endpoint != nil {
			out = append(out, s)
		}
	}
	return out
}

// sortKey orders NaN below every number.
func sortKey(v float64) float64 {
	if math.IsNaN(v) {
		return math.Inf(-1)
	}
	return v
}

// MaxScorePicker is max-score-picker: the highest total score first, ties broken at random
// (shuffle, then a stable sort by score, descending).
type MaxScorePicker struct{ base }

var _ framework.Picker = (*MaxScorePicker)(nil)

// NewMaxScorePicker returns a max-score-picker (name "" means the type, maxNum ≤ 0 means 1)
// whose tie-breaks are drawn from seed and name.
func NewMaxScorePicker(name string, maxNum int, seed int64) *MaxScorePicker {
	return &MaxScorePicker{newBase(MaxScorePickerType, name, maxNum, seed)}
}

// Pick returns up to MaxNumOfEndpoints endpoints by descending score; nil targets for no input.
func (p *MaxScorePicker) Pick(_ context.Context, _ *framework.CycleState, scored []framework.ScoredEndpoint) *framework.ProfileRunResult {
	s := candidates(scored)
	p.rnd.shuffle(s)
	if p.max == 1 && len(s) > 0 {
		// The first element of the stable sort below, in one pass: the first (in shuffled order)
		// of the highest scores. Same result, same random draws, no sort.
		best := 0
		for i := 1; i < len(s); i++ {
			if sortKey(s[i].Score) > sortKey(s[best].Score) {
				best = i
			}
		}
		return p.result(s[best : best+1])
	}
	slices.SortStableFunc(s, func(a, b framework.ScoredEndpoint) int {
		ka, kb := sortKey(a.Score), sortKey(b.Score)
		switch {
		case ka > kb:
			return -1
		case ka < kb:
			return 1
		}
		return 0
	})
	return p.result(s)
}

// RandomPicker is random-picker: a uniformly random order, scores ignored.
type RandomPicker struct{ base }

var _ framework.Picker = (*RandomPicker)(nil)

// NewRandomPicker returns a random-picker (name "" means the type, maxNum ≤ 0 means 1).
func NewRandomPicker(name string, maxNum int, seed int64) *RandomPicker {
	return &RandomPicker{newBase(RandomPickerType, name, maxNum, seed)}
}

// Pick returns up to MaxNumOfEndpoints endpoints in random order.
func (p *RandomPicker) Pick(_ context.Context, _ *framework.CycleState, scored []framework.ScoredEndpoint) *framework.ProfileRunResult {
	s := candidates(scored)
	p.rnd.shuffle(s)
	return p.result(s)
}

// WeightedRandomPicker is weighted-random-picker: weighted sampling without replacement by the
// A-Res algorithm (Efraimidis & Spirakis 2006) — each endpoint with score w > 0 draws
// u ∈ (0,1) and gets key u^(1/w); the largest keys win, so the first pick is endpoint i with
// probability w_i / Σw. Endpoints with score ≤ 0 (or NaN) never precede a positive one: they
// follow in random order as fallbacks. When no score is positive the picker behaves as
// random-picker (GIE v1.5.0 weighted_random_picker.go).
type WeightedRandomPicker struct{ base }

var _ framework.Picker = (*WeightedRandomPicker)(nil)

// NewWeightedRandomPicker returns a weighted-random-picker (name "" means the type, maxNum ≤ 0
// means 1).
func NewWeightedRandomPicker(name string, maxNum int, seed int64) *WeightedRandomPicker {
	return &WeightedRandomPicker{newBase(WeightedRandomPickerType, name, maxNum, seed)}
}

// Pick returns up to MaxNumOfEndpoints endpoints by descending A-Res key.
func (p *WeightedRandomPicker) Pick(_ context.Context, _ *framework.CycleState, scored []framework.ScoredEndpoint) *framework.ProfileRunResult {
	s := candidates(scored)
	p.rnd.shuffle(s) // random order among the non-positive ones (stable sort below keeps it)
	keys := make([]float64, len(s))
	for i, c := range s {
		if c.Score > 0 && !math.IsInf(c.Score, 1) {
			keys[i] = math.Pow(p.rnd.float64Open(), 1/c.Score)
		} else if math.IsInf(c.Score, 1) {
			keys[i] = 1
		}
	}
	idx := make([]int, len(s))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case keys[a] > keys[b]:
			return -1
		case keys[a] < keys[b]:
			return 1
		}
		return 0
	})
	ordered := make([]framework.ScoredEndpoint, len(s))
	for i, j := range idx {
		ordered[i] = s[j]
	}
	return p.result(ordered)
}
