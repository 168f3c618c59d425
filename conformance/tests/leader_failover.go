package tests

import (
	"context"
	"fmt"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "LeaderFailover",
		Description: "When the leading replica of a pool's EPP shuts down (SIGTERM) or dies (SIGKILL), another replica becomes the " +
			"one SERVING readiness within the leaderFailover bound, and picks inside the pool at once (its datastore kept warm " +
			"while it followed).",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureHighAvailability},
		Preconditions: []string{
			"the run knows how to turn the EPP's leader election on (--leader-election-args; the reference target knows its own)",
			"the apiserver endpoint source, a target that starts replicas (command, reference)"},
		Source: "llm-d-router v0.10.0 test/e2e/e2e_test.go (leader election: failover after the leader pod is deleted); " +
			"cmd/epp/runner/runner.go (reconcilers run on non-leaders, haPopulateNonLeaderDatastore default true; the lease " +
			"released on cancel, pkg/epp/server/controller_manager.go LeaderElectionReleaseOnCancel)",
		EndpointSource: "apiserver",
		Run:            runLeaderFailover,
	})
}

func runLeaderFailover(t harness.TestingT, s *harness.Suite) {
	if why := s.ReplicasUnsupported(true); why != "" {
		harness.Skip(t, "%s", why)
	}
	rs := s.StartReplicas(t, haReplicas, true)
	leader := mustOneLeader(t, s, rs, s.Timeouts.TargetReady.D())
	r := s.Rand(t)
	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		old := rs.Members[leader]
		var err error
		if how == "SIGTERM" {
			err = old.Terminate()
		} else {
			err = old.Kill()
		}
		if err != nil {
			t.Fatalf("%s the leading replica %d: %v", how, leader, err)
		}
		start := time.Now()
		var next int
		harness.MustEventually(t, s, s.Timeouts.LeaderFailover.D(), 1, func() error {
			ready := rs.Serving(context.Background(), "readiness")
			if len(ready) != 1 || ready[0] == leader {
				return fmt.Errorf("after %s of the leader (replica %d), replicas SERVING readiness: %v; want one other (bound leaderFailover %v)",
					how, leader, ready, s.Timeouts.LeaderFailover.D())
			}
			next = ready[0]
			return nil
		})
		took := time.Since(start)
		// The new leader picks at once: its datastore was warm while it followed.
		c, err := extprocclient.Dial(rs.Members[next].GRPCAddress, s.TargetTLS)
		if err != nil {
			t.Fatalf("dial replica %d: %v", next, err)
		}
		c.MessageTimeout = s.Timeouts.Request.D()
		req := chatRequest(s, uniquePrompt(s, t, r, 8), nil)
		d, err := tryExchange(s, c, req)
		_ = c.Close()
		if err != nil {
			t.Fatalf("the new leader (replica %d) after %s of the old: %v", next, how, err)
		}
		mustRoute(t, s, d, req)
		t.Logf("%s of the leader (replica %d): replica %d SERVING readiness %v later (bound %v), and picked inside the pool at once",
			how, leader, next, took.Round(time.Millisecond), s.Timeouts.LeaderFailover.D())
		leader = next
	}
	mustOneLeader(t, s, rs, s.Timeouts.LeaderFailover.D())
}
