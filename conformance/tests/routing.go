package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// Helpers of the EPP-Routing tests: requests go through the fake gateway to the fake vLLM fleet,
// and the endpoint that served each one is read from the model server's own x-inference-pod
// header (cross-checked with the gateway's record of where it forwarded the request).

// routingWorkers is how many requests a routing measurement keeps in flight. It is only used
// where concurrency cannot change what the EPP sees: unique prompts (no shared prefixes) and
// pinned metrics (the fakes report the pinned gauges, not their live load).
const routingWorkers = 4

// send posts body to path through the gateway and returns the endpoint (ip:port) that served
// it. err is non-nil when the gateway failed, the EPP refused the request, or the served
// endpoint cannot be identified; a model server's own error status (e.g. 404 for an adapter it
// does not serve) is not an error: the request was still routed there.
func send(s *harness.Suite, path string, body []byte) (string, error) {
	return sendWithHeaders(s, path, body, nil)
}

// sendWithHeaders is send with extra request headers (content-type is always
// application/json).
func sendWithHeaders(s *harness.Suite, path string, body []byte, headers map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	hdr := map[string]string{"content-type": "application/json"}
	for k, v := range headers {
		hdr[k] = v
	}
	res, err := s.Gateway.Do(ctx, &gateway.Request{Method: http.MethodPost, Path: path, Headers: hdr, Body: body})
	if err != nil {
		return "", fmt.Errorf("gateway: %w", err)
	}
	if res.Immediate {
		return "", fmt.Errorf("the EPP refused the request with %d: %s", res.Status, strings.TrimSpace(string(res.Body)))
	}
	if res.Endpoint == "" {
		return "", fmt.Errorf("the gateway did not forward the request (status %d: %s)", res.Status, strings.TrimSpace(string(res.Body)))
	}
	// The model server's identity header must agree with where the gateway sent the request.
	if res.ServedPod != "" {
		addr, _ := s.PodAddr(res.ServedPod)
		if addr != res.Endpoint {
			return "", fmt.Errorf("x-inference-pod %q (%s) disagrees with the gateway's endpoint %s", res.ServedPod, addr, res.Endpoint)
		}
	}
	return res.Endpoint, nil
}

// mustSend is send that fails the test.
func mustSend(t harness.TestingT, s *harness.Suite, path string, body []byte) string {
	t.Helper()
	ep, err := send(s, path, body)
	if err != nil {
		t.Fatalf("POST %s (%d bytes): %v", path, len(body), err)
	}
	return ep
}

// sendAll sends n requests built by mk (called from the calling goroutine, so mk may use the
// test's random stream) with routingWorkers in flight, and returns the serving endpoint of each,
// in order. It fails the test on the first error.
func sendAll(t harness.TestingT, s *harness.Suite, n int, mk func(i int) (path string, body []byte)) []string {
	t.Helper()
	return sendAllWithHeaders(t, s, n, nil, mk)
}

// sendAllWithHeaders is sendAll with extra request headers on every request.
func sendAllWithHeaders(t harness.TestingT, s *harness.Suite, n int, headers map[string]string, mk func(i int) (path string, body []byte)) []string {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("%d requests through the gateway in %s", n, time.Since(start).Round(time.Millisecond)) }()
	type job struct {
		i        int
		path     string
		body     []byte
		endpoint string
		err      error
	}
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i].i = i
		jobs[i].path, jobs[i].body = mk(i)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	var broken atomic.Value // the run's BrokenCause, once a request failed and the EPP is known broken
	for w := 0; w < routingWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				jobs[i].endpoint, jobs[i].err = sendWithHeaders(s, jobs[i].path, jobs[i].body, headers)
				if jobs[i].err != nil {
					if cause := s.BrokenCause(); cause != "" {
						broken.CompareAndSwap(nil, cause)
					}
				}
			}
		}()
	}
	sent := 0
	for i := range jobs {
		if broken.Load() != nil {
			break // not every request: the run already knows why they fail
		}
		next <- i
		sent++
	}
	close(next)
	wg.Wait()
	if cause, ok := broken.Load().(string); ok {
		var first error
		for _, j := range jobs[:sent] {
			if j.err != nil {
				first = fmt.Errorf("request %d: %w", j.i, j.err)
				break
			}
		}
		t.Fatalf("stopped after %d of %d requests: %v (not sending the rest: %s)", sent, n, first, cause)
	}
	out := make([]string, n)
	var errs []error
	for _, j := range jobs {
		if j.err != nil {
			errs = append(errs, fmt.Errorf("request %d: %w", j.i, j.err))
		}
		out[j.i] = j.endpoint
	}
	if len(errs) > 0 {
		t.Fatalf("%d of %d requests failed (seed %d); first: %v", len(errs), n, s.Seed, errors.Join(errs[:min(3, len(errs))]...))
	}
	return out
}

// pinAll pins every endpoint's metrics (unpinned in Cleanup) and logs them.
func pinAll(t harness.TestingT, s *harness.Suite, pins map[string]vllm.FakeMetrics) {
	t.Helper()
	for _, a := range s.Endpoints() {
		m, ok := pins[a]
		if !ok {
			t.Fatalf("pinAll: no metrics for endpoint %s", a)
		}
		s.PinMetrics(t, a, m)
		t.Logf("pinned %s: running %d, waiting %d, KV %.3f, loras %v", a, m.RunningRequests, m.WaitingRequests, m.KVCacheUsage, m.Loras)
	}
}

// awaitObserved waits, at most Timeouts.MetricsPropagation, until the EPP's routing shows it
// has scraped the pinned metrics: ok(endpoint) holds for every request of a batch of 2N unique
// requests, RequiredConsecutiveSuccesses batches in a row. It does not fail the test when the
// bound passes: it logs that and returns, and the statistical check that follows decides (an
// EPP that ignores the metrics fails there, with n, the rate and the bound in the message).
func awaitObserved(t harness.TestingT, s *harness.Suite, what string, mk func() (string, []byte), ok func(endpoint string) bool) {
	t.Helper()
	start := time.Now()
	batch := 2 * len(s.Endpoints())
	err := s.Eventually(s.Timeouts.MetricsPropagation.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		for i := 0; i < batch; i++ {
			path, body := mk()
			ep, err := send(s, path, body)
			if err != nil {
				return err
			}
			if !ok(ep) {
				return fmt.Errorf("request %d of a batch of %d went to %s", i+1, batch, ep)
			}
		}
		return nil
	})
	if err != nil {
		t.Logf("the EPP did not show it observed %s within metricsPropagation %s: %v; measuring anyway", what, s.Timeouts.MetricsPropagation.D(), err)
		return
	}
	t.Logf("the EPP observed %s (after %s)", what, time.Since(start).Round(time.Millisecond))
}

// restoreRouting is a Cleanup step for tests that pinned an endpoint away: after the pins are
// undone, wait (at most MetricsPropagation) until avoided is picked again, so the next test
// starts from equal metrics. Failures are logged, not fatal (a cleanup must not Fatalf).
func restoreRouting(t harness.TestingT, s *harness.Suite, avoided string, mk func() (string, []byte)) {
	start := time.Now()
	err := s.Eventually(s.Timeouts.MetricsPropagation.D(), 1, func() error {
		for i := 0; i < 4*len(s.Endpoints()); i++ {
			path, body := mk()
			ep, err := send(s, path, body)
			if err != nil {
				return err
			}
			if ep == avoided {
				return nil
			}
		}
		return fmt.Errorf("%s is still avoided after its metrics were unpinned", avoided)
	})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	t.Logf("cleanup: %s is picked again (after %s)", avoided, time.Since(start).Round(time.Millisecond))
}

// count returns how many of eps equal want.
func count(eps []string, want string) int {
	n := 0
	for _, e := range eps {
		if e == want {
			n++
		}
	}
	return n
}

// histogram counts endpoints for logs.
func histogram(eps []string) map[string]int {
	h := map[string]int{}
	for _, e := range eps {
		h[e]++
	}
	return h
}

// runLoadedEndpointAvoided is the shape of the load-awareness rules (SPEC §6 QueueAwareness,
// KVCacheAwareness): one endpoint, drawn at random, is pinned to the metrics pin(r, true) returns
// and every other to pin(r, false); once the EPP is seen avoiding it, new unique-prompt requests
// must reach it at most ruleRate of the time, with the sample size and threshold of a
// harness.Plan. what names the load in messages ("the deep queue").
func runLoadedEndpointAvoided(t harness.TestingT, s *harness.Suite, what string, ruleRate float64,
	pin func(r *rand.Rand, loaded bool) vllm.FakeMetrics) {
	pool := requireEndpoints(t, s, 2)
	r := s.Rand(t)
	plan := harness.MustPlan(t, harness.Shape{
		Outcome: "requests sent to the endpoint with " + what, Tail: harness.AtMost,
		Compliant: harness.Exploration, Random: 1 / float64(len(pool)), RuleRate: ruleRate,
	})
	loaded := pool[r.IntN(len(pool))]
	mk := func() (string, []byte) {
		return pathCompletions, completionBody(s.ModelName, uniquePrompt(s, t, r, 24), nil)
	}
	// Registered before the pins, so it runs after they are undone (Cleanup is last-in first-out).
	t.Cleanup(func() { restoreRouting(t, s, loaded, mk) })

	pins := map[string]vllm.FakeMetrics{}
	for _, a := range pool {
		pins[a] = pin(r, false)
	}
	pins[loaded] = pin(r, true)
	pinAll(t, s, pins)
	awaitObserved(t, s, what+" on "+loaded, mk, func(ep string) bool { return ep != loaded })

	eps := sendAll(t, s, plan.N, func(int) (string, []byte) { return mk() })
	t.Logf("loaded endpoint %s; picks: %v", loaded, histogram(eps))
	plan.Check(t, s, count(eps, loaded), len(eps))
}
