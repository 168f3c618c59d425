package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/eppkit/eppkit/conformance"
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
	c.BlockSize = FrozenBlockSize
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
	Target conformance.Target
	Source conformance.EndpointSource
	// ConfigFile is the target's EndpointPickerConfig ("" = its default); Eppkit the eppkit binary.
	ConfigFile, Eppkit string
	// LogDir receives the target's log.
	LogDir string
	// Seed seeds the fakes.
	Seed int64
	// FleetSize, KVCacheSize (blocks per endpoint) and MaxModelLen default to the Default* constants.
	FleetSize, KVCacheSize, MaxModelLen int
	// FleetPort is the port every endpoint listens on (0 = a free one), so an EPP started outside
	// (the address target) can be told 127.0.10.1..N:FleetPort in advance.
	FleetPort int
	// Logger receives harness progress; nil discards.
	Logger *slog.Logger
}

// Env is a running benchmark environment: the conformance harness (fleet with the frozen
// profile, endpoint source, EPP, gateway) and the gateway served over HTTP.
type Env struct {
	// Suite is the harness.
	Suite *conformance.Suite
	// URL is the gateway's base URL.
	URL string
	// Adapters are every LoRA adapter name; every endpoint serves all of them.
	Adapters []string
	srv      *http.Server
}

// StartEnv starts the environment through conformance.StartHarness. Errors are the harness's
// (*conformance.HarnessError) or the HTTP listener's.
func StartEnv(ctx context.Context, cfg EnvConfig) (*Env, error) {
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
	adapters := AdapterNames(cfg.FleetSize)
	hc := conformance.HarnessConfig{Target: cfg.Target, Source: cfg.Source, Eppkit: cfg.Eppkit, ConfigFile: cfg.ConfigFile,
		LogDir: cfg.LogDir, Seed: cfg.Seed, FleetSize: cfg.FleetSize, FleetPort: cfg.FleetPort, Logger: cfg.Logger, NoTarget: cfg.Target == nil,
		FleetOverride: func(i int, c *vllm.Config) {
			FrozenProfile(c)
			c.KVCacheSize = cfg.KVCacheSize
			c.MaxModelLen = cfg.MaxModelLen
			c.MaxWaitingQueueLength = 10000
			// Histograms stay on: the fakes' own TTFT and queue-time histograms split the
			// client's TTFT into engine time and time outside the engines.
			c.GaugeOnly = false
			c.MaxRequestBodySizeMB = 64
			// Every endpoint serves every adapter (max-loras of them at once), so a LoRA request
			// can go anywhere and affinity only saves adapter slots.
			c.LoraModules = nil
			for _, a := range adapters {
				c.LoraModules = append(c.LoraModules, vllm.LoraModule{Name: a})
			}
			c.MaxCPULoras = len(adapters)
		}}
	hc.Timeouts = conformance.DefaultTimeoutConfig()
	hc.Timeouts.Request = conformance.Duration(2 * time.Minute)
	s, err := conformance.StartHarness(ctx, hc)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("gateway listener: %w", err)
	}
	e := &Env{Suite: s, URL: "http://" + ln.Addr().String(), Adapters: adapters,
		srv: &http.Server{Handler: s.Gateway, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && cfg.Logger != nil {
			cfg.Logger.Error("gateway HTTP server", "err", err)
		}
	}()
	return e, nil
}

// AdapterNames are the LoRA adapters of a bench fleet of n endpoints (the harness's names,
// conformance.DefaultAdaptersPerServer per endpoint).
func AdapterNames(n int) []string {
	var out []string
	for i := range n {
		for j := range conformance.DefaultAdaptersPerServer {
			out = append(out, fmt.Sprintf("conformance-lora-%d-%d", i, j))
		}
	}
	return out
}

// MetricsURLs maps each endpoint's pod name to its /metrics URL.
func (e *Env) MetricsURLs() map[string]string {
	out := map[string]string{}
	for _, m := range e.Suite.Fleet.Members() {
		out[m.Name] = m.URL() + "/metrics"
	}
	return out
}

// Close stops the HTTP server and the harness.
func (e *Env) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = e.srv.Shutdown(ctx)
	cancel()
	e.Suite.Close()
}
