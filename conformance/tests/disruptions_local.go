package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
)

// The disruptions of issue 33 item 4 on the local control plane (no container engine): the
// leading EPP process killed, a model server stopped and its pod marked not ready, each under
// load, each counting what was sent, answered, failed and never answered (a request that times
// out is a failure).

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "DisruptionLeaderKilledUnderLoad",
		Description: "While 20 req/s flow through a data plane that follows readiness, the leading replica of the pool's EPP is " +
			"killed (SIGKILL): through a FailOpen pool no request fails, through a FailClose pool requests fail only until another " +
			"replica is ready, and no request is left unanswered.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureHighAvailability},
		Preconditions: []string{"the EPP serves the pool's base model",
			"the run knows how to turn the EPP's leader election on (--leader-election-args; the reference target knows its own)",
			"the apiserver endpoint source, a target that starts replicas (command, reference)"},
		Source: "llm-d-router v0.10.0 test/e2e/disruption_test.go (the EPP killed while requests are in flight, then recovery) and " +
			"e2e_test.go (leader election failover); GIE InferencePool endpointPickerRef.failureMode FailOpen/FailClose",
		EndpointSource: "apiserver",
		Run:            runDisruptionLeaderKilledUnderLoad,
	})
	conformance.Register(conformance.ConformanceTest{
		ShortName: "DisruptionModelServerDown",
		Description: "While 20 req/s flow, a model server stops and its pod turns not ready: requests fail only until the EPP has " +
			"observed it (within endpointChange), none is left unanswered, and once it is back and ready it is routed to again.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureEndpointChurn, conformance.FeatureHighAvailability},
		Preconditions: []string{"the EPP serves the pool's base model", "eppkit's fake fleet (a member is stopped and started)",
			"an endpoint source that can mark an endpoint not ready (apiserver)"},
		Source: "llm-d-router v0.10.0 test/e2e/disruption_test.go (a decode pod killed mid-request, then recovery)",
		Run:    runDisruptionModelServerDown,
	})
}

// disruptionRate is the request rate of the disruption tests.
const disruptionRate = 20

// loadCounts is what a load run through one data plane saw.
type loadCounts struct {
	name                         string
	sent, ok, failed, unanswered int
	failedOpen                   int
	statuses                     map[int]int
	firstFail, lastFail          time.Time
}

func (c *loadCounts) String() string {
	var codes []string
	for code, n := range c.statuses {
		codes = append(codes, fmt.Sprintf("%d×%d", code, n))
	}
	sort.Strings(codes)
	return fmt.Sprintf("%s: sent %d, answered 200 %d (failed open %d), failed %d, never answered %d [%s]",
		c.name, c.sent, c.ok, c.failedOpen, c.failed, c.unanswered, strings.Join(codes, " "))
}

type doer interface {
	Do(ctx context.Context, req *gateway.Request) (*gateway.Result, error)
}

// load sends disruptionRate req/s of distinct chat completions through each data plane until
// stop is closed, then waits for every request's end (each bounded by the request timeout).
func load(t harness.TestingT, s *harness.Suite, names []string, planes []doer, stop <-chan struct{}) []*loadCounts {
	r := s.Rand(t)
	prompts := make(chan string, 4096)
	go func() {
		for {
			select {
			case <-stop:
				return
			case prompts <- uniquePrompt(s, t, r, 4):
			}
		}
	}()
	out := make([]*loadCounts, len(planes))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, p := range planes {
		c := &loadCounts{name: names[i], statuses: map[int]int{}}
		out[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / disruptionRate)
			defer tick.Stop()
			var reqs sync.WaitGroup
			defer reqs.Wait()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				prompt := <-prompts
				mu.Lock()
				c.sent++
				mu.Unlock()
				reqs.Add(1)
				go func() {
					defer reqs.Done()
					ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
					defer cancel()
					res, err := p.Do(ctx, &gateway.Request{Path: pathChat, Headers: map[string]string{"content-type": "application/json"},
						Body: chatBody(s.ModelName, prompt)})
					now := time.Now()
					mu.Lock()
					defer mu.Unlock()
					failed := err != nil || res.Status != http.StatusOK
					if failed {
						if c.firstFail.IsZero() {
							c.firstFail = now
						}
						c.lastFail = now
					}
					switch {
					case err != nil:
						c.unanswered++
					case res.Status != http.StatusOK:
						c.failed++
						c.statuses[res.Status]++
					default:
						c.ok++
						c.statuses[res.Status]++
						if res.FailedOpen {
							c.failedOpen++
						}
					}
				}()
			}
		}()
	}
	wg.Wait()
	return out
}

func runDisruptionLeaderKilledUnderLoad(t harness.TestingT, s *harness.Suite) {
	if why := s.ReplicasUnsupported(true); why != "" {
		harness.Skip(t, "%s", why)
	}
	rs := s.StartReplicas(t, 2, true)
	leader := mustOneLeader(t, s, rs, s.Timeouts.TargetReady.D())
	open := rs.LeaderGateway(t, s, gateway.FailOpen)
	closed := rs.LeaderGateway(t, s, gateway.FailClose)
	stop := make(chan struct{})
	var counts []*loadCounts
	done := make(chan struct{})
	go func() {
		counts = load(t, s, []string{"FailOpen", "FailClose"}, []doer{open, closed}, stop)
		close(done)
	}()
	time.Sleep(2 * time.Second)
	killed := time.Now()
	if err := rs.Members[leader].Kill(); err != nil {
		close(stop)
		<-done
		t.Fatalf("SIGKILL the leader: %v", err)
	}
	var failover time.Duration
	err := harness.Eventually(s.Timeouts.LeaderFailover.D(), s.Timeouts.Poll.D(), 1, func() error {
		ready := rs.Serving(context.Background(), "readiness")
		if len(ready) != 1 || ready[0] == leader {
			return fmt.Errorf("replicas ready %v after the leader %d was killed", ready, leader)
		}
		failover = time.Since(killed)
		return nil
	})
	time.Sleep(2 * time.Second)
	close(stop)
	<-done
	if err != nil {
		t.Fatalf("no failover within leaderFailover %v: %v; load: %s; %s", s.Timeouts.LeaderFailover.D(), err, counts[0], counts[1])
	}
	t.Logf("leader killed at %d req/s: another replica ready %v later (bound %v); %s; %s", disruptionRate,
		failover.Round(time.Millisecond), s.Timeouts.LeaderFailover.D(), counts[0], counts[1])
	if c := counts[0]; c.failed+c.unanswered > 0 {
		t.Fatalf("through the FailOpen pool requests failed while the leader was replaced: %s", c)
	}
	if c := counts[1]; c.unanswered > 0 {
		t.Fatalf("through the FailClose pool requests were never answered: %s", c)
	}
	if c := counts[1]; c.failed > 0 && (c.firstFail.Before(killed) || c.lastFail.After(killed.Add(failover+s.Timeouts.Request.D()))) {
		t.Fatalf("through the FailClose pool requests failed outside the failover window (%v after the kill): first %v, last %v after it; %s",
			failover, c.firstFail.Sub(killed), c.lastFail.Sub(killed), c)
	}
}

func runDisruptionModelServerDown(t harness.TestingT, s *harness.Suite) {
	requireEndpoints(t, s, 2)
	if s.Fleet == nil {
		harness.Skip(t, "the run's model servers are not eppkit's fake fleet (--fleet fake), whose members the test stops and starts")
	}
	m := s.Fleet.Member(0)
	addr := m.Addr()
	// The source must be able to mark the stopped server's Pod not ready: ask before anything is
	// stopped (marking a ready endpoint ready changes nothing).
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
	err := s.SetEndpointReady(ctx, addr, true)
	cancel()
	if errors.Is(err, harness.ErrUnsupported) {
		harness.Skip(t, "the endpoint source cannot mark an endpoint not ready (use --endpoint-source apiserver)")
	}
	if err != nil {
		t.Fatalf("mark %s ready: %v", addr, err)
	}
	t.Cleanup(func() {
		if !m.Running() {
			_ = m.Start()
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
		defer cancel()
		_ = s.SetEndpointReady(ctx, addr, true)
	})
	stop := make(chan struct{})
	var counts []*loadCounts
	done := make(chan struct{})
	go func() {
		counts = load(t, s, []string{"gateway"}, []doer{s.Gateway}, stop)
		close(done)
	}()
	time.Sleep(2 * time.Second)
	down := time.Now()
	m.Kill()
	ctx, cancel = context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
	err = s.SetEndpointReady(ctx, addr, false)
	cancel()
	if err != nil {
		close(stop)
		<-done
		t.Fatalf("mark %s not ready: %v", addr, err)
	}
	time.Sleep(s.Timeouts.EndpointChange.D() / 2)
	close(stop)
	<-done
	c := counts[0]
	// Back: started and ready again, it is routed to.
	if err := m.Start(); err != nil {
		t.Fatalf("start %s again: %v", addr, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
	defer cancel()
	if err := s.SetEndpointReady(ctx, addr, true); err != nil {
		t.Fatalf("mark %s ready again: %v", addr, err)
	}
	r := s.Rand(t)
	harness.MustEventually(t, s, s.Timeouts.EndpointChange.D(), 1, func() error {
		for i := 0; i < 3*len(s.Endpoints()); i++ {
			res, err := s.Gateway.Do(context.Background(), &gateway.Request{Path: pathChat, Body: chatBody(s.ModelName, uniquePrompt(s, t, r, 4))})
			if err == nil && res.Status == http.StatusOK && res.Endpoint == addr {
				return nil
			}
		}
		return fmt.Errorf("%s, started and ready again, gets no request", addr)
	})
	t.Logf("model server %s stopped and marked not ready at %d req/s: %s; failures from %v to %v after it (bound endpointChange %v)",
		addr, disruptionRate, c, sinceOrZero(c.firstFail, down), sinceOrZero(c.lastFail, down), s.Timeouts.EndpointChange.D())
	if c.unanswered > 0 {
		t.Fatalf("requests never answered: %s", c)
	}
	if c.failed > 0 && c.lastFail.After(down.Add(s.Timeouts.EndpointChange.D())) {
		t.Fatalf("requests still failed %v after the model server went down (bound endpointChange %v): %s",
			c.lastFail.Sub(down), s.Timeouts.EndpointChange.D(), c)
	}
}

func sinceOrZero(t, from time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(from).Round(time.Millisecond)
}
