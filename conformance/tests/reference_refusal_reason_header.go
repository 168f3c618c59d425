package tests

import (
	"fmt"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// retiredReasonHeader is the header eppkit's reference set on every refusal until issue 31
// (SPEC §9.3 before llm-d-router v0.10.0 named its own, x-llm-d-request-dropped-reason).
const retiredReasonHeader = "x-eppkit-reason"

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "ReferenceRefusalReasonHeader",
		Description: "The reference MUST mark refusals with x-llm-d-request-dropped-reason exactly where llm-d-router v0.10.0 does: " +
			"not on a malformed body (400), an empty subset hint or one no endpoint matches (503), or a sheddable request shed " +
			"by the saturation detector with flow control off (429) — flow control's own refusals are FlowControl tests — and " +
			"never with the retired x-eppkit-reason; every refusal has a JSON error body.",
		Level:   conformance.LevelEppkit,
		Profile: conformance.ProfileReference,
		Preconditions: []string{"the EPP knows the InferenceObjective " + harness.SheddableObjective + " with priority -1 (as RequestShedding)",
			"flow control is off (the legacy saturation detector sheds)",
			"the saturation detector uses thresholds below waiting 50 and KV-cache use 0.99",
			"the EPP observes new metrics within metricsPropagation"},
		Source: "docs/request-surface.md §2 (llm-d-router v0.10.0 pkg/common/error/error.go RequestDroppedReasonHeaderKey, " +
			"BuildErrResponse; pkg/epp/requestcontrol/admission.go rejectIfSheddableAndSaturated (no reason), " +
			"translateFlowControlOutcome (the reasons); pkg/epp/requestcontrol/director.go HandleRequest (503 without reason))",
		Run: runReferenceRefusalReasonHeader,
	})
}

// mustNoReason fails the test unless d is an ImmediateResponse of status with a JSON error body
// and neither x-llm-d-request-dropped-reason nor x-eppkit-reason.
func mustNoReason(t harness.TestingT, s *harness.Suite, d *extprocclient.Decision, req extprocclient.Request, status int) {
	t.Helper()
	mustRefuse(t, s, d, req, status)
	for _, h := range []string{droppedReasonHeader, retiredReasonHeader} {
		if got, ok := d.Immediate.Headers[h]; ok {
			t.Fatalf("%s: ImmediateResponse %d carries %s=%q; llm-d-router v0.10.0 marks only flow control's refusals (headers %v)",
				describe(req), status, h, got, d.Immediate.Headers)
		}
	}
	if len(d.Immediate.Body) == 0 || d.Immediate.Body[0] != '{' {
		t.Fatalf("%s: ImmediateResponse %d has no JSON body: %q", describe(req), status, d.Immediate.Body)
	}
	t.Logf("%s: %d without a dropped reason", describe(req), status)
}

func runReferenceRefusalReasonHeader(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	good := func() []byte { return completionBody(s.ModelName, uniquePrompt(s, t, r, 8), nil) }

	bad := surfaceRequest(pathCompletions, []byte(`{"model": "`+s.ModelName+`", "prompt": `), nil)
	mustNoReason(t, s, exchange(t, s, c, bad), bad, 400)
	noModel := surfaceRequest(pathChat, []byte(`{"messages":[{"role":"user","content":"x"}]}`), nil)
	mustNoReason(t, s, exchange(t, s, c, noModel), noModel, 400)

	empty := surfaceRequest(pathCompletions, good(), nil)
	empty.SubsetHint = []string{}
	mustNoReason(t, s, exchange(t, s, c, empty), empty, 503)

	outside := surfaceRequest(pathCompletions, good(), nil)
	outside.SubsetHint = []string{"192.0.2.1:8000"} // TEST-NET-1: never a pool member
	mustNoReason(t, s, exchange(t, s, c, outside), outside, 503)

	// Saturation: every endpoint above both thresholds; a sheddable request is shed.
	pins := map[string]vllm.FakeMetrics{}
	for _, a := range s.Endpoints() {
		pins[a] = vllm.FakeMetrics{RunningRequests: 16, WaitingRequests: 50, KVCacheUsage: 0.99}
	}
	mkUnique := func() (string, []byte) { return pathCompletions, good() }
	t.Cleanup(func() { restoreRouting(t, s, s.Endpoints()[0], mkUnique) })
	pinAll(t, s, pins)
	shed := surfaceRequest(pathCompletions, good(), map[string]string{hdrObjective: harness.SheddableObjective})
	var last *extprocclient.Decision
	harness.MustEventually(t, s, s.Timeouts.MetricsPropagation.D(), 1, func() error {
		d, err := tryExchange(s, c, shed)
		if err != nil {
			return err
		}
		last = d
		if d.Immediate == nil || d.Immediate.Status != 429 {
			return fmt.Errorf("the sheddable request under saturation was not refused with 429 yet (pick %q)", d.Pick())
		}
		return nil
	})
	mustNoReason(t, s, last, shed, 429)
}
