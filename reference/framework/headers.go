package framework

import "strings"

// Request control headers (SPEC §5.2, §10). llm-d-router v0.10.0 renamed them to x-llm-d-* and
// keeps the names of GIE v1.5.0 as deprecated aliases (llm-d-router v0.10.0
// pkg/epp/metadata/consts.go: ObjectiveKey/OldObjectiveKey, ModelNameRewriteKey/
// OldModelNameRewriteKey, FlowFairnessIDKey/OldFlowFairnessIDKey, TTFTSLOHeaderKey/
// OldTTFTSLOHeaderKey, TPOTSLOHeaderKey/OldTPOTSLOHeaderKey). Read them with RequestHeader,
// never by indexing the header map, so every alias works.
const (
	// HeaderObjective names the request's InferenceObjective (its priority).
	HeaderObjective = "x-llm-d-inference-objective"
	// HeaderObjectiveLegacy is HeaderObjective's GIE v1.5.0 name.
	HeaderObjectiveLegacy = "x-gateway-inference-objective"
	// HeaderModelNameRewrite names the model the request is served by (SPEC §9.4).
	HeaderModelNameRewrite = "x-llm-d-model-name-rewrite"
	// HeaderModelNameRewriteLegacy is HeaderModelNameRewrite's GIE v1.5.0 name.
	HeaderModelNameRewriteLegacy = "x-gateway-model-name-rewrite"
	// HeaderFairnessID names the request's flow (flow control fairness).
	HeaderFairnessID = "x-llm-d-inference-fairness-id"
	// HeaderFairnessIDLegacy is HeaderFairnessID's GIE v1.5.0 name.
	HeaderFairnessIDLegacy = "x-gateway-inference-fairness-id"
	// HeaderTTFTSLO is the request's time-to-first-token SLO in milliseconds.
	HeaderTTFTSLO = "x-llm-d-slo-ttft-ms"
	// HeaderTTFTSLOLegacy is HeaderTTFTSLO's GIE v1.5.0 name.
	HeaderTTFTSLOLegacy = "x-slo-ttft-ms"
	// HeaderTPOTSLO is the request's time-per-output-token SLO in milliseconds.
	HeaderTPOTSLO = "x-llm-d-slo-tpot-ms"
	// HeaderTPOTSLOLegacy is HeaderTPOTSLO's GIE v1.5.0 name.
	HeaderTPOTSLOLegacy = "x-slo-tpot-ms"
	// DefaultFairnessID is the flow of a request without a fairness id (llm-d-router v0.10.0
	// metadata.DefaultFairnessID).
	DefaultFairnessID = "default-flow"
)

// headerAliases maps each current name to its names in lookup order: current first, then the
// deprecated alias (llm-d-router v0.10.0 pkg/epp/metadata/consts.go headerAliases).
var headerAliases = map[string][2]string{
	HeaderObjective:        {HeaderObjective, HeaderObjectiveLegacy},
	HeaderModelNameRewrite: {HeaderModelNameRewrite, HeaderModelNameRewriteLegacy},
	HeaderFairnessID:       {HeaderFairnessID, HeaderFairnessIDLegacy},
	HeaderTTFTSLO:          {HeaderTTFTSLO, HeaderTTFTSLOLegacy},
	HeaderTPOTSLO:          {HeaderTPOTSLO, HeaderTPOTSLOLegacy},
}

// RequestHeader returns the value of the control header name (one of the Header* constants,
// current name) from headers (keys lower case), and the name it was found under. The current
// name wins when both are present, even with an empty value, as in llm-d-router v0.10.0
// (pkg/epp/metadata/consts.go GetLowerCaseHeaderValue: the first alias present in the map); a
// name without aliases is looked up as is. ok is false when no name is present.
func RequestHeader(headers map[string]string, name string) (value, foundAs string, ok bool) {
	name = strings.ToLower(name)
	names, aliased := headerAliases[name]
	if !aliased {
		v, ok := headers[name]
		return v, name, ok
	}
	for _, n := range names {
		if v, ok := headers[n]; ok {
			return v, n, true
		}
	}
	return "", "", false
}

// ControlHeaders returns every name, current and deprecated, of the request control headers:
// the headers the EPP reads and never sets back onto the request (llm-d-router v0.10.0
// pkg/epp/util/request/headers.go InputControlHeaders).
func ControlHeaders() []string {
	out := make([]string, 0, 2*len(headerAliases))
	for _, n := range []string{HeaderObjective, HeaderModelNameRewrite, HeaderFairnessID, HeaderTTFTSLO, HeaderTPOTSLO} {
		out = append(out, headerAliases[n][0], headerAliases[n][1])
	}
	return out
}
