package tests

import (
	"fmt"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// reasonHeader names the cause of an ImmediateResponse (SPEC §9.3).
const reasonHeader = "x-eppkit-reason"

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "ReferenceRefusalReasonHeader",
		Description: "Every ImmediateResponse MUST carry the header x-eppkit-reason naming its cause besides the JSON body: " +
			"bad-request for a malformed body, empty-subset for an empty subset hint, no-endpoints when no candidate is left, " +
			"shed for a sheddable request refused because the pool is saturated.",
		Level:   conformance.LevelEppkit,
		Profile: conformance.ProfileReference,
		Preconditions: []string{"the EPP knows the InferenceObjective " + harness.SheddableObjective + " with priority -1 (as RequestShedding)",
			"the saturation detector uses thresholds below waiting 50 and KV-cache use 0.99",
			"the EPP observes new metrics within metricsPropagation"},
		Source: "SPEC §9.3 (x-eppkit-reason: bad-request, shed, filtered-out, no-endpoints, empty-subset, internal; llm-d-router #1735)",
		Run:    runReferenceRefusalReasonHeader,
	})
}

// mustReason fails the test unless d is an ImmediateResponse of status with x-eppkit-reason
// reason and a JSON error body.
func mustReason(t harness.TestingT, s *harness.Suite, d *extprocclient.Decision, req extprocclient.Request, status int, reason string) {
	t.Helper()
	mustRefuse(t, s, d, req, status)
	if got := d.Immediate.Headers[reasonHeader]; got != reason {
		t.Fatalf("%s: ImmediateResponse %d carries %s=%q, want %q (headers %v)", describe(req), status, reasonHeader, got, reason, d.Immediate.Headers)
	}
	if len(d.Immediate.Body) == 0 || d.Immediate.Body[0] != '{' {
		t.Fatalf("%s: ImmediateResponse %d has no JSON body besides the header: %q", describe(req), status, d.Immediate.Body)
	}
	t.Logf("%s: %d, %s: %s", describe(req), status, reasonHeader, reason)
}

func runReferenceRefusalReasonHeader(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	good := func() []byte { return completionBody(s.ModelName, uniquePrompt(s, t, r, 8), nil) }

	bad := surfaceRequest(pathCompletions, []byte(`{"model": "`+s.ModelName+`", "prompt": `), nil)
	mustReason(t, s, exchange(t, s, c, bad), bad, 400, "bad-request")
	noModel := surfaceRequest(pathChat, []byte(`{"messages":[{"role":"user","content":"x"}]}`), nil)
	mustReason(t, s, exchange(t, s, c, noModel), noModel, 400, "bad-request")

	empty := surfaceRequest(pathCompletions, good(), nil)
	empty.SubsetHint = []string{}
	mustReason(t, s, exchange(t, s, c, empty), empty, 503, "empty-subset")

	outside := surfaceRequest(pathCompletions, good(), nil)
	outside.SubsetHint = []string{"192.0.2.1:8000"} // TEST-NET-1: never a pool member
	mustReason(t, s, exchange(t, s, c, outside), outside, 503, "no-endpoints")

	// Saturation: every endpoint above both thresholds; a sheddable request is shed.
	pins := map[string]vllm.FakeMetrics{}
	for _, a := range s.Endpoints() {
		pins[a] = vllm.FakeMetrics{RunningRequests: 16, WaitingRequests: 50, KVCacheUsage: 0.99}
	}
	mkUnique := func() (string, []byte) { return pathCompletions, good() }
	t.Cleanup(func() { restoreRouting(t, s, s.Endpoints()[0], mkUnique) })
	pinAll(t, s, pins)
	shed := surfaceRequest(pathCompletions, good(), map[string]string{"x-gateway-inference-objective": harness.SheddableObjective})
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
	mustReason(t, s, last, shed, 429, "shed")
}
