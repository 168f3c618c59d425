package eppserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/eppkit/eppkit/reference/discovery"
)

// HAFlags are the reference EPP's high-availability flags, named as llm-d-router v0.10.0 names
// them (pkg/epp/server/options.go AddFlags) except --drain-handover, eppkit's own.
type HAFlags struct {
	// LeaderElection elects one leader among the replicas of a pool's EPP with a Lease
	// (--ha-enable-leader-election; needs --pool-name): followers keep discovering but report
	// readiness NOT_SERVING.
	LeaderElection bool
	// DrainTimeout bounds the drain after SIGTERM (--drain-timeout, default 30s as upstream).
	DrainTimeout time.Duration
	// DrainHandover is how long after SIGTERM new requests are still served before they are
	// refused with 503 rejected-shutting-down (--drain-handover, default 0).
	DrainHandover time.Duration
	// MetricsEndpointAuth authenticates and authorizes every /metrics scrape through the API
	// server (--metrics-endpoint-auth; needs --pool-name): a bearer token checked by TokenReview,
	// allowed by a SubjectAccessReview of get on the non-resource URL /metrics.
	MetricsEndpointAuth bool
}

// AddFlags binds f to fs.
func (f *HAFlags) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&f.LeaderElection, "ha-enable-leader-election", false,
		"elect a leader among the replicas of the pool's EPP with the Lease epp-<namespace>-<pool>.llm-d.ai (needs --pool-name); followers discover but are not ready")
	fs.DurationVar(&f.DrainTimeout, "drain-timeout", DefaultDrainTimeout,
		"after SIGTERM, how long requests in flight get to finish before the EPP exits")
	fs.DurationVar(&f.DrainHandover, "drain-handover", 0,
		"after SIGTERM, how long new requests are still served (while the data plane moves to another replica) before they are refused with 503 rejected-shutting-down; at most --drain-timeout")
	fs.BoolVar(&f.MetricsEndpointAuth, "metrics-endpoint-auth", false,
		"authenticate (TokenReview) and authorize (SubjectAccessReview: get /metrics) every /metrics scrape through the API server (needs --pool-name)")
}

// apply validates f and sets the HA parts of opts: the drain timings, the leader election and
// the metrics filter. pool is nil with --endpoints.
func (f *HAFlags) apply(opts *Options, pool *discovery.PoolConfig, logger *slog.Logger) error {
	if f.DrainTimeout <= 0 {
		return fmt.Errorf("--drain-timeout: %v, want > 0", f.DrainTimeout)
	}
	if f.DrainHandover < 0 || f.DrainHandover > f.DrainTimeout {
		return fmt.Errorf("--drain-handover: %v, want between 0 and --drain-timeout (%v)", f.DrainHandover, f.DrainTimeout)
	}
	opts.DrainTimeout, opts.DrainHandover = f.DrainTimeout, f.DrainHandover
	if f.LeaderElection {
		if pool == nil {
			return errors.New("--ha-enable-leader-election: needs Kubernetes discovery (--pool-name): the Lease lives in the pool's namespace")
		}
		le, err := discovery.NewLeaderElection(discovery.ElectionConfig{RestConfig: pool.RestConfig,
			Namespace: pool.Namespace, Pool: pool.Name, Logger: logger})
		if err != nil {
			return fmt.Errorf("--ha-enable-leader-election: %w", err)
		}
		opts.Leader = le
	}
	if f.MetricsEndpointAuth {
		if pool == nil {
			return errors.New("--metrics-endpoint-auth: needs Kubernetes discovery (--pool-name): scrapes are checked by the API server")
		}
		if f.MetricsEndpointAuth && opts.MetricsAddr == "" {
			return errors.New("--metrics-endpoint-auth: the metrics listener is off (--metrics-port 0)")
		}
		opts.MetricsFilter = APIServerMetricsFilter(pool.RestConfig, logger)
	}
	return nil
}

// APIServerMetricsFilter authenticates and authorizes every scrape through the API server at rc,
// with controller-runtime's filter (sigs.k8s.io/controller-runtime pkg/metrics/filters
// WithAuthenticationAndAuthorization), the one llm-d-router v0.10.0 installs for
// --metrics-endpoint-auth (cmd/epp/runner/runner.go, metricsServerOptions.FilterProvider):
// no or a bad bearer token → 401; a token whose user may not get the non-resource URL /metrics
// → 403. The EPP's own identity needs create on tokenreviews and subjectaccessreviews.
func APIServerMetricsFilter(rc *rest.Config, logger *slog.Logger) MetricsFilter {
	return func(h http.Handler) (http.Handler, error) {
		hc, err := rest.HTTPClientFor(rc)
		if err != nil {
			return nil, err
		}
		filter, err := filters.WithAuthenticationAndAuthorization(rc, hc)
		if err != nil {
			return nil, err
		}
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		return filter(logr.FromSlogHandler(logger.With("component", "metrics-auth").Handler()), h)
	}
}
