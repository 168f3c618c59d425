package extprocclient

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// DefaultChunkSize is the request/response body chunk size (bytes) when none is given.
const DefaultChunkSize = 16384

// Request is one HTTP request as the gateway presents it to the EPP.
type Request struct {
	// Headers in order; pseudo-headers (":method", ":path", ":authority", ":scheme") included.
	// See RequestHeaders for a helper.
	Headers []Header
	// Body is the request body; empty means a headers-only request (request_headers carries
	// end_of_stream and no request_body is sent).
	Body []byte
	// ChunkSize splits Body into request_body messages of at most this many bytes; 0 means
	// DefaultChunkSize.
	ChunkSize int
	// SubsetHint as in Metadata.SubsetHint (nil = not sent).
	SubsetHint []string
}

// ImmediateInfo is an ImmediateResponse the EPP answered with.
type ImmediateInfo struct {
	// Status is the HTTP status code (0 if the EPP left it unset).
	Status int
	// Headers are the set headers of the immediate response (lower-case keys).
	Headers map[string]string
	// Body is the response body (for EPP errors, JSON with a message).
	Body []byte
	// Details is the ImmediateResponse's details string.
	Details string
}

// Decision is what the EPP answered for the request phases of one request.
type Decision struct {
	// PickHeader is the value of the x-gateway-destination-endpoint header mutation ("" if absent).
	PickHeader string
	// PickMetadata is dynamic metadata envoy.lb / x-gateway-destination-endpoint ("" if absent).
	PickMetadata string
	// Headers are the headers set by the request-phase responses (lower-case keys, last wins).
	Headers map[string]string
	// RemovedHeaders are the header names the EPP asked to remove.
	RemovedHeaders []string
	// ContentLength is the content-length header mutation ("" if not set).
	ContentLength string
	// Body is the mutated request body reassembled from the streamed body responses (nil for a
	// headers-only request).
	Body []byte
	// BodyChunks counts the streamed request-body responses.
	BodyChunks int
	// MaxChunk is the largest streamed body chunk, in bytes.
	MaxChunk int
	// ClearRouteCache reports whether any header response asked to clear the route cache.
	ClearRouteCache bool
	// DynamicMetadata merges the dynamic_metadata of every response of the phase (later wins
	// per top-level key).
	DynamicMetadata *structpb.Struct
	// Immediate is set when the EPP answered with an ImmediateResponse; the other fields then
	// hold what arrived before it.
	Immediate *ImmediateInfo
	// Responses are the raw ProcessingResponses of the phase, in arrival order.
	Responses []*extprocv3.ProcessingResponse

	// What Envoy's router sees (FULL_DUPLEX_STREAMED). The upstream host is chosen when the
	// ext_proc filter releases the request headers to the router: at the request_headers
	// response when there is no body (processor_state.cc handleHeadersResponse,
	// continueIfNecessary), else — the whole body having been sent before the EPP answered the
	// headers — at the first request_body response that carries data or end_of_stream, whose
	// injected data first continues the headers (filter_manager.cc
	// injectDecodedDataToFilterChain → doHeaders). Dynamic metadata is set before each message
	// is handled (ext_proc.cc onReceiveMessage), so metadata up to and including that message
	// counts; header mutations on streamed body responses are never applied
	// (handleDuplexStreamedBodyResponse ignores them).

	// SentHeaders are the request headers that were sent (the header map Envoy mutates).
	SentHeaders []Header
	// HeadersMutation is the header mutation of the request_headers response (nil if none).
	HeadersMutation *extprocv3.HeaderMutation
	// ReleasedAt is the index in Responses of the message at which Envoy releases the request
	// headers to the router; -1 when it never happened (no headers response, or no body data).
	ReleasedAt int
	// RoutingMetadata merges the dynamic metadata of Responses[:ReleasedAt+1]: what the router
	// can read.
	RoutingMetadata *structpb.Struct
	// LateHeaderMutations counts request_body responses that carried a header mutation (Envoy
	// ignores them in FULL_DUPLEX_STREAMED mode).
	LateHeaderMutations int
}

// Routing is the destination as Envoy's router sees it (see Decision.ReleasedAt).
type Routing struct {
	// Headers are the request headers after the request_headers response's mutation.
	Headers HeaderList
	// Report says what the mutation touched and what Envoy would read differently.
	Report MutationReport
	// Header holds the values of x-gateway-destination-endpoint in Headers (several when the EPP
	// appended to a value the request carried).
	Header []string
	// Metadata is envoy.lb / x-gateway-destination-endpoint in the metadata received by the
	// release ("" if absent).
	Metadata string
	// Released reports whether the headers were released to the router at all.
	Released bool
}

// Pick returns the destination the router uses: the metadata when present, else the first
// value of the header (Envoy reads the first entry of a repeated header), "" when neither.
func (r Routing) Pick() string {
	if !r.Released {
		return ""
	}
	if r.Metadata != "" {
		return r.Metadata
	}
	if len(r.Header) > 0 {
		return r.Header[0]
	}
	return ""
}

// Routing returns the destination as Envoy's router sees it: the request_headers response's
// mutation applied to SentHeaders under sem, and the metadata received by the release. Errors are
// ApplyHeaderMutation's (Envoy answers them with status_on_error).
func (d *Decision) Routing(sem HeaderSemantics) (Routing, error) {
	r := Routing{Headers: append(HeaderList(nil), d.SentHeaders...), Released: d.ReleasedAt >= 0}
	rep, err := ApplyHeaderMutation(&r.Headers, d.HeadersMutation, sem)
	r.Report = rep
	if err != nil {
		return r, err
	}
	r.Header = r.Headers.Values(DestinationKey)
	r.Metadata = metadataString(d.RoutingMetadata, DestinationNamespace, DestinationKey)
	return r, nil
}

// Pick returns the pick: the metadata value when present, else the header value.
func (d *Decision) Pick() string {
	if d.PickMetadata != "" {
		return d.PickMetadata
	}
	return d.PickHeader
}

// RequestHeaders builds the request headers Envoy would send for an HTTP/1.1 request: the
// pseudo-headers, content-type application/json and content-length when body is non-empty, and
// extra (keys lower-cased, sorted; an extra key overrides a default).
func RequestHeaders(method, path, authority string, body []byte, extra map[string]string) []Header {
	base := map[string]string{":method": method, ":path": path, ":authority": authority, ":scheme": "http"}
	if len(body) > 0 {
		base["content-type"] = "application/json"
		base["content-length"] = strconv.Itoa(len(body))
	}
	for k, v := range extra {
		base[strings.ToLower(k)] = v
	}
	keys := slices.Sorted(maps.Keys(base))
	// Pseudo-headers first, as on the wire.
	slices.SortStableFunc(keys, func(a, b string) int {
		pa, pb := strings.HasPrefix(a, ":"), strings.HasPrefix(b, ":")
		switch {
		case pa && !pb:
			return -1
		case pb && !pa:
			return 1
		}
		return 0
	})
	out := make([]Header, 0, len(keys))
	for _, k := range keys {
		out = append(out, Header{Key: k, Value: base[k]})
	}
	return out
}

// SendRequest sends the request phases of req (headers, then the body in chunks) without
// waiting for responses. A send error is returned as is; the EPP may have answered with an
// ImmediateResponse and closed the stream, which ReadDecision then reports.
func (s *Stream) SendRequest(req Request) error {
	md := Metadata{SubsetHint: req.SubsetHint}
	headersOnly := len(req.Body) == 0
	s.sent = req.Headers
	if err := s.SendRequestHeaders(req.Headers, headersOnly, md); err != nil {
		return err
	}
	size := req.ChunkSize
	if size <= 0 {
		size = DefaultChunkSize
	}
	for off := 0; off < len(req.Body); off += size {
		end := min(off+size, len(req.Body))
		if err := s.SendRequestBody(req.Body[off:end], end == len(req.Body), md); err != nil {
			return err
		}
	}
	return nil
}

// Exchange runs the request phases of one request: sends req, then reads until the EPP has
// answered the request headers and (unless headers-only) returned the whole streamed body with
// end_of_stream, or answered with an ImmediateResponse. Errors: a send or receive error, a
// timeout (ErrMessageTimeout), or a protocol violation (ErrProtocol); the partial Decision is
// returned with the error.
func (s *Stream) Exchange(ctx context.Context, req Request) (*Decision, error) {
	sendErr := s.SendRequest(req)
	d, err := s.ReadDecision(ctx, len(req.Body) == 0)
	if err != nil && sendErr != nil && d.Immediate == nil {
		return d, fmt.Errorf("%w (after send error: %v)", err, sendErr)
	}
	return d, err
}

// ReadDecision reads the request-phase responses of one request (see Exchange).
func (s *Stream) ReadDecision(ctx context.Context, headersOnly bool) (*Decision, error) {
	d := &Decision{Headers: map[string]string{}, SentHeaders: s.sent, ReleasedAt: -1}
	defer d.fillPick() // on errors too: the partial Decision says what the EPP picked so far
	gotHeaders, bodyDone := false, false
	for !gotHeaders || (!headersOnly && !bodyDone) {
		msg, err := s.Recv(ctx)
		if err != nil {
			return d, fmt.Errorf("extprocclient: waiting for the request-phase responses: %w", err)
		}
		d.Responses = append(d.Responses, msg)
		d.DynamicMetadata = mergeStruct(d.DynamicMetadata, msg.GetDynamicMetadata())
		if d.ReleasedAt < 0 {
			d.RoutingMetadata = mergeStruct(d.RoutingMetadata, msg.GetDynamicMetadata())
		}
		switch r := msg.Response.(type) {
		case *extprocv3.ProcessingResponse_RequestHeaders:
			if gotHeaders {
				return d, fmt.Errorf("extprocclient: a second request_headers response: %w", ErrProtocol)
			}
			gotHeaders = true
			common := r.RequestHeaders.GetResponse()
			d.HeadersMutation = common.GetHeaderMutation()
			if headersOnly {
				d.ReleasedAt = len(d.Responses) - 1
			}
			d.ClearRouteCache = d.ClearRouteCache || common.GetClearRouteCache()
			applyHeaderMutation(d.Headers, &d.RemovedHeaders, common.GetHeaderMutation())
			if common.GetBodyMutation() != nil {
				return d, fmt.Errorf("extprocclient: body mutation in a request_headers response: %w", ErrProtocol)
			}
		case *extprocv3.ProcessingResponse_RequestBody:
			if headersOnly {
				return d, fmt.Errorf("extprocclient: request_body response to a headers-only request: %w", ErrProtocol)
			}
			if !gotHeaders {
				return d, fmt.Errorf("extprocclient: request_body response before the request_headers response: %w", ErrProtocol)
			}
			if bodyDone {
				return d, fmt.Errorf("extprocclient: request_body response after end_of_stream: %w", ErrProtocol)
			}
			common := r.RequestBody.GetResponse()
			applyHeaderMutation(d.Headers, &d.RemovedHeaders, common.GetHeaderMutation())
			if len(common.GetHeaderMutation().GetSetHeaders()) > 0 || len(common.GetHeaderMutation().GetRemoveHeaders()) > 0 {
				d.LateHeaderMutations++
			}
			sr := common.GetBodyMutation().GetStreamedResponse()
			if sr == nil {
				return d, fmt.Errorf("extprocclient: request_body response without a streamed_response body mutation (FULL_DUPLEX_STREAMED requires one): %w", ErrProtocol)
			}
			if d.ReleasedAt < 0 && (len(sr.GetBody()) > 0 || sr.GetEndOfStream()) {
				d.ReleasedAt = len(d.Responses) - 1
			}
			if d.Body == nil {
				d.Body = []byte{}
			}
			d.Body = append(d.Body, sr.GetBody()...)
			d.BodyChunks++
			d.MaxChunk = max(d.MaxChunk, len(sr.GetBody()))
			bodyDone = sr.GetEndOfStream()
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			d.Immediate = immediateInfo(r.ImmediateResponse)
			d.fillPick()
			return d, nil
		default:
			return d, fmt.Errorf("extprocclient: unexpected %T during the request phases: %w", msg.Response, ErrProtocol)
		}
	}
	d.fillPick()
	return d, nil
}

func (d *Decision) fillPick() {
	d.PickHeader = d.Headers[DestinationKey]
	d.ContentLength = d.Headers["content-length"]
	d.PickMetadata = metadataString(d.DynamicMetadata, DestinationNamespace, DestinationKey)
}

// Response is the upstream response as the gateway presents it to the EPP.
type Response struct {
	// Headers include ":status".
	Headers []Header
	// Chunks are the body chunks in order, each sent as one response_body message (the last
	// with end_of_stream); empty means a response without a body.
	Chunks [][]byte
	// Served is the "ip:port" that served the request (sent as envoy.lb /
	// x-gateway-destination-endpoint-served); "" = not sent.
	Served string
	// SubsetHint is repeated on the response messages when non-nil, as Envoy forwards the same
	// metadata namespaces on every message.
	SubsetHint []string
	// Trailers, when set, end the response (response_trailers) after the chunks, the last of
	// which then has end_of_stream false, as Envoy sends a response that ends with trailers.
	Trailers []Header
}

// ResponseResult is what the EPP answered for the response phases.
type ResponseResult struct {
	// Trailers is set when the EPP answered the response_trailers message.
	Trailers bool
	// Headers set by the response_headers response (lower-case keys).
	Headers map[string]string
	// RemovedHeaders are header names the EPP asked to remove.
	RemovedHeaders []string
	// Body is the body reassembled from the streamed response-body responses.
	Body []byte
	// BodyChunks counts the streamed response-body responses.
	BodyChunks int
	// DynamicMetadata merges the responses' dynamic_metadata.
	DynamicMetadata *structpb.Struct
	// Immediate is set when the EPP answered with an ImmediateResponse.
	Immediate *ImmediateInfo
	// Responses are the raw responses in arrival order.
	Responses []*extprocv3.ProcessingResponse
}

// Respond runs the response phases on the stream after Exchange: sends the response headers
// and body chunks, then reads until the response_headers response and (if there is a body) the
// streamed body with end_of_stream. Errors as for Exchange.
func (s *Stream) Respond(ctx context.Context, resp Response) (*ResponseResult, error) {
	md := Metadata{SubsetHint: resp.SubsetHint, Served: resp.Served}
	noBody := len(resp.Chunks) == 0 && resp.Trailers == nil
	sendErr := s.SendResponseHeaders(resp.Headers, noBody, md)
	for i := 0; sendErr == nil && i < len(resp.Chunks); i++ {
		sendErr = s.SendResponseBody(resp.Chunks[i], i == len(resp.Chunks)-1 && resp.Trailers == nil, md)
	}
	if sendErr == nil && resp.Trailers != nil {
		sendErr = s.SendResponseTrailers(resp.Trailers, md)
	}
	rr, err := s.ReadResponse(ctx, noBody)
	if err != nil && sendErr != nil && rr.Immediate == nil {
		return rr, fmt.Errorf("%w (after send error: %v)", err, sendErr)
	}
	return rr, err
}

// ReadResponse reads the response-phase responses (see Respond).
func (s *Stream) ReadResponse(ctx context.Context, noBody bool) (*ResponseResult, error) {
	rr := &ResponseResult{Headers: map[string]string{}}
	gotHeaders, bodyDone := false, false
	for !gotHeaders || (!noBody && !bodyDone) {
		msg, err := s.Recv(ctx)
		if err != nil {
			return rr, fmt.Errorf("extprocclient: waiting for the response-phase responses: %w", err)
		}
		done, err := rr.Add(msg, &gotHeaders, noBody)
		if err != nil {
			return rr, err
		}
		if rr.Immediate != nil {
			return rr, nil
		}
		bodyDone = bodyDone || done
	}
	return rr, nil
}

// Add folds one response-phase ProcessingResponse into rr. gotHeaders tracks whether the
// response_headers response has arrived. It returns true when msg ends the streamed body.
// Errors wrap ErrProtocol.
func (rr *ResponseResult) Add(msg *extprocv3.ProcessingResponse, gotHeaders *bool, noBody bool) (bool, error) {
	if rr.Headers == nil {
		rr.Headers = map[string]string{}
	}
	rr.Responses = append(rr.Responses, msg)
	rr.DynamicMetadata = mergeStruct(rr.DynamicMetadata, msg.GetDynamicMetadata())
	switch r := msg.Response.(type) {
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		if *gotHeaders {
			return false, fmt.Errorf("extprocclient: a second response_headers response: %w", ErrProtocol)
		}
		*gotHeaders = true
		applyHeaderMutation(rr.Headers, &rr.RemovedHeaders, r.ResponseHeaders.GetResponse().GetHeaderMutation())
		return false, nil
	case *extprocv3.ProcessingResponse_ResponseBody:
		if noBody {
			return false, fmt.Errorf("extprocclient: response_body response to a response without a body: %w", ErrProtocol)
		}
		if !*gotHeaders {
			return false, fmt.Errorf("extprocclient: response_body response before the response_headers response: %w", ErrProtocol)
		}
		common := r.ResponseBody.GetResponse()
		sr := common.GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return false, fmt.Errorf("extprocclient: response_body response without a streamed_response body mutation: %w", ErrProtocol)
		}
		if rr.Body == nil {
			rr.Body = []byte{}
		}
		rr.Body = append(rr.Body, sr.GetBody()...)
		rr.BodyChunks++
		return sr.GetEndOfStream(), nil
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		rr.Immediate = immediateInfo(r.ImmediateResponse)
		return false, nil
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		if !*gotHeaders {
			return false, fmt.Errorf("extprocclient: response_trailers response before the response_headers response: %w", ErrProtocol)
		}
		rr.Trailers = true
		return true, nil // the trailers end the response
	default:
		return false, fmt.Errorf("extprocclient: unexpected %T during the response phases: %w", msg.Response, ErrProtocol)
	}
}

func applyHeaderMutation(set map[string]string, removed *[]string, hm *extprocv3.HeaderMutation) {
	if hm == nil {
		return
	}
	for _, opt := range hm.GetSetHeaders() {
		h := opt.GetHeader()
		if h == nil {
			continue
		}
		v := string(h.GetRawValue())
		if len(h.GetRawValue()) == 0 {
			v = h.GetValue()
		}
		set[strings.ToLower(h.GetKey())] = v
	}
	for _, k := range hm.GetRemoveHeaders() {
		*removed = append(*removed, strings.ToLower(k))
	}
}

func immediateInfo(ir *extprocv3.ImmediateResponse) *ImmediateInfo {
	info := &ImmediateInfo{Status: int(ir.GetStatus().GetCode()), Headers: map[string]string{}, Body: ir.GetBody(), Details: ir.GetDetails()}
	var removed []string
	applyHeaderMutation(info.Headers, &removed, ir.GetHeaders())
	return info
}

// mergeStruct returns a copy-on-write merge of b's top-level fields over a.
func mergeStruct(a, b *structpb.Struct) *structpb.Struct {
	if len(b.GetFields()) == 0 {
		return a
	}
	out := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(a.GetFields())+len(b.GetFields()))}
	maps.Copy(out.Fields, a.GetFields())
	maps.Copy(out.Fields, b.GetFields())
	return out
}

// metadataString reads ns/key from a dynamic-metadata struct as a string; a list value is
// joined with commas. "" when absent.
func metadataString(s *structpb.Struct, ns, key string) string {
	v := s.GetFields()[ns].GetStructValue().GetFields()[key]
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_ListValue:
		parts := make([]string, 0, len(k.ListValue.GetValues()))
		for _, e := range k.ListValue.GetValues() {
			parts = append(parts, e.GetStringValue())
		}
		return strings.Join(parts, ",")
	}
	return ""
}
