// Package modelrewrite holds the model rewrite rules of one InferencePool (SPEC §9.4): GIE's
// InferenceModelRewrite (sigs.k8s.io/gateway-api-inference-extension apix/v1alpha2, the pinned
// v1.5.0 module), from the API server (reference/discovery watches the objects) or from a file
// (`eppkit reference-epp --model-rewrites`, LoadFile). A request whose body names a model that a
// rule matches is sent to one of the rule's target models, picked by weight.
//
// Precedence, as upstream v1.5.0 resolves it (pkg/epp/datastore/modelrewritestore.go): a rule
// with an Exact match of the model wins over a generic rule (no matches); among rules of the same
// kind the oldest InferenceModelRewrite (creation timestamp) wins, then, in eppkit, the lower
// name; within one object the first matching rule in list order. The x-gateway-model-name-rewrite
// header takes precedence over every rule (the director applies it first; upstream v1.5.0 lets a
// rule override the header).
package modelrewrite

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
)

// Limits of a target's weight (the CRD's validation: minimum 1, maximum 1,000,000).
const (
	MinWeight = 1
	MaxWeight = 1_000_000
)

// Store is the set of rewrites of one pool, by object name. Safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	rewrites map[string]rewrite
	rng      *rand.Rand
	// index, rebuilt on every change: exact rules by model and generic rules, each in precedence
	// order.
	exact   map[string][]*rule
	generic []*rule
}

type rewrite struct {
	name    string
	created time.Time
	rules   []rule
}

type rule struct {
	rewrite string
	// models are the exact models the rule matches; none = a generic rule (matches every model).
	models  []string
	targets []v1alpha2.TargetModel
	total   int64
}

// NewStore returns an empty store whose weighted choices are drawn from a source seeded with
// seed (so a seeded EPP makes the same choices).
func NewStore(seed int64) *Store {
	return &Store{rewrites: map[string]rewrite{}, exact: map[string][]*rule{},
		rng: rand.New(rand.NewPCG(uint64(seed), 0x6d6f64656c))}
}

// Set adds or replaces the rewrite called name, created at created (its precedence among
// rewrites), with spec's rules. An invalid spec (Validate) is refused: the error names the field,
// and the store keeps no rules of that name (a replaced rewrite is removed).
func (s *Store) Set(name string, created time.Time, spec *v1alpha2.InferenceModelRewriteSpec) error {
	if err := Validate(spec); err != nil {
		s.Delete(name)
		return err
	}
	rw := rewrite{name: name, created: created}
	for _, r := range spec.Rules {
		rl := rule{rewrite: name, targets: append([]v1alpha2.TargetModel(nil), r.Targets...)}
		seen := map[string]bool{}
		for _, m := range r.Matches {
			if !seen[m.Model.Value] {
				seen[m.Model.Value] = true
				rl.models = append(rl.models, m.Model.Value)
			}
		}
		for _, t := range r.Targets {
			rl.total += int64(t.Weight)
		}
		rw.rules = append(rw.rules, rl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rewrites[name] = rw
	s.reindexLocked()
	return nil
}

// Delete removes the rewrite called name; absent names are ignored.
func (s *Store) Delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.rewrites[name]; !ok {
		return
	}
	delete(s.rewrites, name)
	s.reindexLocked()
}

// Len returns the number of rewrites held.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rewrites)
}

// reindexLocked rebuilds the precedence index: rewrites by creation time then name, rules in
// list order, each rule under every exact model it matches or among the generic rules.
func (s *Store) reindexLocked() {
	order := make([]rewrite, 0, len(s.rewrites))
	for _, rw := range s.rewrites {
		order = append(order, rw)
	}
	sort.Slice(order, func(i, j int) bool {
		if !order[i].created.Equal(order[j].created) {
			return order[i].created.Before(order[j].created)
		}
		return order[i].name < order[j].name
	})
	s.exact, s.generic = map[string][]*rule{}, nil
	for _, rw := range order {
		for i := range rw.rules {
			r := &rw.rules[i]
			if len(r.models) == 0 {
				s.generic = append(s.generic, r)
			}
			for _, m := range r.models {
				s.exact[m] = append(s.exact[m], r)
			}
		}
	}
}

// Rewrite returns the target model for a request whose body names model: the rule that applies
// (precedence in the package doc) picks one of its targets with probability weight/Σweights
// (uniformly when no target sets a weight); rewrite names the InferenceModelRewrite. ok is false
// when no rule applies, and always for a nil Store.
func (s *Store) Rewrite(model string) (target, rewrite string, ok bool) {
	if s == nil {
		return "", "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var r *rule
	if rs := s.exact[model]; len(rs) > 0 {
		r = rs[0]
	} else if len(s.generic) > 0 {
		r = s.generic[0]
	}
	if r == nil || len(r.targets) == 0 {
		return "", "", false
	}
	if r.total <= 0 {
		return r.targets[s.rng.IntN(len(r.targets))].ModelRewrite, r.rewrite, true
	}
	n := s.rng.Int64N(r.total)
	for _, t := range r.targets {
		if n < int64(t.Weight) {
			return t.ModelRewrite, r.rewrite, true
		}
		n -= int64(t.Weight)
	}
	return r.targets[len(r.targets)-1].ModelRewrite, r.rewrite, true // unreachable: n < total
}

// Validate checks a spec's rules as the CRD's schema does, and the rules the CRD only states in
// prose; the error names the field (spec.rules[0].targets[1].weight): a rule needs at least one
// target; every target a non-empty modelRewrite and a weight within [MinWeight, MaxWeight], set
// on all targets of the rule or on none; every match a model with a non-empty value and type
// Exact (or unset, which defaults to Exact).
func Validate(spec *v1alpha2.InferenceModelRewriteSpec) error {
	if spec == nil {
		return fmt.Errorf("spec: required")
	}
	for i, r := range spec.Rules {
		path := fmt.Sprintf("spec.rules[%d]", i)
		for k, m := range r.Matches {
			mp := fmt.Sprintf("%s.matches[%d].model", path, k)
			switch {
			case m.Model == nil:
				return fmt.Errorf("%s: required", mp)
			case m.Model.Value == "":
				return fmt.Errorf("%s.value: must not be empty", mp)
			case m.Model.Type != nil && *m.Model.Type != v1alpha2.MatchExact:
				return fmt.Errorf("%s.type: %q is not supported (only %q)", mp, *m.Model.Type, v1alpha2.MatchExact)
			}
		}
		if len(r.Targets) == 0 {
			return fmt.Errorf("%s.targets: at least one target is required", path)
		}
		weighted := r.Targets[0].Weight != 0
		for j, t := range r.Targets {
			tp := fmt.Sprintf("%s.targets[%d]", path, j)
			switch {
			case t.ModelRewrite == "":
				return fmt.Errorf("%s.modelRewrite: required", tp)
			case (t.Weight != 0) != weighted:
				return fmt.Errorf("%s.weight: set a weight on every target of the rule or on none (targets[0] %s one)", tp,
					map[bool]string{true: "has", false: "has no"}[weighted])
			case weighted && (t.Weight < MinWeight || t.Weight > MaxWeight):
				return fmt.Errorf("%s.weight: %d is outside [%d, %d]", tp, t.Weight, MinWeight, MaxWeight)
			}
		}
	}
	return nil
}
