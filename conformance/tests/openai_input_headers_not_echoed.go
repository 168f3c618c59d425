package tests

import (
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// Request control headers (SPEC §5.2, §10): llm-d-router v0.10.0's names and the GIE v1.5.0
// names it keeps as aliases (llm-d-router v0.10.0 pkg/epp/metadata/consts.go).
const (
	hdrObjective          = "x-llm-d-inference-objective"
	hdrObjectiveLegacy    = "x-gateway-inference-objective"
	hdrRewrite            = "x-llm-d-model-name-rewrite"
	hdrRewriteLegacy      = "x-gateway-model-name-rewrite"
	hdrFairnessID         = "x-llm-d-inference-fairness-id"
	hdrFairnessIDLegacy   = "x-gateway-inference-fairness-id"
	hdrTTFTSLO            = "x-llm-d-slo-ttft-ms"
	hdrTTFTSLOLegacy      = "x-slo-ttft-ms"
	hdrTPOTSLO            = "x-llm-d-slo-tpot-ms"
	hdrTPOTSLOLegacy      = "x-slo-tpot-ms"
	inputHeadersSentRound = 6
)

// gatewayInputHeaders are the control headers a gateway (or client) sends the EPP as input:
// round 0 mod 3 the GIE v1.5.0 names, 1 the llm-d-router v0.10.0 names, 2 both. The model-name
// rewrite names the base model itself and the SLOs are loose, so honouring them changes nothing;
// nonce must be lower case (objective names are Kubernetes object names).
func gatewayInputHeaders(s *harness.Suite, nonce string, round int) map[string]string {
	legacy := map[string]string{
		hdrObjectiveLegacy:  "conformance-objective-" + nonce,
		hdrFairnessIDLegacy: "conformance-fairness-" + nonce,
		hdrRewriteLegacy:    s.ModelName,
		hdrTTFTSLOLegacy:    "600000",
		hdrTPOTSLOLegacy:    "600000",
	}
	current := map[string]string{
		hdrObjective:  "conformance-objective-" + nonce,
		hdrFairnessID: "conformance-fairness-" + nonce,
		hdrRewrite:    s.ModelName,
		hdrTTFTSLO:    "600000",
		hdrTPOTSLO:    "600000",
	}
	switch round % 3 {
	case 0:
		return legacy
	case 1:
		return current
	}
	for k, v := range legacy {
		current[k] = v
	}
	return current
}

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIInputHeadersNotEchoed",
		Description: "The EPP's request header mutation MUST NOT set the request control headers back onto the request, under " +
			"llm-d-router v0.10.0's names (x-llm-d-inference-objective, x-llm-d-inference-fairness-id, x-llm-d-model-name-rewrite, " +
			"x-llm-d-slo-ttft-ms, x-llm-d-slo-tpot-ms) or their GIE v1.5.0 aliases (x-gateway-inference-objective, " +
			"x-gateway-inference-fairness-id, x-gateway-model-name-rewrite, x-slo-ttft-ms, x-slo-tpot-ms).",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureOpenAIRequestParsing},
		Preconditions: []string{"the EPP reads the request control headers", "an unknown objective name means the default priority",
			"an SLO of 600000 ms is met by every endpoint"},
		Source: "llm-d-router v0.10.0 pkg/epp/util/request/headers.go IsSystemOwnedHeader (x-llm-d-* control headers " +
			"and their x-gateway-*/x-slo-* aliases), applied by pkg/epp/handlers/request.go generateHeaders; GIE v1.5.0 " +
			"same function with the x-gateway-* names only. SPEC §5.2, §10.",
		Run: runOpenAIInputHeadersNotEchoed,
	})
}

// isControlHeader reports whether k is a request control header name, current or legacy.
func isControlHeader(k string) bool {
	return (strings.HasPrefix(k, "x-gateway-") && k != extprocclient.DestinationKey) ||
		(strings.HasPrefix(k, "x-llm-d-") && k != droppedReasonHeader) || strings.HasPrefix(k, "x-slo-")
}

func runOpenAIInputHeadersNotEchoed(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	for i := 0; i < inputHeadersSentRound; i++ {
		in := gatewayInputHeaders(s, strings.ToLower(s.Nonce(t)), i)
		body := chatBody(s.ModelName, uniquePrompt(s, t, r, 12))
		path := pathChat
		if i%2 == 1 {
			body, path = completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil), pathCompletions
		}
		req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", path, authority, body, in), Body: body}
		d := exchange(t, s, c, req)
		mustRoute(t, s, d, req)
		for k := range d.Headers {
			if _, isInput := in[k]; isInput || isControlHeader(k) {
				t.Fatalf("%s: the EPP set the input header %s=%q back onto the request (sent %v; set headers: %v)", describe(req), k, d.Headers[k], in, d.Headers)
			}
		}
	}
}
