// Package eppserver assembles and serves the reference EPP (`eppkit reference-epp`): the
// framework Runtime built from a config, the director over an endpoint source (discovery) and a
// metrics collector (data layer), the ext_proc gRPC service, the standard gRPC health service,
// and Prometheus metrics. Start returns once every listener is open; the server runs until its
// context ends and then shuts down gracefully.
package eppserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/extproc"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
)

// HealthServices are the gRPC health service names the server answers SERVING for once ready
// (SPEC §5.1): the overall server, the names upstream's deployments probe, and the ext_proc
// service. "liveness" is SERVING from the start; the others once discovery has synced, on the
// elected leader only when leader election is on, and never while draining (ha.go healthState).
var HealthServices = []string{"", "inference-extension", "readiness", extprocv3.ExternalProcessor_ServiceDesc.ServiceName}

// LivenessService is SERVING as soon as the server runs.
const LivenessService = "liveness"

// extprocStreamWorkers is the number of pooled goroutines serving ext_proc streams
// (grpc.NumStreamWorkers); streams beyond it get a goroutine of their own.
const extprocStreamWorkers = 32

// Discovery is what the server needs from the endpoint source (reference/discovery.Source).
type Discovery interface {
	director.EndpointSource
	// Start begins watching; it returns once set up and stops with ctx.
	Start(ctx context.Context) error
	// Synced reports whether the first full list was observed.
	Synced() bool
	// Subscribe registers fn, called serially after each change with the endpoints that came
	// and went.
	Subscribe(fn func(added, removed []*framework.EndpointMetadata))
}

// Collector is what the server needs from the data layer (reference/datalayer.Collector).
type Collector interface {
	director.MetricsSource
	// SetEndpoints replaces the set of endpoints to scrape.
	SetEndpoints(eps []*framework.EndpointMetadata)
	// Start runs the scrapers until ctx ends (it may return at once). A collector that also has
	// a Wait() method is waited for at shutdown.
	Start(ctx context.Context)
}

// EndpointRemover is implemented by plugins with per-endpoint state (the prefix producer, the
// legacy prefix scorer); the server calls RemoveEndpoint with the endpoint's key ("ip:port") when
// discovery reports that it left the pool.
type EndpointRemover interface {
	RemoveEndpoint(key string)
}

// Options configure the server. Discovery is required.
type Options struct {
	// Config is the EndpointPickerConfig; nil means framework.DefaultConfig().
	Config *framework.EndpointPickerConfig
	// Registry holds the plugin types; nil means a registry with plugins.RegisterAll.
	Registry *framework.Registry
	// Discovery is the endpoint source.
	Discovery Discovery
	// Collector is the metrics source; nil means no endpoint metrics.
	Collector Collector
	// ModelRewrites holds the pool's model rewrite rules (reference/modelrewrite.Store: from
	// --model-rewrites, or the InferenceModelRewrites discovery watches); nil means none.
	ModelRewrites director.ModelRewriter
	// GRPCAddr is the ext_proc listen address, e.g. ":9002" (port 0 picks a free port).
	GRPCAddr string
	// HealthAddr is the gRPC health listen address, e.g. ":9003"; "" serves health only on
	// GRPCAddr (it is served there too in any case).
	HealthAddr string
	// MetricsAddr is the Prometheus /metrics listen address, e.g. ":9090"; "" disables metrics.
	MetricsAddr string
	// TLS, when set, serves ext_proc and health over TLS (secure serving).
	TLS *tls.Config
	// Seed is the base seed of every random choice (Handle.Seed).
	Seed int64
	// Clock is the time source of the runtime and the director; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives every log; nil means slog.Default().
	Logger *slog.Logger
	// Leader, when set, is the replica's leader election (--ha-enable-leader-election): readiness
	// is SERVING only while it holds the lease. nil: the replica is always the leader.
	Leader Leader
	// DrainTimeout bounds the drain after the context ends (SIGTERM): requests in flight get
	// until then to finish (ha.go drain); 0 means DefaultDrainTimeout (30 s, upstream's).
	DrainTimeout time.Duration
	// DrainHandover is how long after the context ends new requests are still served before they
	// are refused with 503 rejected-shutting-down (0: refused at once). At most DrainTimeout.
	DrainHandover time.Duration
	// MetricsFilter, when set, wraps /metrics (--metrics-endpoint-auth).
	MetricsFilter MetricsFilter
	// EmitEndpointScores publishes envoy.lb / x-gateway-destination-endpoint-scores with every
	// pick (extproc.Server.SetEmitEndpointScores).
	EmitEndpointScores bool
	// MaxBufferedBodyBytes bounds the request-body bytes held over all ext_proc streams
	// (extproc.Server.SetMaxBufferedBodyBytes); 0 means extproc.DefaultMaxBufferedBodyBytes.
	MaxBufferedBodyBytes int64
}

// ConfigError is returned by Start when the runtime cannot be built from Options.Config (a
// plugin's parameters, profiles, the PrepareData DAG); Err names the plugin and the field.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Server is a running reference EPP.
type Server struct {
	opts     Options
	logger   *slog.Logger
	runtime  *framework.Runtime
	director *director.Director
	extproc  *extproc.Server
	health   *health.Server

	draining   atomic.Bool
	healthPoke chan struct{}

	grpcLis, healthLis, metricsLis net.Listener
	grpcSrv, healthSrv             *grpc.Server
	httpSrv                        *http.Server

	done chan struct{}
	err  error
}

// Start builds the runtime (a config error is a *ConfigError naming the plugin and field), starts
// discovery and the collector, opens the listeners and serves until ctx ends. Errors opening a
// listener or building anything are returned before anything is served.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Discovery == nil {
		return nil, errors.New("eppserver: Options.Discovery is required")
	}
	if opts.GRPCAddr == "" {
		return nil, errors.New("eppserver: Options.GRPCAddr is required")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	reg := opts.Registry
	if reg == nil {
		reg = framework.NewRegistry()
		plugins.RegisterAll(reg)
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.DrainHandover < 0 || opts.DrainHandover > opts.DrainTimeout {
		return nil, fmt.Errorf("eppserver: the drain handover (%v) must be between 0 and the drain timeout (%v)", opts.DrainHandover, opts.DrainTimeout)
	}
	s := &Server{opts: opts, logger: logger, done: make(chan struct{}), healthPoke: make(chan struct{}, 1)}

	var promReg *prometheus.Registry
	var obs *director.Observer
	if opts.MetricsAddr != "" {
		promReg = prometheus.NewRegistry()
		promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		var err error
		if obs, err = director.NewObserver(promReg); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}

	// Two lifetimes: stopCtx ends with ctx (SIGTERM) or a failed listener and starts the drain;
	// runCtx (discovery, metrics, plugins, health) outlives it until the drain is over, so the
	// requests still served during the drain see a live pool.
	stopCtx, stop := context.WithCancel(ctx)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ok := false
	defer func() {
		if !ok {
			stop()
			cancel()
		}
	}()
	rtOpts := framework.RuntimeOptions{Context: runCtx, Clock: opts.Clock, Seed: opts.Seed, Logger: logger,
		Endpoints: opts.Discovery.Endpoints}
	if obs != nil {
		rtOpts.ObservePlugin = obs.ObservePlugin
	}
	rt, err := framework.NewRuntime(opts.Config, reg, rtOpts)
	if err != nil {
		return nil, &ConfigError{Err: err}
	}
	s.runtime = rt
	dOpts := director.Options{Runtime: rt, Endpoints: opts.Discovery, Logger: logger, Observer: obs, ModelRewrites: opts.ModelRewrites,
		Context: runCtx}
	if opts.Clock != nil {
		dOpts.Clock = opts.Clock
	}
	if opts.Collector != nil {
		dOpts.Metrics = opts.Collector
	}
	if s.director, err = director.New(dOpts); err != nil {
		return nil, &ConfigError{Err: err}
	}
	if promReg != nil {
		if err := s.director.RegisterPoolCollectors(promReg); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}

	// Listeners first, so a busy port fails start-up before anything runs.
	if s.grpcLis, err = net.Listen("tcp", opts.GRPCAddr); err != nil {
		return nil, fmt.Errorf("--grpc-port: %w", err)
	}
	closeAll := func() {
		for _, l := range []net.Listener{s.grpcLis, s.healthLis, s.metricsLis} {
			if l != nil {
				_ = l.Close()
			}
		}
	}
	if opts.HealthAddr != "" {
		if s.healthLis, err = net.Listen("tcp", opts.HealthAddr); err != nil {
			closeAll()
			return nil, fmt.Errorf("--grpc-health-port: %w", err)
		}
	}
	if opts.MetricsAddr != "" {
		if s.metricsLis, err = net.Listen("tcp", opts.MetricsAddr); err != nil {
			closeAll()
			return nil, fmt.Errorf("--metrics-port: %w", err)
		}
	}

	// Endpoint changes: the collector follows the pool; plugins forget departed endpoints.
	opts.Discovery.Subscribe(func(added, removed []*framework.EndpointMetadata) {
		if opts.Collector != nil {
			opts.Collector.SetEndpoints(opts.Discovery.Endpoints())
		}
		for _, md := range removed {
			for _, p := range rt.Plugins() {
				if r, ok := p.(EndpointRemover); ok {
					r.RemoveEndpoint(md.Key())
				}
			}
		}
		if len(added)+len(removed) > 0 {
			logger.Info("pool changed", "added", keys(added), "removed", keys(removed), "ready", len(opts.Discovery.Endpoints()))
		}
	})
	if err := opts.Discovery.Start(runCtx); err != nil {
		closeAll()
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if opts.Collector != nil {
		opts.Collector.SetEndpoints(opts.Discovery.Endpoints())
		go opts.Collector.Start(runCtx)
	}
	rt.Start(runCtx)
	if opts.Leader != nil {
		// The election ends with stopCtx: a draining replica releases the lease at once.
		if err := opts.Leader.Start(stopCtx); err != nil {
			closeAll()
			return nil, err
		}
	}

	s.health = health.NewServer()
	s.health.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	for _, name := range HealthServices {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	var grpcOpts []grpc.ServerOption
	if opts.TLS != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	// Stream workers: an ext_proc stream runs on a pooled goroutine whose stack has already grown
	// to the decision path's depth, instead of a new goroutine that grows (copies) its stack on
	// every request; when all are busy (long-lived streams), grpc-go starts a goroutine as before.
	s.grpcSrv = grpc.NewServer(append(grpcOpts, grpc.NumStreamWorkers(extprocStreamWorkers))...)
	s.extproc = extproc.NewServer(s.director, logger)
	s.extproc.SetEmitEndpointScores(opts.EmitEndpointScores)
	maxBody := int64(extproc.DefaultMaxBufferedBodyBytes)
	if opts.MaxBufferedBodyBytes > 0 {
		maxBody = opts.MaxBufferedBodyBytes
	}
	s.extproc.SetMaxBufferedBodyBytes(maxBody)
	extprocv3.RegisterExternalProcessorServer(s.grpcSrv, s.extproc)
	healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	if s.healthLis != nil {
		s.healthSrv = grpc.NewServer(grpcOpts...)
		healthpb.RegisterHealthServer(s.healthSrv, s.health)
	}
	if s.metricsLis != nil {
		var h http.Handler = promhttp.HandlerFor(promReg, promhttp.HandlerOpts{})
		if err := s.registerStreamMetrics(promReg); err != nil {
			closeAll()
			return nil, fmt.Errorf("metrics: %w", err)
		}
		if opts.MetricsFilter != nil {
			if h, err = opts.MetricsFilter(h); err != nil {
				closeAll()
				return nil, fmt.Errorf("--metrics-endpoint-auth: %w", err)
			}
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", h)
		s.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	var failed atomic.Bool
	serve := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("%s: %w", name, err)
				failed.Store(true)
				stop()
			}
		}()
	}
	serve("ext_proc", func() error { return s.grpcSrv.Serve(s.grpcLis) })
	if s.healthSrv != nil {
		serve("health", func() error { return s.healthSrv.Serve(s.healthLis) })
	}
	if s.httpSrv != nil {
		serve("metrics", func() error { return s.httpSrv.Serve(s.metricsLis) })
	}
	go s.watchHealth(runCtx)
	logger.Info("reference EPP serving", "grpc", s.grpcLis.Addr().String(), "health", addrString(s.healthLis),
		"metrics", addrString(s.metricsLis), "tls", opts.TLS != nil, "profiles", rt.ProfileNames(),
		"maxBufferedBodyBytes", maxBody)

	go func() {
		<-stopCtx.Done()
		s.shutdown(s.drain(failed.Load()))
		if opts.Leader != nil {
			<-opts.Leader.Done() // the lease is released
		}
		cancel()
		wg.Wait()
		rt.Wait()
		if w, ok := opts.Collector.(interface{ Wait() }); ok {
			w.Wait() // the collector's scrapers have stopped with runCtx
		}
		close(errs)
		s.err = <-errs
		cancel()
		logger.Info("stopped")
		close(s.done)
	}()
	ok = true
	return s, nil
}

// shutdownGrace bounds how long shutdown lets the ext_proc streams still open end by
// themselves: a request that completed during the drain had its last answer queued, not yet
// written, and grpc.Server.Stop would drop it with the connection (the client then sees the
// response cut short before its end).
const shutdownGrace = 2 * time.Second

// shutdown stops every listener once the drain is over (ha.go drain). After a drain that left
// nothing in flight it stops accepting and lets the streams still open end within
// shutdownGrace (GracefulStop flushes what was sent), then closes what is left; after a drain
// that timed out it closes every stream at once, so no request outlives DrainTimeout.
func (s *Server) shutdown(cut bool) {
	if cut {
		s.grpcSrv.Stop()
	} else {
		done := make(chan struct{})
		go func() {
			s.grpcSrv.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(shutdownGrace):
			s.grpcSrv.Stop()
			<-done
		}
	}
	if s.healthSrv != nil {
		s.healthSrv.Stop()
	}
	if s.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.httpSrv.Shutdown(ctx)
	}
	s.logger.Info("listeners closed")
}

// Wait blocks until the server has shut down (its context ended, or a listener failed) and
// returns the first serving error, nil after a clean shutdown.
func (s *Server) Wait() error {
	<-s.done
	return s.err
}

// Done is closed once the server has shut down.
func (s *Server) Done() <-chan struct{} { return s.done }

// GRPCAddr is the ext_proc listener's address.
func (s *Server) GRPCAddr() net.Addr { return s.grpcLis.Addr() }

// HealthAddr is the health listener's address, nil when HealthAddr was "".
func (s *Server) HealthAddr() net.Addr { return addrOf(s.healthLis) }

// MetricsAddr is the metrics listener's address, nil when metrics are disabled.
func (s *Server) MetricsAddr() net.Addr { return addrOf(s.metricsLis) }

func addrOf(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}

func addrString(l net.Listener) string {
	if l == nil {
		return "off"
	}
	return l.Addr().String()
}

func keys(mds []*framework.EndpointMetadata) []string {
	out := make([]string, len(mds))
	for i, md := range mds {
		out[i] = md.Key()
	}
	return out
}
