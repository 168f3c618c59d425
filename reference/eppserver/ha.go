package eppserver

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/eppkit/eppkit/reference/extproc"
)

// DefaultDrainTimeout bounds a drain when Options.DrainTimeout is 0: llm-d-router v0.10.0's
// --drain-timeout default (pkg/epp/server/options.go DefaultDrainTimeout).
const DefaultDrainTimeout = 30 * time.Second

// Leader is the replica's leader election (reference/discovery.LeaderElection).
type Leader interface {
	// Start campaigns until ctx ends, then releases a held lease and closes Done.
	Start(ctx context.Context) error
	// IsLeader reports whether this replica holds the lease now.
	IsLeader() bool
	// Done is closed once the campaign has ended.
	Done() <-chan struct{}
}

// MetricsFilter wraps the /metrics handler: authentication and authorization of every scrape
// (--metrics-endpoint-auth, through the API server's TokenReview and SubjectAccessReview).
type MetricsFilter func(http.Handler) (http.Handler, error)

// healthState is what the health services answer, computed from discovery, the election and the
// drain (GIE proposal 004 as of v1.6.2, Health Checking; llm-d-router v0.10.0
// cmd/epp/runner/health.go healthServer.Check):
//   - liveness: SERVING whenever the process answers — before sync, on a follower and while
//     draining (upstream keeps it SERVING while draining "to avoid a restart mid-drain");
//   - readiness, the ext_proc service name, "" and inference-extension: SERVING only when
//     discovery has synced, the replica is the leader (always, without leader election) and it is
//     not draining.
func (s *Server) healthState() healthpb.HealthCheckResponse_ServingStatus {
	ready := s.opts.Discovery.Synced() && !s.draining.Load() && (s.opts.Leader == nil || s.opts.Leader.IsLeader())
	if ready {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// healthInterval is how often the health services follow discovery, the election and the drain.
const healthInterval = 20 * time.Millisecond

// watchHealth sets the readiness services to healthState every healthInterval (and at once when
// poked) until ctx ends, logging each change.
func (s *Server) watchHealth(ctx context.Context) {
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	last := healthpb.HealthCheckResponse_UNKNOWN
	for {
		st := s.healthState()
		if st != last {
			for _, name := range HealthServices {
				s.health.SetServingStatus(name, st)
			}
			leader := s.opts.Leader == nil || s.opts.Leader.IsLeader()
			s.logger.Info("readiness "+st.String(), "synced", s.opts.Discovery.Synced(), "leader", leader,
				"leaderElection", s.opts.Leader != nil, "draining", s.draining.Load(), "endpoints", len(s.opts.Discovery.Endpoints()))
			last = st
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.healthPoke:
		}
	}
}

// drain is the graceful shutdown of a replica (SIGTERM; SPEC: issue 33, modelled on llm-d-router
// v0.10.0 cmd/epp/runner/runner.go runWithGracefulShutdown):
//  1. readiness and the ext_proc health name turn NOT_SERVING at once (liveness stays SERVING),
//     and the leader election ends, releasing the lease, so a warm follower takes over;
//  2. for DrainHandover every request is still served: a data plane that keeps a connection
//     open to this replica (Envoy's HTTP/2 connection to the EPP Service) goes on sending it new
//     streams until it notices, and upstream serves them for its whole drain window;
//  3. then every new request is refused with 503 and x-llm-d-request-dropped-reason:
//     rejected-shutting-down (upstream's answer while its flow controller is stopped), while the
//     requests in flight run to their end;
//  4. once none is in flight, or DrainTimeout after the drain began, the listeners close; a
//     request still in flight then is cut, and logged.
//
// failed skips the handover: a listener failed and nothing will be served well. drain reports
// whether it timed out with requests still in flight (shutdown then cuts them at once).
func (s *Server) drain(failed bool) (timedOut bool) {
	start := time.Now()
	deadline := start.Add(s.opts.DrainTimeout)
	s.draining.Store(true)
	s.poke()
	handover := s.opts.DrainHandover
	if failed {
		handover = 0
	}
	msg := "draining: readiness NOT_SERVING"
	if s.opts.Leader != nil {
		msg += ", lease released"
	}
	s.logger.Info(msg, "handover", handover.String(), "drainTimeout", s.opts.DrainTimeout.String(),
		"inFlight", s.extproc.InFlight())
	if handover > 0 {
		timer := time.NewTimer(min(handover, s.opts.DrainTimeout))
		<-timer.C
	}
	s.extproc.StopAdmitting()
	s.logger.Info("draining: new requests refused (503 rejected-shutting-down); waiting for the requests in flight",
		"inFlight", s.extproc.InFlight(), "remaining", time.Until(deadline).Round(time.Millisecond).String())
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	// Requests whose body is still arriving are waited for too: their body ends in a 503 refusal
	// (extproc.Server.Receiving), not in a stream cut by the server's stop.
	for s.extproc.InFlight()+s.extproc.Receiving() > 0 && time.Now().Before(deadline) {
		<-t.C
	}
	if n, m := s.extproc.InFlight(), s.extproc.Receiving(); n+m > 0 {
		s.logger.Warn("drain timeout: cutting the requests still in flight", "inFlight", n, "receivingBody", m, "drainTimeout", s.opts.DrainTimeout.String())
		return true
	}
	s.logger.Info("drained: no request in flight", "after", time.Since(start).Round(time.Millisecond).String())
	return false
}

// poke makes watchHealth recompute at once.
func (s *Server) poke() {
	select {
	case s.healthPoke <- struct{}{}:
	default:
	}
}

// MetricInFlight is the gauge of requests the EPP scheduled whose response has not ended
// (completed, failed or abandoned) [eppkit]: it returns to 0 when every stream has ended, and a
// drain waits for it.
const MetricInFlight = "eppkit_epp_requests_in_flight"

const inFlightHelp = "Requests this EPP scheduled whose response has not ended yet (completed, failed or abandoned)."

// MetricResponses counts the scheduled requests by how their response ended [eppkit], label
// outcome: completed (its natural end), aborted (trailers with a non-zero grpc-status: a failed
// request, issue 33) or abandoned (the stream ended first). reference/extproc abort.go.
const MetricResponses = "eppkit_epp_responses_total"

// MetricBufferedRequestBodyBytes is the gauge of request-body bytes the EPP holds over every
// ext_proc stream [eppkit]: received and not yet sent back to the gateway; bounded by
// --max-buffered-body-bytes (extproc.Server.SetMaxBufferedBodyBytes).
const MetricBufferedRequestBodyBytes = "eppkit_epp_buffered_request_body_bytes"

// registerStreamMetrics registers the in-flight and buffered-body gauges and the response
// outcome counters.
func (s *Server) registerStreamMetrics(reg prometheus.Registerer) error {
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricInFlight, Help: inFlightHelp},
		func() float64 { return float64(s.extproc.InFlight()) })); err != nil {
		return err
	}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricBufferedRequestBodyBytes,
		Help: "Request-body bytes this EPP holds over every ext_proc stream (received, not yet sent back; bound --max-buffered-body-bytes)."},
		func() float64 { return float64(s.extproc.BufferedBodyBytes()) })); err != nil {
		return err
	}
	for _, o := range []string{extproc.OutcomeCompleted, extproc.OutcomeAborted, extproc.OutcomeAbandoned} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricResponses, ConstLabels: prometheus.Labels{"outcome": o},
			Help: "Scheduled requests by how their response ended: completed, aborted (a non-zero grpc-status in its trailers) or abandoned."},
			func() float64 { return float64(s.extproc.Outcomes()[o]) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
