package tests

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPReadinessOnlyOnLeader",
		Description: "With leader election on, of several synced replicas of the EPP for one pool exactly one — the elected leader — MUST " +
			"answer SERVING for readiness and envoy.service.ext_proc.v3.ExternalProcessor; every follower MUST answer NOT_SERVING for " +
			"both, while liveness is SERVING on every replica.",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{
			"the run knows how to turn the EPP's leader election on (--leader-election-args; the reference target knows its own); otherwise the test does not apply",
			"an endpoint source the EPP discovers the pool from (apiserver: the lease lives in the API server), and a target that starts replicas (command, reference)"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol) as of GIE v1.6.2, Health Checking (GIE PR #2514, " +
			"GIE v1.6.0): readiness \"Returns NOT_SERVING if the datastore has not synced or if the EPP is a follower\" and SERVING " +
			"\"if the EPP datastore has synced and the EPP is the elected leader\" (\"in multi-replica deployments\"); the ext_proc " +
			"service has the \"same criteria as readiness check\"; liveness \"Returns SERVING if the EPP process can respond\". " +
			"llm-d-router v0.10.0 test/e2e/e2e_test.go checks the same with 3 replicas (one Ready).",
		EndpointSource: "apiserver",
		Run:            runEPPReadinessOnlyOnLeader,
	})
}

// haReplicas is how many replicas the leader election tests start (llm-d-router's e2e test starts
// 3).
const haReplicas = 3

func runEPPReadinessOnlyOnLeader(t harness.TestingT, s *harness.Suite) {
	if why := s.ReplicasUnsupported(true); why != "" {
		harness.Skip(t, "%s", why)
	}
	rs := s.StartReplicas(t, haReplicas, true)
	leader := mustOneLeader(t, s, rs, s.Timeouts.TargetReady.D())
	t.Logf("%d replicas of pool %s: replica %d leads (readiness and the ext_proc service SERVING on it alone, %d checks in a row), liveness SERVING on all",
		len(rs.Members), rs.PoolName, leader, s.Timeouts.RequiredConsecutiveSuccesses)
}

// mustOneLeader waits at most bound until, RequiredConsecutiveSuccesses checks in a row, exactly
// one running replica is SERVING on readiness and the ext_proc service (the same one, on both),
// every other running replica NOT_SERVING, and liveness SERVING on all of them; it returns the
// leader's index.
func mustOneLeader(t harness.TestingT, s *harness.Suite, rs *harness.Replicas, bound time.Duration) int {
	t.Helper()
	leader := -1
	harness.MustEventually(t, s, bound, s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		ctx := context.Background()
		ready := rs.Serving(ctx, "readiness")
		extproc := rs.Serving(ctx, harness.ExtProcHealthService)
		if len(ready) != 1 || !slices.Equal(ready, extproc) {
			return fmt.Errorf("replicas SERVING readiness %v and %s %v; want exactly one, the same (%s)", ready, harness.ExtProcHealthService, extproc, rs)
		}
		for _, r := range rs.Members {
			if r.Exited() {
				continue
			}
			if st, err := r.Health(ctx, "liveness"); err != nil || st.String() != "SERVING" {
				return fmt.Errorf("replica %d answers liveness %v (%v); want SERVING on every replica, follower or not", r.Index, st, err)
			}
		}
		if prev := leader; prev != ready[0] {
			leader = ready[0]
			if prev != -1 {
				return fmt.Errorf("readiness moved from replica %d to %d", prev, leader)
			}
		}
		return nil
	})
	return leader
}
