package eppserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/eppkit/eppkit/reference/datalayer"
	"github.com/eppkit/eppkit/reference/discovery"
	"github.com/eppkit/eppkit/reference/extproc"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/modelrewrite"
	"github.com/eppkit/eppkit/reference/plugins"
	"github.com/eppkit/eppkit/reference/plugins/latency"
)

// Flags are the reference EPP's command-line flags (`eppkit reference-epp`). Their names follow
// the upstream EPP v1.5.0's where it has them (gateway-api-inference-extension,
// pkg/epp/server/options.go). AddFlags binds them with their defaults; Options turns them into
// the server's Options.
type Flags struct {
	// Endpoints is the static pool: comma-separated ip:port (--endpoints; excludes PoolName).
	Endpoints string
	// Objectives are static InferenceObjective priorities, name=priority,... (--objectives; only
	// with Endpoints).
	Objectives string
	// ModelRewrites is a YAML file of InferenceModelRewrite specs, the static pool's model
	// rewrite rules (--model-rewrites; only with Endpoints: with PoolName the rules come from the
	// pool's InferenceModelRewrites). SPEC §9.4; reference/modelrewrite.LoadFile.
	ModelRewrites string
	// PoolName, PoolNamespace and PoolGroup name the InferencePool to watch (--pool-name,
	// --pool-namespace, --pool-group); Kubeconfig reaches its API server (--kubeconfig; "" =
	// in-cluster config).
	PoolName, PoolNamespace, PoolGroup, Kubeconfig string
	// GRPCPort, GRPCHealthPort and MetricsPort are the listeners' ports (--grpc-port,
	// --grpc-health-port, --metrics-port; 0 disables the health and metrics listeners).
	GRPCPort, GRPCHealthPort, MetricsPort int
	// ConfigFile and ConfigText are the EndpointPickerConfig (--config-file, --config-text; at
	// most one; neither = the default config).
	ConfigFile, ConfigText string
	// SecureServing serves ext_proc and health over TLS (--secure-serving), with the tls.crt and
	// tls.key of CertPath (--cert-path) or a self-signed certificate.
	SecureServing bool
	CertPath      string
	// RefreshMetrics is the /metrics scrape interval (--refresh-metrics-interval), StaleThreshold
	// the age that makes an endpoint stale (--stale-threshold, ≥ RefreshMetrics), ScrapeTimeout
	// the bound of one scrape (--metrics-scrape-timeout; 0 = datalayer's default).
	RefreshMetrics, StaleThreshold, ScrapeTimeout time.Duration
	// Seed is the base seed of every random choice (--seed).
	Seed int64
	// LogLevel is debug, info, warn or error (--log-level).
	LogLevel string
	// BindAddress is the address the listeners bind to (--bind-address; "" = all interfaces).
	BindAddress string
	// PredictorURL is an upstream-compatible latency predictor's base URL (--predictor-url).
	PredictorURL string
	// HA is high availability: leader election, drain, metrics authentication (ha_flags.go).
	HA HAFlags
	// EmitEndpointScores publishes every candidate's score with the pick
	// (--emit-endpoint-scores; llm-d-router v0.10.0 pkg/epp/server/options.go).
	EmitEndpointScores bool
	// MaxBufferedBodyBytes bounds the request-body bytes held over all ext_proc streams
	// (--max-buffered-body-bytes; extproc.Server.SetMaxBufferedBodyBytes), > 0.
	MaxBufferedBodyBytes int64
}

// AddFlags binds f to fs with the reference EPP's flag names and defaults.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.Endpoints, "endpoints", "", "static pool: comma-separated ip:port of the model servers (excludes --pool-name)")
	fs.StringVar(&f.Objectives, "objectives", "", "static InferenceObjective priorities: name=priority,... (priority < 0 = sheddable)")
	fs.StringVar(&f.ModelRewrites, "model-rewrites", "", "static model rewrite rules: a YAML file of InferenceModelRewrite specs (rules: matches, weighted targets), documents separated by ---")
	fs.StringVar(&f.PoolName, "pool-name", "", "InferencePool to watch (Kubernetes discovery)")
	fs.StringVar(&f.PoolNamespace, "pool-namespace", "default", "namespace of the InferencePool")
	fs.StringVar(&f.PoolGroup, "pool-group", "inference.networking.k8s.io", "API group of the InferencePool (inference.networking.k8s.io or inference.networking.x-k8s.io)")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig for Kubernetes discovery (default: in-cluster config)")
	fs.IntVar(&f.GRPCPort, "grpc-port", 9002, "ext_proc gRPC port")
	fs.IntVar(&f.GRPCHealthPort, "grpc-health-port", 9003, "gRPC health port")
	fs.IntVar(&f.MetricsPort, "metrics-port", 9090, "Prometheus /metrics port (0 disables)")
	fs.StringVar(&f.ConfigFile, "config-file", "", "EndpointPickerConfig file (YAML or JSON)")
	fs.StringVar(&f.ConfigText, "config-text", "", "EndpointPickerConfig text (YAML or JSON); excludes --config-file")
	fs.BoolVar(&f.SecureServing, "secure-serving", false, "serve ext_proc and health over TLS (self-signed certificate unless --cert-path)")
	fs.StringVar(&f.CertPath, "cert-path", "", "directory holding tls.crt and tls.key for --secure-serving")
	fs.DurationVar(&f.RefreshMetrics, "refresh-metrics-interval", 50*time.Millisecond, "how often each endpoint's /metrics is scraped")
	fs.DurationVar(&f.StaleThreshold, "stale-threshold", time.Second, "metrics older than this (or a failed scrape) make an endpoint stale")
	fs.DurationVar(&f.ScrapeTimeout, "metrics-scrape-timeout", 0, "bound of one /metrics scrape (0: 10 refresh intervals, capped at --stale-threshold); a failed scrape makes the endpoint stale")
	fs.Int64Var(&f.Seed, "seed", 0, "base seed of every random choice (pickers, exploration)")
	fs.StringVar(&f.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.BindAddress, "bind-address", "", "address the listeners bind to (default: all interfaces)")
	f.HA.AddFlags(fs)
	fs.BoolVar(&f.EmitEndpointScores, "emit-endpoint-scores", false, "publish envoy.lb/x-gateway-destination-endpoint-scores (every candidate's score in the primary profile) with each pick, as llm-d-router v0.10.0's flag")
	f.MaxBufferedBodyBytes = extproc.DefaultMaxBufferedBodyBytes
	fs.Var(byteQuantity{&f.MaxBufferedBodyBytes}, "max-buffered-body-bytes", "bound of the request-body bytes held at once over every ext_proc stream (received, not yet sent back), a byte count or quantity (536870912, 512Mi, 1Gi); a request that would pass it is refused with 429, a body longer than it with 400")
	fs.StringVar(&f.PredictorURL, "predictor-url", "", "base URL of an upstream-compatible latency predictor (eppkit predictor) that every predicted-latency-producer without predictionServerURLs uses instead of the in-process model")
}

// byteQuantity is an int64 flag of bytes written as a plain number or a Kubernetes quantity
// (536870912, 512Mi, 1Gi, 500M; k8s.io/apimachinery resource.ParseQuantity, as llm-d-router
// v0.10.0's flowControl.maxBytes): a plain number is decimal, so a leading zero does not make it
// octal as pflag's Int64Var would. The forms are Kubernetes' (a decimal suffix k, M, G, T, P, E, a
// binary one Ki … Ei, an exponent 1e3); a fraction of a byte (1.5, 100m) or more than
// maxByteQuantity is refused, each with its own message.
type byteQuantity struct{ v *int64 }

// maxByteQuantity is the largest byteQuantity: 18 digits, all that resource.Quantity.AsInt64
// converts (it refuses some 19-digit values an int64 could hold).
var maxByteQuantity = resource.MustParse("999999999999999999")

func (q byteQuantity) String() string {
	if q.v == nil {
		return ""
	}
	return resource.NewQuantity(*q.v, resource.BinarySI).String()
}

func (q byteQuantity) Set(s string) error {
	qty, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("want a byte count such as 536870912 or 512Mi, got %q", s)
	}
	n, ok := qty.AsInt64()
	switch {
	case ok:
	case qty.Cmp(maxByteQuantity) > 0:
		return fmt.Errorf("want at most %s bytes (18 digits), got %q", maxByteQuantity.String(), s)
	default: // up to 18 digits, AsInt64 refuses only a fraction (100m, 1.5, 1.5Ki)
		return fmt.Errorf("want a whole number of bytes, got %q, a fraction of a byte", s)
	}
	*q.v = n
	return nil
}

func (q byteQuantity) Type() string { return "bytes" }

// Logger returns a JSON logger to w at f.LogLevel; the error names --log-level.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not debug, info, warn or error", f.LogLevel)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// Options validates f and builds the server's Options, logging to logger. pool is the
// InferencePool discovery config (nil with Endpoints). Every error names the flag at fault: the
// port ranges, the pool (exactly one of --endpoints and --pool-name), the config (the file's or
// text's field), the scrape timings, TLS and the predictor URL. Nothing is served yet.
func (f *Flags) Options(logger *slog.Logger) (opts Options, pool *discovery.PoolConfig, err error) {
	for _, p := range []struct {
		name string
		port int
	}{{"--grpc-port", f.GRPCPort}, {"--grpc-health-port", f.GRPCHealthPort}, {"--metrics-port", f.MetricsPort}} {
		if p.port < 0 || p.port > 65535 {
			return Options{}, nil, fmt.Errorf("%s: %d is not a port (0–65535)", p.name, p.port)
		}
	}
	if f.GRPCPort == 0 {
		return Options{}, nil, errors.New("--grpc-port: must be set (1–65535)")
	}
	if f.MaxBufferedBodyBytes <= 0 {
		return Options{}, nil, fmt.Errorf("--max-buffered-body-bytes: must be > 0 bytes, got %d", f.MaxBufferedBodyBytes)
	}
	if f.PredictorURL != "" {
		if u, err := url.Parse(f.PredictorURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Options{}, nil, fmt.Errorf("--predictor-url %q: want an absolute http(s) URL", f.PredictorURL)
		}
	}
	if f.StaleThreshold < f.RefreshMetrics {
		// Metrics are at best one interval old when read; a shorter threshold marks every
		// endpoint stale forever.
		return Options{}, nil, fmt.Errorf("--stale-threshold must be ≥ --refresh-metrics-interval (got %v < %v)", f.StaleThreshold, f.RefreshMetrics)
	}
	cfg, err := f.config()
	if err != nil {
		return Options{}, nil, err
	}
	src, pool, rewrites, err := f.discovery(logger)
	if err != nil {
		return Options{}, nil, err
	}
	collector, err := datalayer.New(f.MetricsConfig(logger))
	if err != nil {
		return Options{}, nil, fmt.Errorf("--refresh-metrics-interval/--stale-threshold/--metrics-scrape-timeout: %w", err)
	}
	var tlsCfg *tls.Config
	switch {
	case f.SecureServing && f.CertPath != "":
		tlsCfg, err = CertDirTLS(f.CertPath)
	case f.SecureServing:
		tlsCfg, err = SelfSignedTLS()
	case f.CertPath != "":
		err = errors.New("--cert-path: only with --secure-serving")
	}
	if err != nil {
		return Options{}, nil, err
	}
	addr := func(port int) string {
		if port == 0 {
			return ""
		}
		return net.JoinHostPort(f.BindAddress, strconv.Itoa(port))
	}
	var reg *framework.Registry
	if f.PredictorURL != "" {
		reg = framework.NewRegistry()
		plugins.RegisterAllWithPredictor(reg, latency.SidecarPredictorFactory(f.PredictorURL))
	}
	opts = Options{
		Config: cfg, Registry: reg, Discovery: src, Collector: collector,
		GRPCAddr: addr(f.GRPCPort), HealthAddr: addr(f.GRPCHealthPort), MetricsAddr: addr(f.MetricsPort),
		TLS: tlsCfg, Seed: f.Seed, Logger: logger, EmitEndpointScores: f.EmitEndpointScores,
		MaxBufferedBodyBytes: f.MaxBufferedBodyBytes,
	}
	if rewrites != nil {
		opts.ModelRewrites = rewrites
	}
	if err := f.HA.apply(&opts, pool, logger); err != nil {
		return Options{}, nil, err
	}
	return opts, pool, nil
}

// MetricsConfig is the configuration of the metrics collector Options builds: the scrape
// interval, stale threshold and timeout of the flags, upstream vLLM's metric names
// (datalayer.DefaultMetricNames) and logger.
func (f *Flags) MetricsConfig(logger *slog.Logger) datalayer.Config {
	return datalayer.Config{
		Interval: f.RefreshMetrics, StaleThreshold: f.StaleThreshold, Timeout: f.ScrapeTimeout,
		Names: datalayer.DefaultMetricNames(), Logger: logger,
	}
}

// StartError names the config flag in an error of Start whose cause is the config (a
// ConfigError); other errors are returned as they are.
func (f *Flags) StartError(err error) error {
	if cfgErr := (*ConfigError)(nil); errors.As(err, &cfgErr) {
		switch {
		case f.ConfigText != "":
			return fmt.Errorf("--config-text: %w", err)
		case f.ConfigFile != "":
			return fmt.Errorf("--config-file %s: %w", f.ConfigFile, err)
		}
	}
	return err
}

// config returns the config of --config-file / --config-text, nil (the default) when neither
// is set. Errors name the flag and the field.
func (f *Flags) config() (*framework.EndpointPickerConfig, error) {
	switch {
	case f.ConfigFile != "" && f.ConfigText != "":
		return nil, errors.New("--config-file and --config-text cannot both be set")
	case f.ConfigFile != "":
		cfg, err := framework.LoadConfigFile(f.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("--config-file %s: %w", f.ConfigFile, err)
		}
		return cfg, nil
	case f.ConfigText != "":
		cfg, err := framework.LoadConfig([]byte(f.ConfigText))
		if err != nil {
			return nil, fmt.Errorf("--config-text: %w", err)
		}
		return cfg, nil
	}
	return nil, nil
}

// discovery returns the endpoint source of --endpoints or --pool-name, the InferencePool config
// for the latter, and the pool's model rewrite rules: those of --model-rewrites for --endpoints
// (nil without it), a store the InferencePool source fills from InferenceModelRewrites for
// --pool-name.
func (f *Flags) discovery(logger *slog.Logger) (Discovery, *discovery.PoolConfig, *modelrewrite.Store, error) {
	switch {
	case f.Endpoints != "" && f.PoolName != "":
		return nil, nil, nil, errors.New("--endpoints and --pool-name cannot both be set")
	case f.Endpoints != "":
		objectives, err := discovery.ParseObjectives(f.Objectives)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--objectives: %w", err)
		}
		addrs := strings.Split(f.Endpoints, ",")
		for i := range addrs {
			addrs[i] = strings.TrimSpace(addrs[i])
		}
		st, err := discovery.NewStatic(addrs, objectives)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--endpoints: %w", err)
		}
		var rewrites *modelrewrite.Store
		if f.ModelRewrites != "" {
			if rewrites, err = modelrewrite.LoadFile(f.ModelRewrites, f.Seed); err != nil {
				return nil, nil, nil, fmt.Errorf("--model-rewrites: %w", err)
			}
		}
		return st, nil, rewrites, nil
	case f.PoolName != "":
		if f.Objectives != "" {
			return nil, nil, nil, errors.New("--objectives: only with --endpoints; with --pool-name priorities come from InferenceObjectives")
		}
		if f.ModelRewrites != "" {
			return nil, nil, nil, errors.New("--model-rewrites: only with --endpoints; with --pool-name the rules come from InferenceModelRewrites")
		}
		rc, err := discovery.RestConfig(f.Kubeconfig)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		rewrites := modelrewrite.NewStore(f.Seed)
		pool := &discovery.PoolConfig{RestConfig: rc, Name: f.PoolName, Namespace: f.PoolNamespace, Group: f.PoolGroup,
			Logger: logger, ModelRewrites: rewrites}
		ip, err := discovery.NewInferencePool(*pool)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--pool-name: %w", err)
		}
		return ip, pool, rewrites, nil
	}
	return nil, nil, nil, errors.New("the pool is required: --endpoints ip:port,... or --pool-name NAME")
}
