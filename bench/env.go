package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// The frozen reference latency profile for benchmarks (SPEC §7: the simulator's "8B on H100,
// balanced" profile). Changing any of these changes every published eppkit bench number.
const (
	FrozenMaxNumSeqs          = 16
	FrozenPrefillOverhead     = 30 * time.Millisecond
	FrozenPrefillTimePerToken = 250 * time.Microsecond
	FrozenInterTokenLatency   = 12 * time.Millisecond
	FrozenInterTokenStdDev    = 2 * time.Millisecond
	FrozenTimeFactorUnderLoad = 2.0
	// FrozenBlockSize is the fake's KV block size in tokens (vLLM's default 16).
	FrozenBlockSize = 16
)

// Fleet sizing defaults of the benchmark (not part of SPEC §7's frozen profile; flags change them).
const (
	// DefaultFleetSize is the number of fake vLLM endpoints. Two endpoints of 16 slots saturate
	// under round-robin at about 25–30 req/s of the default shared-prefix workload, a rate the load
	// generator, gateway and fleet reach on a 2-core machine; 4 endpoints need over 40 req/s.
	DefaultFleetSize = 2
	// DefaultKVCacheSize is blocks per endpoint: 3,072 blocks of 16 tokens hold about 23 of the
	// default shared-prefix workload's 32 system prompts (2,048 tokens = 128 blocks each) beside
	// the running requests, so one endpoint cannot keep every group cached but the fleet of 2 can
	// when each group goes to one endpoint.
	DefaultKVCacheSize = 3072
	// DefaultMaxModelLen is the context window in tokens.
	DefaultMaxModelLen = 8192
)

// FrozenProfile sets SPEC §7's frozen latency profile on c: max-num-seqs 16, prefill overhead
// 30 ms, 250 µs per uncached prompt token, inter-token latency 12 ms (sd 2 ms), load factor 2.0,
// no fixed TTFT, no prefill jitter, prefix caching on with 16-token blocks.
func FrozenProfile(c *vllm.Config) {
	c.MaxNumSeqs = FrozenMaxNumSeqs
	c.Latency = vllm.Latency{
		PrefillOverhead:         vllm.Duration(FrozenPrefillOverhead),
		PrefillTimePerToken:     vllm.Duration(FrozenPrefillTimePerToken),
		InterTokenLatency:       vllm.Duration(FrozenInterTokenLatency),
		InterTokenLatencyStdDev: vllm.Duration(FrozenInterTokenStdDev),
		TimeFactorUnderLoad:     FrozenTimeFactorUnderLoad,
	}
	c.EnableKVCache = true
	// The bench reads prefix-cache hits from usage (prompt_tokens_details.cached_tokens), which
	// vLLM writes only with --enable-prompt-tokens-details.
	c.EnablePromptTokensDetails = true
	c.BlockSize = FrozenBlockSize
}

// SlowProfile applies SPEC §7's second frozen profile, `slow` (an older GPU generation, for
// heterogeneous fleets), on top of FrozenProfile: prefill overhead, per-token prefill time and
// inter-token latency doubled (60 ms, 500 µs per token, 24 ms); everything else as FrozenProfile.
func SlowProfile(c *vllm.Config) {
	FrozenProfile(c)
	c.Latency.PrefillOverhead *= 2
	c.Latency.PrefillTimePerToken *= 2
	c.Latency.InterTokenLatency *= 2
}

// FrozenLatencyModel is the oracle's view of FrozenProfile.
func FrozenLatencyModel() LatencyModel {
	return LatencyModel{PrefillOverhead: FrozenPrefillOverhead, PrefillTimePerToken: FrozenPrefillTimePerToken, BlockSize: FrozenBlockSize}
}

// EnvConfig configures StartEnv.
type EnvConfig struct {
	// Name labels the target in results ("round-robin", "reference", …).
	Name string
	// Target and Source start the EPP; a nil Target means no EPP: the gateway runs round-robin.
	Target harness.Target
	Source harness.EndpointSource
	// ConfigFile is the target's EndpointPickerConfig ("" = its default); Eppkit the eppkit binary.
	ConfigFile, Eppkit string
	// LogDir receives the target's log.
	LogDir string
	// Seed seeds the fakes.
	Seed int64
	// FleetSize, KVCacheSize (blocks per endpoint) and MaxModelLen default to the Default* constants.
	FleetSize, KVCacheSize, MaxModelLen int
	// Profiles are the endpoints' latency profiles, cycled over the fleet (ProfileOf; nil: all
	// ProfileDefault).
	Profiles []string
	// FleetPort is the port every endpoint listens on (0 = a free one), so an EPP started outside
	// (the address target) can be told 127.0.10.1..N:FleetPort in advance.
	FleetPort int
	// Logger receives harness progress; nil discards.
	Logger *slog.Logger
}

// Env is a running benchmark environment: the fake fleet (each endpoint with its profile), the gateway
// in front of it (the harness's, in strict mode before a target EPP, or a round-robin gateway
// without one), served over HTTP.
type Env struct {
	// Fleet is the fake vLLM fleet.
	Fleet *fleet.Fleet
	// Suite is the harness around the target EPP; nil for the round-robin baseline.
	Suite *harness.Suite
	// URL is the gateway's base URL.
	URL string
	// Adapters are every LoRA adapter name; every endpoint serves all of them.
	Adapters []string
	// Profiles maps each endpoint's pod name to its latency profile.
	Profiles map[string]string
	srv      *http.Server
	rr       *gateway.Gateway // the round-robin gateway when Suite is nil
}

// StartEnv starts the fleet (each endpoint with its latency profile and the bench's sizing),
// then either the harness around cfg.Target (harness.Start, with this fleet as its pool) or,
// without a target, a round-robin gateway, and serves the gateway over HTTP. Errors are the harness's
// (*harness.Error) or the fleet's, gateway's and listener's.
func StartEnv(ctx context.Context, cfg EnvConfig) (e *Env, err error) {
	if cfg.FleetSize == 0 {
		cfg.FleetSize = DefaultFleetSize
	}
	if cfg.KVCacheSize == 0 {
		cfg.KVCacheSize = DefaultKVCacheSize
	}
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = DefaultMaxModelLen
	}
	if need := (cfg.MaxModelLen + FrozenBlockSize - 1) / FrozenBlockSize; cfg.KVCacheSize < need {
		return nil, fmt.Errorf("--kv-cache-size %d blocks cannot hold one request of --max-model-len %d tokens (needs %d blocks)",
			cfg.KVCacheSize, cfg.MaxModelLen, need)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeouts := harness.DefaultTimeoutConfig()
	timeouts.Request = harness.Duration(2 * time.Minute)
	e = &Env{Adapters: AdapterNames(cfg.FleetSize)}
	defer func() {
		if err != nil {
			e.Close()
			e = nil
		}
	}()
	if e.Fleet, err = startFleet(ctx, cfg, e.Adapters, timeouts.HarnessStart.D(), log); err != nil {
		return e, &harness.Error{Stage: "fleet", Err: err}
	}
	e.Profiles = map[string]string{}
	for _, m := range e.Fleet.Members() {
		e.Profiles[m.Name] = ProfileOf(cfg.Profiles, m.Index)
	}
	handler := http.Handler(nil)
	if cfg.Target == nil {
		e.rr, err = gateway.New(gateway.Config{Mode: gateway.ModeRoundRobin, Endpoints: fleetAddrs(e.Fleet),
			MessageTimeout: timeouts.Request.D(), Logger: log})
		if err != nil {
			return e, &harness.Error{Stage: "gateway", Err: err}
		}
		handler = e.rr
	} else {
		e.Suite, err = harness.Start(ctx, harness.Config{Target: cfg.Target, Source: cfg.Source, Eppkit: cfg.Eppkit,
			ConfigFile: cfg.ConfigFile, LogDir: cfg.LogDir, Seed: cfg.Seed, FleetSize: cfg.FleetSize, Logger: cfg.Logger,
			Timeouts: timeouts, StartFleet: func(context.Context, harness.FleetSpec) (harness.ExternalFleet, error) {
				return benchFleet{e.Fleet}, nil
			}})
		if err != nil {
			return e, err
		}
		handler = e.Suite.Gateway
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return e, fmt.Errorf("gateway listener: %w", err)
	}
	e.URL = "http://" + ln.Addr().String()
	e.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && cfg.Logger != nil {
			cfg.Logger.Error("gateway HTTP server", "err", err)
		}
	}()
	return e, nil
}

// FakeConfig is the configuration of bench fleet member i: the harness's fleet settings (the
// conformance model, prefix caching, harness.DefaultAdaptersPerServer adapter slots, seed + i)
// with SPEC §7's frozen latency profile, kvCacheSize blocks, a maxModelLen context, a waiting
// queue of 10,000, histograms on, and every adapter of the fleet served. The fleet simulation
// (bench/sim) builds its engines from it, so a simulated endpoint is a bench fake.
func FakeConfig(i int, seed int64, kvCacheSize, maxModelLen int, adapters []string) vllm.Config {
	c := vllm.DefaultConfig()
	c.Model = harness.DefaultModelName
	c.Seed = seed + int64(i)
	c.EnableKVCache = true
	c.MaxLoras = harness.DefaultAdaptersPerServer
	FrozenProfile(&c)
	c.KVCacheSize = kvCacheSize
	c.MaxModelLen = maxModelLen
	c.MaxWaitingQueueLength = 10000
	// Histograms stay on: the fakes' own TTFT and queue-time histograms split the client's TTFT
	// into engine time and time outside the engines.
	c.GaugeOnly = false
	c.MaxRequestBodySizeMB = 64
	// Every endpoint serves every adapter (max-loras of them at once), so a LoRA request can go
	// anywhere and affinity only saves adapter slots.
	c.LoraModules = nil
	for _, a := range adapters {
		c.LoraModules = append(c.LoraModules, vllm.LoraModule{Name: a})
	}
	c.MaxCPULoras = len(adapters)
	return c
}

// startFleet starts the fake fleet of FakeConfig members, each with its latency profile
// (ApplyProfile), and waits until it is healthy.
func startFleet(ctx context.Context, cfg EnvConfig, adapters []string, timeout time.Duration, log *slog.Logger) (*fleet.Fleet, error) {
	base := FakeConfig(0, cfg.Seed, cfg.KVCacheSize, cfg.MaxModelLen, adapters)
	log.Info("starting fake vLLM fleet", "count", cfg.FleetSize, "model", base.Model,
		"profiles", ProfileSummary(ProfileCounts(cfg.Profiles, cfg.FleetSize)))
	f, err := fleet.Start(fleet.Options{Count: cfg.FleetSize, Base: base, Port: cfg.FleetPort, NamePrefix: "conformance-",
		// Members differ from FakeConfig(0, …) only in their seed and latency profile.
		PerServer: func(i int, c *vllm.Config) {
			c.Seed = cfg.Seed + int64(i)
			ApplyProfile(c, ProfileOf(cfg.Profiles, i))
		},
	})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := f.WaitHealthy(wctx); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func fleetAddrs(f *fleet.Fleet) []string {
	var out []string
	for _, m := range f.Members() {
		out = append(out, m.Addr())
	}
	return out
}

// benchFleet hands the bench's running fleet to the harness as its pool. The harness does not
// close it (Env.Close does, after the harness).
type benchFleet struct{ f *fleet.Fleet }

func (b benchFleet) Members() []harness.ExternalMember {
	var out []harness.ExternalMember
	for _, m := range b.f.Members() {
		out = append(out, harness.ExternalMember{Name: m.Name, Addr: m.Addr()})
	}
	return out
}
func (b benchFleet) DistinctIPs() bool { return b.f.Loopback() }
func (benchFleet) UnpinMetrics() any   { return nil }
func (benchFleet) Close()              {}

// AdapterNames are the LoRA adapters of a bench fleet of n endpoints (the harness's names,
// harness.DefaultAdaptersPerServer per endpoint).
func AdapterNames(n int) []string {
	var out []string
	for i := range n {
		for j := range harness.DefaultAdaptersPerServer {
			out = append(out, fmt.Sprintf("conformance-lora-%d-%d", i, j))
		}
	}
	return out
}

// MetricsURLs maps each endpoint's pod name to its /metrics URL.
func (e *Env) MetricsURLs() map[string]string {
	out := map[string]string{}
	for _, m := range e.Fleet.Members() {
		out[m.Name] = m.URL() + "/metrics"
	}
	return out
}

// Close stops the HTTP server, the harness or the round-robin gateway, and the fleet.
func (e *Env) Close() {
	if e.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = e.srv.Shutdown(ctx)
		cancel()
	}
	if e.Suite != nil {
		e.Suite.Close()
	}
	if e.rr != nil {
		_ = e.rr.Close()
	}
	if e.Fleet != nil {
		e.Fleet.Close()
	}
}
