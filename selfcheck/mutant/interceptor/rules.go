package interceptor

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/selfcheck/mutant"
)

// Header names the protocol mutants read or rewrite (SPEC §4.1, §5.2; upstream v1.5.0
// pkg/epp/metadata/consts.go and pkg/common/request).
const (
	headerRequestID   = "x-request-id"
	headerObjective   = "x-gateway-inference-objective"
	headerModelRewite = "x-gateway-model-name-rewrite"
	headerTTFTSLO     = "x-slo-ttft-ms"
	headerTPOTSLO     = "x-slo-tpot-ms"
	// llm-d-router v0.10.0's names of the control headers (pkg/epp/metadata/consts.go); the
	// four above are their GIE v1.5.0 aliases.
	headerLLMDObjective  = "x-llm-d-inference-objective"
	headerLLMDRewrite    = "x-llm-d-model-name-rewrite"
	headerLLMDFairnessID = "x-llm-d-inference-fairness-id"
	headerLLMDTTFTSLO    = "x-llm-d-slo-ttft-ms"
	headerLLMDTPOTSLO    = "x-llm-d-slo-tpot-ms"
	headerContentLen     = "content-length"
	// headerProfile is the reference EPP's response header naming the primary profile [eppkit].
	headerProfile = "x-eppkit-profile"
	// headerSessionToken carries the session token both ways (llm-d-router v0.10.0
	// util/sessionaffinity DefaultHeader).
	headerSessionToken = "x-session-token"
	// headerScores is the key of every candidate's score in the pick's dynamic metadata
	// namespace envoy.lb (llm-d-router v0.10.0 DestinationEndpointScoresKey).
	headerScores = "x-gateway-destination-endpoint-scores"
	// headerDroppedReason names why flow control refused a request (llm-d-router v0.10.0
	// pkg/common/error/error.go RequestDroppedReasonHeaderKey).
	headerDroppedReason = "x-llm-d-request-dropped-reason"
	// headerPath is the request path pseudo-header Envoy sends in request_headers.
	headerPath = ":path"
	// sseDone is the marker that ends an OpenAI SSE stream.
	sseDone = "data: [DONE]"
	// servingBeforeReadyFor is how long serving-before-endpoints refuses every request: three
	// times the default servingGrace.
	servingBeforeReadyFor = 6 * time.Second
)

// rule is one protocol mutant: request rewrites (or fails on) a gateway message in place,
// response turns an EPP message into what the gateway gets. Nil hooks pass messages through.
type rule struct {
	request  func(st *stream, msg *extprocv3.ProcessingRequest) error
	response func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending)
	// detach keeps the EPP's stream open after the gateway's ended (the client's going away
	// never reaches the EPP); it ends when the EPP ends it.
	detach bool
}

// pass forwards resp unchanged.
func pass(resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
	return []*extprocv3.ProcessingResponse{resp}, nil
}

// rules are the protocol mutants, by name; "" is the transparent proxy. Each breaks the rule its
// catalogue entry (selfcheck/mutant) names, and nothing else.
var rules = map[mutant.Name]rule{
	"": {},

	// The pick header and the pick metadata name different endpoints (both pool members: the
	// value is an earlier pick of this EPP).
	mutant.HeaderMetadataDisagree: {response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		hm := commonOf(resp).GetHeaderMutation()
		header := setHeaderValue(hm, extprocclient.DestinationKey)
		md := pickMetadata(resp)
		pick := md
		if pick == "" {
			pick = header
		}
		if pick == "" {
			return pass(resp)
		}
		other := st.i.otherPick(pick)
		if other == "" {
			return pass(resp)
		}
		if header == "" {
			// Only the metadata carries the pick: add a header that disagrees with it.
			addSetHeader(resp, extprocclient.DestinationKey, other)
		} else {
			setPickMetadata(resp, other)
		}
		return pass(resp)
	}},

	// A non-empty subset hint is hidden from the EPP, so its pick ignores the hint (an empty
	// hint still reaches it).
	mutant.SubsetIgnored: {request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		fm := msg.GetMetadataContext().GetFilterMetadata()
		ns := fm[extprocclient.SubsetHintNamespace]
		if v, ok := ns.GetFields()[extprocclient.SubsetHintKey]; ok && len(v.GetListValue().GetValues()) > 0 {
			delete(ns.Fields, extprocclient.SubsetHintKey)
			if len(ns.Fields) == 0 {
				delete(fm, extprocclient.SubsetHintNamespace)
			}
		}
		return nil
	}},

	// An ImmediateResponse 503 (no eligible endpoint) reaches the gateway as 500.
	mutant.NoEndpoints500: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		restatus(resp, typev3.StatusCode_ServiceUnavailable, typev3.StatusCode_InternalServerError)
		return pass(resp)
	}},

	// An ImmediateResponse 400 (malformed body) reaches the gateway as 500.
	mutant.BadRequest500: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		restatus(resp, typev3.StatusCode_BadRequest, typev3.StatusCode_InternalServerError)
		return pass(resp)
	}},

	// After an ImmediateResponse the stream ends with status OK.
	mutant.StreamClosedAfterRefuse: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if resp.GetImmediateResponse() != nil {
			return []*extprocv3.ProcessingResponse{resp}, &ending{}
		}
		return pass(resp)
	}},

	// After an ImmediateResponse the stream fails with gRPC Internal.
	mutant.RefusalBreaksStream: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if resp.GetImmediateResponse() != nil {
			return []*extprocv3.ProcessingResponse{resp}, &ending{err: status.Error(codes.Internal, "ext_proc: mutant refusal-breaks-stream")}
		}
		return pass(resp)
	}},

	// The streamed request body goes back to the gateway in one chunk, however long.
	mutant.BodyNotChunked: {response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		sr := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			held := st.held
			st.held = nil
			return append(held, resp), nil
		}
		st.held = append(st.held, resp)
		if !sr.GetEndOfStream() {
			return nil, nil
		}
		var body []byte
		for _, h := range st.held {
			body = append(body, h.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()...)
		}
		sr.Body = body // the last message, with end_of_stream, carries the whole body
		st.held = nil
		return []*extprocv3.ProcessingResponse{resp}, nil
	}},

	// The Content-Length the EPP sets on the request is one byte longer than the body it returns.
	mutant.ContentLengthWrong: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if !requestPhase(resp) {
			return pass(resp)
		}
		for _, o := range commonOf(resp).GetHeaderMutation().GetSetHeaders() {
			h := o.GetHeader()
			if !strings.EqualFold(h.GetKey(), headerContentLen) {
				continue
			}
			n, err := strconv.Atoi(strings.TrimSpace(valueOf(h)))
			if err != nil {
				continue
			}
			setValue(h, strconv.Itoa(n+1))
		}
		return pass(resp)
	}},

	// The SLO headers never reach the EPP.
	mutant.SLOIgnored: {request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		removeHeaders(msg.GetRequestHeaders().GetHeaders(), headerTTFTSLO, headerTPOTSLO, headerLLMDTTFTSLO, headerLLMDTPOTSLO)
		return nil
	}},

	// x-llm-d-model-name-rewrite never reaches the EPP (an EPP that knows only the GIE v1.5.0 name).
	mutant.LLMDRewriteHeaderIgnored: {request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		removeHeaders(msg.GetRequestHeaders().GetHeaders(), headerLLMDRewrite)
		return nil
	}},

	// x-llm-d-inference-objective never reaches the EPP (an EPP that knows only the GIE v1.5.0 name).
	mutant.LLMDObjectiveHeaderIgnored: {request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		removeHeaders(msg.GetRequestHeaders().GetHeaders(), headerLLMDObjective)
		return nil
	}},

	// When a request carries a control header under both names, the x-llm-d-* one is dropped, so
	// the GIE v1.5.0 name wins.
	mutant.LegacyControlHeaderWins: {request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		h := msg.GetRequestHeaders().GetHeaders()
		for _, pair := range [][2]string{{headerLLMDObjective, headerObjective}, {headerLLMDRewrite, headerModelRewite},
			{headerLLMDFairnessID, "x-gateway-inference-fairness-id"}, {headerLLMDTTFTSLO, headerTTFTSLO}, {headerLLMDTPOTSLO, headerTPOTSLO}} {
			if hasHeader(h, pair[0]) && hasHeader(h, pair[1]) {
				removeHeaders(h, pair[0])
			}
		}
		return nil
	}},

	// The request-headers response sets the gateway's x-llm-d-inference-objective back.
	mutant.LLMDInputHeadersEchoed: {response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if resp.GetRequestHeaders() != nil && st.llmdObjective != "" {
			addSetHeader(resp, headerLLMDObjective, st.llmdObjective)
		}
		return pass(resp)
	}},

	// An objective header whose value cannot name an object never reaches the EPP, so the EPP
	// routes the request with the default objective (llm-d-router v0.10.0's behaviour) instead
	// of refusing it with 400.
	mutant.MalformedObjectiveIgnored: {request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		h := msg.GetRequestHeaders().GetHeaders()
		for _, k := range []string{headerLLMDObjective, headerObjective} {
			if v := strings.TrimSpace(headerValue(h, k)); hasHeader(h, k) && v != "" && !dns1123Subdomain.MatchString(v) {
				removeHeaders(h, k)
			}
		}
		return nil
	}},

	// Every request reaches the EPP as the sheddable objective, so requests with priority ≥ 0
	// are shed under saturation too.
	mutant.CriticalShed: {request: func(st *stream, msg *extprocv3.ProcessingRequest) error {
		if h := msg.GetRequestHeaders().GetHeaders(); h != nil {
			removeHeaders(h, headerObjective)
			h.Headers = append(h.Headers, &corev3.HeaderValue{Key: headerObjective, RawValue: []byte(st.i.opts.SheddableObjective)})
		}
		return nil
	}},

	// The stream fails when an SSE response chunk ends inside "data: [DONE]", as an EPP whose
	// usage parser crashes on the split marker.
	mutant.UsageSplitDonePanics: {request: func(st *stream, msg *extprocv3.ProcessingRequest) error {
		if msg.GetResponseBody() == nil || !st.sse {
			return nil
		}
		if l := st.line; len(l) > len("data: ") && len(l) < len(sseDone) && strings.HasPrefix(sseDone, string(l)) {
			return status.Error(codes.Internal, "ext_proc: mutant usage-split-done-panics: data: [DONE] split across chunks")
		}
		return nil
	}},

	// The x-request-id the EPP generates for a request without one is not set on the request.
	mutant.RequestIDMissing: {response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if requestPhase(resp) && !st.hadRequestID {
			if hm := commonOf(resp).GetHeaderMutation(); hm != nil {
				hm.SetHeaders = dropOptions(hm.SetHeaders, headerRequestID)
			}
		}
		return pass(resp)
	}},

	// x-gateway-model-name-rewrite never reaches the EPP.
	mutant.ModelRewriteIgnored: {request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		removeHeaders(msg.GetRequestHeaders().GetHeaders(), headerModelRewite)
		return nil
	}},

	// The request-headers response sets the gateway's x-gateway-inference-objective back.
	mutant.InputHeadersEchoed: {response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if resp.GetRequestHeaders() != nil && st.objective != "" {
			addSetHeader(resp, headerObjective, st.objective)
		}
		return pass(resp)
	}},

	// A completions prompt that is not a string (a list of strings, token ids, lists of token
	// ids) is refused with 400, as an EPP that parses prompt as a string only.
	mutant.PromptListRefused: refuseWhen(func(path string, body []byte) string {
		if !pathIs(path, "/completions") || pathIs(path, "/chat/completions") {
			return ""
		}
		var b struct {
			Prompt json.RawMessage `json:"prompt"`
		}
		if json.Unmarshal(body, &b) != nil || len(b.Prompt) == 0 || b.Prompt[0] == '"' {
			return ""
		}
		return "prompt must be a string"
	}),

	// /v1/embeddings is not recognised: the body falls through to the completions parser, which
	// finds no prompt.
	mutant.EmbeddingsAsCompletions: refuseWhen(func(path string, _ []byte) string {
		if pathIs(path, "/embeddings") {
			return "field prompt is required for completions"
		}
		return ""
	}),

	// /v1/responses is not recognised: the body falls through to the completions parser.
	mutant.ResponsesRefused: refuseWhen(func(path string, _ []byte) string {
		if pathIs(path, "/responses") {
			return "field prompt is required for completions"
		}
		return ""
	}),

	// llm-d-router v0.10.0's other default paths (issue 31 item 8), each refused with 400 as by an
	// EPP that does not know it.
	mutant.ConversationsRefused: refuseWhen(func(path string, _ []byte) string {
		if pathIs(path, "/conversations") {
			return "field prompt is required for completions"
		}
		return ""
	}),
	mutant.RenderRefused: refuseWhen(func(path string, _ []byte) string {
		if pathIs(path, "/completions/render") {
			return "unsupported API endpoint"
		}
		return ""
	}),
	mutant.ImagesRefused: refuseWhen(func(path string, _ []byte) string {
		if pathIs(path, "/images/generations") {
			return "field prompt is required for completions"
		}
		return ""
	}),
	// count_tokens without a model is refused, as by an EPP that requires a model on every path.
	mutant.CountTokensModelRequired: refuseWhen(func(path string, body []byte) string {
		var b struct {
			Model *string `json:"model"`
		}
		if pathIs(path, "/messages/count_tokens") && json.Unmarshal(body, &b) == nil && b.Model == nil {
			return `field "model" is required`
		}
		return ""
	}),
	mutant.GenerateRefused: refuseWhen(func(path string, _ []byte) string {
		if pathIs(path, "/inference/v1/generate") {
			return "field prompt is required for completions"
		}
		return ""
	}),
	// A gRPC Generate body (a 5-byte frame header, then protobuf) is refused as malformed JSON.
	mutant.GRPCRefused: refuseWhen(func(path string, _ []byte) string {
		if pathIs(path, "/vllm.grpc.engine.VllmEngine/Generate") {
			return "request body: must be a JSON object"
		}
		return ""
	}),

	// Every request header the EPP sets is marked APPEND_IF_EXISTS_OR_ADD (the proto's zero
	// value): a gateway that honours append_action keeps the client's value beside the EPP's.
	mutant.HeadersAppended: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if requestPhase(resp) {
			for _, o := range commonOf(resp).GetHeaderMutation().GetSetHeaders() {
				o.AppendAction = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
			}
		}
		return pass(resp)
	}},

	// The pick metadata loses its ports: "10.0.0.1:8000,10.0.0.2:8000" reaches the gateway as
	// "10.0.0.1,10.0.0.2"; the header stays as the EPP set it.
	mutant.MetadataWithoutPort: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if pick := pickMetadata(resp); pick != "" {
			parts := strings.Split(pick, ",")
			for i, a := range parts {
				if host, _, err := net.SplitHostPort(strings.TrimSpace(a)); err == nil {
					parts[i] = host
				}
			}
			setPickMetadata(resp, strings.Join(parts, ","))
		}
		return pass(resp)
	}},

	// Streamed request_body responses that give the body back unchanged are held, and dropped
	// once the whole body came back unchanged: the gateway gets no answer to its body chunks
	// unless the EPP changed the body (then every held response goes out with the last one).
	mutant.BodyNotStreamedBack: {response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		sr := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			if resp.GetRequestHeaders() != nil || resp.GetImmediateResponse() != nil {
				st.held, st.returned = nil, nil
			}
			return pass(resp)
		}
		st.held = append(st.held, resp)
		st.returned = append(st.returned, sr.GetBody()...)
		if !sr.GetEndOfStream() {
			return nil, nil
		}
		held := st.held
		st.held = nil
		unchanged := bytes.Equal(st.returned, st.body)
		st.returned = nil
		if unchanged {
			return nil, nil
		}
		return held, nil
	}},

	// An ImmediateResponse 503 never reaches the gateway: the stream ends with gRPC Unavailable
	// instead, as an EPP that returns its "no endpoint" error from the stream handler.
	mutant.RefusalAsGRPCError: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if resp.GetImmediateResponse().GetStatus().GetCode() == typev3.StatusCode_ServiceUnavailable {
			return nil, &ending{err: status.Error(codes.Unavailable, "no eligible endpoint")}
		}
		return pass(resp)
	}},

	// The pick leaves the request_headers response (header and metadata) and reaches the gateway
	// as metadata on the last streamed request body response: after Envoy's router has chosen.
	mutant.LatePick: {response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if resp.GetRequestHeaders() != nil {
			pick := pickMetadata(resp)
			if hm := commonOf(resp).GetHeaderMutation(); hm != nil {
				if h := setHeaderValue(hm, extprocclient.DestinationKey); h != "" && pick == "" {
					pick = h
				}
				hm.SetHeaders = dropOptions(hm.SetHeaders, extprocclient.DestinationKey)
			}
			if pick != "" {
				delete(resp.GetDynamicMetadata().GetFields(), extprocclient.DestinationNamespace)
				st.latePick = pick
			}
			return pass(resp)
		}
		if sr := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse(); sr != nil && sr.GetEndOfStream() && st.latePick != "" {
			setPickMetadata(resp, st.latePick)
			st.latePick = ""
		}
		return pass(resp)
	}},

	// For servingBeforeReadyFor after the interceptor started, every request is refused with
	// ImmediateResponse 503 and its stream ends, while the health service (proxied) says
	// SERVING: an EPP that reports ready before it knows its endpoints.
	mutant.ServingBeforeReady: {response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if time.Since(st.i.started) >= servingBeforeReadyFor || !requestPhase(resp) {
			return pass(resp)
		}
		body, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "no endpoints known yet", "code": 503}})
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}, Body: body}}}}, &ending{}
	}},

	// The response body reaches the gateway as the model server sent it: the model name is never
	// restored to the client's.
	mutant.ModelNameNotRestored: replayResponseChunks(func(_ *stream, chunk []byte) []byte { return chunk }),

	// The model name is restored chunk by chunk with llm-d-router v0.10.0's byte replacement
	// (pkg/epp/handlers/server.go rewriteModelName), so a member split across chunks is missed.
	mutant.ModelNameRestoredPerChunk: replayResponseChunks(func(st *stream, chunk []byte) []byte {
		if st.rewriteTarget == "" || st.incomingModel == "" || st.rewriteTarget == st.incomingModel {
			return chunk
		}
		out := bytes.ReplaceAll(chunk, []byte(`"model":"`+st.rewriteTarget+`"`), []byte(`"model":"`+st.incomingModel+`"`))
		if bytes.Equal(out, chunk) {
			out = bytes.ReplaceAll(chunk, []byte(`"model": "`+st.rewriteTarget+`"`), []byte(`"model": "`+st.incomingModel+`"`))
		}
		return out
	}),

	// The session token never reaches the EPP: every request looks like a new session.
	mutant.SessionTokenIgnored: {request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		removeHeaders(msg.GetRequestHeaders().GetHeaders(), headerSessionToken)
		return nil
	}},

	// The response headers lose the session token: the client cannot keep its session.
	mutant.SessionTokenNotReturned: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if hm := resp.GetResponseHeaders().GetResponse().GetHeaderMutation(); hm != nil {
			hm.SetHeaders = dropOptions(hm.SetHeaders, headerSessionToken)
		}
		return pass(resp)
	}},

	// An empty or undecodable session token never reaches the EPP, which then routes the request
	// as a new session (llm-d-router v0.10.0's behaviour) instead of refusing it with 400.
	mutant.MalformedSessionTokenIgnored: {request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		h := msg.GetRequestHeaders().GetHeaders()
		if !hasHeader(h, headerSessionToken) {
			return nil
		}
		tok := strings.TrimSpace(headerValue(h, headerSessionToken))
		if _, err := base64.StdEncoding.DecodeString(tok); tok == "" || err != nil {
			removeHeaders(h, headerSessionToken)
		}
		return nil
	}},

	// Flow control (issue 31 item 6). Every request reaches the EPP without an objective, so
	// every request is in band 0: priority is ignored.
	mutant.FCPriorityIgnored: {request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		removeHeaders(msg.GetRequestHeaders().GetHeaders(), headerObjective, headerLLMDObjective)
		return nil
	}},

	// A refusal for an expired TTL never reaches the gateway: the request waits on forever.
	mutant.FCTTLNeverExpires: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if droppedReason(resp) == "rejected-ttl-expired" {
			return nil, nil
		}
		return pass(resp)
	}},

	// A refusal for a full band reaches the gateway only after fcFullBandDelay, as from an EPP
	// that queues the request anyway.
	mutant.FCFullBandWaits: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if droppedReason(resp) == "rejected-saturated" {
			time.Sleep(fcFullBandDelay)
		}
		return pass(resp)
	}},

	// The client's going away never reaches the EPP: its queued request stays queued.
	mutant.FCCancelNotPropagated: {detach: true},

	// Refusals lose x-llm-d-request-dropped-reason (status and body stay).
	mutant.FCDroppedReasonMissing: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if hm := resp.GetImmediateResponse().GetHeaders(); hm != nil {
			hm.SetHeaders = dropOptions(hm.SetHeaders, headerDroppedReason)
		}
		return pass(resp)
	}},

	// The endpoint scores name only the picked endpoints, as an EPP that publishes the
	// destinations' scores and not every candidate's.
	mutant.EndpointScoresPickedOnly: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		ns := resp.GetDynamicMetadata().GetFields()[extprocclient.DestinationNamespace].GetStructValue()
		scores := ns.GetFields()[headerScores].GetStructValue()
		if scores == nil {
			return pass(resp)
		}
		picked := map[string]bool{}
		for _, a := range strings.Split(ns.GetFields()[extprocclient.DestinationKey].GetStringValue(), ",") {
			picked[strings.TrimSpace(a)] = true
		}
		for k := range scores.Fields {
			if !picked[k] {
				delete(scores.Fields, k)
			}
		}
		return pass(resp)
	}},

	// Every ImmediateResponse without a dropped reason gets one, as an EPP that marks every refusal.
	mutant.DroppedReasonEverywhere: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		ir := resp.GetImmediateResponse()
		if ir == nil {
			return pass(resp)
		}
		if ir.Headers == nil {
			ir.Headers = &extprocv3.HeaderMutation{}
		}
		if setHeaderValue(ir.Headers, headerDroppedReason) == "" {
			reason := "rejected-shutting-down"
			switch ir.GetStatus().GetCode() {
			case typev3.StatusCode_TooManyRequests:
				reason = "rejected-saturated"
			case typev3.StatusCode_ServiceUnavailable:
				reason = "rejected-no-endpoints"
			}
			ir.Headers.SetHeaders = append(ir.Headers.SetHeaders, &corev3.HeaderValueOption{
				Header: &corev3.HeaderValue{Key: headerDroppedReason, RawValue: []byte(reason)}})
		}
		return pass(resp)
	}},

	// The response headers lose x-eppkit-profile.
	mutant.ProfileHeaderMissing: {response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if hm := resp.GetResponseHeaders().GetResponse().GetHeaderMutation(); hm != nil {
			hm.SetHeaders = dropOptions(hm.SetHeaders, headerProfile)
		}
		return pass(resp)
	}},
}

// fcFullBandDelay is how long fc-full-band-waits holds a capacity refusal (longer than the
// FlowControl test's TTL).
const fcFullBandDelay = 4 * time.Second

// droppedReason returns the x-llm-d-request-dropped-reason of an ImmediateResponse, "" otherwise.
func droppedReason(resp *extprocv3.ProcessingResponse) string {
	return setHeaderValue(resp.GetImmediateResponse().GetHeaders(), headerDroppedReason)
}

// replayResponseChunks is a mutant that answers the response body itself: each chunk the gateway
// sent, as fn makes it, one streamed response per chunk, in place of the EPP's body responses
// (released whenever the EPP answers a body chunk, all of them by the EPP's end of stream). It
// models an EPP that handles the response body chunk by chunk; the EPP's headers responses pass.
func replayResponseChunks(fn func(st *stream, chunk []byte) []byte) rule {
	return rule{
		request: func(st *stream, msg *extprocv3.ProcessingRequest) error {
			switch {
			case msg.GetRequestHeaders() != nil:
				h := msg.GetRequestHeaders().GetHeaders()
				st.rewriteTarget = headerValue(h, headerLLMDRewrite)
				if !hasHeader(h, headerLLMDRewrite) {
					st.rewriteTarget = headerValue(h, headerModelRewite)
				}
				st.respChunks, st.respDone = nil, false
			case msg.GetRequestBody().GetEndOfStream():
				var b struct {
					Model string `json:"model"`
				}
				_ = json.Unmarshal(st.body, &b)
				st.incomingModel = b.Model
			case msg.GetResponseBody() != nil:
				st.respChunks = append(st.respChunks, chunkOf{data: append([]byte(nil), msg.GetResponseBody().GetBody()...), eos: msg.GetResponseBody().GetEndOfStream()})
			}
			return nil
		},
		response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
			rb := resp.GetResponseBody()
			if rb == nil {
				return pass(resp)
			}
			var out []*extprocv3.ProcessingResponse
			for _, c := range st.respChunks {
				if st.respDone {
					break
				}
				out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
					Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
						StreamedResponse: &extprocv3.StreamedBodyResponse{Body: fn(st, c.data), EndOfStream: c.eos}}}}}}})
				st.respDone = c.eos
			}
			st.respChunks = nil
			return out, nil
		},
	}
}

// chunkOf is one response body chunk the gateway sent.
type chunkOf struct {
	data []byte
	eos  bool
}

// refuseWhen is a mutant that answers a request with ImmediateResponse 400 itself when refuse,
// given the request's :path and its whole body, returns a message (the EPP still sees the
// request; its answers to it are dropped). It models an EPP that refuses what it should route.
func refuseWhen(refuse func(path string, body []byte) string) rule {
	return rule{
		request: func(st *stream, msg *extprocv3.ProcessingRequest) error {
			if rb := msg.GetRequestBody(); rb != nil && rb.GetEndOfStream() {
				st.refusal = refuse(st.path, st.body)
			}
			return nil
		},
		response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
			lastBody := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream()
			if st.dropping {
				// The EPP's answers to the request already refused, up to its last one.
				switch {
				case resp.GetImmediateResponse() != nil:
					st.dropping = false
					return nil, nil
				case requestPhase(resp):
					st.dropping = !lastBody
					return nil, nil
				}
				return pass(resp)
			}
			switch {
			case st.refusal == "":
				return pass(resp)
			case resp.GetImmediateResponse() != nil:
				// The EPP refused it too; nothing more comes for this request.
				st.refusal = ""
				return pass(resp)
			case !requestPhase(resp):
				return pass(resp)
			}
			body, _ := json.Marshal(map[string]any{"error": map[string]any{"message": st.refusal, "type": "BadRequest", "code": 400}})
			refusal := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
				ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadRequest},
					Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
						Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}}}},
					Body: body}}}
			// This answer is dropped; so are the rest of the EPP's answers to the refused request.
			st.refusal, st.dropping = "", !lastBody
			return []*extprocv3.ProcessingResponse{refusal}, nil
		},
	}
}

// pathIs reports whether the request path (query stripped) ends in suffix, as upstream v1.5.0
// matches API paths.
func pathIs(path, suffix string) bool {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return strings.HasSuffix(path, suffix)
}

// otherPick records pick and returns the first earlier pick that differs from it ("" if none).
func (i *Interceptor) otherPick(pick string) string {
	i.picksMu.Lock()
	defer i.picksMu.Unlock()
	other := ""
	seen := false
	for _, p := range i.picks {
		if p == pick {
			seen = true
		} else if other == "" {
			other = p
		}
	}
	if !seen {
		i.picks = append(i.picks, pick)
	}
	return other
}

// requestPhase reports whether resp answers request headers or a request body chunk.
func requestPhase(resp *extprocv3.ProcessingResponse) bool {
	return resp.GetRequestHeaders() != nil || resp.GetRequestBody() != nil
}

// commonOf returns the CommonResponse of a headers or body response, nil for other kinds.
func commonOf(resp *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
	switch r := resp.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return r.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		return r.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return r.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		return r.ResponseBody.GetResponse()
	}
	return nil
}

// addSetHeader adds key: value to the header mutation of a request-phase response.
func addSetHeader(resp *extprocv3.ProcessingResponse, key, value string) {
	var common **extprocv3.CommonResponse
	switch r := resp.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		if r.RequestHeaders == nil {
			r.RequestHeaders = &extprocv3.HeadersResponse{}
		}
		common = &r.RequestHeaders.Response
	case *extprocv3.ProcessingResponse_RequestBody:
		if r.RequestBody == nil {
			r.RequestBody = &extprocv3.BodyResponse{}
		}
		common = &r.RequestBody.Response
	default:
		return
	}
	if *common == nil {
		*common = &extprocv3.CommonResponse{}
	}
	if (*common).HeaderMutation == nil {
		(*common).HeaderMutation = &extprocv3.HeaderMutation{}
	}
	hm := (*common).HeaderMutation
	hm.SetHeaders = append(hm.SetHeaders, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)}})
}

// pickMetadata returns the pick in resp's dynamic metadata envoy.lb / x-gateway-destination-endpoint.
func pickMetadata(resp *extprocv3.ProcessingResponse) string {
	return resp.GetDynamicMetadata().GetFields()[extprocclient.DestinationNamespace].GetStructValue().GetFields()[extprocclient.DestinationKey].GetStringValue()
}

// setPickMetadata sets the pick in resp's dynamic metadata, creating the namespace as needed.
func setPickMetadata(resp *extprocv3.ProcessingResponse, pick string) {
	if resp.DynamicMetadata == nil {
		resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	if resp.DynamicMetadata.Fields == nil {
		resp.DynamicMetadata.Fields = map[string]*structpb.Value{}
	}
	ns := resp.DynamicMetadata.Fields[extprocclient.DestinationNamespace].GetStructValue()
	if ns == nil {
		ns = &structpb.Struct{}
		resp.DynamicMetadata.Fields[extprocclient.DestinationNamespace] = structpb.NewStructValue(ns)
	}
	if ns.Fields == nil {
		ns.Fields = map[string]*structpb.Value{}
	}
	ns.Fields[extprocclient.DestinationKey] = structpb.NewStringValue(pick)
}

// restatus changes an ImmediateResponse's status from one code to another.
func restatus(resp *extprocv3.ProcessingResponse, from, to typev3.StatusCode) {
	if ir := resp.GetImmediateResponse(); ir != nil && ir.GetStatus().GetCode() == from {
		ir.Status.Code = to
	}
}

// valueOf is a header's value: RawValue when set (as Envoy sends it), else Value.
func valueOf(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// setValue replaces a header's value in the field it was given in.
func setValue(h *corev3.HeaderValue, v string) {
	if len(h.GetRawValue()) > 0 || h.GetValue() == "" {
		h.RawValue, h.Value = []byte(v), ""
		return
	}
	h.Value = v
}

// headerValue returns the value of key in hm (case-insensitive; "" when absent).
func headerValue(hm *corev3.HeaderMap, key string) string {
	for _, h := range hm.GetHeaders() {
		if strings.EqualFold(h.GetKey(), key) {
			return valueOf(h)
		}
	}
	return ""
}

// setHeaderValue returns the value a header mutation sets key to ("" when it does not).
func setHeaderValue(hm *extprocv3.HeaderMutation, key string) string {
	for _, o := range hm.GetSetHeaders() {
		if strings.EqualFold(o.GetHeader().GetKey(), key) {
			return valueOf(o.GetHeader())
		}
	}
	return ""
}

// hasHeader reports whether hm carries key (case-insensitive), whatever its value.
func hasHeader(hm *corev3.HeaderMap, key string) bool {
	for _, h := range hm.GetHeaders() {
		if strings.EqualFold(h.GetKey(), key) {
			return true
		}
	}
	return false
}

// dns1123Subdomain is a Kubernetes object name (RFC 1123 subdomain, at most 253 characters).
var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// removeHeaders deletes the named headers from hm (case-insensitive).
func removeHeaders(hm *corev3.HeaderMap, keys ...string) {
	if hm == nil {
		return
	}
	out := hm.Headers[:0]
	for _, h := range hm.Headers {
		drop := false
		for _, k := range keys {
			drop = drop || strings.EqualFold(h.GetKey(), k)
		}
		if !drop {
			out = append(out, h)
		}
	}
	hm.Headers = out
}

// dropOptions returns set without the options that set key (case-insensitive).
func dropOptions(set []*corev3.HeaderValueOption, key string) []*corev3.HeaderValueOption {
	out := set[:0]
	for _, o := range set {
		if !strings.EqualFold(o.GetHeader().GetKey(), key) {
			out = append(out, o)
		}
	}
	return out
}
