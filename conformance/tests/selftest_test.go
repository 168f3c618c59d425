package tests

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/endpointsource"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

// The self test runs the EPP-profile tests against a toy EPP built on the scripted ext_proc
// server (extproctest): a uniform random picker that follows GIE proposal 004, and mutants that
// each break one rule. Every test must pass the toy and fail each mutant aimed at it; that is
// the proof that the tests can fail. (The routing tests are proved against the reference EPP with
// random-picker config in suites/conformancecontrol.)

// toyEPP is a uniform random picker over the pool speaking the protocol; mutant names one rule
// it breaks ("" = none).
type toyEPP struct {
	mutant   string
	pool     atomic.Pointer[[]string]
	notReady sync.Map // addresses the source marked not ready
	started  time.Time
	mu       sync.Mutex
	rng      *rand.Rand
	srv      *extproctest.Server
	health   *grpc.Server
	hl       net.Listener
	exited   chan struct{}
}

// Mutants of toyEPP.
const (
	mutIgnoreSubset     = "ignore-subset"      // picks from the whole pool whatever the hint says
	mutExactPortSubset  = "exact-port-subset"  // matches the hint by ip:port, not by IP (what proposal 004 allows)
	mutRouteEmptySubset = "route-empty-subset" // treats an empty hint as no hint
	mutMetadataDiffers  = "metadata-differs"   // dynamic metadata names another endpoint than the header
	mutNoPick           = "no-pick"            // sets neither header nor metadata (after the first requests)
	mutOutsidePool      = "outside-pool"       // picks an address outside the pool now and then
	mutRejectServed     = "reject-served"      // answers response phases carrying the served endpoint with 500
	mutNoReadiness      = "no-readiness"       // health answers liveness only
	mutRouteForeignHint = "route-foreign-hint" // a hint matching nothing falls back to the whole pool
	mutIgnoreReadiness  = "ignore-readiness"   // keeps picking endpoints the source marked not ready
	mutEchoInputHeaders = "echo-input-headers" // sets the x-gateway-* input headers back onto the request
	mutOneBodyChunk     = "one-body-chunk"     // returns the request body in one chunk whatever its size
	mutNoBodyParsing    = "no-body-parsing"    // the toy never parses bodies; named so the table can say so
	mutNeedsBody        = "needs-body"         // refuses requests without a body with 400
	mutLatePick         = "late-pick"          // sets the pick (header and metadata) only on its last body response
	mutMetadataNoPort   = "metadata-no-port"   // the dynamic metadata carries the IP without the port (the header is right)
	mutBodyNotStreamed  = "body-not-streamed"  // answers the request headers, never the request body chunks
	mutServingEarly     = "serving-early"      // health SERVING at once, but refuses with 503 for its first 4 s (no endpoints yet)
)

// servingEarlyFor is how long the serving-early toy refuses requests after it started: twice the
// default servingGrace.
const servingEarlyFor = 4 * time.Second

// toySource is an endpoint source that can mark endpoints not ready, as the apiserver source
// does; the toy EPP it belongs to observes the change at once.
type toySource struct{ epp *toyEPP }

func (toySource) Name() string { return "toy" }
func (toySource) Start(_ context.Context, addrs []string) (harness.Env, error) {
	return harness.Env{Endpoints: strings.Join(addrs, ",")}, nil
}
func (ts toySource) SetReady(_ context.Context, addr string, ready bool) error {
	if ready {
		ts.epp.notReady.Delete(addr)
	} else {
		ts.epp.notReady.Store(addr, true)
	}
	return nil
}
func (toySource) Stop(context.Context) error { return nil }

func (e *toyEPP) Name() string { return "toy-" + e.mutant }

func (e *toyEPP) Start(_ context.Context, env harness.TargetEnv) (harness.TargetAddrs, error) {
	pool := strings.Split(env.Endpoints, ",")
	e.pool.Store(&pool)
	e.rng = rand.New(rand.NewPCG(1, 2))
	e.exited = make(chan struct{})
	e.started = time.Now()
	var err error
	e.srv, err = extproctest.Start(extproctest.Script{OnRequest: e.onRequest, OnResponseHeaders: e.onResponseHeaders})
	if err != nil {
		return harness.TargetAddrs{}, err
	}
	e.hl, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return harness.TargetAddrs{}, err
	}
	hs := health.NewServer()
	hs.SetServingStatus("liveness", healthpb.HealthCheckResponse_SERVING)
	if e.mutant != mutNoReadiness {
		hs.SetServingStatus("readiness", healthpb.HealthCheckResponse_SERVING)
		hs.SetServingStatus("envoy.service.ext_proc.v3.ExternalProcessor", healthpb.HealthCheckResponse_SERVING)
	}
	e.health = grpc.NewServer()
	healthpb.RegisterHealthServer(e.health, hs)
	go func() { _ = e.health.Serve(e.hl) }()
	return harness.TargetAddrs{GRPC: e.srv.Addr(), Health: e.hl.Addr().String()}, nil
}

func (e *toyEPP) Exited() <-chan struct{} { return e.exited }
func (e *toyEPP) ExitErr() error          { return nil }
func (e *toyEPP) Stop(time.Duration) error {
	e.srv.Stop()
	e.health.Stop()
	return nil
}

func (e *toyEPP) onRequest(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
	if e.mutant == mutNeedsBody && seen.HeadersEOS {
		return []*extprocv3.ProcessingResponse{extproctest.Immediate(http.StatusBadRequest, nil, []byte(`{"message":"no body"}`))}
	}
	if e.mutant == mutServingEarly && time.Since(e.started) < servingEarlyFor {
		return []*extprocv3.ProcessingResponse{extproctest.Immediate(http.StatusServiceUnavailable, nil, []byte(`{"message":"no endpoints known yet"}`))}
	}
	pool := *e.pool.Load()
	if e.mutant != mutIgnoreReadiness {
		pool = slices.DeleteFunc(slices.Clone(pool), func(a string) bool { _, out := e.notReady.Load(a); return out })
		if len(pool) == 0 {
			return []*extprocv3.ProcessingResponse{extproctest.Immediate(http.StatusServiceUnavailable, nil, []byte(`{"message":"no ready endpoint"}`))}
		}
	}
	cands := pool
	hint, present := extproctest.SubsetHint(seen.RequestMetadata)
	if present && e.mutant != mutIgnoreSubset && !(e.mutant == mutRouteEmptySubset && len(hint) == 0) {
		cands = nil
		for _, a := range pool {
			if slices.ContainsFunc(hint, func(h string) bool {
				if e.mutant == mutExactPortSubset {
					return h == a
				}
				return hostOf(h) == hostOf(a)
			}) {
				cands = append(cands, a)
			}
		}
		if len(cands) == 0 && e.mutant == mutRouteForeignHint && len(hint) > 0 {
			cands = pool
		}
		if len(cands) == 0 {
			return []*extprocv3.ProcessingResponse{extproctest.Immediate(http.StatusServiceUnavailable, nil, []byte(`{"message":"no eligible endpoint"}`))}
		}
	}
	e.mu.Lock()
	pick := cands[e.rng.IntN(len(cands))]
	n := e.rng.IntN(10)
	e.mu.Unlock()
	switch {
	case e.mutant == mutOutsidePool && n == 0:
		pick = "192.0.2.9:8000"
	case e.mutant == mutNoPick && n < 3:
		pick = ""
	}
	var extra map[string]string
	if e.mutant == mutEchoInputHeaders {
		extra = map[string]string{}
		for k, v := range seen.Headers {
			if strings.HasPrefix(k, "x-gateway-") {
				extra[k] = v
			}
		}
	}
	chunk := extprocclient.MaxStreamedChunk
	if e.mutant == mutOneBodyChunk {
		chunk = 0
	}
	out := extproctest.PickResponses(pick, extra, seen.Body, chunk, !seen.HeadersEOS)
	if e.mutant == mutLatePick && len(out) > 1 {
		last := out[len(out)-1].GetRequestBody().GetResponse()
		last.HeaderMutation = out[0].GetRequestHeaders().GetResponse().GetHeaderMutation()
		out[0].GetRequestHeaders().GetResponse().HeaderMutation = nil
		out[len(out)-1].DynamicMetadata, out[0].DynamicMetadata = out[0].DynamicMetadata, nil
	}
	if e.mutant == mutMetadataNoPort {
		out[0].DynamicMetadata = extproctest.PickResponses(hostOf(pick), nil, nil, 0, false)[0].DynamicMetadata
	}
	if e.mutant == mutBodyNotStreamed && !seen.HeadersEOS {
		out = out[:1]
	}
	if e.mutant == mutMetadataDiffers && n < 5 {
		out[0].DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
			"envoy.lb": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"x-gateway-destination-endpoint": structpb.NewStringValue(pool[(slices.Index(pool, pick)+1)%len(pool)]),
			}}),
		}}
	}
	return out
}

func (e *toyEPP) onResponseHeaders(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
	if e.mutant == mutRejectServed && extproctest.Served(seen.ResponseMetadata) != "" {
		return []*extprocv3.ProcessingResponse{extproctest.Immediate(http.StatusInternalServerError, nil, []byte(`{"message":"served?"}`))}
	}
	return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}}
}

// runAgainst starts a harness around the toy EPP with mutant and runs the named EPP-profile
// tests, returning each one's result. The endpoint source is static unless withReadiness, when
// it is a toySource that can mark endpoints not ready (so the readiness halves of the tests run).
func runAgainst(t *testing.T, mutant string, names ...string) map[string]conformance.TestResult {
	return runAgainstSource(t, mutant, false, names...)
}

func runAgainstSource(t *testing.T, mutant string, withReadiness bool, names ...string) map[string]conformance.TestResult {
	t.Helper()
	to := harness.DefaultTimeoutConfig()
	to.TestTimeout = harness.Duration(time.Minute)
	to.EndpointChange = harness.Duration(2 * time.Second)
	to.Request = harness.Duration(2 * time.Second)
	epp := &toyEPP{mutant: mutant}
	var source harness.EndpointSource = endpointsource.StaticSource{}
	if withReadiness {
		source = toySource{epp: epp}
	}
	s, err := harness.Start(context.Background(), harness.Config{
		Target: epp, Source: source, Seed: 7, Timeouts: to, FleetSize: 4,
	})
	if err != nil {
		t.Fatalf("StartHarness: %v", err)
	}
	defer s.Close()
	out := map[string]conformance.TestResult{}
	for _, name := range names {
		r := conformance.Runner{Suite: s, Selection: conformance.Selection{Profiles: conformance.Profiles,
			SupportedFeatures: conformance.AllFeatures, RunTest: name}}
		for _, res := range r.Run(conformance.All()) {
			if res.Test.ShortName == name {
				out[name] = res
			}
		}
		if _, ok := out[name]; !ok {
			t.Fatalf("test %s is not registered", name)
		}
	}
	return out
}

func TestEPPProfileAgainstToyEPP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet and a toy EPP")
	}
	var coreTests []string
	for _, ct := range conformance.All() {
		if ct.Profile == conformance.ProfileEPP {
			coreTests = append(coreTests, ct.ShortName)
		}
	}
	// The toy target starts one EPP for one pool: tests that need a second instance (a pool
	// created after the EPP started, a second pool) do not apply to it and skip, saying why; the
	// tests that need an endpoint source that marks endpoints not ready run in the readiness
	// subtest below.
	secondInstance := []string{"EPPReadinessFollowsSync", "EPPEndpointListScopedToPool", "EPPPoolFailoverScoped", "EPPReadinessOnlyOnLeader"}
	readinessTests := []string{"EPPPickIsReadyEndpoint", "EPPNoEligibleEndpoint503", "EPPSubsetHintIneligible503"}
	coreTests = slices.DeleteFunc(coreTests, func(n string) bool {
		return slices.Contains(secondInstance, n) || n == "EPPSubsetHintIneligible503"
	})
	eppTests := slices.Clone(coreTests)
	// The toy does not parse bodies, but it routes headers-only requests and leaves input
	// headers alone, so these OpenAIRequestParsing tests apply to it as well; it matches subset
	// hints by IP, as upstream v1.5.0 does.
	eppTests = append(eppTests, "OpenAIHeadersOnlyPick", "OpenAIInputHeadersNotEchoed", "OpenAILargeBodyChunked", "SubsetHintIPMatching")
	t.Run("compliant toy passes every test that applies to it", func(t *testing.T) {
		for name, res := range runAgainst(t, "", eppTests...) {
			if res.Outcome != conformance.Passed {
				t.Errorf("%s: %s against the compliant toy EPP:\n%s", name, res.Outcome, res.Log)
			}
		}
	})
	t.Run("tests needing a second EPP instance do not apply to the toy", func(t *testing.T) {
		for name, res := range runAgainst(t, "", secondInstance...) {
			if res.Outcome != conformance.Skipped || !strings.Contains(res.Message, "second") {
				t.Errorf("%s: %s against the toy target, want skipped for want of a second instance: %s", name, res.Outcome, res.Message)
			}
		}
	})
	t.Run("compliant toy passes the readiness halves", func(t *testing.T) {
		for name, res := range runAgainstSource(t, "", true, readinessTests...) {
			if res.Outcome != conformance.Passed || strings.Contains(res.Log, "half not run") {
				t.Errorf("%s: %s against the compliant toy EPP with a readiness source (the not-ready half must run):\n%s", name, res.Outcome, res.Log)
			}
		}
	})
	// An EPP that matches the hint by exact ip:port follows proposal 004: it passes the whole core
	// profile and fails only the upstream feature test.
	t.Run(mutExactPortSubset+" passes the EPP profile", func(t *testing.T) {
		for name, res := range runAgainst(t, mutExactPortSubset, coreTests...) {
			if res.Outcome != conformance.Passed {
				t.Errorf("%s: %s against the exact-address toy EPP, which follows proposal 004:\n%s", name, res.Outcome, res.Log)
			}
		}
	})
	t.Run(mutIgnoreReadiness, func(t *testing.T) {
		for name, res := range runAgainstSource(t, mutIgnoreReadiness, true, readinessTests...) {
			if res.Outcome != conformance.Failed {
				t.Errorf("%s passed against the %s mutant; it must fail. Log:\n%s", name, mutIgnoreReadiness, res.Log)
				continue
			}
			t.Logf("%s fails against %s as it must: %s", name, mutIgnoreReadiness, firstLineOf(res.Message))
		}
	})
	for _, tc := range []struct {
		mutant   string
		failing  []string // must fail
		wantText string   // in the failure message
	}{
		{mutIgnoreSubset, []string{"EPPSubsetHint", "EPPEmptySubset503", "EPPNoEligibleEndpoint503", "SubsetHintIPMatching"}, ""},
		{mutExactPortSubset, []string{"SubsetHintIPMatching"}, "refused a valid request"},
		{mutRouteEmptySubset, []string{"EPPEmptySubset503"}, "want ImmediateResponse 503"},
		{mutRouteForeignHint, []string{"EPPNoEligibleEndpoint503"}, "want ImmediateResponse 503"},
		{mutMetadataDiffers, []string{"EPPPickHeaderAndMetadata"}, "two different picks"},
		{mutNoPick, []string{"EPPPickHeaderAndMetadata", "EPPPickIsReadyEndpoint"}, "no pick"},
		{mutOutsidePool, []string{"EPPPickIsReadyEndpoint"}, "not a ready endpoint of the pool"},
		{mutRejectServed, []string{"EPPServedEndpointMetadata"}, "ImmediateResponse 500"},
		{mutNoReadiness, []string{"EPPHealth"}, "readiness"},
		{mutEchoInputHeaders, []string{"OpenAIInputHeadersNotEchoed"}, "set the input header"},
		{mutOneBodyChunk, []string{"OpenAILargeBodyChunked"}, "above the 62000-byte limit"},
		{mutNeedsBody, []string{"OpenAIHeadersOnlyPick"}, "refused a valid request"},
		{mutNoBodyParsing, []string{"OpenAIBadRequest400"}, "want ImmediateResponse 400"},
		{mutLatePick, []string{"EPPPickBeforeRouting"}, "reaches Envoy's router too late"},
		{mutMetadataNoPort, []string{"EPPPickHeaderAndMetadata"}, "has no port (an IP alone is not <ip:port>)"},
		{mutBodyNotStreamed, []string{"EPPStreamedBodiesIntact"}, "request_body chunks"},
		{mutServingEarly, []string{"EPPReadyRoutes"}, "readiness SERVING means"},
	} {
		t.Run(tc.mutant, func(t *testing.T) {
			for name, res := range runAgainst(t, tc.mutant, tc.failing...) {
				if res.Outcome != conformance.Failed {
					t.Errorf("%s passed against the %s mutant; it must fail. Log:\n%s", name, tc.mutant, res.Log)
					continue
				}
				if tc.wantText != "" && !strings.Contains(res.Message, tc.wantText) {
					t.Errorf("%s failed against %s with %q; want a message containing %q", name, tc.mutant, res.Message, tc.wantText)
				}
				t.Logf("%s fails against %s as it must: %s", name, tc.mutant, firstLineOf(res.Message))
			}
		})
	}
}

func firstLineOf(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
