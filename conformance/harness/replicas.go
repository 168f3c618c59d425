package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/eppkit/eppkit/fakes/gateway"
)

// ArgsInstanceStarter is implemented by targets that can start another instance of the same EPP
// with extra command-line arguments (a command target: its template with the arguments
// appended). Suite.StartReplicas uses it to turn on the EPP's leader election.
type ArgsInstanceStarter interface {
	NewInstanceWithArgs(extra string) (Target, error)
}

// Signaller is implemented by targets that are processes the harness can signal without
// waiting: SIGTERM (a drain, as Kubernetes deletes a pod) or SIGKILL (a crash).
type Signaller interface {
	Signal(sig syscall.Signal) error
}

// LeaderElectionArgsProvider is implemented by targets that know how to turn their EPP's leader
// election on (the reference target: --ha-enable-leader-election); Config.LeaderElectionArgs,
// when set, takes precedence.
type LeaderElectionArgsProvider interface {
	LeaderElectionArgs() string
}

// ExtProcHealthService is the gRPC health service name of the ext_proc service (GIE proposal 004,
// Health Checking: "same criteria as readiness check").
const ExtProcHealthService = "envoy.service.ext_proc.v3.ExternalProcessor"

// LeaderElectionArgs returns the arguments that turn the target EPP's leader election on: the
// run's --leader-election-args, else what the target says (LeaderElectionArgsProvider), else "".
func (s *Suite) LeaderElectionArgs() string {
	if s.cfg.LeaderElectionArgs != "" {
		return s.cfg.LeaderElectionArgs
	}
	if p, ok := s.target.(LeaderElectionArgsProvider); ok {
		return p.LeaderElectionArgs()
	}
	return ""
}

// ReplicasUnsupported returns why this run cannot start replicas of the target EPP
// (StartReplicas), or "" when it can: the target must start instances with extra arguments and be
// a process the harness can signal, the source must present pools to new instances
// (SidePoolSource); with leaderElection the run must also know the EPP's leader election
// arguments and the EPP must discover from an API server, where the lease lives (apiserver).
func (s *Suite) ReplicasUnsupported(leaderElection bool) string {
	if why := s.SidePoolUnsupported(); why != "" {
		return why
	}
	if _, ok := s.target.(ArgsInstanceStarter); !ok {
		return fmt.Sprintf("the %s target cannot start replicas with extra arguments (use --target reference or command)", s.TargetName)
	}
	if leaderElection {
		if s.Source.Kubeconfig == "" {
			return fmt.Sprintf("leader election needs an API server for its lease, and the %s endpoint source has none "+
				"(use --endpoint-source apiserver)", s.source.Name())
		}
		if s.LeaderElectionArgs() == "" {
			return "the run does not know how to turn the EPP's leader election on: give --leader-election-args " +
				"(e.g. '--ha-enable-leader-election' for llm-d-router and the reference)"
		}
	}
	return ""
}

// Replica is one replica of the target EPP started by StartReplicas.
type Replica struct {
	// Index is the replica's place in Replicas.Members.
	Index int
	// GRPCAddress, HealthAddress and MetricsAddress are where it listens.
	GRPCAddress, HealthAddress, MetricsAddress string

	target Target
	health *grpc.ClientConn
	suite  *Suite
}

// Replicas are N replicas of the target EPP for one pool of the run's fleet, with or without
// their leader election (StartReplicas).
type Replicas struct {
	// PoolName is their pool (a pool of its own, so its lease is the test's).
	PoolName string
	// Endpoints are the pool's endpoints: the run's fleet.
	Endpoints []string
	// Members are the replicas in start order.
	Members []*Replica
}

var replicaSets atomic.Int64

// StartReplicas starts n replicas of the target EPP (the run's command, config file and seed,
// with the run's leader election arguments when leaderElection) for a new pool of the run's
// fleet in the run's endpoint source, and waits until each answers gRPC health (followers need
// not be ready). The test must check ReplicasUnsupported first; StartReplicas fails the test when
// anything fails to start. Every replica is stopped in the test's Cleanup.
func (s *Suite) StartReplicas(t TestingT, n int, leaderElection bool) *Replicas {
	t.Helper()
	if why := s.ReplicasUnsupported(leaderElection); why != "" {
		t.Fatalf("replicas of the EPP: %s", why)
	}
	if n < 1 {
		t.Fatalf("StartReplicas(%d): want ≥ 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.HarnessStart.D())
	defer cancel()
	set := replicaSets.Add(1)
	rs := &Replicas{PoolName: fmt.Sprintf("%s-ha%d", DefaultPoolName, set), Endpoints: s.Endpoints()}
	env, err := s.source.(SidePoolSource).StartSidePool(ctx, rs.PoolName, rs.Endpoints)
	if err != nil {
		t.Fatalf("endpoint source %s: pool %s of %v: %v", s.source.Name(), rs.PoolName, rs.Endpoints, err)
	}
	extra := ""
	if leaderElection {
		extra = s.LeaderElectionArgs()
	}
	for i := 0; i < n; i++ {
		target, err := s.target.(ArgsInstanceStarter).NewInstanceWithArgs(extra)
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		ports, err := FreePorts(3)
		if err != nil {
			t.Fatalf("free ports for replica %d: %v", i, err)
		}
		logDir := s.cfg.LogDir
		if logDir != "" {
			logDir = filepath.Join(logDir, fmt.Sprintf("replicas%d-%d", set, i))
		}
		tenv := TargetEnv{Eppkit: s.cfg.Eppkit, Endpoints: env.Endpoints, GRPCPort: ports[0], HealthPort: ports[1], MetricsPort: ports[2],
			Kubeconfig: env.Kubeconfig, PoolName: env.PoolName, PoolNamespace: env.PoolNamespace, ConfigFile: s.cfg.ConfigFile,
			LogDir: logDir, Seed: s.Seed, PredictorURL: s.PredictorURL()}
		if env.Endpoints != "" {
			tenv.ModelRewritesFile = s.modelRewritesFile
		}
		if tenv.ConfigFile != "" {
			if abs, err := filepath.Abs(tenv.ConfigFile); err == nil {
				tenv.ConfigFile = abs
			}
		}
		addrs, err := target.Start(ctx, tenv)
		if err != nil {
			t.Fatalf("start replica %d of the %s EPP: %v", i, target.Name(), err)
		}
		r := &Replica{Index: i, GRPCAddress: addrs.GRPC, HealthAddress: addrs.Health, MetricsAddress: addrs.Metrics, target: target, suite: s}
		if r.HealthAddress == "" {
			r.HealthAddress = r.GRPCAddress
		}
		t.Cleanup(func() { _ = target.Stop(s.Timeouts.TargetStop.D()) })
		if r.health, err = grpc.NewClient(r.HealthAddress, grpc.WithTransportCredentials(transportCreds(s.HealthTLS))); err != nil {
			t.Fatalf("replica %d: dial its health service at %s: %v", i, r.HealthAddress, err)
		}
		t.Cleanup(func() { _ = r.health.Close() })
		rs.Members = append(rs.Members, r)
	}
	// Every replica answers health (any status: a follower is not ready).
	for _, r := range rs.Members {
		err := pollUntil(ctx, s.Timeouts.TargetReady.D(), s.Timeouts.Poll.D()*4, func() error {
			if r.Exited() {
				return fmt.Errorf("replica %d exited: %v%s", r.Index, r.target.ExitErr(), logTail(r.target))
			}
			_, err := r.Health(context.Background(), "liveness")
			if err != nil {
				_, err = r.Health(context.Background(), ExtProcHealthService)
			}
			return err
		})
		if err != nil {
			t.Fatalf("replica %d of pool %s never answered gRPC health at %s: %v%s", r.Index, rs.PoolName, r.HealthAddress, err, logTail(r.target))
		}
	}
	return rs
}

func transportCreds(c *tls.Config) credentials.TransportCredentials {
	if c == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(c)
}

func logTail(t Target) string {
	if lt, ok := t.(LogTailer); ok {
		return fmt.Sprintf("\n--- last lines of %s ---\n%s", lt.LogPath(), lt.LogTail(15))
	}
	return ""
}

// pollUntil calls f every interval until it returns nil or d passes (its last error).
func pollUntil(ctx context.Context, d, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// Health asks the replica's gRPC health service about name, bounded by the poll interval × 4.
func (r *Replica) Health(ctx context.Context, name string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, r.suite.Timeouts.Poll.D()*4)
	defer cancel()
	resp, err := healthpb.NewHealthClient(r.health).Check(ctx, &healthpb.HealthCheckRequest{Service: name})
	return resp.GetStatus(), err
}

// Serving reports whether the replica answers SERVING for name.
func (r *Replica) Serving(ctx context.Context, name string) bool {
	st, err := r.Health(ctx, name)
	return err == nil && st == healthpb.HealthCheckResponse_SERVING
}

// Exited reports whether the replica's process has exited.
func (r *Replica) Exited() bool {
	ch := r.target.Exited()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// ExitedChan is closed once the replica's process has exited.
func (r *Replica) ExitedChan() <-chan struct{} { return r.target.Exited() }

// Kill ends the replica as a crash does (SIGKILL: no drain, a held lease is not released).
func (r *Replica) Kill() error { return r.target.(Signaller).Signal(syscall.SIGKILL) }

// Terminate asks the replica to shut down as Kubernetes does when it deletes a pod (SIGTERM) and
// returns at once.
func (r *Replica) Terminate() error { return r.target.(Signaller).Signal(syscall.SIGTERM) }

// LogTail is the end of the replica's log, for failure messages.
func (r *Replica) LogTail(n int) string {
	if lt, ok := r.target.(LogTailer); ok {
		return lt.LogTail(n)
	}
	return ""
}

// Gateway returns a strict fake gateway in front of the replica alone (FailClose), closed in
// t.Cleanup.
func (r *Replica) Gateway(t TestingT) *gateway.Gateway {
	t.Helper()
	gw, err := gateway.New(gateway.Config{EPPAddress: r.GRPCAddress, EPPTLS: r.suite.TargetTLS, Mode: gateway.ModeStrict,
		Endpoints: r.suite.Endpoints(), MessageTimeout: r.suite.Timeouts.Request.D(), Dial: r.suite.cfg.EndpointDial})
	if err != nil {
		t.Fatalf("gateway for replica %d: %v", r.Index, err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	return gw
}

// Serving returns the indexes of the running replicas answering SERVING for name.
func (rs *Replicas) Serving(ctx context.Context, name string) []int {
	var out []int
	for _, r := range rs.Members {
		if !r.Exited() && r.Serving(ctx, name) {
			out = append(out, r.Index)
		}
	}
	return out
}

// String names the replicas' addresses for messages.
func (rs *Replicas) String() string {
	s := rs.PoolName + ":"
	for _, r := range rs.Members {
		s += " " + strconv.Itoa(r.Index) + "=" + r.HealthAddress
	}
	return s
}
