package tests

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// ReferencePrepareDataBudget is black-box: the slow producer is the reference's own
// predicted-latency-producer, shipped and configured as in production
// (manifests/epp-configs/conformance.yaml), talking to the harness's predictor sidecar
// (--predictor-url) with the predictor client's per-call timeout of 1 s
// (reference/predictor/client.go DefaultClientTimeout). The test makes that sidecar hang
// (SIGSTOP: connections are accepted, nothing answers), so PredictBulk blocks for up to 1 s, and
// times the decision from outside over ext_proc. No test-only plugin or hook exists in the
// reference for this: the overrun is the one a hung predictor server causes in a deployment.
const (
	// pdbBudget is the PrepareData phase budget of the config under test: conformance.yaml sets
	// no prepareData.timeoutMs, so the SPEC §1.1 default 400 ms applies.
	pdbBudget = 400 * time.Millisecond
	// pdbSlack is what a decision may take beyond the budget (scheduling after PrepareData, the
	// ext_proc round trip, a loaded machine). The budget-ignoring alternative waits for the
	// predictor client's 1 s timeout, so budget + slack stays well below it.
	pdbSlack = 300 * time.Millisecond
	// pdbTrials is how many decisions with a stalled producer are timed; the median is judged.
	pdbTrials = 5
	// pdbMaxAttempts bounds the paused decisions tried to get pdbTrials stalled ones (a decision
	// is not stalled when the EPP's predictor client had already marked the predictor not ready).
	pdbMaxAttempts = 4 * pdbTrials
	// pdbPredictedProfile is the primary profile the reference runs for SLO requests once its
	// predictor is ready (latency-fallback-profile-handler in conformance.yaml).
	pdbPredictedProfile = "predicted-latency"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "ReferencePrepareDataBudget",
		Description: "A PrepareData producer that overruns the phase budget (prepareData.timeoutMs) MUST NOT hold the " +
			"decision: the EPP cancels it at the budget and schedules with what was committed, so the pick arrives " +
			"within the budget plus scheduling time.",
		Level:    conformance.LevelEppkit,
		Profile:  conformance.ProfileReference,
		Features: []conformance.Feature{conformance.FeaturePredictedLatency},
		Preconditions: []string{
			"the EPP runs predicted-latency-producer in PrepareData against the harness's predictor sidecar " +
				"({{.PredictorURL}}; the reference: --predictor-url) and a prepareData.timeoutMs of 400 (the default; conformance.yaml)",
			"SLO requests run the \"predicted-latency\" profile (x-eppkit-profile) once the predictor is ready " +
				"(latency-fallback-profile-handler), which is how the test knows the producer will call the predictor",
			"the harness can pause the sidecar (SIGSTOP); targets given no sidecar skip",
		},
		Source: "SPEC §1.1 Execution (committed only within the phase budget; on timeout the context is cancelled and " +
			"scheduling proceeds) [eppkit: upstream v1.5.0 let a timed-out plugin keep writing]; reference/framework/prepare.go",
		Run: runReferencePrepareDataBudget,
	})
}

func runReferencePrepareDataBudget(t harness.TestingT, s *harness.Suite) {
	requireEndpoints(t, s, 1)
	if s.PredictorURL() == "" {
		harness.Skip(t, "the harness runs no predictor sidecar for this target: it runs one when a PredictedLatency or "+
			"RequestShedding test is selected and the target is given {{.PredictorURL}} (a --command template that uses it; "+
			"the address and cluster targets never are)")
	}
	r := s.Rand(t)
	slo := map[string]string{"x-slo-ttft-ms": "1000"}
	c := s.ExtProc(t)
	var stalled, fast []time.Duration
	for attempt := 1; len(stalled) < pdbTrials; attempt++ {
		if attempt > pdbMaxAttempts {
			t.Fatalf("only %d of %d paused decisions waited for the budget (%v; the others took %v): the producer was not "+
				"stalled, so the rule was not exercised (seed %d)", len(stalled), pdbMaxAttempts, stalled, fast, s.Seed)
		}
		// Streamed answers of several tokens: the predictor trains on TTFT and TPOT samples.
		awaitPredictedProfile(t, s, slo, func() []byte {
			return completionBody(s.ModelName, uniquePrompt(s, t, r, 16), map[string]any{
				"max_tokens": 4, "stream": true, "stream_options": map[string]any{"include_usage": true}})
		})
		resume, ok := s.PausePredictor(t)
		if !ok {
			harness.Skip(t, "the predictor sidecar does not run")
		}
		body := completionBody(s.ModelName, uniquePrompt(s, t, r, 16), nil)
		req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", pathCompletions, authority, body, slo), Body: body}
		start := time.Now()
		d := exchange(t, s, c, req)
		took := time.Since(start)
		resume()
		mustRoute(t, s, d, req)
		// A decision faster than the budget never waited for the hung predictor (its client had
		// already marked it not ready): not a trial.
		if took < pdbBudget*9/10 {
			fast = append(fast, took.Round(time.Millisecond))
			continue
		}
		stalled = append(stalled, took.Round(time.Millisecond))
	}
	sorted := slices.Sorted(slices.Values(stalled))
	median := sorted[len(sorted)/2]
	t.Logf("decisions with the producer stalled on a hung predictor: %v (median %s); budget %s + slack %s; %d faster "+
		"decisions not counted: %v", stalled, median, pdbBudget, pdbSlack, len(fast), fast)
	if median > pdbBudget+pdbSlack {
		t.Fatalf("the median decision with a producer overrunning the %s PrepareData budget took %s (> %s): the EPP waited "+
			"for the producer instead of cancelling it at the budget (trials %v, seed %d)", pdbBudget, median, pdbBudget+pdbSlack, stalled, s.Seed)
	}
}

// awaitPredictedProfile sends SLO requests through the gateway until one runs the
// predicted-latency profile (the EPP's predictor is ready), within predictorWarmup. The
// completed requests are also the predictor's training data.
func awaitPredictedProfile(t harness.TestingT, s *harness.Suite, slo map[string]string, mk func() []byte) {
	t.Helper()
	deadline := time.Now().Add(s.Timeouts.PredictorWarmup.D())
	hdr := map[string]string{"content-type": "application/json"}
	for k, v := range slo {
		hdr[k] = v
	}
	var profiles []string
	for n := 1; ; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		res, err := s.Gateway.Do(ctx, &gateway.Request{Method: http.MethodPost, Path: pathCompletions, Headers: hdr, Body: mk()})
		cancel()
		if err != nil {
			t.Fatalf("SLO request %d through the gateway: %v", n, err)
		}
		if res.Status != http.StatusOK {
			t.Fatalf("SLO request %d: status %d: %s", n, res.Status, strings.TrimSpace(string(res.Body)))
		}
		p := res.Headers.Get(profileHeader)
		if p == pdbPredictedProfile {
			return
		}
		if len(profiles) < 5 {
			profiles = append(profiles, strconv.Quote(p))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no SLO request ran the %q profile within predictorWarmup %s (%d requests; first profiles %s): the predictor "+
				"never became ready, so the producer cannot be made to overrun (seed %d)", pdbPredictedProfile,
				s.Timeouts.PredictorWarmup.D(), n, strings.Join(profiles, ", "), s.Seed)
		}
		if n%50 == 0 {
			time.Sleep(s.Timeouts.Poll.D())
		}
	}
}
