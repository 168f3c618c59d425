package interceptor

import (
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/selfcheck/mutant"
)

// The mutants of the protocol as GIE v1.6.2 states it (issue 30): the streaming MUST, the
// subset hint's eligibility and the endpoint list's scope.
func init() {
	// Every streamed body response carries no data: the EPP answers each chunk, but what it
	// puts back on the wire is empty (end_of_stream kept).
	rules[mutant.StreamedBodyDropped] = rule{response: func(_ *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		var sr *extprocv3.StreamedBodyResponse
		switch {
		case resp.GetRequestBody() != nil:
			sr = resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		case resp.GetResponseBody() != nil:
			sr = resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		}
		if sr != nil {
			sr.Body = nil
		}
		return pass(resp)
	}}

	// The EPP's answers to response body chunks are held back until the one with end_of_stream,
	// then sent together: a streamed response reaches the client only when it has ended.
	rules[mutant.ResponseHeldToEnd] = rule{response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		rb := resp.GetResponseBody()
		if rb == nil {
			return pass(resp)
		}
		st.heldResponse = append(st.heldResponse, resp)
		if !rb.GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
			return nil, nil
		}
		out := st.heldResponse
		st.heldResponse = nil
		return out, nil
	}}

	// The subset hint reaches the EPP cut to its first entry.
	rules[mutant.HintFirstEntryOnly] = rule{request: func(_ *stream, msg *extprocv3.ProcessingRequest) error {
		v := msg.GetMetadataContext().GetFilterMetadata()[extprocclient.SubsetHintNamespace].GetFields()[extprocclient.SubsetHintKey]
		if l := v.GetListValue(); l != nil && len(l.Values) > 1 {
			l.Values = l.Values[:1]
		}
		return nil
	}}

	// A 503 to a request with a non-empty subset hint becomes a pick of the hint's first entry,
	// with the request body streamed back: the EPP turned the hint into a destination without
	// asking whether the endpoint is eligible. Only a 503 that comes after the whole request body
	// can be replaced (the body must go back with the pick).
	rules[mutant.HintTrustedOverReadiness] = rule{response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		ir := resp.GetImmediateResponse()
		if ir == nil || ir.GetStatus().GetCode() != typev3.StatusCode_ServiceUnavailable || len(st.hint) == 0 || !st.bodyEnded {
			return pass(resp)
		}
		pick := st.hint[0]
		headers := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{ClearRouteCache: true}}}}
		addSetHeader(headers, extprocclient.DestinationKey, pick)
		setPickMetadata(headers, pick)
		if st.headersOnly {
			return []*extprocv3.ProcessingResponse{headers}, nil
		}
		body := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
					Body: append([]byte(nil), st.body...), EndOfStream: true}}}}}}}
		return []*extprocv3.ProcessingResponse{headers, body}, nil
	}}

	// With a subset hint, the pick (header and metadata) is replaced by the hint's first entry,
	// whichever pool it belongs to.
	rules[mutant.HintBeyondPool] = rule{response: func(st *stream, resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
		if len(st.hint) == 0 || !requestPhase(resp) {
			return pass(resp)
		}
		hm := commonOf(resp).GetHeaderMutation()
		if setHeaderValue(hm, extprocclient.DestinationKey) != "" {
			for _, o := range hm.GetSetHeaders() {
				if o.GetHeader().GetKey() == extprocclient.DestinationKey {
					setValue(o.GetHeader(), st.hint[0])
				}
			}
		}
		if pickMetadata(resp) != "" {
			setPickMetadata(resp, st.hint[0])
		}
		return pass(resp)
	}}
}

// subsetHint returns the subset hint msg carries (filter metadata envoy.lb.subset_hint /
// x-gateway-destination-endpoint-subset, a list of strings), and whether it carries one.
func subsetHint(msg *extprocv3.ProcessingRequest) ([]string, bool) {
	v, ok := msg.GetMetadataContext().GetFilterMetadata()[extprocclient.SubsetHintNamespace].GetFields()[extprocclient.SubsetHintKey]
	if !ok {
		return nil, false
	}
	hint := []string{}
	for _, e := range v.GetListValue().GetValues() {
		if sv, ok := e.GetKind().(*structpb.Value_StringValue); ok {
			hint = append(hint, sv.StringValue)
		}
	}
	return hint, true
}
