package tests

import (
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPReadyRoutes",
		Description: "Once the EPP's gRPC health service readiness (or envoy.service.ext_proc.v3.ExternalProcessor) answers SERVING " +
			"(\"the EPP datastore has synced\"), it MUST route " +
			"requests for the pool: it may refuse them with 503 for want of endpoints for at most servingGrace (2 s) after " +
			"it first answered SERVING, and a request sent now is routed.",
		Level:   conformance.LevelMUST,
		Profile: conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model",
			"the harness waited for the EPP itself (every target does; the readiness record is what this test judges)",
			"the EPP serves the health service readiness or envoy.service.ext_proc.v3.ExternalProcessor"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol), Health Checking: readiness \"Returns SERVING " +
			"if the EPP datastore has synced and the EPP is the elected leader\"; SPEC §5.1",
		Run: runEPPReadyRoutes,
	})
}

func runEPPReadyRoutes(t harness.TestingT, s *harness.Suite) {
	rd := s.Readiness
	if rd == nil {
		harness.NotApplicable(t, "the harness waited for the EPP itself", "this run has no readiness record (the Suite was built without harness.Start)")
	}
	if rd.ServingAt.IsZero() {
		// The harness was satisfied by another health name; EPPHealth judges the readiness names.
		harness.NotApplicable(t, "the EPP serves the health services readiness or "+harness.ReadinessServiceNames[1],
			"neither answered SERVING while the harness waited (EPPHealth checks them)")
	}
	grace := s.Timeouts.ServingGrace.D()
	if gap := rd.Gap(); gap > grace {
		t.Fatalf("the EPP's gRPC health answered SERVING, yet it refused %d probe requests with ImmediateResponse 503 for %v after "+
			"that before it routed one (first refusal: %s); readiness SERVING means \"the EPP datastore has synced\" (proposal 004, "+
			"Health Checking), so a SERVING EPP MUST route requests for its pool: report NOT_SERVING until it knows its endpoints "+
			"(allowed gap: servingGrace %v, --timeout-config)", rd.Refusals, gap.Round(time.Millisecond), rd.FirstRefusal, grace)
	}
	t.Logf("health SERVING, then ready after %v (%d refusals with 503 in between)", rd.ReadyAt.Sub(rd.ServingAt).Round(time.Millisecond), rd.Refusals)
	c := s.ExtProc(t)
	req := chatRequest(s, uniquePrompt(s, t, s.Rand(t), 12), nil)
	mustRoute(t, s, exchange(t, s, c, req), req)
}
