package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/reference/datalayer"
	"github.com/eppkit/eppkit/reference/discovery"
	"github.com/eppkit/eppkit/reference/eppserver"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
	"github.com/eppkit/eppkit/reference/plugins/latency"
)

func init() { subcommands = append(subcommands, newReferenceEPPCommand) }

// referenceEPPFlags are the flags of `eppkit reference-epp` (WAVE2 contract; names follow
// upstream v1.5.0's EPP where it has them: gateway-api-inference-extension, pkg/epp/server/options.go).
type referenceEPPFlags struct {
	endpoints      string
	objectives     string
	poolName       string
	poolNamespace  string
	poolGroup      string
	kubeconfig     string
	grpcPort       int
	grpcHealthPort int
	metricsPort    int
	configFile     string
	configText     string
	secureServing  bool
	certPath       string
	refreshMetrics time.Duration
	staleThreshold time.Duration
	scrapeTimeout  time.Duration
	seed           int64
	logLevel       string
	bindAddress    string
	predictorURL   string
}

func newReferenceEPPCommand() *cobra.Command {
	f := &referenceEPPFlags{}
	cmd := &cobra.Command{
		Use:   "reference-epp (--endpoints IP:PORT,... | --pool-name NAME [--kubeconfig PATH])",
		Short: "Run eppkit's reference endpoint picker (an Envoy ext_proc server)",
		Long: `Run the reference EPP: an Envoy ext_proc v3 server (FULL_DUPLEX_STREAMED bodies) that picks an
endpoint of the pool for every request with the plugin framework and the config given by
--config-file or --config-text (default: queue-scorer 2, kv-cache-utilization-scorer 2,
prefix-cache-scorer 3, max-score-picker).

The pool comes from --endpoints (a static list; InferenceObjective priorities from --objectives
name=priority,...) or from an InferencePool watched through --kubeconfig (or the in-cluster
config). Endpoint metrics are scraped from http://IP:PORT/metrics every
--refresh-metrics-interval.

Serves gRPC health (standard grpc.health.v1; "", inference-extension, liveness, readiness and
envoy.service.ext_proc.v3.ExternalProcessor; readiness once discovery has synced) on
--grpc-health-port and on --grpc-port, and Prometheus metrics on --metrics-port (0 disables).
SIGINT/SIGTERM shut down gracefully.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runReferenceEPP(cmd, f) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.endpoints, "endpoints", "", "static pool: comma-separated ip:port of the model servers (excludes --pool-name)")
	fs.StringVar(&f.objectives, "objectives", "", "static InferenceObjective priorities: name=priority,... (priority < 0 = sheddable)")
	fs.StringVar(&f.poolName, "pool-name", "", "InferencePool to watch (Kubernetes discovery)")
	fs.StringVar(&f.poolNamespace, "pool-namespace", "default", "namespace of the InferencePool")
	fs.StringVar(&f.poolGroup, "pool-group", "inference.networking.k8s.io", "API group of the InferencePool (inference.networking.k8s.io or inference.networking.x-k8s.io)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for Kubernetes discovery (default: in-cluster config)")
	fs.IntVar(&f.grpcPort, "grpc-port", 9002, "ext_proc gRPC port")
	fs.IntVar(&f.grpcHealthPort, "grpc-health-port", 9003, "gRPC health port")
	fs.IntVar(&f.metricsPort, "metrics-port", 9090, "Prometheus /metrics port (0 disables)")
	fs.StringVar(&f.configFile, "config-file", "", "EndpointPickerConfig file (YAML or JSON)")
	fs.StringVar(&f.configText, "config-text", "", "EndpointPickerConfig text (YAML or JSON); excludes --config-file")
	fs.BoolVar(&f.secureServing, "secure-serving", false, "serve ext_proc and health over TLS (self-signed certificate unless --cert-path)")
	fs.StringVar(&f.certPath, "cert-path", "", "directory holding tls.crt and tls.key for --secure-serving")
	fs.DurationVar(&f.refreshMetrics, "refresh-metrics-interval", 50*time.Millisecond, "how often each endpoint's /metrics is scraped")
	fs.DurationVar(&f.staleThreshold, "stale-threshold", time.Second, "metrics older than this (or a failed scrape) make an endpoint stale")
	fs.DurationVar(&f.scrapeTimeout, "metrics-scrape-timeout", 0, "bound of one /metrics scrape (0: 10 refresh intervals, capped at --stale-threshold); a failed scrape makes the endpoint stale")
	fs.Int64Var(&f.seed, "seed", 0, "base seed of every random choice (pickers, exploration)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.bindAddress, "bind-address", "", "address the listeners bind to (default: all interfaces)")
	fs.StringVar(&f.predictorURL, "predictor-url", "", "base URL of an upstream-compatible latency predictor (eppkit predictor) that every predicted-latency-producer without predictionServerURLs uses instead of the in-process model")
	return cmd
}

// loadReferenceConfig returns the config of --config-file / --config-text, nil (the default)
// when neither is set. Errors name the flag and the field.
func loadReferenceConfig(f *referenceEPPFlags) (*framework.EndpointPickerConfig, error) {
	switch {
	case f.configFile != "" && f.configText != "":
		return nil, errors.New("--config-file and --config-text cannot both be set")
	case f.configFile != "":
		cfg, err := framework.LoadConfigFile(f.configFile)
		if err != nil {
			return nil, fmt.Errorf("--config-file %s: %w", f.configFile, err)
		}
		return cfg, nil
	case f.configText != "":
		cfg, err := framework.LoadConfig([]byte(f.configText))
		if err != nil {
			return nil, fmt.Errorf("--config-text: %w", err)
		}
		return cfg, nil
	}
	return nil, nil
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level: %q is not debug, info, warn or error", s)
	}
	return l, nil
}

func runReferenceEPP(cmd *cobra.Command, f *referenceEPPFlags) error {
	level, err := parseLogLevel(f.logLevel)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	for name, port := range map[string]int{"--grpc-port": f.grpcPort, "--grpc-health-port": f.grpcHealthPort, "--metrics-port": f.metricsPort} {
		if port < 0 || port > 65535 {
			return fmt.Errorf("%s: %d is not a port (0–65535)", name, port)
		}
	}
	if f.grpcPort == 0 {
		return errors.New("--grpc-port: must be set (1–65535)")
	}
	if f.predictorURL != "" {
		if u, err := url.Parse(f.predictorURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--predictor-url %q: want an absolute http(s) URL", f.predictorURL)
		}
	}
	if f.staleThreshold < f.refreshMetrics {
		// Metrics are at best one interval old when read; a shorter threshold marks every
		// endpoint stale forever.
		return fmt.Errorf("--stale-threshold must be ≥ --refresh-metrics-interval (got %v < %v)", f.staleThreshold, f.refreshMetrics)
	}
	cfg, err := loadReferenceConfig(f)
	if err != nil {
		return err
	}

	// SIGINT/SIGTERM, or the command's context (tests, embedding), end the server gracefully.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var src eppserver.Discovery
	switch {
	case f.endpoints != "" && f.poolName != "":
		return errors.New("--endpoints and --pool-name cannot both be set")
	case f.endpoints != "":
		objectives, err := discovery.ParseObjectives(f.objectives)
		if err != nil {
			return fmt.Errorf("--objectives: %w", err)
		}
		addrs := strings.Split(f.endpoints, ",")
		for i := range addrs {
			addrs[i] = strings.TrimSpace(addrs[i])
		}
		st, err := discovery.NewStatic(addrs, objectives)
		if err != nil {
			return fmt.Errorf("--endpoints: %w", err)
		}
		src = st
	case f.poolName != "":
		if f.objectives != "" {
			return errors.New("--objectives: only with --endpoints; with --pool-name priorities come from InferenceObjectives")
		}
		rc, err := discovery.RestConfig(f.kubeconfig)
		if err != nil {
			return fmt.Errorf("--kubeconfig: %w", err)
		}
		ip, err := discovery.NewInferencePool(discovery.PoolConfig{RestConfig: rc, Name: f.poolName, Namespace: f.poolNamespace,
			Group: f.poolGroup, Logger: logger})
		if err != nil {
			return fmt.Errorf("--pool-name: %w", err)
		}
		src = ip
	default:
		return errors.New("the pool is required: --endpoints ip:port,... or --pool-name NAME")
	}

	collector, err := datalayer.New(datalayer.Config{
		Interval: f.refreshMetrics, StaleThreshold: f.staleThreshold, Timeout: f.scrapeTimeout,
		Names: datalayer.DefaultMetricNames(), Logger: logger,
	})
	if err != nil {
		return fmt.Errorf("--refresh-metrics-interval/--stale-threshold/--metrics-scrape-timeout: %w", err)
	}

	var tlsCfg *tls.Config
	if f.secureServing {
		if f.certPath != "" {
			tlsCfg, err = eppserver.CertDirTLS(f.certPath)
		} else {
			tlsCfg, err = eppserver.SelfSignedTLS()
		}
		if err != nil {
			return err
		}
	} else if f.certPath != "" {
		return errors.New("--cert-path: only with --secure-serving")
	}

	if pa := os.Getenv("EPPKIT_PPROF_ADDR"); pa != "" {
		// Diagnostics: net/http/pprof (registered by fakevllm.go's import) on a separate
		// listener, e.g. EPPKIT_PPROF_ADDR=127.0.0.1:6061.
		go func() { logger.Warn("pprof server stopped", "err", http.ListenAndServe(pa, nil)) }()
	}
	addr := func(port int) string {
		if port == 0 {
			return ""
		}
		return net.JoinHostPort(f.bindAddress, strconv.Itoa(port))
	}
	var reg *framework.Registry
	if f.predictorURL != "" {
		reg = framework.NewRegistry()
		plugins.RegisterAllWithPredictor(reg, latency.SidecarPredictorFactory(f.predictorURL))
	}
	srv, err := eppserver.Start(ctx, eppserver.Options{
		Config: cfg, Registry: reg, Discovery: src, Collector: collector,
		GRPCAddr: addr(f.grpcPort), HealthAddr: addr(f.grpcHealthPort), MetricsAddr: addr(f.metricsPort),
		TLS: tlsCfg, Seed: f.seed, Logger: logger,
	})
	if cfgErr := (*eppserver.ConfigError)(nil); errors.As(err, &cfgErr) {
		switch {
		case f.configText != "":
			return fmt.Errorf("--config-text: %w", err)
		case f.configFile != "":
			return fmt.Errorf("--config-file %s: %w", f.configFile, err)
		}
	}
	if err != nil {
		return err
	}
	<-srv.Done()
	return srv.Wait()
}
