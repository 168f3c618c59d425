package tests

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:   "DuplicateRequestIDIsolated",
		FormerNames: []string{"ReferenceDuplicateRequestIDIsolated"}, // in the Reference profile until issue 32
		Description: "Concurrent requests that carry the same x-request-id MUST each be routed and keep their own per-request " +
			"state: the prefix of each MUST be indexed on its own pick, so that with equal load a repeat of each prompt goes to " +
			"the endpoint that served it (a stress test: bursts of 64 requests with one id scheduled at once).",
		Level:         conformance.LevelEppkit,
		Profile:       conformance.ProfileEPPProduction,
		Features:      []conformance.Feature{conformance.FeatureRequestIDIsolation, conformance.FeaturePrefixCacheAffinity},
		Preconditions: []string{"prefix-cache affinity as in PrefixCacheAffinity"},
		Source:        "SPEC §9.2 (per-request state keyed by an EPP-internal id; x-request-id only a label; GIE #1489)",
		Run:           runDuplicateRequestIDIsolated,
	})
}

// duplicateBurst is how many requests with one x-request-id the EPP gets to schedule at the same
// moment, and duplicatePromptChars the length of each prompt (about 21 blocks of 64 characters:
// a whole burst fits in the 1,024-block KV cache of one fake, which the EPP's autoTuned prefix
// index mirrors, so no repeat misses for eviction).
const (
	duplicateBurst       = 64
	duplicatePromptChars = 1000
)

func runDuplicateRequestIDIsolated(t harness.TestingT, s *harness.Suite) {
	requireEndpoints(t, s, 2)
	r := s.Rand(t)
	// The adversary is not a random picker but an EPP whose per-request state collides under a
	// shared x-request-id: each collision leaves one prompt unindexed and another indexed on the
	// wrong pick, so its repeats miss far more often than exploration explains. The plan separates
	// a compliant EPP (≥ 98% of repeats home; the reference sends 100% home) from one that loses 5%
	// of them (n ≈ 3,200). How many requests collide depends on how the EPP interleaves them, so
	// this is a stress test: it catches sharing that costs more than about 3.5% of the prompts,
	// not every possible race. The reference's mutant with its prefix state keyed by x-request-id
	// (state-keyed-by-x-request-id) lost 5–8% of them in bursts of 64 on a loaded 2-core machine,
	// which a bound separating 98% from 90% (the first version of this test) missed in one run of
	// three.
	//
	// Collisions come in bursts (the EPP's thread descheduled inside one request's decision while
	// other requests with the id pass through): a burst that loses a dozen of its 64 repeats is
	// the signature. So the false-failure budget of SPEC §6 is split: half for the overall rate,
	// half for "some burst lost ≥ burstMisses repeats", whose bound for a compliant EPP (each
	// repeat leaves home with probability ≤ Exploration, independently) is the union over the
	// bursts of the binomial tail.
	plan := harness.MustPlan(t, harness.Shape{
		Outcome: "repeats sent to the endpoint that served their prompt under a shared x-request-id", Tail: harness.AtLeast,
		Compliant: 1 - harness.Exploration, Random: 0.95, MaxFalseFailure: harness.MaxFalseFailure / 2,
	})
	bursts := (plan.N + duplicateBurst - 1) / duplicateBurst
	burstMisses := 1
	for float64(bursts)*harness.BinomialTail(duplicateBurst, burstMisses, harness.Exploration, true) > harness.MaxFalseFailure/2 {
		burstMisses++
	}
	t.Logf("a burst fails the test when %d or more of its %d repeats leave home: P(fail|compliant) ≤ %.3g over %d bursts",
		burstMisses, duplicateBurst, float64(bursts)*harness.BinomialTail(duplicateBurst, burstMisses, harness.Exploration, true), bursts)
	c := s.ExtProc(t)
	ctx := testContext(t, s)
	hits, sent := 0, 0
	var misses []string
	for sent < plan.N {
		shared := "eppkit-conformance-duplicate-" + s.Nonce(t)
		burst := make([]extprocclient.Request, min(duplicateBurst, plan.N-sent))
		for i := range burst {
			prompt := uniquePrompt(s, t, r, 0) + " "
			for len(prompt) < duplicatePromptChars {
				prompt += vocabulary[r.IntN(len(vocabulary))] + " "
			}
			burst[i] = surfaceRequest(pathCompletions, completionBody(s.ModelName, prompt, nil), map[string]string{requestIDHeader: shared})
		}
		picks := sendBurst(t, s, ctx, c, burst)
		t.Logf("%d requests with %s=%s scheduled at once: %v", len(burst), requestIDHeader, shared, histogram(picks))
		// Repeats at once after the burst (before later prompts could evict its blocks), one at a
		// time, each with an id of its own.
		lost := 0
		for i, req := range burst {
			req.Headers = extprocclient.RequestHeaders("POST", pathCompletions, authority, req.Body, map[string]string{requestIDHeader: s.Nonce(t)})
			got := mustRoute(t, s, exchange(t, s, c, req), req)[0]
			if got == picks[i] {
				hits++
			} else {
				lost++
				misses = append(misses, fmt.Sprintf("request %d: %s→%s", sent+i, picks[i], got))
			}
		}
		if lost >= burstMisses {
			t.Fatalf("requests %d–%d with %s=%s: %d of %d repeats left the endpoint that served their prompt (≥ %d fails; "+
				"their per-request state was shared; seed %d): %v", sent, sent+len(burst)-1, requestIDHeader, shared, lost, len(burst),
				burstMisses, s.Seed, misses[len(misses)-lost:])
		}
		sent += len(burst)
	}
	if len(misses) > 0 {
		t.Logf("repeats that left the endpoint that served their prompt: %v", misses)
	}
	plan.Check(t, s, hits, plan.N)
}

// sendBurst sends reqs on a stream each so that the EPP gets them all to schedule at the same
// moment: every stream first carries its headers and all of its body but the last byte, then the
// last bytes go out back to back. It returns each request's pick and fails the test when one is
// not routed.
func sendBurst(t harness.TestingT, s *harness.Suite, ctx context.Context, c *extprocclient.Client, reqs []extprocclient.Request) []string {
	t.Helper()
	streams := make([]*extprocclient.Stream, len(reqs))
	for i, req := range reqs {
		streams[i] = openStream(t, s, c)
		if err := streams[i].SendRequestHeaders(req.Headers, false, extprocclient.Metadata{}); err != nil {
			t.Fatalf("request %d: send headers: %v", i, err)
		}
		if err := streams[i].SendRequestBody(req.Body[:len(req.Body)-1], false, extprocclient.Metadata{}); err != nil {
			t.Fatalf("request %d: send body: %v", i, err)
		}
	}
	for i, req := range reqs {
		if err := streams[i].SendRequestBody(req.Body[len(req.Body)-1:], true, extprocclient.Metadata{}); err != nil {
			t.Fatalf("request %d: send the last body byte: %v", i, err)
		}
	}
	picks := make([]string, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, s.Timeouts.Request.D())
			defer cancel()
			d, err := streams[i].ReadDecision(rctx, false)
			switch {
			case err != nil:
				errs[i] = err
			case d.Immediate != nil:
				errs[i] = fmt.Errorf("refused with %d: %s", d.Immediate.Status, strings.TrimSpace(string(d.Immediate.Body)))
			default:
				addrs, problem := pickProblem(s, d)
				if problem != "" {
					errs[i] = fmt.Errorf("%s", problem)
				} else {
					picks[i] = addrs[0]
				}
			}
		}()
	}
	wg.Wait()
	for _, st := range streams {
		st.Close()
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d of %d sent at once with one %s was not routed: %v", i, len(reqs), requestIDHeader, err)
		}
	}
	return picks
}
