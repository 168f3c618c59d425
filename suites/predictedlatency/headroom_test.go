package predictedlatency_test

import (
	"context"
	"fmt"
	"math"
	"net/http"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/internal/testseed"
	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/reference/predictor"
	"github.com/eppkit/eppkit/suites/internal/latencytest"
)

// producerOnly is a config whose only latency plugin is the producer (no calibration, so the
// attribute carries the scripted predictions as they are).
const producerOnly = latencytest.ConfigHead + `plugins:
- type: predicted-latency-producer
  parameters: {perEndpointCalibration: false, sloBufferFactor: 1.5}
- type: max-score-picker
`

// prepare runs PrepareData for req on fresh copies of eps and returns them with their
// attributes.
func prepare(ctx context.Context, rt *framework.Runtime, req *framework.LLMRequest, eps []*framework.Endpoint) []*framework.Endpoint {
	fresh := latencytest.Fresh(eps)
	gomega.Expect(rt.PrepareData(ctx, req, fresh)).To(gomega.Succeed())
	return fresh
}

func info(ep *framework.Endpoint) *latency.LatencyPredictionInfo {
	v, ok := framework.AttributeAs[*latency.LatencyPredictionInfo](ep, latency.LatencyPredictionInfoKey)
	gomega.Expect(ok).To(gomega.BeTrue(), "endpoint %s has no %s", ep.Key(), latency.LatencyPredictionInfoKey)
	return v
}

func producerOf(rt *framework.Runtime) *latency.Producer {
	p, ok := rt.Plugin(latency.ProducerType)
	gomega.Expect(ok).To(gomega.BeTrue())
	return p.(*latency.Producer)
}

// withInfo returns an endpoint carrying a prediction attribute.
func withInfo(i int, li latency.LatencyPredictionInfo, m framework.Metrics) *framework.Endpoint {
	ep := latencytest.Endpoint(i, m)
	li.TTFTValid, li.TPOTValid = li.TTFTHeadroom >= 0, li.TPOTHeadroom >= 0
	ep.Put(latency.LatencyPredictionInfoKey, &li)
	return ep
}

var _ = ginkgo.Describe("SLO headroom classification", ginkgo.Label(suiteLabel), func() {
	var (
		rt   *framework.Runtime
		pred *latencytest.Predictor
		eps  []*framework.Endpoint
	)
	ginkgo.BeforeEach(func(ctx context.Context) {
		// Endpoint i has i−1 waiting requests: TTFT = 50 + 100·waiting, TPOT = 10 + 5·running.
		pred = latencytest.NewPredictor(latencytest.ByLoad(50, 100, 10, 5))
		var err error
		rt, err = latencytest.Runtime(context.Background(), producerOnly, pred, nil, 1)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		eps = []*framework.Endpoint{
			latencytest.Endpoint(1, framework.Metrics{WaitingQueueSize: 0, RunningRequests: 0}),
			latencytest.Endpoint(2, framework.Metrics{WaitingQueueSize: 1, RunningRequests: 2}),
			latencytest.Endpoint(3, framework.Metrics{WaitingQueueSize: 3, RunningRequests: 4}),
		}
	})

	ginkgo.When("a request carries both SLOs", func() {
		ginkgo.It("should compute headroom = SLO − prediction and mark the endpoints that meet both as valid", func(ctx context.Context) {
			got := prepare(ctx, rt, latencytest.Request("r1", "hello world", map[string]string{
				latency.HeaderTTFTSLO: "200", latency.HeaderTPOTSLO: "12"}), eps)
			// TPOT budget = 12 × sloBufferFactor 1.5 = 18.
			want := []latency.LatencyPredictionInfo{
				{TTFT: 50, TPOT: 10, TTFTHeadroom: 150, TPOTHeadroom: 8, TTFTValid: true, TPOTValid: true},
				{TTFT: 150, TPOT: 20, TTFTHeadroom: 50, TPOTHeadroom: -2, TTFTValid: true, TPOTValid: false},
				{TTFT: 350, TPOT: 30, TTFTHeadroom: -150, TPOTHeadroom: -12, TTFTValid: false, TPOTValid: false},
			}
			for i, ep := range got {
				gomega.Expect(*info(ep)).To(gomega.BeComparableTo(want[i]), "endpoint %d", i+1)
			}
		})
	})

	ginkgo.When("a request carries only a TTFT SLO", func() {
		ginkgo.It("should not judge TPOT: its headroom is 0 and valid", func(ctx context.Context) {
			got := prepare(ctx, rt, latencytest.Request("r1", "hello", map[string]string{latency.HeaderTTFTSLO: "100"}), eps)
			gomega.Expect(info(got[0]).TPOTHeadroom).To(gomega.Equal(0.0))
			gomega.Expect(info(got[0]).Valid()).To(gomega.BeTrue())
			gomega.Expect(info(got[1]).TTFTValid).To(gomega.BeFalse())
			gomega.Expect(info(got[1]).TPOTValid).To(gomega.BeTrue())
		})
	})

	ginkgo.When("a request carries no SLO header", func() {
		ginkgo.It("should give every endpoint the negative headroom 0 − prediction in both dimensions", func(ctx context.Context) {
			got := prepare(ctx, rt, latencytest.Request("r1", "hello", nil), eps)
			for i, ep := range got {
				in := info(ep)
				gomega.Expect(in.TTFTHeadroom).To(gomega.Equal(-in.TTFT), "endpoint %d", i+1)
				gomega.Expect(in.TPOTHeadroom).To(gomega.Equal(-in.TPOT), "endpoint %d", i+1)
				gomega.Expect(in.Valid()).To(gomega.BeFalse())
			}
		})
	})

	ginkgo.When("requests with TPOT SLOs are running on an endpoint", func() {
		ginkgo.It("should judge a new request's TPOT against the strictest running TPOT SLO there", func(ctx context.Context) {
			// Dispatch a request with a strict TPOT SLO (4 ms) to endpoint 1.
			strict := latencytest.Request("strict", "x", map[string]string{latency.HeaderTPOTSLO: "4"})
			only := []*framework.Endpoint{eps[0]}
			res, err := rt.Schedule(ctx, strict, latencytest.Fresh(only))
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			rt.PreRequest(ctx, strict, res)

			got := prepare(ctx, rt, latencytest.Request("r2", "y", map[string]string{latency.HeaderTPOTSLO: "20"}), eps)
			// Endpoint 1: budget min(20, 4) × 1.5 = 6, TPOT 10 → −4. Endpoint 2: 20 × 1.5 = 30 − 20 = 10.
			gomega.Expect(info(got[0]).TPOTHeadroom).To(gomega.BeNumerically("~", -4, 1e-9))
			gomega.Expect(info(got[0]).DispatchedRequests).To(gomega.Equal(1))
			gomega.Expect(info(got[1]).TPOTHeadroom).To(gomega.BeNumerically("~", 10, 1e-9))
		})
	})

	ginkgo.When("an SLO header is malformed", func() {
		for _, bad := range []string{"fast", "-5", "NaN", "+Inf", "1e400"} {
			ginkgo.It(fmt.Sprintf("should refuse x-slo-ttft-ms %q with ErrBadRequest, which the director maps to 400", bad), func(ctx context.Context) {
				_, err := rt.Schedule(ctx, latencytest.Request("r", "p", map[string]string{latency.HeaderTTFTSLO: bad}), latencytest.Fresh(eps))
				gomega.Expect(err).To(gomega.MatchError(framework.ErrBadRequest))
				gomega.Expect(err.Error()).To(gomega.ContainSubstring(latency.HeaderTTFTSLO))
				gomega.Expect(director.StatusFor(err)).To(gomega.Equal(http.StatusBadRequest))
			})
		}
	})
})

var _ = ginkgo.Describe("slo-headroom-tier-filter", ginkgo.Label(suiteLabel), func() {
	pos := latency.LatencyPredictionInfo{TTFTHeadroom: 10, TPOTHeadroom: 1}
	neg := latency.LatencyPredictionInfo{TTFTHeadroom: -10, TPOTHeadroom: 1}

	ginkgo.When("both tiers have endpoints", func() {
		ginkgo.It("should keep only the positive tier when exploration is off", func(ctx context.Context) {
			f, err := latency.NewTierFilter("", latency.TierFilterParameters{EpsilonExploreNeg: 0}, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			in := []*framework.Endpoint{withInfo(1, neg, framework.Metrics{}), withInfo(2, pos, framework.Metrics{}), withInfo(3, pos, framework.Metrics{})}
			gomega.Expect(keysOf(f.Filter(ctx, nil, nil, in))).To(gomega.Equal([]string{in[1].Key(), in[2].Key()}))
		})

		ginkgo.It("should explore the negative tier at the configured rate 0.01", func(ctx context.Context) {
			seed := testseed.Seed()
			ginkgo.DeferCleanup(func() {
				if ginkgo.CurrentSpecReport().Failed() {
					ginkgo.AddReportEntry("repro", repro(seed))
				}
			})
			f, err := latency.NewTierFilter("tier", latency.TierFilterParameters{EpsilonExploreNeg: 0.01}, seed)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			in := []*framework.Endpoint{withInfo(1, neg, framework.Metrics{}), withInfo(2, pos, framework.Metrics{})}
			// n = 20000 draws of Binomial(n, 0.01): mean 200, sd 14.1. The bound [125, 275] is ±5.3 sd:
			// a correct filter falls outside with probability < 1e-6.
			const n, lo, hi = 20000, 125, 275
			explored := 0
			for i := 0; i < n; i++ {
				out := f.Filter(ctx, nil, nil, in)
				gomega.Expect(out).To(gomega.HaveLen(1))
				if out[0] == in[0] {
					explored++
				}
			}
			gomega.Expect(explored).To(gomega.And(gomega.BeNumerically(">=", lo), gomega.BeNumerically("<=", hi)),
				"n=%d draws, negative tier kept %d times (%.3f%%), bound [%d, %d]; %s", n, explored, 100*float64(explored)/n, lo, hi, repro(seed))
		})
	})

	ginkgo.When("no endpoint meets the SLO", func() {
		ginkgo.It("should keep every endpoint (the negative tier)", func(ctx context.Context) {
			f, _ := latency.NewTierFilter("", latency.TierFilterParameters{}, 1)
			in := []*framework.Endpoint{withInfo(1, neg, framework.Metrics{}), withInfo(2, neg, framework.Metrics{})}
			gomega.Expect(f.Filter(ctx, nil, nil, in)).To(gomega.HaveLen(2))
		})
	})

	ginkgo.When("no endpoint has a prediction", func() {
		ginkgo.It("should keep every endpoint", func(ctx context.Context) {
			f, _ := latency.NewTierFilter("", latency.TierFilterParameters{}, 1)
			gomega.Expect(f.Filter(ctx, nil, nil, latencytest.Endpoints(3))).To(gomega.HaveLen(3))
		})
	})

	ginkgo.When("epsilonExploreNeg is outside [0,1]", func() {
		ginkgo.It("should fail naming the field", func() {
			_, err := latency.NewTierFilter("", latency.TierFilterParameters{EpsilonExploreNeg: 1.5}, 1)
			gomega.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("parameters.epsilonExploreNeg")))
		})
	})
})

// withPrefix puts a prefix match of m out of 10 blocks on ep.
func withPrefix(ep *framework.Endpoint, m int) *framework.Endpoint {
	ep.Put(prefix.PrefixCacheMatchInfoKey, &prefix.PrefixCacheMatchInfo{MatchBlocks: m, TotalBlocks: 10, BlockSizeTokens: 16})
	return ep
}

var _ = ginkgo.Describe("prefix-cache-affinity-filter", ginkgo.Label(suiteLabel), func() {
	params := latency.AffinityFilterParameters{AffinityThreshold: 0.8, ExplorationProbability: 0, MaxTTFTPenaltyMs: 5000}

	ginkgo.When("some endpoints hold at least 80% of the prompt", func() {
		ginkgo.It("should keep only those", func(ctx context.Context) {
			f, _ := latency.NewAffinityFilter("", params, 1)
			in := []*framework.Endpoint{withPrefix(latencytest.Endpoint(1, framework.Metrics{}), 9),
				withPrefix(latencytest.Endpoint(2, framework.Metrics{}), 5), withPrefix(latencytest.Endpoint(3, framework.Metrics{}), 8)}
			gomega.Expect(keysOf(f.Filter(ctx, nil, nil, in))).To(gomega.Equal([]string{in[0].Key(), in[2].Key()}))
		})
	})

	ginkgo.When("no endpoint reaches the threshold", func() {
		ginkgo.It("should keep every endpoint", func(ctx context.Context) {
			f, _ := latency.NewAffinityFilter("", params, 1)
			in := []*framework.Endpoint{withPrefix(latencytest.Endpoint(1, framework.Metrics{}), 2), latencytest.Endpoint(2, framework.Metrics{})}
			gomega.Expect(f.Filter(ctx, nil, nil, in)).To(gomega.HaveLen(2))
		})
	})

	ginkgo.When("the sticky endpoints are predicted much slower than the others", func() {
		ginkgo.It("should break stickiness and keep every endpoint", func(ctx context.Context) {
			f, _ := latency.NewAffinityFilter("", latency.AffinityFilterParameters{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 100}, 1)
			sticky := withPrefix(withInfo(1, latency.LatencyPredictionInfo{TTFT: 900}, framework.Metrics{}), 10)
			other := withInfo(2, latency.LatencyPredictionInfo{TTFT: 100}, framework.Metrics{})
			gomega.Expect(f.Filter(ctx, nil, nil, []*framework.Endpoint{sticky, other})).To(gomega.HaveLen(2))
		})
	})

	ginkgo.When("exploration is on", func() {
		ginkgo.It("should keep every endpoint at the exploration rate 0.01", func(ctx context.Context) {
			seed := testseed.Seed()
			f, _ := latency.NewAffinityFilter("aff", latency.AffinityFilterParameters{AffinityThreshold: 0.8, ExplorationProbability: 0.01}, seed)
			in := []*framework.Endpoint{withPrefix(latencytest.Endpoint(1, framework.Metrics{}), 10), latencytest.Endpoint(2, framework.Metrics{})}
			// Same bound as the tier filter: n = 20000, Binomial(n, 0.01) within [125, 275] (±5.3 sd, < 1e-6).
			const n, lo, hi = 20000, 125, 275
			all := 0
			for i := 0; i < n; i++ {
				if len(f.Filter(ctx, nil, nil, in)) == 2 {
					all++
				}
			}
			gomega.Expect(all).To(gomega.And(gomega.BeNumerically(">=", lo), gomega.BeNumerically("<=", hi)),
				"n=%d draws, every endpoint kept %d times, bound [%d, %d]; %s", n, all, lo, hi, repro(seed))
		})
	})
})

func keysOf(eps []*framework.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Key()
	}
	return out
}

// best returns the key with the highest score (ties: the first in eps order).
func best(eps []*framework.Endpoint, scores map[string]float64) string {
	bk, bv := "", math.Inf(-1)
	for _, e := range eps {
		if scores[e.Key()] > bv {
			bk, bv = e.Key(), scores[e.Key()]
		}
	}
	return bk
}

var _ = ginkgo.Describe("latency-scorer", ginkgo.Label(suiteLabel), func() {
	scorer := func(strategy string) *latency.Scorer {
		p := latency.DefaultScorerParameters()
		p.HeadroomSelectionStrategy = strategy
		s, err := latency.NewScorer("", p)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		return s
	}
	positive := func() []*framework.Endpoint {
		return []*framework.Endpoint{
			withInfo(1, latency.LatencyPredictionInfo{TTFTHeadroom: 50, TPOTHeadroom: 5}, framework.Metrics{}),
			withInfo(2, latency.LatencyPredictionInfo{TTFTHeadroom: 10, TPOTHeadroom: 1}, framework.Metrics{}),
			withInfo(3, latency.LatencyPredictionInfo{TTFTHeadroom: 30, TPOTHeadroom: 3}, framework.Metrics{}),
		}
	}

	ginkgo.When("the strategy is least (the default)", func() {
		ginkgo.It("should score highest the endpoint with the least headroom that still meets the SLO", func(ctx context.Context) {
			eps := positive()
			s := scorer(latency.StrategyLeast).Score(ctx, nil, nil, eps)
			gomega.Expect(best(eps, s)).To(gomega.Equal(eps[1].Key()))
			gomega.Expect(s[eps[1].Key()]).To(gomega.BeNumerically(">", s[eps[2].Key()]))
			gomega.Expect(s[eps[2].Key()]).To(gomega.BeNumerically(">", s[eps[0].Key()]))
		})
	})

	ginkgo.When("the strategy is most", func() {
		ginkgo.It("should score highest the endpoint with the most headroom", func(ctx context.Context) {
			eps := positive()
			gomega.Expect(best(eps, scorer(latency.StrategyMost).Score(ctx, nil, nil, eps))).To(gomega.Equal(eps[0].Key()))
		})
	})

	ginkgo.When("positive and negative endpoints are mixed", func() {
		ginkgo.It("should score only the positive ones", func(ctx context.Context) {
			eps := append(positive(), withInfo(4, latency.LatencyPredictionInfo{TTFTHeadroom: -1, TPOTHeadroom: 0}, framework.Metrics{}))
			s := scorer(latency.StrategyMost).Score(ctx, nil, nil, eps)
			gomega.Expect(s[eps[3].Key()]).To(gomega.Equal(0.0))
			for _, e := range eps[:3] {
				gomega.Expect(s[e.Key()]).To(gomega.BeNumerically(">", 0))
			}
		})
	})

	ginkgo.When("every endpoint misses the SLO and one is idle", func() {
		ginkgo.It("should prefer the idle endpoint even when its deficit is larger", func(ctx context.Context) {
			eps := []*framework.Endpoint{
				withInfo(1, latency.LatencyPredictionInfo{TTFTHeadroom: -5, TPOTHeadroom: -1, DispatchedRequests: 3}, framework.Metrics{}),
				withInfo(2, latency.LatencyPredictionInfo{TTFTHeadroom: -500, TPOTHeadroom: -50, DispatchedRequests: 0}, framework.Metrics{}),
			}
			s := scorer(latency.StrategyMost).Score(ctx, nil, nil, eps)
			gomega.Expect(best(eps, s)).To(gomega.Equal(eps[1].Key()))
			gomega.Expect(s[eps[0].Key()]).To(gomega.Equal(0.0))
		})
	})

	ginkgo.When("every endpoint misses the SLO and none is idle", func() {
		ginkgo.It("should prefer the smallest deficit", func(ctx context.Context) {
			eps := []*framework.Endpoint{
				withInfo(1, latency.LatencyPredictionInfo{TTFTHeadroom: -300, TPOTHeadroom: -3, DispatchedRequests: 1}, framework.Metrics{}),
				withInfo(2, latency.LatencyPredictionInfo{TTFTHeadroom: -20, TPOTHeadroom: -2, DispatchedRequests: 2}, framework.Metrics{}),
				withInfo(3, latency.LatencyPredictionInfo{TTFTHeadroom: -100, TPOTHeadroom: -9, DispatchedRequests: 1}, framework.Metrics{}),
			}
			gomega.Expect(best(eps, scorer(latency.StrategyMost).Score(ctx, nil, nil, eps))).To(gomega.Equal(eps[1].Key()))
		})

		ginkgo.It("should prefer an endpoint that violates only TPOT over one that violates TTFT", func(ctx context.Context) {
			eps := []*framework.Endpoint{
				withInfo(1, latency.LatencyPredictionInfo{TTFTHeadroom: -1, TPOTHeadroom: 1, DispatchedRequests: 1}, framework.Metrics{}),
				withInfo(2, latency.LatencyPredictionInfo{TTFTHeadroom: 5, TPOTHeadroom: -40, DispatchedRequests: 1}, framework.Metrics{}),
			}
			gomega.Expect(best(eps, scorer(latency.StrategyLeast).Score(ctx, nil, nil, eps))).To(gomega.Equal(eps[1].Key()))
		})
	})

	ginkgo.When("no candidate has a prediction", func() {
		ginkgo.It("should score the composite of free KV, relative queue and prefix score with weights 1/1/1", func(ctx context.Context) {
			eps := []*framework.Endpoint{
				withPrefix(latencytest.Endpoint(1, framework.Metrics{KVCacheUsage: 0.5, WaitingQueueSize: 4}), 10),
				latencytest.Endpoint(2, framework.Metrics{KVCacheUsage: 0.1, WaitingQueueSize: 0}),
				latencytest.Endpoint(3, framework.Metrics{KVCacheUsage: 0.9, WaitingQueueSize: 2}),
			}
			s := scorer(latency.StrategyLeast).Score(ctx, nil, nil, eps)
			want := map[string]float64{
				eps[0].Key(): math.Round((0.5+0+1)/3*100) / 100,
				eps[1].Key(): math.Round((0.9+1+0)/3*100) / 100,
				eps[2].Key(): math.Round((0.1+0.5+0)/3*100) / 100,
			}
			gomega.Expect(s).To(gomega.BeComparableTo(want))
		})
	})
})

// answerFor returns an answer function keyed by the endpoint's waiting queue (the only feature
// the specs vary), so a spec can give each endpoint its own prediction.
func answerFor(byWaiting map[int]predictor.PredictionResponse) func(predictor.PredictionRequest) predictor.PredictionResponse {
	return func(r predictor.PredictionRequest) predictor.PredictionResponse {
		return byWaiting[r.NumRequestWaiting]
	}
}
