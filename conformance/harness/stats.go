package harness

import (
	"fmt"
	"math"
)

// SPEC §6 bounds every statistical routing test is built from.
const (
	// MaxFalseFailure is the highest probability with which a statistical test may fail a compliant
	// EPP (SPEC §6 (a)).
	MaxFalseFailure = 1e-6
	// MaxFalsePass is the highest probability with which a statistical test may pass a uniform
	// random picker (SPEC §6 (b)).
	MaxFalsePass = 1e-6
	// Exploration is the share of picks, in [0,1], a compliant EPP may make against its own
	// preference (SPEC §6: "explores ... up to 2% of the time").
	Exploration = 0.02
	// DefaultMaxSampleSize caps the sample size NewPlan searches; a shape needing more is an error.
	DefaultMaxSampleSize = 20000
)

// Tail says which way a statistical test counts.
type Tail int

const (
	// AtLeast: the test counts a wanted outcome (e.g. "the request went to the affine endpoint")
	// and passes when at least Threshold of N trials have it.
	AtLeast Tail = iota + 1
	// AtMost: the test counts an unwanted outcome (e.g. "the request went to the loaded endpoint")
	// and passes when at most Threshold of N trials have it.
	AtMost
)

func (t Tail) String() string {
	switch t {
	case AtLeast:
		return "at least"
	case AtMost:
		return "at most"
	}
	return fmt.Sprintf("Tail(%d)", int(t))
}

// Shape describes one statistical test: independent Bernoulli trials whose per-trial probability
// of the counted outcome is Compliant for the worst compliant EPP and Random for a uniform random
// picker. NewPlan turns it into a sample size and a pass threshold.
type Shape struct {
	// Outcome names what is counted, for messages ("requests sent to the loaded endpoint").
	Outcome string
	// Tail is AtLeast (count wanted outcomes) or AtMost (count unwanted outcomes).
	Tail Tail
	// Compliant is the per-trial probability, in (0,1), of the counted outcome for the worst
	// compliant EPP: the lowest success probability for AtLeast (e.g. 1 − Exploration), the highest
	// unwanted rate for AtMost (e.g. Exploration).
	Compliant float64
	// Random is the per-trial probability, in (0,1), of the counted outcome for a uniform random
	// picker (e.g. 1/N over N endpoints). AtLeast needs Random < Compliant, AtMost Random > Compliant.
	Random float64
	// RuleRate, when > 0, is the rate the rule itself states (SPEC §6 "gets ≤ 5%"): the threshold
	// is also kept at Threshold/N ≤ RuleRate for AtMost and ≥ RuleRate for AtLeast, so a pass
	// never means a rate the rule forbids. 0 = no such constraint.
	RuleRate float64
	// MaxFalseFailure and MaxFalsePass default to the package constants (SPEC §6) when 0.
	MaxFalseFailure, MaxFalsePass float64
	// MaxN caps the search; default DefaultMaxSampleSize.
	MaxN int
}

// Plan is a statistical test's sample size and pass threshold, with the exact error
// probabilities they give.
type Plan struct {
	Shape
	// N is the number of trials: the smallest that admits a threshold meeting both bounds (and
	// RuleRate).
	N int
	// Threshold is the pass boundary in trials: pass ⇔ count ≥ Threshold (AtLeast) or count ≤
	// Threshold (AtMost).
	Threshold int
	// FalseFailure is the exact probability that a compliant EPP fails (binomial tail at
	// Shape.Compliant).
	FalseFailure float64
	// FalsePass is the exact probability that a uniform random picker passes (binomial tail at
	// Shape.Random).
	FalsePass float64
}

// NewPlan computes the smallest sample size N for which some threshold keeps both the
// false-failure probability (compliant EPP) ≤ MaxFalseFailure and the false-pass probability
// (uniform random picker) ≤ MaxFalsePass, with binomial tails computed exactly in log space.
// Among the thresholds that work at that N it picks the one with the most margin (the smallest
// max(falseFailure/MaxFalseFailure, falsePass/MaxFalsePass)). It returns an error naming the
// field for probabilities outside (0,1), a Compliant/Random order that cannot separate the two
// pickers, or no solution up to MaxN.
func NewPlan(sh Shape) (Plan, error) {
	if sh.MaxFalseFailure == 0 {
		sh.MaxFalseFailure = MaxFalseFailure
	}
	if sh.MaxFalsePass == 0 {
		sh.MaxFalsePass = MaxFalsePass
	}
	if sh.MaxN == 0 {
		sh.MaxN = DefaultMaxSampleSize
	}
	switch {
	case sh.Tail != AtLeast && sh.Tail != AtMost:
		return Plan{}, fmt.Errorf("stats: Tail %d: want AtLeast or AtMost", int(sh.Tail))
	case !(sh.Compliant > 0 && sh.Compliant < 1):
		return Plan{}, fmt.Errorf("stats: Compliant %v: want a probability in (0,1)", sh.Compliant)
	case !(sh.Random > 0 && sh.Random < 1):
		return Plan{}, fmt.Errorf("stats: Random %v: want a probability in (0,1)", sh.Random)
	case sh.Tail == AtLeast && sh.Random >= sh.Compliant:
		return Plan{}, fmt.Errorf("stats: Random %v must be below Compliant %v for an at-least test", sh.Random, sh.Compliant)
	case sh.Tail == AtMost && sh.Random <= sh.Compliant:
		return Plan{}, fmt.Errorf("stats: Random %v must be above Compliant %v for an at-most test", sh.Random, sh.Compliant)
	case !(sh.RuleRate >= 0 && sh.RuleRate <= 1):
		return Plan{}, fmt.Errorf("stats: RuleRate %v: want 0 (none) or a rate in (0,1]", sh.RuleRate)
	case !(sh.MaxFalseFailure > 0 && sh.MaxFalseFailure < 1):
		return Plan{}, fmt.Errorf("stats: MaxFalseFailure %v: want a probability in (0,1)", sh.MaxFalseFailure)
	case !(sh.MaxFalsePass > 0 && sh.MaxFalsePass < 1):
		return Plan{}, fmt.Errorf("stats: MaxFalsePass %v: want a probability in (0,1)", sh.MaxFalsePass)
	case sh.MaxN < 1:
		return Plan{}, fmt.Errorf("stats: MaxN %d: want ≥ 1", sh.MaxN)
	}
	for n := 1; n <= sh.MaxN; n++ {
		if p, ok := planAt(sh, n); ok {
			return p, nil
		}
	}
	return Plan{}, fmt.Errorf("stats: no sample size up to %d separates %s rate %v (compliant) from %v (random) with bounds %g/%g",
		sh.MaxN, sh.Outcome, sh.Compliant, sh.Random, sh.MaxFalseFailure, sh.MaxFalsePass)
}

// planAt returns the best threshold at sample size n, if any meets both bounds.
func planAt(sh Shape, n int) (Plan, bool) {
	cdfC := binomialCDF(n, sh.Compliant) // cdfC[k] = P(X ≤ k) for a compliant EPP
	cdfR := binomialCDF(n, sh.Random)
	best, bestScore := Plan{}, math.Inf(1)
	for k := 0; k <= n; k++ {
		var ff, fp float64
		if sh.Tail == AtLeast {
			// pass ⇔ X ≥ k: a compliant EPP fails with P(X ≤ k−1); a random picker passes with P(X ≥ k).
			ff = lowerTail(cdfC, k-1)
			fp = upperTail(cdfR, k)
			if sh.RuleRate > 0 && float64(k) < sh.RuleRate*float64(n) {
				continue
			}
		} else {
			// pass ⇔ X ≤ k: a compliant EPP fails with P(X ≥ k+1); a random picker passes with P(X ≤ k).
			ff = upperTail(cdfC, k+1)
			fp = lowerTail(cdfR, k)
			if sh.RuleRate > 0 && float64(k) > sh.RuleRate*float64(n) {
				continue
			}
		}
		if ff > sh.MaxFalseFailure || fp > sh.MaxFalsePass {
			continue
		}
		if score := math.Max(ff/sh.MaxFalseFailure, fp/sh.MaxFalsePass); score < bestScore {
			bestScore = score
			best = Plan{Shape: sh, N: n, Threshold: k, FalseFailure: ff, FalsePass: fp}
		}
	}
	return best, bestScore <= 1
}

// binomialCDF returns, for X ~ Binomial(n, p), log P(X ≤ k) and log P(X ≥ k) for every k, each
// summed from its own end in log space so that tiny tails keep their precision.
func binomialCDF(n int, p float64) binomTails {
	logPMF := make([]float64, n+1)
	lp, lq := math.Log(p), math.Log1p(-p)
	ln1, _ := math.Lgamma(float64(n) + 1)
	for k := 0; k <= n; k++ {
		lk, _ := math.Lgamma(float64(k) + 1)
		lnk, _ := math.Lgamma(float64(n-k) + 1)
		logPMF[k] = ln1 - lk - lnk + float64(k)*lp + float64(n-k)*lq
	}
	t := binomTails{lower: make([]float64, n+1), upper: make([]float64, n+1)}
	acc := math.Inf(-1)
	for k := 0; k <= n; k++ {
		acc = logAddExp(acc, logPMF[k])
		t.lower[k] = acc
	}
	acc = math.Inf(-1)
	for k := n; k >= 0; k-- {
		acc = logAddExp(acc, logPMF[k])
		t.upper[k] = acc
	}
	return t
}

// binomTails holds log P(X ≤ k) and log P(X ≥ k) for k = 0..n.
type binomTails struct{ lower, upper []float64 }

// lowerTail is P(X ≤ k): 0 for k < 0, 1 for k ≥ n.
func lowerTail(t binomTails, k int) float64 {
	switch {
	case k < 0:
		return 0
	case k >= len(t.lower)-1:
		return 1
	}
	return math.Exp(t.lower[k])
}

// upperTail is P(X ≥ k): 1 for k ≤ 0, 0 for k > n.
func upperTail(t binomTails, k int) float64 {
	switch {
	case k <= 0:
		return 1
	case k > len(t.upper)-1:
		return 0
	}
	return math.Exp(t.upper[k])
}

func logAddExp(a, b float64) float64 {
	if math.IsInf(a, -1) {
		return b
	}
	if math.IsInf(b, -1) {
		return a
	}
	if a < b {
		a, b = b, a
	}
	return a + math.Log1p(math.Exp(b-a))
}

// BinomialTail returns P(X ≥ k) (upper = true) or P(X ≤ k) (upper = false) for
// X ~ Binomial(n, p), computed in log space; exported for reports and tests.
func BinomialTail(n, k int, p float64, upper bool) float64 {
	t := binomialCDF(n, p)
	if upper {
		return upperTail(t, k)
	}
	return lowerTail(t, k)
}

// Pass reports whether count outcomes out of Plan.N trials pass the test.
func (p Plan) Pass(count int) bool {
	if p.Tail == AtLeast {
		return count >= p.Threshold
	}
	return count <= p.Threshold
}

// String states the plan: n, threshold, the rates it separates and the exact error probabilities.
func (p Plan) String() string {
	op := "≥"
	if p.Tail == AtMost {
		op = "≤"
	}
	rule := ""
	if p.RuleRate > 0 {
		rule = fmt.Sprintf(", rule rate %s %.4g", op, p.RuleRate)
	}
	return fmt.Sprintf("n=%d, pass iff %s %s %d (%.4g%%); compliant rate %.4g, random rate %.4g%s; P(fail|compliant)=%.3g ≤ %.3g, P(pass|random)=%.3g ≤ %.3g",
		p.N, p.Outcome, op, p.Threshold, 100*float64(p.Threshold)/float64(p.N), p.Compliant, p.Random, rule,
		p.FalseFailure, p.MaxFalseFailure, p.FalsePass, p.MaxFalsePass)
}

// MustPlan is NewPlan that fails the test (Fatalf) on an error, and logs the plan.
func MustPlan(t TestingT, sh Shape) Plan {
	t.Helper()
	p, err := NewPlan(sh)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Logf("statistical plan: %s", p)
	return p
}

// Check asserts a statistical test's result: count outcomes out of trials. It always logs n, the
// observed count and rate, the threshold and the bounds; when the result does not pass it fails
// the test (Errorf) with the same facts and the run seed. trials must equal p.N (a test that lost
// trials to errors must have failed already); otherwise Check fails the test.
func (p Plan) Check(t TestingT, s *Suite, count, trials int) bool {
	t.Helper()
	rate := 0.0
	if trials > 0 {
		rate = float64(count) / float64(trials)
	}
	msg := fmt.Sprintf("%s: observed %d of %d (%.4g%%); %s", p.Outcome, count, trials, 100*rate, p)
	t.Logf("%s", msg)
	if trials != p.N {
		t.Errorf("statistical test ran %d trials, the plan needs exactly %d (seed %d): %s", trials, p.N, s.Seed, msg)
		return false
	}
	if !p.Pass(count) {
		t.Errorf("statistical rule violated (seed %d): %s", s.Seed, msg)
		return false
	}
	return true
}

// DeterministicTrials returns how many independent trials a rule without exploration (every
// trial must hold, as the protocol rules of the EPP profile) needs so that a picker that satisfies
// each trial only by chance, with probability chance in [0,1), passes all of them with
// probability ≤ MaxFalsePass (SPEC §6 (b)): the smallest m with chance^m ≤ MaxFalsePass; 1 when
// chance is 0. It returns an error for chance outside [0,1).
func DeterministicTrials(chance float64) (int, error) {
	if !(chance >= 0 && chance < 1) {
		return 0, fmt.Errorf("stats: chance %v: want a probability in [0,1)", chance)
	}
	if chance == 0 {
		return 1, nil
	}
	m := int(math.Ceil(math.Log(MaxFalsePass) / math.Log(chance)))
	for math.Pow(chance, float64(m)) > MaxFalsePass { // guard against rounding
		m++
	}
	return max(m, 1), nil
}
