package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
)

// PendingPoolEPP is a new instance of the target EPP started for an InferencePool that does not
// exist yet (Suite.StartPendingPoolEPP): what an EPP sees when it starts before its pool is
// created, or before its datastore has synced. CreatePool creates the pool.
type PendingPoolEPP struct {
	// PoolName is the pool the EPP was told to watch.
	PoolName string
	// GRPCAddress and HealthAddress are the instance's ext_proc and gRPC health addresses
	// (HealthAddress = GRPCAddress when the target serves health on its ext_proc port).
	GRPCAddress, HealthAddress string
	// Endpoints are the addresses CreatePool puts in the pool: the run's fleet.
	Endpoints []string

	suite *Suite
}

// PendingPoolUnsupported returns why this run cannot start an EPP for a pool that does not exist
// yet, or "" when it can: the target must start instances (InstanceStarter) and the endpoint
// source must be one whose pool the EPP discovers from an API server (apiserver) and that can
// add pools (SidePoolSource). With the static source the pool is the EPP's command line, so an
// EPP never runs without it.
func (s *Suite) PendingPoolUnsupported() string {
	if why := s.SidePoolUnsupported(); why != "" {
		return why
	}
	if s.Source.Kubeconfig == "" {
		return fmt.Sprintf("the %s endpoint source gives the EPP its endpoints at start, so the EPP never runs before its pool exists "+
			"(use --endpoint-source apiserver)", s.source.Name())
	}
	return ""
}

var pendingPools atomic.Int64

// StartPendingPoolEPP starts a new instance of the target EPP (the run's command, config file
// and seed) told to watch an InferencePool that does not exist yet, in the run's API server, in
// the namespace CreatePool will put it in (SidePoolNamespace). It does not wait for readiness:
// the EPP cannot be ready. The instance is stopped in the test's Cleanup. The test must check
// PendingPoolUnsupported first; StartPendingPoolEPP fails the test when the run cannot do this
// or the instance does not start.
func (s *Suite) StartPendingPoolEPP(t TestingT) *PendingPoolEPP {
	t.Helper()
	if why := s.PendingPoolUnsupported(); why != "" {
		t.Fatalf("an EPP for a pool that does not exist yet: %s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.HarnessStart.D())
	defer cancel()
	n := pendingPools.Add(1)
	p := &PendingPoolEPP{PoolName: fmt.Sprintf("%s-pending%d", DefaultPoolName, n), Endpoints: s.Endpoints(), suite: s}
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatalf("free ports for the pending pool's EPP: %v", err)
	}
	logDir := s.cfg.LogDir
	if logDir != "" {
		logDir = filepath.Join(logDir, "pending-"+strconv.FormatInt(n, 10))
	}
	tenv := TargetEnv{Eppkit: s.cfg.Eppkit, GRPCPort: ports[0], HealthPort: ports[1], MetricsPort: ports[2],
		Kubeconfig: s.Source.Kubeconfig, PoolName: p.PoolName, PoolNamespace: SidePoolNamespace(p.PoolName), ConfigFile: s.cfg.ConfigFile,
		LogDir: logDir, Seed: s.Seed, PredictorURL: s.PredictorURL()}
	if tenv.ConfigFile != "" {
		if abs, err := filepath.Abs(tenv.ConfigFile); err == nil {
			tenv.ConfigFile = abs
		}
	}
	target := s.target.(InstanceStarter).NewInstance()
	addrs, err := target.Start(ctx, tenv)
	if err != nil {
		t.Fatalf("start a second %s EPP for the pending pool %s: %v", target.Name(), p.PoolName, err)
	}
	t.Cleanup(func() { _ = target.Stop(s.Timeouts.TargetStop.D()) })
	p.GRPCAddress, p.HealthAddress = addrs.GRPC, addrs.Health
	if p.HealthAddress == "" {
		p.HealthAddress = addrs.GRPC
	}
	return p
}

// CreatePool creates the InferencePool the instance watches, with one Ready Pod per endpoint of
// the run's fleet.
func (p *PendingPoolEPP) CreatePool(ctx context.Context) error {
	sps := p.suite.source.(SidePoolSource)
	_, err := sps.StartSidePool(ctx, p.PoolName, p.Endpoints)
	return err
}
