// Package latency implements predicted-latency routing (SPEC §4): the `predicted-latency-producer`
// PrepareData plugin, which asks a latency predictor for every candidate's TTFT and TPOT, turns
// them into SLO headroom and collects training samples from the responses; the
// `prefix-cache-affinity-filter` and `slo-headroom-tier-filter` filters; the `latency-scorer`
// (with its composite fallback when no prediction is available); and the `latency-slo-admitter`.
//
// # Upstream source
//
// Rules restated in our own words from the Gateway API Inference Extension v1.5.0
// (sigs.k8s.io/gateway-api-inference-extension@v1.5.0):
//
//	pkg/epp/framework/plugins/requestcontrol/requestdataproducer/predictedlatency/  (producer)
//	pkg/epp/framework/plugins/datalayer/attribute/latency/data_types.go           (LatencyPredictionInfo)
//	pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity/plugin.go     (affinity filter)
//	pkg/epp/framework/plugins/scheduling/filter/sloheadroomtier/plugin.go         (tier filter)
//	pkg/epp/framework/plugins/scheduling/scorer/latency/plugin.go                 (latency-scorer)
//	pkg/epp/framework/plugins/requestcontrol/admitter/latencyslo/plugin.go        (admitter)
//
// # eppkit differences (SPEC §4)
//
//   - A malformed SLO header is framework.ErrBadRequest (400); upstream logged it and used 0.
//   - Input length is characters/4 of the hashed input (prefix.InputText), not a word count.
//   - A request that gives only one of the two SLOs is not judged on the other: the missing
//     dimension's headroom is 0 and valid. A request without any SLO header has headroom
//     0 − predicted in both dimensions (negative tier), as upstream.
//   - TPOT is trained from every streamed response, whatever upstream's streamingMode says:
//     TTFT = dispatch → first streamed token (→ end of response when not streaming),
//     TPOT = (end − first token)/(tokens − 1).
//   - Every random choice uses a seeded source (Handle.Seed and the plugin name).
package latency

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/reference/framework"
)

// Plugin types (upstream names, SPEC §1) and the data key of this package.
const (
	ProducerType       = "predicted-latency-producer"
	AffinityFilterType = "prefix-cache-affinity-filter"
	TierFilterType     = "slo-headroom-tier-filter"
	ScorerType         = "latency-scorer"
	AdmitterType       = "latency-slo-admitter"

	// LatencyPredictionInfoKey is the data key under which the producer puts a
	// *LatencyPredictionInfo on each candidate (upstream attribute/latency.LatencyPredictionInfoKey).
	LatencyPredictionInfoKey = "LatencyPredictionInfoKey"

	// HeaderTTFTSLO and HeaderTPOTSLO carry the request's SLOs in milliseconds (float); the
	// GIE v1.5.0 names x-slo-ttft-ms and x-slo-tpot-ms are aliases (framework.RequestHeader).
	HeaderTTFTSLO = framework.HeaderTTFTSLO
	HeaderTPOTSLO = framework.HeaderTPOTSLO

	// CharactersPerToken is the estimate of characters per token for the input length
	// (SPEC §4.1; llm-d's AverageCharactersPerToken).
	CharactersPerToken = 4
)

// LatencyPredictionInfo is the attribute the producer puts on every candidate when a prediction
// is available, always as a pointer. Latencies and headrooms are in milliseconds. Headroom =
// SLO − predicted: positive or zero meets the SLO, negative violates it.
type LatencyPredictionInfo struct {
	// TTFT and TPOT are the predicted time to first token and time per output token (ms).
	TTFT float64
	TPOT float64
	// TTFTHeadroom and TPOTHeadroom are SLO − prediction (ms); see SLO for missing SLOs.
	TTFTHeadroom float64
	TPOTHeadroom float64
	// TTFTValid and TPOTValid are TTFTHeadroom ≥ 0 and TPOTHeadroom ≥ 0.
	TTFTValid bool
	TPOTValid bool
	// DispatchedRequests is how many requests this EPP dispatched to the endpoint that have not
	// finished (upstream dispatchedRequestCount); 0 means the endpoint is idle for this EPP.
	DispatchedRequests int
	// PromptTokensInFlight is the prompt tokens this EPP dispatched to the endpoint whose prefill
	// has not finished (no first token yet).
	PromptTokensInFlight int64
}

// Valid reports whether both headrooms are ≥ 0 (the positive tier).
func (l *LatencyPredictionInfo) Valid() bool { return l != nil && l.TTFTValid && l.TPOTValid }

// SLO is a request's latency objectives, parsed from the x-slo-* headers.
type SLO struct {
	// TTFT and TPOT in ms; meaningful only when HasTTFT / HasTPOT.
	TTFT, TPOT       float64
	HasTTFT, HasTPOT bool
}

// Any reports whether the request carries at least one SLO.
func (s SLO) Any() bool { return s.HasTTFT || s.HasTPOT }

// ParseSLO reads x-llm-d-slo-ttft-ms and x-llm-d-slo-tpot-ms (aliases x-slo-ttft-ms and
// x-slo-tpot-ms; the current name wins when both are sent, llm-d-router v0.10.0
// pkg/epp/metadata/consts.go) from the request's headers. A missing or blank header means no
// SLO. A value that is not a finite number ≥ 0 is an error wrapping framework.ErrBadRequest that
// names the header it came in (SPEC §4.1 [eppkit]; llm-d-router v0.10.0
// dataproducer/predictedlatency parseFloatHeader treats it as 0).
func ParseSLO(req *framework.LLMRequest) (SLO, error) {
	var s SLO
	if req == nil {
		return s, nil
	}
	var errs []error
	parse := func(name string, dst *float64, has *bool) {
		raw, as, ok := framework.RequestHeader(req.Headers, name)
		if !ok || strings.TrimSpace(raw) == "" {
			return
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			errs = append(errs, fmt.Errorf("header %s: %q is not a latency in milliseconds (a finite number >= 0): %w",
				as, raw, framework.ErrBadRequest))
			return
		}
		*dst, *has = v, true
	}
	parse(HeaderTTFTSLO, &s.TTFT, &s.HasTTFT)
	parse(HeaderTPOTSLO, &s.TPOT, &s.HasTPOT)
	if len(errs) > 0 {
		return SLO{}, errors.Join(errs...)
	}
	return s, nil
}

// Headroom computes the headrooms of one prediction against slo (SPEC §4.3). tpotBudget is
// the TPOT SLO to judge against, already multiplied by sloBufferFactor and tightened to the
// strictest TPOT SLO running on the endpoint; it is used only when slo.HasTPOT.
//
//   - no SLO at all: both headrooms are 0 − prediction (negative tier; the scorer then prefers
//     the lowest predicted latency);
//   - only one SLO: the other dimension is not judged (headroom 0, valid).
func Headroom(slo SLO, predTTFT, predTPOT, tpotBudget float64) (ttftH, tpotH float64) {
	if !slo.Any() {
		return -predTTFT, -predTPOT
	}
	if slo.HasTTFT {
		ttftH = slo.TTFT - predTTFT
	}
	if slo.HasTPOT {
		tpotH = tpotBudget - predTPOT
	}
	return ttftH, tpotH
}

func typed(typ, name string) framework.TypedName {
	if name == "" {
		name = typ
	}
	return framework.TypedName{Type: typ, Name: name}
}

// predictionOf returns the endpoint's *LatencyPredictionInfo, nil when missing or mistyped.
func predictionOf(ep *framework.Endpoint) *LatencyPredictionInfo {
	if ep == nil {
		return nil
	}
	info, ok := framework.AttributeAs[*LatencyPredictionInfo](ep, LatencyPredictionInfoKey)
	if !ok {
		return nil
	}
	return info
}
