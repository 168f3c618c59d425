package predictedlatency_test

import (
	"context"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/suites/internal/latencytest"
)

// stream drives one request through the runtime's hooks on a fake clock: Schedule + PreRequest at
// t0, then the response.
type stream struct {
	ctx  context.Context
	rt   *framework.Runtime
	clk  *clocktesting.FakeClock
	req  *framework.LLMRequest
	resp *framework.Response
}

func dispatch(ctx context.Context, rt *framework.Runtime, clk *clocktesting.FakeClock, id, prompt string, eps []*framework.Endpoint) *stream {
	req := latencytest.Request(id, prompt, nil)
	res, err := rt.Schedule(ctx, req, latencytest.Fresh(eps))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	rt.PreRequest(ctx, req, res)
	return &stream{ctx: ctx, rt: rt, clk: clk, req: req,
		resp: &framework.Response{RequestID: id, Endpoint: res.Primary().TargetEndpoints[0].Metadata}}
}

func (s *stream) headers(contentType string) {
	s.resp.Headers = map[string]string{"content-type": contentType}
	s.rt.ResponseHeader(s.ctx, s.req, s.resp)
}

// chunk delivers body bytes after d.
func (s *stream) chunk(d time.Duration, b string) {
	s.clk.Step(d)
	s.rt.ResponseBody(s.ctx, s.req, s.resp, []byte(b))
}

// end completes the response after d; usage is the completion token count (0: none).
func (s *stream) end(d time.Duration, usage int, eos bool) {
	s.clk.Step(d)
	if usage > 0 {
		s.resp.Usage = &framework.Usage{CompletionTokens: &usage}
	}
	s.resp.EndOfStream = eos
	s.rt.ResponseComplete(s.ctx, s.req, s.resp)
	s.rt.EndRequest(s.req)
}

const tok = "data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\n"

var _ = ginkgo.Describe("Training samples", ginkgo.Label(suiteLabel), func() {
	var (
		rt   *framework.Runtime
		pred *latencytest.Predictor
		clk  *clocktesting.FakeClock
		eps  []*framework.Endpoint
	)
	ginkgo.BeforeEach(func() {
		pred = latencytest.NewPredictor(latencytest.ByLoad(100, 0, 10, 0))
		clk = clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		ctx, cancel := context.WithCancel(context.Background())
		ginkgo.DeferCleanup(cancel)
		var err error
		rt, err = latencytest.Runtime(ctx, routing(400), pred, clk, 1)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		eps = latencytest.Endpoints(1)
	})

	ginkgo.When("the response streams tokens", func() {
		ginkgo.It("should record TTFT = dispatch → first token and TPOT = (end − first token)/(tokens − 1)", func(ctx context.Context) {
			s := dispatch(ctx, rt, clk, "r1", "0123456789abcdef0123456789abcdef", eps) // 32 characters = 8 tokens
			s.headers("text/event-stream")
			s.chunk(5*time.Millisecond, `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n") // role only: no token
			// The first token event arrives split across two chunks at 30 ms.
			s.chunk(20*time.Millisecond, tok[:17])
			s.chunk(5*time.Millisecond, tok[17:])
			s.chunk(10*time.Millisecond, tok)
			s.chunk(10*time.Millisecond, tok)
			s.chunk(10*time.Millisecond, tok+"data: [DONE]\n\n")
			s.end(0, 0, true)
			entries := pred.Entries()
			gomega.Expect(entries).To(gomega.HaveLen(1))
			gomega.Expect(entries[0].ActualTTFT).To(gomega.BeNumerically("~", 30, 1e-9))
			gomega.Expect(entries[0].ActualTPOT).To(gomega.BeNumerically("~", 10, 1e-9)) // (60 − 30)/(4 − 1)
			gomega.Expect(entries[0].InputTokenLength).To(gomega.Equal(8))
		})

		ginkgo.It("should count tokens from the usage block when it has one", func(ctx context.Context) {
			s := dispatch(ctx, rt, clk, "r1", "p", eps)
			s.headers("text/event-stream")
			s.chunk(40*time.Millisecond, tok)             // first token at 40 ms
			s.chunk(60*time.Millisecond, tok+tok+tok+tok) // several tokens per chunk
			s.end(0, 7, true)                             // usage: 7 completion tokens
			entries := pred.Entries()
			gomega.Expect(entries).To(gomega.HaveLen(1))
			gomega.Expect(entries[0].ActualTTFT).To(gomega.BeNumerically("~", 40, 1e-9))
			gomega.Expect(entries[0].ActualTPOT).To(gomega.BeNumerically("~", 10, 1e-9)) // 60/(7 − 1)
		})
	})

	ginkgo.When("the response does not stream", func() {
		ginkgo.It("should record TTFT = dispatch → end of response and no TPOT", func(ctx context.Context) {
			s := dispatch(ctx, rt, clk, "r1", "p", eps)
			s.headers("application/json")
			s.chunk(70*time.Millisecond, `{"choices":[{"text":"abc"}],"usage":{"completion_tokens":3}}`)
			s.end(10*time.Millisecond, 3, true)
			entries := pred.Entries()
			gomega.Expect(entries).To(gomega.HaveLen(1))
			gomega.Expect(entries[0].ActualTTFT).To(gomega.BeNumerically("~", 80, 1e-9))
			gomega.Expect(entries[0].ActualTPOT).To(gomega.Equal(0.0))
		})
	})

	ginkgo.When("the request is abandoned before the end of the response", func() {
		ginkgo.It("should record nothing and release what it counted in flight", func(ctx context.Context) {
			s := dispatch(ctx, rt, clk, "r1", "0123456789abcdef", eps)
			p := producerOf(rt)
			reqs, tokens := p.InFlight(eps[0].Key())
			gomega.Expect([]int64{int64(reqs), tokens}).To(gomega.Equal([]int64{1, 4}))
			s.headers("text/event-stream")
			s.end(15*time.Millisecond, 0, false)
			gomega.Expect(pred.Entries()).To(gomega.BeEmpty())
			reqs, tokens = p.InFlight(eps[0].Key())
			gomega.Expect([]int64{int64(reqs), tokens}).To(gomega.Equal([]int64{0, 0}))
		})
	})

	ginkgo.When("a request's prefill finishes", func() {
		ginkgo.It("should stop counting its prompt tokens in flight at the first token, and its request at the end", func(ctx context.Context) {
			a := dispatch(ctx, rt, clk, "a", "0123456789abcdef0123456789abcdef", eps) // 8 tokens
			b := dispatch(ctx, rt, clk, "b", "0123456789abcdef", eps)                 // 4 tokens
			p := producerOf(rt)
			reqs, tokens := p.InFlight(eps[0].Key())
			gomega.Expect([]int64{int64(reqs), tokens}).To(gomega.Equal([]int64{2, 12}))
			// The next prediction sees the prompt tokens in flight as a feature.
			prepare(ctx, rt, latencytest.Request("c", "q", nil), eps)
			a.headers("text/event-stream")
			a.chunk(10*time.Millisecond, tok)
			reqs, tokens = p.InFlight(eps[0].Key())
			gomega.Expect([]int64{int64(reqs), tokens}).To(gomega.Equal([]int64{2, 4}))
			a.end(10*time.Millisecond, 0, true)
			b.end(0, 0, true)
			reqs, tokens = p.InFlight(eps[0].Key())
			gomega.Expect([]int64{int64(reqs), tokens}).To(gomega.Equal([]int64{0, 0}))
		})
	})

	ginkgo.When("a request never completes", func() {
		ginkgo.It("should be released by the sweep after the flight TTL", func(ctx context.Context) {
			dispatch(ctx, rt, clk, "lost", "0123456789abcdef", eps)
			p := producerOf(rt)
			gomega.Expect(p.SweepFlights(latency.DefaultFlightTTL)).To(gomega.Equal(0))
			clk.Step(latency.DefaultFlightTTL + time.Second)
			gomega.Expect(p.SweepFlights(latency.DefaultFlightTTL)).To(gomega.Equal(1))
			reqs, tokens := p.InFlight(eps[0].Key())
			gomega.Expect([]int64{int64(reqs), tokens}).To(gomega.Equal([]int64{0, 0}))
		})
	})
})

var _ = ginkgo.Describe("Per-endpoint calibration", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("one endpoint answers 10× faster than the pool-wide prediction", func() {
		ginkgo.It("should scale that endpoint's predictions down after three of its requests", func(ctx context.Context) {
			pred := latencytest.NewPredictor(latencytest.ByLoad(100, 0, 10, 0))
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			rt, err := latencytest.Runtime(ctx, latencytest.ConfigHead+"plugins:\n- type: predicted-latency-producer\n- type: max-score-picker\n", pred, clk, 1)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			eps := latencytest.Endpoints(1)
			for i := 0; i < 3; i++ {
				s := dispatch(ctx, rt, clk, "r"+string(rune('a'+i)), "p", eps)
				s.headers("application/json")
				s.end(10*time.Millisecond, 0, true) // 10 ms against a prediction of 100 ms
			}
			ttft, _ := producerOf(rt).Calibration(eps[0].Key())
			gomega.Expect(ttft).To(gomega.BeNumerically("~", 0.1, 1e-9))
			got := prepare(ctx, rt, latencytest.Request("next", "p", map[string]string{latency.HeaderTTFTSLO: "50"}), eps)
			gomega.Expect(info(got[0]).TTFT).To(gomega.BeNumerically("~", 10, 1e-9))
			gomega.Expect(info(got[0]).TTFTValid).To(gomega.BeTrue())
		})
	})
})
