package tests

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
)

// Shape of DataParallelRanks: dpPods pods (1 without loopback aliases) of dpRanks ranks each.
const (
	dpPods  = 2
	dpRanks = 3
	// dpWorkers is how many requests are in flight at once.
	dpWorkers = 4
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "DataParallelRanks",
		Description: "For an InferencePool with several targetPorts (one per data-parallel rank), the EPP MUST treat every " +
			"rank port of every Ready pod as an endpoint: every rank is picked, and a request picked for a rank is served by that rank.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureDataParallelRanks},
		Preconditions: []string{
			"the harness starts a second instance of the EPP for a second pool of pods with 3 rank ports each " +
				"(an InferencePool's targetPorts apply to all its pods): the reference and command targets; the address and cluster targets skip",
			"with the static source the EPP is given every rank's ip:port; with apiserver, an InferencePool with targetPorts " +
				"rank0..rank0+2 and Ready pods",
			"among idle endpoints serving unique prompts the EPP spreads its picks at least as evenly as a uniform random choice",
		},
		Source: "llm-d-router v0.10.0 pkg/epp/datastore/datastore.go podUpdateOrAddIfNotExist and " +
			"createEndpointNamespacedName: one endpoint <pod>-rank-<i> per InferencePool targetPort " +
			"(spec.targetPorts, 1–8 ports), each scraped on its own port; same in GIE v1.5.0. vLLM " +
			"--data-parallel-size serves rank i on port+i.",
		Run: runDataParallelRanks,
	})
}

func runDataParallelRanks(t harness.TestingT, s *harness.Suite) {
	dp := s.StartDataParallelPool(t, dpPods, dpRanks)
	k := len(dp.Endpoints)
	t.Logf("data-parallel pool: %d pods × %d ranks = %v", len(dp.Fleet.Members()), dp.Ranks, dp.Endpoints)

	// A picker choosing uniformly among the k endpoints misses a given one in n picks with
	// probability (1-1/k)^n; n is the least count for which missing any is ≤ MaxFalseFailure
	// (union bound). An EPP that ignores ranks ≥ 1 never picks them and fails for sure.
	n := int(math.Ceil(math.Log(harness.MaxFalseFailure/float64(k)) / math.Log(1-1/float64(k))))
	t.Logf("%d requests: a uniform picker misses one of %d endpoints with probability ≤ %.3g (seed %d)",
		n, k, float64(k)*math.Pow(1-1/float64(k), float64(n)), s.Seed)

	ctx := testContext(t, s)
	before, err := dp.RankSuccesses(ctx)
	if err != nil {
		t.Fatalf("read the ranks' request counters: %v", err)
	}
	r := s.Rand(t)
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil)
	}
	served := make([]string, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	var broken atomic.Bool // a request failed and the run already knows the EPP's stream is broken
	for w := 0; w < dpWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				served[i], errs[i] = sendDP(s, dp, bodies[i])
				if errs[i] != nil && s.BrokenCause() != "" {
					broken.Store(true)
				}
			}
		}()
	}
	for i := range bodies {
		if broken.Load() {
			break // the first failure is the message; the rest would fail the same way
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d of %d through the data-parallel pool's gateway: %v (seed %d)", i, n, err, s.Seed)
		}
	}
	picks := histogram(served)
	t.Logf("picks: %v", picks)
	var missing []string
	for _, ep := range dp.Endpoints {
		if picks[ep] == 0 {
			missing = append(missing, ep)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("rank endpoints never picked in %d requests: %v (picks %v; seed %d)", n, missing, picks, s.Seed)
	}

	// Each rank must itself have served what was sent to it: its own request counter grew by
	// the number of requests the gateway forwarded to its port.
	harness.MustEventually(t, s, s.Timeouts.MetricsPropagation.D(), 1, func() error {
		after, err := dp.RankSuccesses(ctx)
		if err != nil {
			return err
		}
		var bad []string
		for _, ep := range dp.Endpoints {
			if got := after[ep] - before[ep]; got != float64(picks[ep]) {
				bad = append(bad, fmt.Sprintf("%s served %v, was sent %d", ep, got, picks[ep]))
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("ranks' own counts disagree with the picks: %s", strings.Join(bad, "; "))
		}
		return nil
	})
}

// sendDP posts a completion through the data-parallel pool's gateway and returns the rank
// endpoint (ip:port) it was forwarded to, checking that the answer is a 200 from that pool.
func sendDP(s *harness.Suite, dp *harness.DataParallelPool, body []byte) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	res, err := dp.Gateway.Do(ctx, &gateway.Request{Method: http.MethodPost, Path: pathCompletions,
		Headers: map[string]string{"content-type": "application/json"}, Body: body})
	if err != nil {
		return "", fmt.Errorf("gateway: %w", err)
	}
	if res.Immediate {
		return "", fmt.Errorf("the EPP refused the request with %d: %s", res.Status, strings.TrimSpace(string(res.Body)))
	}
	if res.Endpoint == "" || !slices.Contains(dp.Endpoints, res.Endpoint) {
		return "", fmt.Errorf("forwarded to %q, not a rank of the pool %v (status %d)", res.Endpoint, dp.Endpoints, res.Status)
	}
	if res.Status != http.StatusOK {
		return "", fmt.Errorf("rank %s answered %d: %s", res.Endpoint, res.Status, strings.TrimSpace(string(res.Body)))
	}
	if pod := dp.PodOf(res.Endpoint); res.ServedPod != "" && res.ServedPod != pod {
		return "", fmt.Errorf("x-inference-pod %q disagrees with the pod %q of rank %s", res.ServedPod, pod, res.Endpoint)
	}
	return res.Endpoint, nil
}
