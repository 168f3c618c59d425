package tests

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPReadinessFollowsSync",
		Description: "Before its datastore has synced (its InferencePool does not exist yet) the EPP MUST NOT answer SERVING for " +
			"readiness or envoy.service.ext_proc.v3.ExternalProcessor, while liveness, whenever it is answered, is SERVING; once " +
			"the pool exists, readiness and the ext_proc service MUST turn SERVING.",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{
			"an endpoint source the EPP discovers the pool from (apiserver), and a target that can start a second instance (command, reference); otherwise the test does not apply",
			"a single replica, or leader election off: a follower is never ready (that is the leader-election rule, not this one)"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol) as of GIE v1.6.2, Health Checking (GIE PR #2514, " +
			"GIE v1.6.0): readiness \"Returns NOT_SERVING if the datastore has not synced\"; the ext_proc service check has \"same " +
			"criteria as readiness check\"; liveness \"does not depend on datastore sync status\"",
		EndpointSource: "apiserver",
		Run:            runEPPReadinessFollowsSync,
	})
}

// beforeSyncWindow is how long the test watches health before it creates the pool, counted from
// the first health answer (or, when none comes, from the start of the instance).
const beforeSyncWindow = 4 * time.Second

func runEPPReadinessFollowsSync(t harness.TestingT, s *harness.Suite) {
	if why := s.PendingPoolUnsupported(); why != "" {
		harness.Skip(t, "%s", why)
	}
	p := s.StartPendingPoolEPP(t)
	creds := insecure.NewCredentials()
	if s.HealthTLS != nil {
		creds = credentials.NewTLS(s.HealthTLS)
	}
	conn, err := grpc.NewClient(p.HealthAddress, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatalf("dial the health service at %s: %v", p.HealthAddress, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	check := func(name string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Poll.D()*4)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		return resp.GetStatus(), err
	}

	// Before the pool exists: watch every name until beforeSyncWindow after the first answer
	// (or until the target's readiness timeout passes without one).
	start := time.Now()
	var firstAnswer time.Time
	answers := map[string]int{}
	for {
		now := time.Now()
		if !firstAnswer.IsZero() && now.Sub(firstAnswer) > beforeSyncWindow {
			break
		}
		if firstAnswer.IsZero() && now.Sub(start) > s.Timeouts.TargetReady.D() {
			break
		}
		for _, name := range requiredHealthServices {
			st, err := check(name)
			if err != nil {
				continue // not serving health yet, or the name is unknown: not SERVING either way
			}
			if firstAnswer.IsZero() {
				firstAnswer = time.Now()
			}
			answers[name]++
			switch {
			case name == "liveness" && st != healthpb.HealthCheckResponse_SERVING:
				t.Fatalf("before its pool %s exists the EPP answers health Check(%q) with %s: liveness does not depend on the datastore's sync, "+
					"it must be SERVING whenever the process answers", p.PoolName, name, st)
			case name != "liveness" && st == healthpb.HealthCheckResponse_SERVING:
				t.Fatalf("the EPP answers health Check(%q) with SERVING %v after it started, but its InferencePool %s does not exist yet: "+
					"its datastore cannot have synced", name, time.Since(start).Round(time.Millisecond), p.PoolName)
			}
		}
		time.Sleep(s.Timeouts.Poll.D())
	}
	if firstAnswer.IsZero() {
		t.Logf("the EPP served no health answer for %v while its pool did not exist (not SERVING, as required); liveness could not be checked",
			s.Timeouts.TargetReady.D())
	} else {
		t.Logf("before the pool existed, for %v: answers per name %v, none SERVING but liveness", beforeSyncWindow, answers)
	}

	// Create the pool: readiness and the ext_proc service must turn SERVING.
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
	err = p.CreatePool(ctx)
	cancel()
	if err != nil {
		t.Fatalf("create the InferencePool %s: %v", p.PoolName, err)
	}
	created := time.Now()
	for _, name := range requiredHealthServices {
		harness.MustEventually(t, s, s.Timeouts.EndpointChange.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
			st, err := check(name)
			if err != nil {
				return fmt.Errorf("health Check(%q) at %s after the pool %s was created: %w", name, p.HealthAddress, p.PoolName, err)
			}
			if st != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("health Check(%q) at %s after the pool %s was created: %s, want SERVING", name, p.HealthAddress, p.PoolName, st)
			}
			return nil
		})
	}
	t.Logf("readiness and the ext_proc service SERVING %v after the pool was created", time.Since(created).Round(time.Millisecond))
}
