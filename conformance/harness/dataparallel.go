package harness

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/internal/promscrape"
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

// SidePoolSource is implemented by endpoint sources that can present a second pool to a second
// EPP while the first runs (static: another --endpoints list; apiserver: another InferencePool,
// with one targetPort per rank, in the same kube-apiserver).
type SidePoolSource interface {
	// StartSidePool makes a pool named name of addrs (ip:port; every IP with the same ports, one
	// per data-parallel rank) visible and returns what a target needs to find it. The pool lives
	// until the source stops. A source with namespaces puts the pool in the namespace
	// SidePoolNamespace(name), so a caller can tell an EPP where to look before the pool exists.
	StartSidePool(ctx context.Context, name string, addrs []string) (Env, error)
}

// AppProtocolSidePoolSource is implemented by sources whose pools carry an application protocol
// (apiserver: the InferencePool's spec.appProtocol, GIE v1.5.0 api/v1). A source without it
// (static: the EPP is given addresses only) presents a FleetVariant.AppProtocol pool as any other.
type AppProtocolSidePoolSource interface {
	// StartSidePoolAppProtocol is StartSidePool with the pool's appProtocol set.
	StartSidePoolAppProtocol(ctx context.Context, name string, addrs []string, appProtocol string) (Env, error)
}

// SidePoolNamespace is the namespace of the side pool named name in a source with namespaces
// (apiserver): a namespace of its own, named after the pool, so the run's objects (objectives,
// rewrites) are written again there and no EPP sees another pool's Pods by namespace.
func SidePoolNamespace(name string) string { return name }

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
// (InstanceStarter) and a strict gateway, and waits until that EPP is ready. The instance gets
// every TargetEnv field the first one got, for its own pool and ports: {{.Endpoints}} or the
// pool's {{.Kubeconfig}}/{{.PoolName}}/{{.PoolNamespace}}, the run's {{.ConfigFile}},
// {{.ModelRewritesFile}} (static source), {{.Seed}}
// and the run's predictor sidecar as {{.PredictorURL}} (shared with the first instance). It skips the test (Skip) when the target or the source cannot do this (the address
// and cluster targets run one EPP for one pool) and fails it when anything else goes wrong.
// Without loopback aliases every pod shares 127.0.0.1, so pods is lowered to 1.
func (s *Suite) StartDataParallelPool(t TestingT, pods, ranks int) *DataParallelPool {
	t.Helper()
	if why := s.SidePoolUnsupported(); why != "" {
		Skip(t, "%s", why)
	}
	if ranks < 2 || ranks > 8 || pods < 1 {
		t.Fatalf("StartDataParallelPool(%d pods, %d ranks): want ≥ 1 pod and 2–8 ranks", pods, ranks)
	}
	base := s.sidePoolBase()
	base.Seed = s.Seed + 1000
	base.DPSize = ranks
	loopback := !s.cfg.DistinctPorts && fleet.LoopbackAliasesWork(DataParallelIPPrefix)
	if !loopback {
		pods = 1
	}
	sp := s.startSidePool(t, "dp", pods, base, nil, !loopback, "", false, "")
	dp := &DataParallelPool{Ranks: ranks, Fleet: sp.fleet, Gateway: sp.gateway, Endpoints: sp.endpoints, TargetAddress: sp.targetAddress}
	return dp
}

// SidePoolUnsupported returns why this run cannot start a second pool with its own EPP
// (StartDataParallelPool, StartVariantPool), or "" when it can: the target must be an
// InstanceStarter and the endpoint source a SidePoolSource.
func (s *Suite) SidePoolUnsupported() string {
	if _, ok := s.target.(InstanceStarter); !ok {
		return fmt.Sprintf("the %s target runs one EPP for one pool; a second pool (data-parallel ranks, or a fleet variant) needs "+
			"a second EPP instance (run with --target reference or command)", s.TargetName)
	}
	if s.source == nil {
		return "this suite is itself a side pool's; start side pools from the run's suite"
	}
	if _, ok := s.source.(SidePoolSource); !ok {
		return fmt.Sprintf("the %s endpoint source cannot present a second pool (use static or apiserver)", s.source.Name())
	}
	return ""
}

// FleetVariant is how the fake vLLM pods of a variant pool (Suite.StartVariantPool) differ from
// the run's fleet: vLLM's other metric-name generation, LoRA off, data-parallel engines behind
// one port (SPEC §7.1).
type FleetVariant struct {
	// Name labels the pool ("legacy-metrics"); lower case letters, digits and '-'.
	Name string
	// Pods is the number of pods (≥ 2).
	Pods int
	// Configure edits pod i's configuration after the harness's settings (model, seed, prefix
	// caching on, max-num-seqs 16, LoRA off).
	Configure func(i int, c *vllm.Config)
	// Config, when set, is the EndpointPickerConfig the variant's EPP gets as {{.ConfigFile}}
	// instead of the run's (written to a file that is removed in Cleanup): a feature that needs
	// an EPP configured otherwise than for the rest of the run (flow control).
	Config []byte
	// AppProtocol is the pool's appProtocol ("" = http): "kubernetes.io/h2c" makes the variant's
	// gateway forward over HTTP/2 with prior knowledge, and a source that describes pools
	// (AppProtocolSidePoolSource) writes it into the InferencePool. Not with SharedNamespace.
	AppProtocol string
	// SharedNamespace puts the variant's pool in the run's namespace, beside the run's pool, as
	// two InferencePools of one namespace are in a cluster, when the source can
	// (SharedNamespaceSidePoolSource; otherwise the pool gets SidePoolNamespace as usual): an EPP
	// that took every Pod of its namespace for its pool's then sees the other pool's Pods.
	SharedNamespace bool
}

// SharedNamespaceSidePoolSource is implemented by sources with namespaces that can also put a
// side pool in the run's own namespace (apiserver). The run's objects are already there.
type SharedNamespaceSidePoolSource interface {
	// StartSidePoolShared is StartSidePool with the pool in the run's namespace.
	StartSidePoolShared(ctx context.Context, name string, addrs []string) (Env, error)
}

// StartVariantPool starts v.Pods fake vLLM pods configured as v says, presents them as a second
// pool through the run's endpoint source, starts a new instance of the target EPP (the run's
// config file) for that pool and a strict gateway in front of it, waits until the EPP is ready,
// and returns a Suite for the pool: its Fleet, Gateway and TargetAddress are the variant's,
// everything else (timeouts, seed, model, TLS) the run's. The test must check
// SidePoolUnsupported first; StartVariantPool fails the test when the run cannot start a side
// pool, when loopback aliases do not work (the pods need distinct IPs with one port, as an
// InferencePool's pods) or when anything fails to start. Everything stops in the test's Cleanup.
func (s *Suite) StartVariantPool(t TestingT, v FleetVariant) *Suite {
	t.Helper()
	if why := s.SidePoolUnsupported(); why != "" {
		t.Fatalf("fleet variant %s: %s", v.Name, why)
	}
	if v.Pods < 2 {
		t.Fatalf("fleet variant %s: %d pods, want ≥ 2", v.Name, v.Pods)
	}
	if s.cfg.DistinctPorts || !fleet.LoopbackAliasesWork(DataParallelIPPrefix) {
		t.Fatalf("fleet variant %s: needs loopback aliases on %s0/24 (its pods share one port, as an InferencePool's)", v.Name, DataParallelIPPrefix)
	}
	base := s.sidePoolBase()
	base.Seed = s.Seed + 2000
	configFile := ""
	if len(v.Config) > 0 {
		f, err := os.CreateTemp("", "eppkit-"+v.Name+"-config-*.yaml")
		if err != nil {
			t.Fatalf("fleet variant %s: write its EPP config: %v", v.Name, err)
		}
		t.Cleanup(func() { _ = os.Remove(f.Name()) })
		_, err = f.Write(v.Config)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("fleet variant %s: write its EPP config: %v", v.Name, err)
		}
		configFile = f.Name()
	}
	if v.AppProtocol != "" && v.SharedNamespace {
		t.Fatalf("fleet variant %s: AppProtocol and SharedNamespace together are not supported", v.Name)
	}
	sp := s.startSidePool(t, v.Name, v.Pods, base, v.Configure, false, configFile, v.SharedNamespace, v.AppProtocol)
	child := &Suite{Timeouts: s.Timeouts, Seed: s.Seed, Gateway: sp.gateway, Fleet: sp.fleet, ModelName: s.ModelName,
		TargetAddress: sp.targetAddress, TargetTLS: s.TargetTLS, HealthAddress: sp.healthAddress, HealthTLS: s.HealthTLS,
		MetricsAddress: sp.metricsAddress, TargetName: s.TargetName + " (" + v.Name + " pool)", Source: sp.env,
		target: sp.target, targetStarted: true, Stalls: s.Stalls}
	child.cfg = s.cfg
	child.cfg.EndpointDial = nil
	child.LoRAAdapters = make([][]string, len(sp.fleet.Members()))
	for i, m := range sp.fleet.Members() {
		for _, l := range m.Config().LoraModules {
			child.LoRAAdapters[i] = append(child.LoRAAdapters[i], l.Name)
		}
	}
	return child
}

// sidePoolBase is the configuration every side pool's pods start from: the run's model, prefix
// caching on, 16 running slots, LoRA off.
func (s *Suite) sidePoolBase() vllm.Config {
	base := vllm.DefaultConfig()
	base.Model = s.ModelName
	base.EnableKVCache = true
	base.MaxNumSeqs = 16
	return base
}

// sidePool is what startSidePool started.
type sidePool struct {
	fleet                                        *fleet.Fleet
	gateway                                      *gateway.Gateway
	endpoints                                    []string
	target                                       Target
	targetAddress, healthAddress, metricsAddress string
	env                                          Env
}

// startSidePool starts pods pods of base (edited per pod by configure, when set) on
// DataParallelIPPrefix, a pool of every rank's ip:port in the run's SidePoolSource, a new
// target instance for it with the run's config file (configFile when not ""), and a strict gateway; it waits until the
// EPP is ready and registers every stop in t.Cleanup. distinct puts the pods on distinct ports
// of 127.0.0.1; shared asks for the run's namespace (FleetVariant.SharedNamespace); appProtocol is
// the pool's (FleetVariant.AppProtocol).
func (s *Suite) startSidePool(t TestingT, label string, pods int, base vllm.Config, configure func(int, *vllm.Config), distinct bool, configFile string, shared bool, appProtocol string) *sidePool {
	t.Helper()
	is := s.target.(InstanceStarter)
	sps := s.source.(SidePoolSource)
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.HarnessStart.D())
	defer cancel()
	n := sidePools.Add(1)
	sp := &sidePool{}

	// Pods: rank ports must be free on each pod's IP; a free rank-0 port with a taken rank-r port
	// is retried with another.
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		sp.fleet, err = fleet.Start(fleet.Options{Count: pods, Base: base, IPPrefix: DataParallelIPPrefix, DistinctPorts: distinct,
			NamePrefix: fmt.Sprintf("conformance-%s%d-", label, n), PerServer: configure})
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start %d fake vLLM pods for the %s pool: %v", pods, label, err)
	}
	t.Cleanup(sp.fleet.Close)
	if err := sp.fleet.WaitHealthy(ctx); err != nil {
		t.Fatalf("the %s pool's pods: %v", label, err)
	}
	for _, m := range sp.fleet.Members() {
		for _, u := range m.RankURLs() {
			sp.endpoints = append(sp.endpoints, strings.TrimPrefix(u, "http://"))
		}
	}

	poolName := fmt.Sprintf("%s-%s%d", DefaultPoolName, label, n)
	aps, describesProtocol := s.source.(AppProtocolSidePoolSource)
	if ss, ok := s.source.(SharedNamespaceSidePoolSource); ok && shared {
		sp.env, err = ss.StartSidePoolShared(ctx, poolName, sp.endpoints)
	} else if appProtocol != "" && describesProtocol {
		sp.env, err = aps.StartSidePoolAppProtocol(ctx, poolName, sp.endpoints, appProtocol)
	} else {
		sp.env, err = sps.StartSidePool(ctx, poolName, sp.endpoints)
	}
	if err != nil {
		t.Fatalf("endpoint source %s: pool %s of %v: %v", s.source.Name(), poolName, sp.endpoints, err)
	}

	target := is.NewInstance()
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatalf("free ports for the %s pool's EPP: %v", label, err)
	}
	logDir := s.cfg.LogDir
	if logDir != "" {
		logDir = filepath.Join(logDir, label+"-"+strconv.FormatInt(n, 10))
	}
	tenv := TargetEnv{Eppkit: s.cfg.Eppkit, Endpoints: sp.env.Endpoints, GRPCPort: ports[0], HealthPort: ports[1], MetricsPort: ports[2],
		Kubeconfig: sp.env.Kubeconfig, PoolName: sp.env.PoolName, PoolNamespace: sp.env.PoolNamespace, ConfigFile: s.cfg.ConfigFile,
		LogDir: logDir, Seed: s.Seed, PredictorURL: s.PredictorURL()}
	if configFile != "" {
		tenv.ConfigFile = configFile
	}
	if sp.env.Endpoints != "" {
		tenv.ModelRewritesFile = s.modelRewritesFile
	}
	if tenv.ConfigFile != "" {
		if abs, err := filepath.Abs(tenv.ConfigFile); err == nil {
			tenv.ConfigFile = abs
		}
	}
	addrs, err := target.Start(ctx, tenv)
	if err != nil {
		t.Fatalf("start a second %s EPP for the %s pool: %v", target.Name(), label, err)
	}
	t.Cleanup(func() { _ = target.Stop(s.Timeouts.TargetStop.D()) })
	// The run's readiness probe (--readiness-probe), so an EPP readied headers-only fails each
	// side-pool test on its own exchanges rather than at readiness.
	probe := ReadyProbe{ExtProc: s.TargetTLS, Health: s.HealthTLS, HeadersOnly: s.cfg.ReadinessHeadersOnly, Stalls: s.Stalls}
	if err := WaitReady(ctx, target, addrs, probe, s.ModelName, sp.endpoints,
		s.Timeouts.TargetReady.D(), s.Timeouts.Poll.D()*4); err != nil {
		t.Fatalf("the %s pool's EPP: %v", label, err)
	}
	sp.target, sp.targetAddress, sp.healthAddress, sp.metricsAddress = target, addrs.GRPC, addrs.Health, addrs.Metrics
	// Another instance of the same EPP program: it shares the run's stall watch, so a stream
	// the run found broken fails the side pool's requests as fast as the main pool's.
	log := s.cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sp.gateway, err = gateway.New(gateway.Config{EPPAddress: addrs.GRPC, EPPTLS: s.TargetTLS, Mode: gateway.ModeStrict,
		Endpoints: sp.endpoints, MessageTimeout: s.Timeouts.Request.D(), Stalls: s.Stalls, Logger: slog.New(errorsOnly{log.Handler()}),
		AppProtocol: appProtocol})
	if err != nil {
		t.Fatalf("gateway for the %s pool: %v", label, err)
	}
	t.Cleanup(func() { _ = sp.gateway.Close() })
	return sp
}

// RankSuccesses reads vllm:request_success_total (summed over its labels) from every rank's
// GET /metrics, keyed by the rank's ip:port: what each rank itself says it served.
func (dp *DataParallelPool) RankSuccesses(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, ep := range dp.Endpoints {
		fams, err := promscrape.Get(ctx, client, "http://"+ep+"/metrics")
		if err != nil {
			return nil, err
		}
		out[ep] = fams.Sum(vllm.MetricRequestSuccess)
	}
	return out, nil
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
