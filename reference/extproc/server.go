// Package extproc is the reference EPP's Envoy ext_proc v3 server (SPEC §5.1–§5.3): it turns the
// ExternalProcessor/Process stream of a gateway into calls of the director, returns the pick as
// the header x-gateway-destination-endpoint and the dynamic metadata envoy.lb /
// x-gateway-destination-endpoint, streams the (possibly mutated) request body back in chunks of
// at most BodyChunkLimit bytes, answers refusals with an ImmediateResponse and a JSON body, and
// passes the response through while reading its usage, with the client's model name restored
// when the request's model was rewritten (modelRestorer).
//
// Bodies are expected in FULL_DUPLEX_STREAMED mode. One stream may carry several requests one
// after another: a request_headers message after a finished (or refused) request starts the
// next one, so a refusal never breaks the stream.
//
// Names and shapes follow upstream v1.5.0 (gateway-api-inference-extension):
// pkg/epp/handlers/{server,request,response}.go, pkg/epp/metadata/consts.go,
// pkg/common/envoy/chunking.go and pkg/common/error/error.go.
package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
)

// Protocol names (SPEC §5.1). Upstream: pkg/epp/metadata/consts.go.
const (
	// DestinationEndpointKey is the pick: a request header and a key of the dynamic metadata
	// namespace DestinationEndpointNamespace, a comma list of "ip:port".
	DestinationEndpointKey = "x-gateway-destination-endpoint"
	// DestinationEndpointNamespace is the dynamic/filter metadata namespace of the pick and of the
	// served endpoint.
	DestinationEndpointNamespace = "envoy.lb"
	// DestinationEndpointServedKey is the served endpoint, in the response's filter metadata.
	DestinationEndpointServedKey = "x-gateway-destination-endpoint-served"
	// DestinationEndpointScoresKey holds, in DestinationEndpointNamespace of the pick's dynamic
	// metadata, a struct "ip:port" → score of every candidate of the primary profile
	// (llm-d-router v0.10.0 pkg/epp/metadata/consts.go DestinationEndpointScoresKey; opt-in).
	DestinationEndpointScoresKey = "x-gateway-destination-endpoint-scores"
	// SubsetHintNamespace and SubsetHintKey hold the subset hint in the request's filter
	// metadata: a list of "ip:port" strings.
	SubsetHintNamespace = "envoy.lb.subset_hint"
	SubsetHintKey       = "x-gateway-destination-endpoint-subset"
	// ProfileHeader is the response header naming the primary profile [eppkit, SPEC §5.4].
	ProfileHeader = "x-eppkit-profile"
	// BodyChunkLimit is the largest body chunk the server sends back (upstream BodyByteLimit).
	BodyChunkLimit = 62000
	// MaxRequestBodyBytes bounds a reassembled request body; a longer one is refused with 400.
	MaxRequestBodyBytes = 64 << 20
	// DefaultMaxBufferedBodyBytes is the default bound of the request-body bytes the server holds
	// at once over all its streams (SetMaxBufferedBodyBytes): 512 MiB, eight of the largest body.
	DefaultMaxBufferedBodyBytes = 512 << 20
)

// The request header mutation sets only the pick, Content-Length (when a body is sent) and a
// generated x-request-id: the gateway's input headers (x-llm-d-inference-objective,
// x-llm-d-model-name-rewrite, their x-gateway-* aliases, ...) are never set back, which is what
// llm-d-router v0.10.0 achieves by skipping its system-owned headers
// (pkg/epp/util/request/headers.go IsSystemOwnedHeader).

// Server implements extprocv3.ExternalProcessorServer.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	d      *director.Director
	logger *slog.Logger
	// refusing and inflight are the drain's view (drain.go): StopAdmitting, InFlight.
	refusing atomic.Bool
	inflight atomic.Int64
	// completed, aborted and abandoned count how scheduled requests ended (abort.go Outcomes).
	completed, aborted, abandoned atomic.Int64
	// emitScores publishes DestinationEndpointScoresKey with every pick (SetEmitEndpointScores).
	emitScores bool
	// maxBodyBytes bounds bodyBytes, the request-body bytes held over all streams: received and
	// not yet sent back (SetMaxBufferedBodyBytes, BufferedBodyBytes).
	maxBodyBytes int64
	bodyBytes    atomic.Int64
	// receiving counts the requests whose headers arrived before StopAdmitting and whose body
	// is still arriving (Receiving).
	receiving atomic.Int64
}

// NewServer returns a Server that schedules with d. logger nil means slog.Default().
func NewServer(d *director.Director, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{d: d, logger: logger, maxBodyBytes: DefaultMaxBufferedBodyBytes}
}

// SetMaxBufferedBodyBytes bounds the request-body bytes the server holds at once over all its
// streams, from a body's first chunk until its last chunk has been sent back to the gateway
// (default DefaultMaxBufferedBodyBytes; --max-buffered-body-bytes). A request whose chunk would
// pass the bound stops being buffered at once (its bytes are released) and, when its body ends,
// is refused with 429 ResourceExhausted and a message naming the bound; other requests go on.
// Without it, a gateway streaming large bodies faster than they are scheduled grows the bodies
// the EPP holds without limit. It caps those bodies, not gRPC's own buffers of concurrent
// streams (docs/reference-epp.md, "Request bodies in memory"). n must be > 0.
// Call it before serving.
func (s *Server) SetMaxBufferedBodyBytes(n int64) { s.maxBodyBytes = n }

// BufferedBodyBytes is the number of request-body bytes the server holds now (bytes received and
// not yet sent back, over every stream).
func (s *Server) BufferedBodyBytes() int64 { return s.bodyBytes.Load() }

// reserveBody counts n more buffered bytes, or reports false and counts nothing when that would
// pass the bound. The count never exceeds the bound, even for an instant.
func (s *Server) reserveBody(n int64) bool {
	for {
		cur := s.bodyBytes.Load()
		if cur+n > s.maxBodyBytes {
			return false
		}
		if s.bodyBytes.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// releaseBody drops r's buffered body and uncounts its bytes.
func (s *Server) releaseBody(r *request) {
	s.bodyBytes.Add(-r.held)
	r.held, r.body = 0, nil
}

// SetEmitEndpointScores makes every pick's dynamic metadata carry
// envoy.lb / x-gateway-destination-endpoint-scores (off by default; llm-d-router v0.10.0
// --emit-endpoint-scores, StreamingServer.SetEmitEndpointScores). Call it before serving.
func (s *Server) SetEmitEndpointScores(on bool) { s.emitScores = on }

// Process serves one ext_proc stream until the gateway closes it. It returns nil when the
// stream ends normally (EOF or cancellation) and a gRPC error when receiving or sending fails.
// Whatever way the stream ends, a request in flight gets its ResponseComplete hooks (with
// EndOfStream false when it was abandoned) and EndRequest.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := &stream{s: s, srv: srv, ctx: srv.Context()}
	defer st.abandon()
	for {
		msg, err := srv.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
				return nil
			}
			return status.Errorf(codes.Unknown, "ext_proc: receive: %v", err)
		}
		err = st.handle(msg)
		if err != nil {
			var pe protocolError
			if errors.As(err, &pe) {
				// The gateway broke the ext_proc protocol: end this stream with a precise status
				// instead of leaving the gateway waiting for an answer that never comes.
				s.logger.Warn("ext_proc: protocol violation; ending the stream", "error", string(pe))
				return status.Error(codes.InvalidArgument, "ext_proc: "+string(pe))
			}
			return status.Errorf(codes.Unknown, "ext_proc: send: %v", err)
		}
	}
}

// protocolError is an ext_proc protocol violation by the gateway; Process ends the stream with
// codes.InvalidArgument and this message.
type protocolError string

func (e protocolError) Error() string { return string(e) }

// stream is the state of one Process stream.
type stream struct {
	s   *Server
	srv extprocv3.ExternalProcessor_ProcessServer
	ctx context.Context
	cur *request
}

// request is the state of the request the stream is carrying.
type request struct {
	headers     map[string]string
	subset      *director.Subset
	body        []byte
	held        int64            // bytes of body counted in Server.bodyBytes, until sent back or dropped
	waitingBody bool             // headers arrived without end_of_stream and the body is not complete yet
	receiving   bool             // counted in Server.receiving until the body phase ends
	headersEOS  bool             // request_headers carried end_of_stream: no request body may follow
	tooLarge    error            // the body is longer than any bound lets it be: refused 400 when it ends
	overBudget  bool             // a chunk would have passed Server.maxBodyBytes: refused 429 when the body ends
	res         *director.Result // set once scheduled
	ended       bool             // refused, completed or abandoned: later messages of it are answered but not processed
	served      string
	resp        *framework.Response
	usage       *UsageParser
	aborted     bool           // the response ended with a non-zero grpc-status (abort.go)
	restore     *modelRestorer // nil when the response's model name needs no restoring
}

func (st *stream) handle(msg *extprocv3.ProcessingRequest) error {
	if st.cur != nil {
		if served := servedEndpoint(msg); served != "" {
			st.cur.served = served
		}
	}
	switch v := msg.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.requestHeaders(msg, v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.requestBody(v.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return st.requestTrailers()
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.responseHeaders(v.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return st.responseBody(v.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return st.responseTrailers(v.ResponseTrailers)
	}
	return protocolError("ProcessingRequest without a request: want one of request_headers, request_body, request_trailers, response_headers, response_body, response_trailers")
}

func (st *stream) requestHeaders(msg *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	if st.cur != nil && !st.cur.ended {
		st.s.logger.Warn("ext_proc: a new request started on the stream before the previous one ended; abandoning it")
		st.abandon()
	}
	r := &request{headers: headerMap(h.GetHeaders())}
	r.subset = subsetHint(msg)
	r.served = servedEndpoint(msg)
	st.cur = r
	if h.GetEndOfStream() {
		r.headersEOS = true
		return st.schedule()
	}
	r.waitingBody = true
	if !st.s.refusing.Load() {
		// A drain waits for it (Receiving); one that starts after admission stopped is refused
		// when its body ends and does not hold the drain up.
		r.receiving = true
		st.s.receiving.Add(1)
	}
	return nil
}

// endBody marks r's body phase over (complete, refused or abandoned) and reports whether it was
// still open.
func (st *stream) endBody(r *request) bool {
	if r.receiving {
		r.receiving = false
		st.s.receiving.Add(-1)
	}
	if !r.waitingBody {
		return false
	}
	r.waitingBody = false
	return true
}

func (st *stream) requestBody(b *extprocv3.HttpBody) error {
	r := st.cur
	switch {
	case r == nil:
		return protocolError("request_body before request_headers")
	case r.headersEOS:
		return protocolError("request_body after request_headers with end_of_stream set (the request has no body)")
	case !r.waitingBody:
		return protocolError("request_body after the request body ended (end_of_stream or request_trailers already received)")
	}
	if n := len(b.GetBody()); r.tooLarge == nil && !r.overBudget && n > 0 {
		switch size := int64(len(r.body) + n); {
		case size > MaxRequestBodyBytes:
			r.tooLarge = fmt.Errorf("request body: longer than %d bytes: %w", MaxRequestBodyBytes, framework.ErrBadRequest)
			st.s.releaseBody(r)
		case size > st.s.maxBodyBytes:
			// It could never fit, however idle the server: a 400, not a 429 to retry.
			r.tooLarge = fmt.Errorf("request body: longer than the %d bytes the endpoint picker may hold (--max-buffered-body-bytes): %w",
				st.s.maxBodyBytes, framework.ErrBadRequest)
			st.s.releaseBody(r)
		case !st.s.reserveBody(int64(n)):
			r.overBudget = true
			st.s.releaseBody(r)
		default:
			r.body = append(r.body, b.GetBody()...)
			r.held += int64(n)
		}
	}
	if b.GetEndOfStream() {
		return st.schedule()
	}
	return nil
}

func (st *stream) requestTrailers() error {
	r := st.cur
	if r != nil && r.waitingBody {
		// Trailers end the request body.
		if err := st.schedule(); err != nil {
			return err
		}
	}
	if r == nil || r.res == nil {
		return nil
	}
	return st.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}})
}

// schedule runs the director on the complete request and answers with the pick (headers
// response, then the body in chunks) or an ImmediateResponse.
func (st *stream) schedule() error {
	r := st.cur
	bodyPhase := st.endBody(r) // the gateway streams a body phase and expects it answered
	var (
		res *director.Result
		err error
	)
	if st.s.refusing.Load() {
		// The EPP is draining and admits no new request (drain.go).
		r.ended = true
		st.s.releaseBody(r)
		st.s.d.Refused(errShuttingDown)
		st.s.logger.Info("ext_proc: request refused: shutting down", "requestID", r.headers[director.HeaderRequestID])
		return st.srv.Send(shuttingDownResponse())
	}
	switch {
	case r.tooLarge != nil:
		err = r.tooLarge
	case r.overBudget:
		err = fmt.Errorf("request body: the endpoint picker already holds its bound of %d bytes of request bodies in flight (--max-buffered-body-bytes): %w",
			st.s.maxBodyBytes, framework.ErrShed)
	default:
		res, err = st.s.d.HandleRequest(st.ctx, &director.Input{Headers: r.headers, Body: r.body, Subset: r.subset})
	}
	if res == nil && err != nil && (r.tooLarge != nil || r.overBudget) {
		st.s.d.Refused(err) // HandleRequest, which counts every other outcome, never saw it
	}
	if err != nil {
		st.s.releaseBody(r)
		r.ended = true
		if director.Cancelled(st.ctx, err) {
			// The client (the gateway's stream) went away: not a server error, and there is no
			// one to send an ImmediateResponse to.
			st.s.logger.Debug("ext_proc: request cancelled by the client", "requestID", r.headers[director.HeaderRequestID], "error", err.Error())
			return nil
		}
		code, body := director.ErrorJSON(err)
		st.s.logger.Info("ext_proc: request refused", "status", code, "requestID", r.headers[director.HeaderRequestID], "error", err.Error())
		return st.srv.Send(immediateResponse(code, body, director.CodeFor(err), director.ReasonFor(err)))
	}
	r.res = res
	st.s.inflight.Add(1) // until complete
	dest := res.Destination()
	set := []*corev3.HeaderValueOption{header(DestinationEndpointKey, dest)}
	if res.Body != nil {
		set = append(set, header("Content-Length", strconv.Itoa(len(res.Body))))
	}
	if res.RequestIDGenerated {
		set = append(set, header(director.HeaderRequestID, res.Request.XRequestID))
	}
	set = append(set, resultHeaders(res.Scheduling)...)
	hdrResp := &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{
				ClearRouteCache: true,
				HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: set},
			},
		}},
		DynamicMetadata: destinationMetadata(dest, st.scores(res)),
	}
	if err := st.srv.Send(hdrResp); err != nil {
		return err
	}
	st.s.logger.Debug("ext_proc: request routed", "requestID", res.Request.RequestID, "xRequestID", res.Request.XRequestID,
		"destination", dest, "profile", res.PrimaryProfile)
	// The body is held (and counted) until it has been sent back; the request keeps no copy.
	defer func() { st.s.releaseBody(r); res.Body = nil }()
	if res.Body == nil && !bodyPhase {
		return nil
	}
	// An empty body (a body phase with no bytes) is answered with one empty end_of_stream chunk.
	for _, chunk := range chunks(res.Body, BodyChunkLimit) {
		if err := st.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: streamedBody(chunk.data, chunk.last)}}}); err != nil {
			return err
		}
	}
	return nil
}

func (st *stream) responseHeaders(h *extprocv3.HttpHeaders) error {
	r := st.cur
	var set []*corev3.HeaderValueOption
	var remove []string
	if r != nil && r.res != nil && !r.ended {
		headers := headerMap(h.GetHeaders())
		served := r.served
		if served == "" && len(r.res.Targets) > 0 {
			served = r.res.Targets[0]
		}
		r.resp = &framework.Response{RequestID: r.res.Request.RequestID, Headers: headers, Endpoint: st.s.d.Lookup(served)}
		sse := strings.Contains(strings.ToLower(headers["content-type"]), "text/event-stream")
		r.usage = NewUsageParser(r.res.API, sse)
		st.s.d.ResponseHeader(st.ctx, r.res.Request, r.resp)
		if r.res.PrimaryProfile != "" {
			set = append(set, header(ProfileHeader, r.res.PrimaryProfile))
		}
		// Headers the ResponseHeader plugins set (session affinity's token), sorted.
		for _, k := range slices.Sorted(maps.Keys(r.resp.SetHeaders)) {
			if k != "" && !strings.HasPrefix(k, ":") && k != "content-length" && k != ProfileHeader {
				set = append(set, header(k, r.resp.SetHeaders[k]))
			}
		}
		if !h.GetEndOfStream() {
			r.restore = newModelRestorer(r.res.Request.TargetModel, r.res.IncomingModel, sse)
		}
		if r.restore != nil {
			// The restored body's length differs from the model server's: let the gateway frame it.
			remove = append(remove, "content-length")
		}
	}
	resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove}}}}}
	if err := st.srv.Send(resp); err != nil {
		return err
	}
	if h.GetEndOfStream() {
		st.complete(true)
	}
	return nil
}

func (st *stream) responseBody(b *extprocv3.HttpBody) error {
	r := st.cur
	eos := b.GetEndOfStream()
	if r != nil && r.resp != nil && !r.ended {
		r.usage.Write(b.GetBody())
		if eos {
			r.usage.Finish()
		}
		r.resp.Usage = r.usage.Usage()
		r.resp.EndOfStream = eos
		st.s.d.ResponseBody(st.ctx, r.res.Request, r.resp, b.GetBody())
		if r.restore != nil {
			// The model name goes back to the client's: complete SSE lines as they arrive, any
			// other body at its end (modelRestorer).
			out := r.restore.write(b.GetBody(), eos)
			if len(out) > 0 || eos {
				for _, c := range chunks(out, BodyChunkLimit) {
					if err := st.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
						ResponseBody: &extprocv3.BodyResponse{Response: streamedBody(c.data, c.last && eos)}}}); err != nil {
						return err
					}
				}
			}
			if eos {
				st.complete(true)
			}
			return nil
		}
	}
	// Otherwise the body passes through unchanged, chunk for chunk (FULL_DUPLEX_STREAMED).
	if err := st.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: streamedBody(b.GetBody(), eos)}}}); err != nil {
		return err
	}
	if eos {
		st.complete(true)
	}
	return nil
}

func (st *stream) responseTrailers(tr *extprocv3.HttpTrailers) error {
	err := st.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}})
	// Answered first, then ended: a drain that waits for InFlight to reach 0 never cuts the
	// last answer of a request. A non-zero grpc-status is an abort, not a natural end (abort.go).
	if code, msg, aborted := abortStatus(tr); aborted {
		st.abort(code, msg)
	} else {
		st.complete(true)
	}
	return err
}

// complete ends the current request: ResponseComplete (with EndOfStream = eos) and EndRequest,
// once. A request that was refused or never scheduled has nothing to end (the director released
// it already).
func (st *stream) complete(eos bool) {
	r := st.cur
	if r == nil {
		return
	}
	st.s.releaseBody(r) // a body still arriving or not yet sent back
	if r.ended {
		return
	}
	r.ended = true
	st.endBody(r)
	if r.res == nil {
		return
	}
	defer st.s.inflight.Add(-1)
	st.s.countOutcome(eos, r.aborted)
	if r.resp == nil {
		served := r.served
		if served == "" && len(r.res.Targets) > 0 {
			served = r.res.Targets[0]
		}
		r.resp = &framework.Response{RequestID: r.res.Request.RequestID, Endpoint: st.s.d.Lookup(served)}
	}
	if r.usage != nil {
		r.resp.Usage = r.usage.Finish()
	}
	r.resp.EndOfStream = eos
	// The stream's context may be cancelled already (client went away); plugins still get to
	// clean up, so the hooks run on a context that is not.
	ctx := context.WithoutCancel(st.ctx)
	st.s.d.ResponseComplete(ctx, r.res.Request, r.resp)
	st.s.d.EndRequest(r.res.Request)
}

// abandon ends the current request as abandoned (client cancel, stream end, next request).
func (st *stream) abandon() { st.complete(false) }

// headerMap returns the headers with lower-case keys; a value is RawValue when set, else Value
// (upstream pkg/common/envoy/headers.go GetHeaderValue).
func headerMap(hm *corev3.HeaderMap) map[string]string {
	out := map[string]string{}
	for _, h := range hm.GetHeaders() {
		v := h.GetValue()
		if len(h.GetRawValue()) > 0 {
			v = string(h.GetRawValue())
		}
		out[strings.ToLower(h.GetKey())] = v
	}
	return out
}

// subsetHint reads the subset hint from the filter metadata: nil when absent; a present list
// (or comma-separated string) otherwise, possibly empty.
func subsetHint(msg *extprocv3.ProcessingRequest) *director.Subset {
	ns := msg.GetMetadataContext().GetFilterMetadata()[SubsetHintNamespace]
	if ns == nil {
		return nil
	}
	v, ok := ns.GetFields()[SubsetHintKey]
	if !ok {
		return nil
	}
	sub := &director.Subset{Endpoints: []string{}}
	switch k := v.GetKind().(type) {
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if s, ok := e.GetKind().(*structpb.Value_StringValue); ok && strings.TrimSpace(s.StringValue) != "" {
				sub.Endpoints = append(sub.Endpoints, strings.TrimSpace(s.StringValue))
			}
		}
	case *structpb.Value_StringValue:
		for _, s := range strings.Split(k.StringValue, ",") {
			if s = strings.TrimSpace(s); s != "" {
				sub.Endpoints = append(sub.Endpoints, s)
			}
		}
	}
	return sub
}

// servedEndpoint reads envoy.lb / x-gateway-destination-endpoint-served from the filter
// metadata, "" when absent.
func servedEndpoint(msg *extprocv3.ProcessingRequest) string {
	ns := msg.GetMetadataContext().GetFilterMetadata()[DestinationEndpointNamespace]
	if ns == nil {
		return ""
	}
	return strings.TrimSpace(ns.GetFields()[DestinationEndpointServedKey].GetStringValue())
}

// destinationMetadata is the pick's dynamic metadata: envoy.lb / x-gateway-destination-endpoint,
// and x-gateway-destination-endpoint-scores when scores is not nil (llm-d-router v0.10.0
// pkg/epp/handlers/request.go generateMetadata: a protobuf Struct of number values, omitted
// when empty).
func destinationMetadata(dest string, scores *structpb.Struct) *structpb.Struct {
	fields := map[string]*structpb.Value{DestinationEndpointKey: structpb.NewStringValue(dest)}
	if len(scores.GetFields()) > 0 {
		fields[DestinationEndpointScoresKey] = structpb.NewStructValue(scores)
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationEndpointNamespace: structpb.NewStructValue(&structpb.Struct{Fields: fields}),
	}}
}

// scores returns the primary profile's candidates and scores as a Struct "ip:port" → number,
// nil unless the server emits scores. Every endpoint that passed the primary profile's filters
// appears, the picked ones and the others (llm-d-router v0.10.0 requestcontrol/director.go
// prepareRequest copies primaryResult.ScoredCandidates).
func (st *stream) scores(res *director.Result) *structpb.Struct {
	if !st.s.emitScores {
		return nil
	}
	primary := res.Scheduling.Primary()
	if primary == nil || len(primary.Candidates) == 0 {
		return nil
	}
	out := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(primary.Candidates))}
	for _, c := range primary.Candidates {
		out.Fields[c.Endpoint.Key()] = structpb.NewNumberValue(c.Score)
	}
	return out
}

// header is a set-header mutation that replaces any value the request or response already
// carries (append_action OVERWRITE_IF_EXISTS_OR_ADD; SPEC §9.3): the zero value,
// APPEND_IF_EXISTS_OR_ADD, would duplicate a forged x-gateway-destination-endpoint or a stale
// Content-Length on gateways that honour append_action (agentgateway #905).
func header(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

func streamedBody(b []byte, eos bool) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
		StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}
}

type chunk struct {
	data []byte
	last bool
}

// chunks splits b into pieces of at most limit bytes; the last one is marked. An empty b is one
// empty last chunk.
func chunks(b []byte, limit int) []chunk {
	if len(b) == 0 {
		return []chunk{{data: b, last: true}}
	}
	var out []chunk
	for len(b) > 0 {
		n := min(len(b), limit)
		out = append(out, chunk{data: b[:n], last: n == len(b)})
		b = b[n:]
	}
	return out
}

// DroppedReasonHeader names why flow control refused a request (llm-d-router v0.10.0
// pkg/common/error/error.go RequestDroppedReasonHeaderKey): set on an ImmediateResponse exactly
// when the refusal carries a reason (director.ReasonFor), as upstream sets it only on flow
// control's refusals. eppkit's former x-eppkit-reason is gone (docs/request-surface.md §2).
const DroppedReasonHeader = "x-llm-d-request-dropped-reason"

// immediateResponse is a refusal: the HTTP status, a JSON body, content-type application/json
// and, for a flow-control refusal, DroppedReasonHeader (llm-d-router v0.10.0
// pkg/common/error/error.go BuildErrResponse sends the status, the error text and the error's
// headers).
func immediateResponse(code int, body []byte, details, reason string) *extprocv3.ProcessingResponse {
	set := []*corev3.HeaderValueOption{header("content-type", "application/json")}
	if reason != "" {
		set = append(set, header(DroppedReasonHeader, reason))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: set},
			Body:    body,
			Details: "eppkit_epp_" + details,
		}}}
}
