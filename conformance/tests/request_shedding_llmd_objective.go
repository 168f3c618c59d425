package tests

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/vllm"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "RequestSheddingLLMDObjective",
		Description: "The EPP MUST read the request's InferenceObjective from llm-d-router v0.10.0's header x-llm-d-inference-objective " +
			"as from x-gateway-inference-objective, the x-llm-d-* name winning when both are sent: with every endpoint saturated, " +
			"a request naming the sheddable objective under the new name is refused with 429, and one naming an unknown objective " +
			"under the new name and the sheddable one under the old name is routed.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureRequestShedding},
		Preconditions: []string{
			"the EPP knows the InferenceObjective " + harness.SheddableObjective + " with priority -1 (as RequestShedding)",
			"an unknown objective name means priority 0",
			"the saturation detector uses thresholds below waiting 50 and KV-cache use 0.99",
			"the EPP observes new metrics within metricsPropagation",
		},
		Source: "SPEC §3, §10 (llm-d-router v0.10.0 pkg/epp/metadata/consts.go ObjectiveKey, OldObjectiveKey, " +
			"GetLowerCaseHeaderValue; pkg/epp/requestcontrol/director.go getInferenceObjective; " +
			"pkg/epp/requestcontrol/admission.go rejectIfSheddableAndSaturated)",
		Run: runRequestSheddingLLMDObjective,
	})
}

func runRequestSheddingLLMDObjective(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 1)
	r := s.Rand(t)
	body := func() []byte { return completionBody(s.ModelName, uniquePrompt(s, t, r, 16), nil) }
	sheddable := map[string]string{hdrObjective: harness.SheddableObjective}
	// The new name names an objective nobody defined (priority 0); the old one the sheddable one.
	mixed := map[string]string{hdrObjective: "eppkit-conformance-unknown-" + strings.ToLower(s.Nonce(t)), hdrObjectiveLegacy: harness.SheddableObjective}
	t.Cleanup(func() {
		err := harness.Eventually(s.Timeouts.MetricsPropagation.D(), s.Timeouts.Poll.D(), 1, func() error {
			status, _, err := sendForStatus(s, body(), sheddable)
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
			return fmt.Errorf("a request with %s: %s on the saturated pool got %d (routed to %q), want 429", hdrObjective, harness.SheddableObjective, status, ep)
		}
		return nil
	})
	for i := 0; i < shedRequests/2; i++ {
		status, ep, err := sendForStatus(s, body(), sheddable)
		if err != nil {
			t.Fatalf("request %d with %v: %v", i+1, sheddable, err)
		}
		if status != http.StatusTooManyRequests {
			t.Fatalf("request %d with %v on the saturated pool got %d (routed to %q), want 429 (seed %d)", i+1, sheddable, status, ep, s.Seed)
		}
		status, ep, err = sendForStatus(s, body(), mixed)
		if err != nil {
			t.Fatalf("request %d with %v: %v", i+1, mixed, err)
		}
		if ep == "" {
			t.Fatalf("request %d with %v was not routed (status %d): the legacy header won over %s (seed %d)", i+1, mixed, status, hdrObjective, s.Seed)
		}
	}
	t.Logf("%d requests naming the sheddable objective in %s refused with 429; %d naming an unknown one there and the sheddable one in %s routed",
		shedRequests/2, hdrObjective, shedRequests/2, hdrObjectiveLegacy)
}
