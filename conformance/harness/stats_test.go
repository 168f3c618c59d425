package harness

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
)

// exactTails returns, for X ~ Binomial(n, num/den), P(X ≤ k) and P(X ≥ k) for every k as exact
// rationals: an independent check of the log-space floats NewPlan uses.
func exactTails(n int, num, den int64) (lower, upper []*big.Rat) {
	p := big.NewRat(num, den)
	q := new(big.Rat).Sub(big.NewRat(1, 1), p)
	pmf := make([]*big.Rat, n+1)
	for k := 0; k <= n; k++ {
		c := new(big.Int).Binomial(int64(n), int64(k))
		pk := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(num), big.NewInt(int64(k)), nil))
		pk.Quo(pk, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(den), big.NewInt(int64(k)), nil)))
		qk := new(big.Rat).SetInt(new(big.Int).Exp(q.Num(), big.NewInt(int64(n-k)), nil))
		qk.Quo(qk, new(big.Rat).SetInt(new(big.Int).Exp(q.Denom(), big.NewInt(int64(n-k)), nil)))
		pmf[k] = new(big.Rat).Mul(new(big.Rat).SetInt(c), new(big.Rat).Mul(pk, qk))
	}
	lower = make([]*big.Rat, n+1)
	upper = make([]*big.Rat, n+1)
	acc := new(big.Rat)
	for k := 0; k <= n; k++ {
		acc = new(big.Rat).Add(acc, pmf[k])
		lower[k] = acc
	}
	acc = new(big.Rat)
	for k := n; k >= 0; k-- {
		acc = new(big.Rat).Add(acc, pmf[k])
		upper[k] = acc
	}
	return lower, upper
}

// exactErrors returns the exact false-failure and false-pass probabilities of threshold k at
// sample size n for the tail, from exact tails at the compliant and random rates.
func exactErrors(tail Tail, k int, lowC, upC, lowR, upR []*big.Rat) (ff, fp *big.Rat) {
	n := len(lowC) - 1
	zero, one := new(big.Rat), big.NewRat(1, 1)
	at := func(v []*big.Rat, i int, below, above *big.Rat) *big.Rat {
		switch {
		case i < 0:
			return below
		case i > n:
			return above
		}
		return v[i]
	}
	if tail == AtLeast {
		return at(lowC, k-1, zero, one), at(upR, k, one, zero)
	}
	return at(upC, k+1, one, zero), at(lowR, k, zero, one)
}

func ratFloat(r *big.Rat) float64 { f, _ := r.Float64(); return f }

// rational is a probability num/den, so the test can recompute it exactly.
type rational struct{ num, den int64 }

func (r rational) f() float64 { return float64(r.num) / float64(r.den) }

func TestNewPlanMeetsBothBoundsExactlyAndIsMinimal(t *testing.T) {
	cases := []struct {
		name              string
		tail              Tail
		compliant, random rational
		ruleRate          float64
		wantN             int // 0 = not pinned (the exact checks below still apply)
	}{
		{name: "affinity over 2 endpoints", tail: AtLeast, compliant: rational{49, 50}, random: rational{1, 2}},
		{name: "affinity over 4 endpoints", tail: AtLeast, compliant: rational{49, 50}, random: rational{1, 4}, wantN: 24},
		{name: "affinity over 8 endpoints", tail: AtLeast, compliant: rational{49, 50}, random: rational{1, 8}},
		{name: "avoid loaded among 3", tail: AtMost, compliant: rational{1, 50}, random: rational{1, 3}},
		{name: "avoid loaded among 4", tail: AtMost, compliant: rational{1, 50}, random: rational{1, 4}, wantN: 150},
		{name: "avoid loaded among 4, rule rate 5%", tail: AtMost, compliant: rational{1, 50}, random: rational{1, 4}, ruleRate: 0.05},
		{name: "avoid loaded among 8, rule rate 5%", tail: AtMost, compliant: rational{1, 50}, random: rational{1, 8}, ruleRate: 0.05},
		{name: "affinity, rule rate 90%", tail: AtLeast, compliant: rational{49, 50}, random: rational{1, 4}, ruleRate: 0.9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(Shape{Outcome: "x", Tail: tc.tail, Compliant: tc.compliant.f(), Random: tc.random.f(), RuleRate: tc.ruleRate})
			if err != nil {
				t.Fatalf("NewPlan: %v", err)
			}
			t.Logf("%s", p)
			if tc.wantN != 0 && p.N != tc.wantN {
				t.Errorf("N = %d, want %d", p.N, tc.wantN)
			}
			bound := big.NewRat(1, 1_000_000) // SPEC §6: both error probabilities ≤ 1e-6
			lowC, upC := exactTails(p.N, tc.compliant.num, tc.compliant.den)
			lowR, upR := exactTails(p.N, tc.random.num, tc.random.den)
			ff, fp := exactErrors(tc.tail, p.Threshold, lowC, upC, lowR, upR)
			if ff.Cmp(bound) > 0 {
				t.Errorf("exact P(fail | compliant) = %.6g > 1e-6 at n=%d threshold=%d", ratFloat(ff), p.N, p.Threshold)
			}
			if fp.Cmp(bound) > 0 {
				t.Errorf("exact P(pass | random) = %.6g > 1e-6 at n=%d threshold=%d", ratFloat(fp), p.N, p.Threshold)
			}
			for _, c := range []struct {
				name       string
				got, exact float64
			}{{"FalseFailure", p.FalseFailure, ratFloat(ff)}, {"FalsePass", p.FalsePass, ratFloat(fp)}} {
				if math.Abs(c.got-c.exact) > 1e-9*c.exact {
					t.Errorf("%s = %.12g, exact %.12g", c.name, c.got, c.exact)
				}
			}
			if tc.ruleRate > 0 {
				r := float64(p.Threshold) / float64(p.N)
				if (tc.tail == AtMost && r > tc.ruleRate) || (tc.tail == AtLeast && r < tc.ruleRate) {
					t.Errorf("threshold rate %v breaks the rule rate %v", r, tc.ruleRate)
				}
			}
			// Minimal: at n−1 no threshold meets both bounds (and the rule rate), computed exactly.
			m := p.N - 1
			if m < 1 {
				return
			}
			lowC, upC = exactTails(m, tc.compliant.num, tc.compliant.den)
			lowR, upR = exactTails(m, tc.random.num, tc.random.den)
			for k := 0; k <= m; k++ {
				if tc.ruleRate > 0 {
					r := float64(k) / float64(m)
					if (tc.tail == AtMost && r > tc.ruleRate) || (tc.tail == AtLeast && r < tc.ruleRate) {
						continue
					}
				}
				ff, fp := exactErrors(tc.tail, k, lowC, upC, lowR, upR)
				if ff.Cmp(bound) <= 0 && fp.Cmp(bound) <= 0 {
					t.Errorf("n=%d is not minimal: n=%d with threshold %d also meets both bounds (%.3g, %.3g)",
						p.N, m, k, ratFloat(ff), ratFloat(fp))
				}
			}
		})
	}
}

func TestBinomialTailMatchesExact(t *testing.T) {
	for _, tc := range []struct {
		n int
		p rational
	}{{1, rational{1, 2}}, {10, rational{1, 3}}, {150, rational{1, 50}}, {400, rational{49, 50}}} {
		lower, upper := exactTails(tc.n, tc.p.num, tc.p.den)
		for k := 0; k <= tc.n; k++ {
			for _, c := range []struct {
				upper bool
				exact float64
			}{{false, ratFloat(lower[k])}, {true, ratFloat(upper[k])}} {
				got := BinomialTail(tc.n, k, tc.p.f(), c.upper)
				if c.exact < 1e-300 {
					continue // below float64's normal range; NewPlan never needs it
				}
				if math.Abs(got-c.exact) > 1e-9*c.exact {
					t.Fatalf("BinomialTail(n=%d, k=%d, p=%v, upper=%v) = %.12g, exact %.12g", tc.n, k, tc.p.f(), c.upper, got, c.exact)
				}
			}
		}
	}
	if got := BinomialTail(5, -1, 0.3, false); got != 0 {
		t.Errorf("P(X ≤ -1) = %v, want 0", got)
	}
	if got := BinomialTail(5, 6, 0.3, true); got != 0 {
		t.Errorf("P(X ≥ 6) = %v, want 0", got)
	}
	if got := BinomialTail(5, 0, 0.3, true); got != 1 {
		t.Errorf("P(X ≥ 0) = %v, want 1", got)
	}
}

func TestNewPlanRejectsBadShapes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape Shape
		want  string
	}{
		{"no tail", Shape{Compliant: 0.98, Random: 0.25}, "Tail"},
		{"compliant out of range", Shape{Tail: AtLeast, Compliant: 1, Random: 0.25}, "Compliant"},
		{"random NaN", Shape{Tail: AtLeast, Compliant: 0.98, Random: math.NaN()}, "Random"},
		{"at-least order", Shape{Tail: AtLeast, Compliant: 0.2, Random: 0.25}, "below Compliant"},
		{"at-most order", Shape{Tail: AtMost, Compliant: 0.3, Random: 0.25}, "above Compliant"},
		{"rule rate", Shape{Tail: AtMost, Compliant: 0.02, Random: 0.25, RuleRate: 2}, "RuleRate"},
		{"bound", Shape{Tail: AtMost, Compliant: 0.02, Random: 0.25, MaxFalsePass: 1.5}, "MaxFalsePass"},
		{"unreachable", Shape{Tail: AtMost, Compliant: 0.02, Random: 0.021, MaxN: 200}, "no sample size up to 200"},
		{"rule rate below compliant", Shape{Tail: AtMost, Compliant: 0.02, Random: 0.25, RuleRate: 0.01, MaxN: 500}, "no sample size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPlan(tc.shape)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewPlan(%+v) error = %v, want one containing %q", tc.shape, err, tc.want)
			}
		})
	}
}

// recordingT is a TestingT that records instead of failing.
type recordingT struct {
	logs, errs []string
	fatal      bool
}

func (r *recordingT) Helper()                   {}
func (r *recordingT) Logf(f string, a ...any)   { r.logs = append(r.logs, fmt.Sprintf(f, a...)) }
func (r *recordingT) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recordingT) Fatalf(f string, a ...any) { r.Errorf(f, a...); r.fatal = true }
func (r *recordingT) FailNow()                  { r.fatal = true }
func (r *recordingT) Failed() bool              { return len(r.errs) > 0 || r.fatal }
func (r *recordingT) Cleanup(func())            {}
func (r *recordingT) Name() string              { return "recordingT" }
func (r *recordingT) logged(sub string) bool {
	return strings.Contains(strings.Join(r.logs, "\n"), sub)
}
func (r *recordingT) errored(sub string) bool {
	return strings.Contains(strings.Join(r.errs, "\n"), sub)
}

func TestPlanCheck(t *testing.T) {
	s := &Suite{Seed: 42}
	atLeast, err := NewPlan(Shape{Outcome: "requests to the affine endpoint", Tail: AtLeast, Compliant: 0.98, Random: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	atMost, err := NewPlan(Shape{Outcome: "requests to the loaded endpoint", Tail: AtMost, Compliant: 0.02, Random: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		plan          Plan
		count, trials int
		wantFail      string // "" = pass
	}{
		{"at least: exactly the threshold passes", atLeast, atLeast.Threshold, atLeast.N, ""},
		{"at least: one below fails", atLeast, atLeast.Threshold - 1, atLeast.N, "statistical rule violated (seed 42)"},
		{"at most: exactly the threshold passes", atMost, atMost.Threshold, atMost.N, ""},
		{"at most: one above fails", atMost, atMost.Threshold + 1, atMost.N, "statistical rule violated (seed 42)"},
		{"lost trials fail", atMost, 0, atMost.N - 1, "ran 149 trials, the plan needs exactly 150"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recordingT{}
			ok := tc.plan.Check(r, s, tc.count, tc.trials)
			want := fmt.Sprintf("observed %d of %d", tc.count, tc.trials)
			if !r.logged(want) || !r.logged("P(pass|random)") {
				t.Errorf("log %q lacks %q and the bounds", r.logs, want)
			}
			if tc.wantFail == "" {
				if !ok || r.Failed() {
					t.Errorf("Check failed: %q", r.errs)
				}
				return
			}
			if ok || !r.Failed() || !r.errored(tc.wantFail) || !r.errored(want) || !r.errored(fmt.Sprintf("n=%d", tc.plan.N)) {
				t.Errorf("Check = %v, errors %q; want a failure with %q, the observation and n", ok, r.errs, tc.wantFail)
			}
		})
	}
}

func TestDeterministicTrials(t *testing.T) {
	for _, tc := range []struct {
		chance float64
		want   int
	}{{0, 1}, {0.25, 10}, {0.5, 20}, {1.0 / 3, 13}, {0.75, 49}} {
		got, err := DeterministicTrials(tc.chance)
		if err != nil || got != tc.want {
			t.Errorf("DeterministicTrials(%v) = %d, %v; want %d", tc.chance, got, err, tc.want)
		}
		if tc.chance > 0 && (math.Pow(tc.chance, float64(got)) > MaxFalsePass || math.Pow(tc.chance, float64(got-1)) <= MaxFalsePass) {
			t.Errorf("DeterministicTrials(%v) = %d is not the smallest m with chance^m ≤ 1e-6", tc.chance, got)
		}
	}
	for _, bad := range []float64{-0.1, 1, math.NaN()} {
		if _, err := DeterministicTrials(bad); err == nil {
			t.Errorf("DeterministicTrials(%v): want an error", bad)
		}
	}
}
