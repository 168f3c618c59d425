package tests

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
)

// droppedShuttingDown is droppedReasonHeader's value for a request refused because the EPP is
// shutting down (llm-d-router v0.10.0 pkg/common/error/error.go RequestDroppedReasonShuttingDown).
const droppedShuttingDown = "rejected-shutting-down"

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "ReferenceDrainRefusesNewRequests",
		Description: "Once its drain stops admitting (SIGTERM, then --drain-handover, 0 by default), the EPP answers every new " +
			"request 503 with x-llm-d-request-dropped-reason: rejected-shutting-down, while the stream in flight ends whole and " +
			"the EPP exits once it has.",
		Level:   conformance.LevelEppkit,
		Profile: conformance.ProfileReference,
		Preconditions: []string{"the EPP serves the pool's base model",
			"a target the harness starts replicas of and can signal (command, reference)"},
		Source: "eppkit (issue 33): the reference's drain (reference/eppserver ha.go); the refusal is upstream's while its flow " +
			"controller is stopped (llm-d-router v0.10.0 pkg/epp/requestcontrol/admission.go, ErrFlowControllerNotRunning → 503 " +
			"rejected-shutting-down), which upstream without flow control does not do: it serves every request for its drain window",
		Run: runReferenceDrainRefusesNewRequests,
	})
}

func runReferenceDrainRefusesNewRequests(t harness.TestingT, s *harness.Suite) {
	if why := s.ReplicasUnsupported(false); why != "" {
		harness.Skip(t, "%s", why)
	}
	rs := s.StartReplicas(t, 1, false)
	rep := rs.Members[0]
	harness.MustEventually(t, s, s.Timeouts.TargetReady.D(), 1, func() error {
		if !rep.Serving(context.Background(), "readiness") {
			return fmt.Errorf("replica not ready (%s)", rs)
		}
		return nil
	})
	gw := rep.Gateway(t)
	_, streams := startSlowStreams(t, s, gw, 1)
	if err := rep.Terminate(); err != nil {
		t.Fatalf("SIGTERM the EPP: %v", err)
	}
	sigterm := time.Now()
	// A new request while the stream is in flight: refused, with upstream's reason. (Requests
	// sent before the EPP has handled the signal are still routed.)
	r := s.Rand(t)
	var refusedAfter time.Duration
	harness.MustEventually(t, s, s.Timeouts.Request.D(), 1, func() error {
		res, err := gw.Do(context.Background(), &gateway.Request{Path: pathChat, Headers: map[string]string{"content-type": "application/json"},
			Body: chatBody(s.ModelName, uniquePrompt(s, t, r, 4))})
		switch {
		case err != nil:
			return fmt.Errorf("a new request during the drain: %v", err)
		case res.Status != http.StatusServiceUnavailable || !res.Immediate:
			return fmt.Errorf("a new request during the drain: status %d (EPP refusal %v), want the EPP's 503", res.Status, res.Immediate)
		case res.Headers.Get(droppedReasonHeader) != droppedShuttingDown:
			return fmt.Errorf("the drain's 503 carries %s: %q, want %q", droppedReasonHeader, res.Headers.Get(droppedReasonHeader), droppedShuttingDown)
		}
		refusedAfter = time.Since(sigterm)
		return nil
	})
	bound := 2*s.Timeouts.Request.D() + 5*time.Second
	if _, err := streams[0].finish(bound); err != nil {
		t.Fatalf("the stream in flight when the EPP got SIGTERM: %v\n--- replica log ---\n%s", err, rep.LogTail(15))
	}
	ended := time.Since(sigterm)
	select {
	case <-rep.ExitedChan():
	case <-time.After(s.Timeouts.TargetStop.D()):
		t.Fatalf("the EPP still runs %v after its last stream ended", s.Timeouts.TargetStop.D())
	}
	t.Logf("after SIGTERM: a new request refused 503 %s: %s %v later; the stream in flight ended whole after %v; the EPP exited after %v",
		droppedReasonHeader, droppedShuttingDown, refusedAfter.Round(time.Millisecond), ended.Round(time.Millisecond),
		time.Since(sigterm).Round(time.Millisecond))
}
