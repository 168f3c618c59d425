package tests

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// Flow-control test constants (docs/request-surface.md §6).
const (
	// fcTTL is the variant pool's defaultRequestTTL.
	fcTTL = 3 * time.Second
	// fcBand is every band's maxRequests.
	fcBand = 3
	// fcSettle is how long the test waits for requests it sent to be queued (or dispatched).
	fcSettle = 400 * time.Millisecond
	// fcPods is the variant pool's size; with maxConcurrency 1, fcPods requests run at once.
	fcPods = 2
)

// flowControlConfig is the variant pool's EndpointPickerConfig, in llm-d-router v0.10.0's terms
// (featureGates, flowControl, concurrency-detector: both it and the reference read it): flow
// control on, one request in flight per endpoint (so holding fcPods requests saturates the pool
// without touching metrics), a TTL of fcTTL, fcBand requests per band.
var flowControlConfig = []byte(fmt.Sprintf(`apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters:
    maxConcurrency: 1
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
flowControl:
  defaultRequestTTL: %s
  saturationDetector:
    pluginRef: concurrency-detector
  defaultPriorityBand:
    maxRequests: %d
  priorityBands:
  - priority: 0
    maxRequests: %d
  - priority: %d
    maxRequests: %d
`, fcTTL, fcBand, fcBand, harness.CriticalPriority, fcBand))

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "FlowControl",
		Description: "With flow control on and the pool saturated, requests MUST wait in their priority band: a request that waits " +
			"past the TTL is refused with 429 and x-llm-d-request-dropped-reason: rejected-ttl-expired; a request whose band is " +
			"full is refused at once with 429 and rejected-saturated; a request whose client goes away leaves its band; and when " +
			"capacity returns for one request, a waiting request of a higher priority band MUST be dispatched before one of a " +
			"lower band that waited longer.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureFlowControl},
		Preconditions: []string{
			"the EPP takes the test's EndpointPickerConfig as {{.ConfigFile}} for a pool of its own (featureGates [flowControl], " +
				"concurrency-detector maxConcurrency 1, defaultRequestTTL 3s, 3 requests per band): the test starts a second instance",
			"the EPP knows the InferenceObjective " + harness.CriticalObjective + " with priority 10 (the apiserver source creates it; " +
				"the reference takes --objectives)",
			"a request dispatched and not yet answered counts as in flight until its ext_proc stream ends",
		},
		Source: "SPEC §10 (llm-d-router v0.10.0 pkg/epp/flowcontrol/controller/internal/processor.go hasCapacity, dispatchCycle; " +
			"pkg/epp/flowcontrol/registry/config.go; pkg/epp/requestcontrol/admission.go translateFlowControlOutcome; " +
			"pkg/epp/framework/plugins/flowcontrol/saturationdetector/concurrency/detector.go; " +
			"test/integration/epp/dynamic_attributes_test.go TestDynamicAttributes_Concurrency)",
		Run: runFlowControl,
	})
}

// fcCall is one request sent to the flow-control pool on a stream of its own.
type fcCall struct {
	name    string
	st      *extprocclient.Stream
	sent    time.Time
	done    chan struct{}
	d       *extprocclient.Decision
	err     error
	elapsed time.Duration
}

// fcSend sends one completion with headers on a new stream and reads the EPP's answer in the
// background; the stream stays open (the request in flight) until the test ends or closes it.
func fcSend(t harness.TestingT, v *harness.Suite, c *extprocclient.Client, name string, headers map[string]string) *fcCall {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fcTTL+v.Timeouts.Request.D()+10*time.Second)
	st, err := c.Open(ctx)
	if err != nil {
		cancel()
		t.Fatalf("%s: open an ext_proc stream: %v", name, err)
	}
	t.Cleanup(func() { st.Close(); cancel() })
	st.SetMessageTimeout(fcTTL + v.Timeouts.Request.D() + 5*time.Second)
	body := completionBody(v.ModelName, name+" "+v.Nonce(t), nil)
	call := &fcCall{name: name, st: st, sent: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(call.done)
		call.d, call.err = st.Exchange(ctx, extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", pathCompletions, authority, body, headers), Body: body})
		call.elapsed = time.Since(call.sent)
	}()
	return call
}

// answered reports whether call has its answer, waiting at most d.
func (c *fcCall) answered(d time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(d):
		return false
	}
}

// wait returns call's answer, failing the test when none came.
func (c *fcCall) wait(t harness.TestingT) *extprocclient.Decision {
	t.Helper()
	<-c.done
	if c.err != nil {
		t.Fatalf("%s: the EPP did not answer: %v", c.name, c.err)
	}
	return c.d
}

// mustDropped fails unless the answer is an ImmediateResponse of status with the dropped reason.
func mustDropped(t harness.TestingT, c *fcCall, status int, reason string) {
	t.Helper()
	d := c.wait(t)
	if d.Immediate == nil {
		t.Fatalf("%s: routed to %q after %v, want ImmediateResponse %d %s: %s", c.name, d.Pick(), c.elapsed.Round(time.Millisecond), status, droppedReasonHeader, reason)
	}
	if d.Immediate.Status != status || d.Immediate.Headers[droppedReasonHeader] != reason {
		t.Fatalf("%s: ImmediateResponse %d with %s=%q after %v, want %d with %q (body %s)", c.name, d.Immediate.Status, droppedReasonHeader,
			d.Immediate.Headers[droppedReasonHeader], c.elapsed.Round(time.Millisecond), status, reason, d.Immediate.Body)
	}
}

// mustRouted fails unless the answer is a pick of the pool.
func mustRouted(t harness.TestingT, v *harness.Suite, c *fcCall) {
	t.Helper()
	d := c.wait(t)
	if d.Immediate != nil {
		t.Fatalf("%s: refused with %d (%s=%q) after %v, want it routed: %s", c.name, d.Immediate.Status, droppedReasonHeader,
			d.Immediate.Headers[droppedReasonHeader], c.elapsed.Round(time.Millisecond), d.Immediate.Body)
	}
	if _, problem := pickProblem(v, d); problem != "" {
		t.Fatalf("%s: %s", c.name, problem)
	}
}

func runFlowControl(t harness.TestingT, s *harness.Suite) {
	if why := s.SidePoolUnsupported(); why != "" {
		harness.Skip(t, "%s", why)
	}
	v := s.StartVariantPool(t, harness.FleetVariant{Name: "flow-control", Pods: fcPods, Config: flowControlConfig})
	c := v.ExtProc(t)
	critical := map[string]string{hdrObjective: harness.CriticalObjective}

	// Saturate: fcPods requests dispatched and held (their streams stay open, unanswered).
	held := make([]*fcCall, fcPods)
	for i := range held {
		held[i] = fcSend(t, v, c, fmt.Sprintf("held-%d", i), nil)
		if !held[i].answered(v.Timeouts.Request.D()) {
			t.Fatalf("%s: no answer within %v on the idle pool", held[i].name, v.Timeouts.Request.D())
		}
		mustRouted(t, v, held[i])
	}
	t.Logf("%d requests in flight: the pool (maxConcurrency 1 per endpoint) is saturated", fcPods)

	// Band 0 fills: fcBand requests queue; the next is refused at once.
	queued := make([]*fcCall, fcBand)
	for i := range queued {
		queued[i] = fcSend(t, v, c, fmt.Sprintf("queued-%d", i), nil)
	}
	if queued[0].answered(fcSettle) {
		t.Fatalf("%s was answered on the saturated pool (%+v): flow control did not queue it", queued[0].name, queued[0].d)
	}
	over := fcSend(t, v, c, "over-capacity", nil)
	if !over.answered(fcTTL / 2) {
		t.Fatalf("%s: no answer within %v with band 0 full (%d queued): a full band must refuse at once", over.name, fcTTL/2, fcBand)
	}
	mustDropped(t, over, http.StatusTooManyRequests, "rejected-saturated")
	t.Logf("band 0 full: refused in %v with 429 rejected-saturated", over.elapsed.Round(time.Millisecond))

	// A client goes away: its request leaves the band, so a new one is queued, not refused.
	queued[0].st.Close()
	time.Sleep(fcSettle)
	again := fcSend(t, v, c, "after-cancel", nil)
	if again.answered(fcSettle + time.Second) {
		t.Fatalf("%s was answered at once (%v) although a queued request's client went away: the band still counted it", again.name, describeFC(again))
	}
	t.Logf("a queued client went away; the next request was queued")

	// TTL: the queued requests are refused with 429 rejected-ttl-expired once they waited fcTTL.
	for _, q := range append(queued[1:], again) {
		mustDropped(t, q, http.StatusTooManyRequests, "rejected-ttl-expired")
		if q.elapsed < fcTTL*9/10 {
			t.Fatalf("%s: refused rejected-ttl-expired after %v, before the TTL %v", q.name, q.elapsed, fcTTL)
		}
		t.Logf("%s: 429 rejected-ttl-expired after %v (TTL %v)", q.name, q.elapsed.Round(time.Millisecond), fcTTL)
	}

	// Priority: a low-priority request waits first, then a critical one; capacity for one
	// request returns (a held stream ends): the critical one goes first, the other still waits.
	low := fcSend(t, v, c, "low", nil)
	time.Sleep(fcSettle)
	high := fcSend(t, v, c, "critical", critical)
	time.Sleep(fcSettle)
	if low.answered(0) || high.answered(0) {
		t.Fatalf("a request was answered on the saturated pool: low %v, critical %v", describeFC(low), describeFC(high))
	}
	held[0].st.Close()
	if !high.answered(fcTTL / 2) {
		t.Fatalf("the critical request was not dispatched within %v of capacity returning (low: %v)", fcTTL/2, describeFC(low))
	}
	mustRouted(t, v, high)
	if low.answered(fcSettle) {
		t.Fatalf("capacity for one request returned and the low-priority request (%v) was dispatched although a critical request waited", describeFC(low))
	}
	held[1].st.Close()
	if !low.answered(fcTTL / 2) {
		t.Fatalf("the low-priority request was not dispatched within %v of capacity returning again", fcTTL/2)
	}
	mustRouted(t, v, low)
	t.Logf("capacity for one: the critical request (waited %v) went before the low one (waited %v)", high.elapsed.Round(time.Millisecond), low.elapsed.Round(time.Millisecond))
}

// describeFC summarises a call's answer so far.
func describeFC(c *fcCall) string {
	select {
	case <-c.done:
	default:
		return "no answer yet"
	}
	switch {
	case c.err != nil:
		return "error " + c.err.Error()
	case c.d.Immediate != nil:
		return fmt.Sprintf("refused %d %q after %v", c.d.Immediate.Status, c.d.Immediate.Headers[droppedReasonHeader], c.elapsed.Round(time.Millisecond))
	}
	return fmt.Sprintf("routed to %s after %v", c.d.Pick(), c.elapsed.Round(time.Millisecond))
}
