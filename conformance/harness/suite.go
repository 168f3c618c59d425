package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// Suite is the harness a test runs against: the fake vLLM fleet, the fake gateway in front of the
// target EPP, and what a test needs to isolate itself. One Suite serves every test of a run; tests
// must not change it except through its methods (which undo themselves in Cleanup).
type Suite struct {
	// Timeouts holds every wait (see TimeoutConfig).
	Timeouts TimeoutConfig
	// Seed is the run's seed; Rand derives each test's stream from it.
	Seed int64
	// Gateway is the fake gateway (strict mode) in front of the target: send requests through it
	// with s.Gateway.Do(ctx, &gateway.Request{...}); the Result names the endpoint that served.
	Gateway *gateway.Gateway
	// Fleet is the fake vLLM fleet behind the pool; nil when External serves it.
	Fleet *fleet.Fleet
	// External is the pool's model servers when the run uses an ExternalFleet
	// (Config.StartFleet, e.g. llm-d-inference-sim); nil with the fake fleet.
	External ExternalFleet
	// ModelName is the base model every fleet member serves.
	ModelName string
	// LoRAAdapters are the adapter names each member serves, indexed like Fleet.Members(); every
	// name is unique across the fleet.
	LoRAAdapters [][]string
	// TargetAddress is the target EPP's ext_proc gRPC address (host:port).
	TargetAddress string
	// TargetTLS is the TLS config to dial the target with; nil = plaintext.
	TargetTLS *tls.Config
	// HealthAddress is the target's gRPC health address (host:port); may equal TargetAddress.
	HealthAddress string
	// HealthTLS is the TLS config to dial HealthAddress with; nil = plaintext. It equals
	// TargetTLS unless the run set it apart (--target-health-tls).
	HealthTLS *tls.Config
	// MetricsAddress is the target's Prometheus address (host:port), "" when unknown.
	MetricsAddress string
	// TargetName names the target in messages ("reference", "command", "address").
	TargetName string
	// Source is the endpoint source's environment for this run.
	Source Env
	// Readiness is what the harness saw while it waited for the target (EPPReadyRoutes).
	Readiness *Readiness
	// Stalls is the run's stall watch, shared by the gateway and every ExtProc client: once the
	// target has left one ext_proc phase unanswered DefaultStallThreshold times in a row, later
	// waits for that phase last DefaultStallShort, so a run against an EPP whose stream is broken
	// fails each test within a second instead of its full request timeout.
	Stalls *extprocclient.StallWatch

	nonce    atomic.Uint64
	httpOnce sync.Once
	http     *http.Client

	cfg       Config // as Start ran with (defaults filled in)
	target    Target
	source    EndpointSource
	predictor *PredictorSidecar
	// modelRewritesFile is the {{.ModelRewritesFile}} the target was given ("" without one).
	modelRewritesFile string
	targetStarted     bool
	sourceStarted     bool
}

// Endpoints returns the pool's endpoint addresses (ip:port of each fleet member's rank 0), in
// member order.
func (s *Suite) Endpoints() []string {
	if s.External != nil {
		var out []string
		for _, m := range s.External.Members() {
			out = append(out, m.Addr)
		}
		return out
	}
	if s.Fleet == nil {
		return nil
	}
	out := make([]string, 0, len(s.Fleet.Members()))
	for _, m := range s.Fleet.Members() {
		out = append(out, m.Addr())
	}
	return out
}

// Rand returns a random stream for this test, derived from Seed and the test's name so that a
// test's draws do not depend on which other tests ran. Tests print s.Seed on failure.
func (s *Suite) Rand(t TestingT) *rand.Rand {
	h := fnv.New64a()
	_, _ = io.WriteString(h, t.Name())
	return rand.New(rand.NewPCG(uint64(s.Seed), h.Sum64()))
}

// Nonce returns a prefix unique to this call within the run (test name, seed and a counter), for
// prompts and cache_salt values that must not share prefix-cache state with other tests.
func (s *Suite) Nonce(t TestingT) string {
	n := s.nonce.Add(1)
	name := strings.Map(func(r rune) rune {
		if r == ' ' || r == '/' {
			return '-'
		}
		return r
	}, t.Name())
	return fmt.Sprintf("eppkit-%s-%d-%d", name, s.Seed, n)
}

func (s *Suite) httpClient() *http.Client {
	s.httpOnce.Do(func() {
		s.http = &http.Client{Timeout: s.Timeouts.Request.D()}
		if s.cfg.EndpointDial != nil {
			s.http.Transport = &http.Transport{DialContext: s.cfg.EndpointDial}
		}
	})
	return s.http
}

// member fails the test unless addr (ip:port) is a member of the pool.
func (s *Suite) member(t TestingT, addr string) {
	t.Helper()
	for _, a := range s.Endpoints() {
		if a == addr {
			return
		}
	}
	t.Fatalf("no fleet member at %s (pool: %v)", addr, s.Endpoints())
}

// PodAddr returns the ip:port of the model server whose pod name (its x-inference-pod response
// header) is name, and false when no member has that name.
func (s *Suite) PodAddr(name string) (string, bool) {
	if s.External != nil {
		for _, m := range s.External.Members() {
			if m.Name == name {
				return m.Addr, true
			}
		}
		return "", false
	}
	if s.Fleet == nil {
		return "", false
	}
	for _, m := range s.Fleet.Members() {
		if m.Name == name {
			return m.Addr(), true
		}
	}
	return "", false
}

// DistinctIPs reports whether every model server of the pool has its own IP (false when the fake
// fleet fell back to distinct ports on 127.0.0.1).
func (s *Suite) DistinctIPs() bool {
	if s.External != nil {
		return s.External.DistinctIPs()
	}
	return s.Fleet != nil && s.Fleet.Loopback()
}

// PinMetrics pins the metrics the fake at addr (ip:port) reports, through its admin API
// (POST /admin/config "fake-metrics"), and unpins them in t.Cleanup (null for the fakes, which
// then report their live load again; ExternalFleet.UnpinMetrics for an external fleet). It does
// not wait for the EPP to scrape them: use MustEventually or wait Timeouts.MetricsPropagation.
func (s *Suite) PinMetrics(t TestingT, addr string, m vllm.FakeMetrics) {
	t.Helper()
	s.member(t, addr)
	if err := s.postAdmin(addr, map[string]any{"fake-metrics": m}); err != nil {
		t.Fatalf("pin metrics on %s: %v", addr, err)
	}
	t.Cleanup(func() {
		var unpin any
		if s.External != nil {
			unpin = s.External.UnpinMetrics()
		}
		if err := s.postAdmin(addr, map[string]any{"fake-metrics": unpin}); err != nil {
			t.Errorf("unpin metrics on %s: %v", addr, err)
			return
		}
		// Leave the pool as found: the next test must not start while the EPP still routes on
		// the pinned values (seen in CI: TokenIDPrompts ran right after
		// StaleEndpointFiltered, whose pins made one endpoint the only idle one, and
		// its follow-ups all went there).
		if err := s.awaitScrapes(addr, 2); err != nil {
			t.Logf("after unpinning %s: %v", addr, err)
		}
	})
}

// awaitScrapes waits, at most Timeouts.MetricsPropagation, until the fake at addr has written n
// more /metrics pages than when it was called (GET /admin/metrics-scrapes), so that a scraper has
// fetched the fake's current values, and n-1 pages later has had the time of a scrape interval to
// store them. It returns an error when the bound passes (an EPP that does not scrape) or the fake
// cannot say (a fake without the path); the caller logs it and goes on.
func (s *Suite) awaitScrapes(addr string, n uint64) error {
	start, err := s.metricsScrapes(addr)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(s.Timeouts.MetricsPropagation.D())
	for {
		got, err := s.metricsScrapes(addr)
		if err != nil {
			return err
		}
		if got >= start+n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d /metrics scrapes within %v", got-start, n, s.Timeouts.MetricsPropagation.D())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metricsScrapes reads GET /admin/metrics-scrapes of the fake at addr.
func (s *Suite) metricsScrapes(addr string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/admin/metrics-scrapes", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /admin/metrics-scrapes: HTTP %d: %s", resp.StatusCode, rb)
	}
	var m vllm.MetricsScrapes
	if err := json.Unmarshal(rb, &m); err != nil {
		return 0, fmt.Errorf("GET /admin/metrics-scrapes: %w", err)
	}
	return m.Scrapes, nil
}

func (s *Suite) postAdmin(addr string, body map[string]any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/admin/config", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /admin/config: HTTP %d: %s", resp.StatusCode, rb)
	}
	return nil
}
