package conformance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// DataParallelIPPrefix is the loopback block of the pods of a data-parallel pool
// (Suite.StartDataParallelPool), apart from the main fleet's fleet.DefaultIPPrefix.
const DataParallelIPPrefix = "127.0.11."

// InstanceStarter is implemented by targets that can start another, independent instance of the
// same EPP (a command target: the same command template run again). Suite.StartDataParallelPool
// needs it: an InferencePool's targetPorts apply to every one of its Pods, so pods with
// data-parallel ranks need a pool, and an EPP, of their own.
type InstanceStarter interface {
	// NewInstance returns a new, not yet started target running the same EPP.
	NewInstance() Target
}

// NewInstance implements InstanceStarter: a CommandTarget with the same name and template.
func (c *CommandTarget) NewInstance() Target {
	return &CommandTarget{name: c.name, tmpl: c.tmpl, text: c.text}
}

// SidePoolSource is implemented by endpoint sources that can present a second pool to a second
// EPP while the first runs (static: another --endpoints list; apiserver: another InferencePool,
// with one targetPort per rank, in the same kube-apiserver).
type SidePoolSource interface {
	// StartSidePool makes a pool named name of addrs (ip:port; every IP with the same ports, one
	// per data-parallel rank) visible and returns what a target needs to find it. The pool lives
	// until the source stops.
	StartSidePool(ctx context.Context, name string, addrs []string) (Env, error)
}

// StartSidePool implements SidePoolSource: Env.Endpoints is addrs joined by commas.
func (s StaticSource) StartSidePool(ctx context.Context, _ string, addrs []string) (Env, error) {
	return s.Start(ctx, addrs)
}

// DataParallelPool is a second pool and EPP started by Suite.StartDataParallelPool: pods with
// several data-parallel ranks (rank r of a pod on rank 0's port + r, as `vllm serve
// --data-parallel-size`), told to a new instance of the target EPP by the run's endpoint source,
// and a strict fake gateway in front of that EPP. Everything stops in the test's Cleanup.
type DataParallelPool struct {
	// Fleet holds the pods; Fleet.Member(i).RankURLs() are pod i's ranks.
	Fleet *fleet.Fleet
	// Gateway is a strict fake gateway in front of the pool's EPP.
	Gateway *gateway.Gateway
	// Endpoints are every rank's ip:port, pod by pod, rank by rank.
	Endpoints []string
	// Ranks is the number of ranks per pod.
	Ranks int
	// TargetAddress is the pool EPP's ext_proc address.
	TargetAddress string
}

var sidePools atomic.Int64

// StartDataParallelPool starts pods fake vLLM pods with ranks data-parallel ranks each (2–8), a
// pool of them in the run's endpoint source (SidePoolSource), a new instance of the target EPP
// (InstanceStarter) with the run's config file, and a strict gateway, and waits until that EPP
// is ready. It skips the test (Skip) when the target or the source cannot do this (the address
// and cluster targets run one EPP for one pool) and fails it when anything else goes wrong.
// Without loopback aliases every pod shares 127.0.0.1, so pods is lowered to 1.
func (s *Suite) StartDataParallelPool(t TestingT, pods, ranks int) *DataParallelPool {
	t.Helper()
	is, ok := s.target.(InstanceStarter)
	if !ok {
		Skip(t, "the %s target runs one EPP for one pool; data-parallel ranks need a second pool (an InferencePool's targetPorts "+
			"apply to all its Pods) and a second EPP instance (run with --target reference or command)", s.TargetName)
	}
	sps, ok := s.source.(SidePoolSource)
	if !ok {
		Skip(t, "the %s endpoint source cannot present a second pool (use static or apiserver)", s.source.Name())
	}
	if ranks < 2 || ranks > 8 || pods < 1 {
		t.Fatalf("StartDataParallelPool(%d pods, %d ranks): want ≥ 1 pod and 2–8 ranks", pods, ranks)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.HarnessStart.D())
	defer cancel()
	n := sidePools.Add(1)
	dp := &DataParallelPool{Ranks: ranks}

	// Pods: rank ports must be free on each pod's IP; a free rank-0 port with a taken rank-r port
	// is retried with another.
	loopback := !s.cfg.DistinctPorts && fleet.LoopbackAliasesWork(DataParallelIPPrefix)
	if !loopback {
		pods = 1
	}
	base := vllm.DefaultConfig()
	base.Model = s.ModelName
	base.Seed = s.Seed + 1000
	base.EnableKVCache = true
	base.MaxNumSeqs = 16
	base.DPSize = ranks
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		dp.Fleet, err = fleet.Start(fleet.Options{Count: pods, Base: base, IPPrefix: DataParallelIPPrefix, DistinctPorts: !loopback,
			NamePrefix: fmt.Sprintf("conformance-dp%d-", n)})
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start %d fake vLLM pods with %d data-parallel ranks: %v", pods, ranks, err)
	}
	t.Cleanup(dp.Fleet.Close)
	if err := dp.Fleet.WaitHealthy(ctx); err != nil {
		t.Fatalf("data-parallel pods: %v", err)
	}
	for _, m := range dp.Fleet.Members() {
		for _, u := range m.RankURLs() {
			dp.Endpoints = append(dp.Endpoints, strings.TrimPrefix(u, "http://"))
		}
	}

	poolName := fmt.Sprintf("%s-dp%d", DefaultPoolName, n)
	env, err := sps.StartSidePool(ctx, poolName, dp.Endpoints)
	if err != nil {
		t.Fatalf("endpoint source %s: pool %s of %v: %v", s.source.Name(), poolName, dp.Endpoints, err)
	}

	target := is.NewInstance()
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatalf("free ports for the data-parallel pool's EPP: %v", err)
	}
	logDir := s.cfg.LogDir
	if logDir != "" {
		logDir = filepath.Join(logDir, "dataparallel-"+strconv.FormatInt(n, 10))
	}
	tenv := TargetEnv{Eppkit: s.cfg.Eppkit, Endpoints: env.Endpoints, GRPCPort: ports[0], HealthPort: ports[1], MetricsPort: ports[2],
		Kubeconfig: env.Kubeconfig, PoolName: env.PoolName, PoolNamespace: env.PoolNamespace, ConfigFile: s.cfg.ConfigFile,
		LogDir: logDir, Seed: s.Seed}
	if tenv.ConfigFile != "" {
		if abs, err := filepath.Abs(tenv.ConfigFile); err == nil {
			tenv.ConfigFile = abs
		}
	}
	addrs, err := target.Start(ctx, tenv)
	if err != nil {
		t.Fatalf("start a second %s EPP for the data-parallel pool: %v", target.Name(), err)
	}
	t.Cleanup(func() { _ = target.Stop(s.Timeouts.TargetStop.D()) })
	if err := WaitReady(ctx, target, addrs, ReadyProbe{ExtProc: s.TargetTLS, Health: s.HealthTLS}, s.ModelName, dp.Endpoints,
		s.Timeouts.TargetReady.D(), s.Timeouts.Poll.D()*4); err != nil {
		t.Fatalf("the data-parallel pool's EPP: %v", err)
	}
	dp.TargetAddress = addrs.GRPC
	dp.Gateway, err = gateway.New(gateway.Config{EPPAddress: addrs.GRPC, EPPTLS: s.TargetTLS, Mode: gateway.ModeStrict,
		Endpoints: dp.Endpoints, MessageTimeout: s.Timeouts.Request.D()})
	if err != nil {
		t.Fatalf("gateway for the data-parallel pool: %v", err)
	}
	t.Cleanup(func() { _ = dp.Gateway.Close() })
	return dp
}

// RankSuccesses reads vllm:request_success_total (summed over its labels) from every rank's
// GET /metrics, keyed by the rank's ip:port: what each rank itself says it served.
func (dp *DataParallelPool) RankSuccesses(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, ep := range dp.Endpoints {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ep+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("GET %s/metrics: %w", ep, err)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		_ = resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("GET %s/metrics: %w", ep, err)
		}
		sum, err := sumCounter(string(b), vllm.MetricRequestSuccess)
		if err != nil {
			return nil, fmt.Errorf("%s/metrics: %w", ep, err)
		}
		out[ep] = sum
	}
	return out, nil
}

// sumCounter sums the samples of metric (any labels) in Prometheus text exposition.
func sumCounter(text, metric string) (float64, error) {
	sum := 0.0
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(line, metric) {
			continue
		}
		rest := line[len(metric):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // another metric with this prefix
		}
		if rest[0] == '{' {
			rest = rest[strings.LastIndexByte(rest, '}')+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("malformed sample %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("sample %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// PodOf returns the name of the pod one of whose ranks listens on ep (ip:port), "" when none.
func (dp *DataParallelPool) PodOf(ep string) string {
	for _, m := range dp.Fleet.Members() {
		for _, u := range m.RankURLs() {
			if u == "http://"+ep {
				return m.Name
			}
		}
	}
	return ""
}
