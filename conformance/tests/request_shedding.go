package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// Rule constants of RequestShedding (SPEC §3 saturation, §4.3 latency-slo-admitter, §6).
const (
	// shedRequests is how many sheddable and how many non-sheddable requests are sent once the
	// EPP has observed the saturation; the rule is deterministic, so every one must comply.
	shedRequests = 20
	// shedImpossibleTTFT is an SLO (ms) no endpoint can meet.
	shedImpossibleTTFT = "0.001"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "RequestShedding",
		Description: "With every endpoint saturated (waiting queue and KV-cache use above the saturation thresholds), a sheddable " +
			"request (InferenceObjective priority < 0) carrying an SLO no endpoint can meet MUST be refused with 429, and " +
			"requests with priority ≥ 0 MUST still be routed.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureRequestShedding},
		Preconditions: []string{
			"the EPP knows the InferenceObjective " + harness.SheddableObjective + " with priority -1 (the apiserver source creates it; " +
				"with a static pool configure it, the reference takes --objectives)",
			"the saturation detector uses thresholds below waiting 50 and KV-cache use 0.99 (upstream defaults: 5 and 0.8)",
			"the EPP observes new metrics within metricsPropagation",
		},
		Source: "llm-d-router v0.10.0 pkg/epp/requestcontrol/admission.go LegacyAdmissionController.Admit/ " +
			"rejectIfSheddableAndSaturated (priority < 0 and utilization saturation ≥ 1 ⇒ 429; " +
			"framework/plugins/flowcontrol/saturationdetector/utilization/detector.go Saturation); same in GIE " +
			"v1.5.0. SPEC §3, §6.",
		Run: runRequestShedding,
	})
}

// shedResult is one request's outcome: the HTTP status and, when it was routed, the endpoint.
func sendForStatus(s *harness.Suite, body []byte, headers map[string]string) (status int, endpoint string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	hdr := map[string]string{"content-type": "application/json"}
	for k, v := range headers {
		hdr[k] = v
	}
	res, err := s.Gateway.Do(ctx, &gateway.Request{Method: http.MethodPost, Path: pathCompletions, Headers: hdr, Body: body})
	if err != nil {
		return 0, "", fmt.Errorf("gateway: %w", err)
	}
	if res.Immediate {
		return res.Status, "", nil
	}
	if res.Endpoint == "" {
		return res.Status, "", fmt.Errorf("the gateway did not forward the request (status %d: %s)", res.Status, strings.TrimSpace(string(res.Body)))
	}
	return res.Status, res.Endpoint, nil
}

func runRequestShedding(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 1)
	r := s.Rand(t)
	sheddable := map[string]string{
		"x-gateway-inference-objective": harness.SheddableObjective,
		"x-slo-ttft-ms":                 shedImpossibleTTFT,
	}
	body := func() []byte { return completionBody(s.ModelName, uniquePrompt(s, t, r, 16), nil) }
	inPool := map[string]bool{}
	for _, a := range pool {
		inPool[a] = true
	}
	// Registered before the pins, so it runs after they are undone: wait until sheddable
	// requests are admitted again, so later tests start from an unsaturated pool.
	t.Cleanup(func() {
		err := s.Eventually(s.Timeouts.MetricsPropagation.D(), 1, func() error {
			status, _, err := sendForStatus(s, body(), map[string]string{"x-gateway-inference-objective": harness.SheddableObjective})
			if err != nil {
				return err
			}
			if status == http.StatusTooManyRequests {
				return fmt.Errorf("sheddable requests are still refused with 429")
			}
			return nil
		})
		if err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	pins := map[string]vllm.FakeMetrics{}
	for _, a := range pool {
		pins[a] = vllm.FakeMetrics{RunningRequests: 16, WaitingRequests: 50, KVCacheUsage: 0.99}
	}
	pinAll(t, s, pins)

	harness.MustEventually(t, s, s.Timeouts.MetricsPropagation.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
		status, ep, err := sendForStatus(s, body(), sheddable)
		if err != nil {
			return err
		}
		if status != http.StatusTooManyRequests {
			return fmt.Errorf("a sheddable request on the saturated pool got %d (routed to %q), want 429", status, ep)
		}
		return nil
	})

	for i := 0; i < shedRequests; i++ {
		status, ep, err := sendForStatus(s, body(), sheddable)
		if err != nil {
			t.Fatalf("sheddable request %d: %v", i+1, err)
		}
		if status != http.StatusTooManyRequests {
			t.Fatalf("sheddable request %d of %d on the saturated pool got %d (routed to %q), want 429 (seed %d)", i+1, shedRequests, status, ep, s.Seed)
		}
		status, ep, err = sendForStatus(s, body(), nil)
		if err != nil {
			t.Fatalf("non-sheddable request %d: %v", i+1, err)
		}
		if ep == "" || !inPool[ep] {
			t.Fatalf("non-sheddable request %d of %d was not routed into the pool: status %d, endpoint %q (seed %d)", i+1, shedRequests, status, ep, s.Seed)
		}
	}
	t.Logf("%d sheddable requests refused with 429, %d requests with priority 0 routed", shedRequests, shedRequests)
}
