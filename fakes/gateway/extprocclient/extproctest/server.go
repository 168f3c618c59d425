// Package extproctest is a tiny scripted ext_proc server for tests of gateways and ext_proc
// clients: per request it collects what the gateway sent (headers, reassembled body, filter
// metadata) and answers with responses the test scripts (a fixed pick, an ImmediateResponse, a
// chunked body mutation, a stall). It is not an EPP: it implements no picking.
package extproctest

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"
)

// Seen is what the server observed of one request on a stream.
type Seen struct {
	// Headers are the request headers (lower-case keys; repeated keys joined with ",").
	Headers map[string]string
	// HeadersEOS reports request_headers.end_of_stream.
	HeadersEOS bool
	// Body is the request body reassembled from the request_body chunks; BodyChunks counts them.
	Body       []byte
	BodyChunks int
	// RequestMetadata is the metadata_context of the last request-phase message.
	RequestMetadata *corev3.Metadata
	// ProtocolConfig is the protocol_config of the stream's first message (nil on later requests).
	ProtocolConfig *extprocv3.ProtocolConfiguration
	// ResponseHeaders are the response headers (with ":status").
	ResponseHeaders map[string]string
	// ResponseMetadata is the metadata_context of the response_headers message.
	ResponseMetadata *corev3.Metadata
	// ResponseBody is the response body as received; ResponseChunks counts the chunks.
	ResponseBody   []byte
	ResponseChunks int
	// ResponseDone reports that a response_body with end_of_stream arrived.
	ResponseDone bool
	// ResponseTrailers are the response_trailers the gateway sent (nil: none).
	ResponseTrailers map[string]string
}

// Script decides the server's answers. Nil functions take the defaults noted.
type Script struct {
	// OnRequest answers a complete request (at headers end_of_stream or body end_of_stream).
	// Default: PickResponses("", seen.Body, 0) — no pick, the body echoed.
	OnRequest func(seen *Seen) []*extprocv3.ProcessingResponse
	// OnResponseHeaders answers the response headers. Default: an empty response_headers response.
	OnResponseHeaders func(seen *Seen) []*extprocv3.ProcessingResponse
	// OnResponseBody answers one response body chunk. Default: the chunk echoed as a streamed
	// response_body, end_of_stream copied.
	OnResponseBody func(seen *Seen, chunk []byte, eos bool) []*extprocv3.ProcessingResponse
}

// Server is a running scripted ext_proc server on 127.0.0.1.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	script Script
	grpc   *grpc.Server
	ln     net.Listener

	mu   sync.Mutex
	seen []*Seen
}

// Start listens on 127.0.0.1:0 and serves script in plaintext until Stop.
func Start(script Script) (*Server, error) { return StartTLS(script, nil) }

// StartTLS is Start serving over TLS with cfg (nil = plaintext).
func StartTLS(script Script, cfg *tls.Config) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var opts []grpc.ServerOption
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	s := &Server{script: script, grpc: grpc.NewServer(opts...), ln: ln}
	extprocv3.RegisterExternalProcessorServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(ln) }()
	return s, nil
}

// Addr is the server's "ip:port".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Stop stops the server and closes open streams.
func (s *Server) Stop() { s.grpc.Stop() }

// Seen returns snapshots of the requests observed so far, in the order they started.
func (s *Server) Seen() []Seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Seen, len(s.seen))
	for i, p := range s.seen {
		out[i] = *p
		out[i].Body = append([]byte(nil), p.Body...)
		out[i].ResponseBody = append([]byte(nil), p.ResponseBody...)
	}
	return out
}

// Process implements ExternalProcessor/Process.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	var cur *Seen
	send := func(rs []*extprocv3.ProcessingResponse) error {
		for _, r := range rs {
			if err := stream.Send(r); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var out []*extprocv3.ProcessingResponse
		switch r := msg.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			s.mu.Lock()
			cur = &Seen{Headers: headerMap(r.RequestHeaders.GetHeaders()), HeadersEOS: r.RequestHeaders.GetEndOfStream(),
				RequestMetadata: msg.GetMetadataContext(), ProtocolConfig: msg.GetProtocolConfig()}
			s.seen = append(s.seen, cur)
			s.mu.Unlock()
			if cur.HeadersEOS {
				out = s.onRequest(cur)
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			if cur == nil {
				return errors.New("extproctest: request_body before request_headers")
			}
			s.mu.Lock()
			cur.Body = append(cur.Body, r.RequestBody.GetBody()...)
			cur.BodyChunks++
			cur.RequestMetadata = msg.GetMetadataContext()
			s.mu.Unlock()
			if r.RequestBody.GetEndOfStream() {
				out = s.onRequest(cur)
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			if cur == nil {
				return errors.New("extproctest: response_headers before request_headers")
			}
			s.mu.Lock()
			cur.ResponseHeaders = headerMap(r.ResponseHeaders.GetHeaders())
			cur.ResponseMetadata = msg.GetMetadataContext()
			if r.ResponseHeaders.GetEndOfStream() {
				cur.ResponseDone = true
			}
			s.mu.Unlock()
			if s.script.OnResponseHeaders != nil {
				out = s.script.OnResponseHeaders(cur)
			} else {
				out = []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}}
			}
		case *extprocv3.ProcessingRequest_ResponseBody:
			if cur == nil {
				return errors.New("extproctest: response_body before request_headers")
			}
			chunk, eos := r.ResponseBody.GetBody(), r.ResponseBody.GetEndOfStream()
			s.mu.Lock()
			cur.ResponseBody = append(cur.ResponseBody, chunk...)
			cur.ResponseChunks++
			cur.ResponseDone = eos
			s.mu.Unlock()
			if s.script.OnResponseBody != nil {
				out = s.script.OnResponseBody(cur, chunk, eos)
			} else {
				out = []*extprocv3.ProcessingResponse{StreamedBody(false, chunk, eos)}
			}
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			if cur == nil {
				return errors.New("extproctest: response_trailers before request_headers")
			}
			s.mu.Lock()
			cur.ResponseTrailers = headerMap(r.ResponseTrailers.GetTrailers())
			cur.ResponseDone = true
			s.mu.Unlock()
			out = []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}}
		}
		if err := send(out); err != nil {
			return err
		}
	}
}

func (s *Server) onRequest(seen *Seen) []*extprocv3.ProcessingResponse {
	if s.script.OnRequest != nil {
		return s.script.OnRequest(seen)
	}
	return PickResponses("", nil, seen.Body, 0, !seen.HeadersEOS)
}

func headerMap(hm *corev3.HeaderMap) map[string]string {
	out := map[string]string{}
	for _, h := range hm.GetHeaders() {
		v := string(h.GetRawValue())
		if len(h.GetRawValue()) == 0 {
			v = h.GetValue()
		}
		k := strings.ToLower(h.GetKey())
		if old, ok := out[k]; ok {
			v = old + "," + v
		}
		out[k] = v
	}
	return out
}

// PickResponses builds the request-phase answer of an EPP that picks pick: a request_headers
// response setting x-gateway-destination-endpoint (when pick != ""), extra headers and
// Content-Length (when hasBody), with dynamic metadata envoy.lb / x-gateway-destination-endpoint,
// then — when hasBody — body split into streamed request_body chunks of at most chunk bytes
// (0 = one chunk), the last with end_of_stream.
func PickResponses(pick string, extra map[string]string, body []byte, chunk int, hasBody bool) []*extprocv3.ProcessingResponse {
	var set []*corev3.HeaderValueOption
	if pick != "" {
		set = append(set, HeaderOption("x-gateway-destination-endpoint", pick))
	}
	if hasBody {
		set = append(set, HeaderOption("Content-Length", strconv.Itoa(len(body))))
	}
	for k, v := range extra {
		set = append(set, HeaderOption(k, v))
	}
	hdr := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}},
	}}}
	if pick != "" {
		hdr.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
			"envoy.lb": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"x-gateway-destination-endpoint": structpb.NewStringValue(pick),
			}}),
		}}
	}
	out := []*extprocv3.ProcessingResponse{hdr}
	if !hasBody {
		return out
	}
	if chunk <= 0 {
		chunk = max(len(body), 1)
	}
	if len(body) == 0 {
		return append(out, StreamedBody(true, nil, true))
	}
	for off := 0; off < len(body); off += chunk {
		end := min(off+chunk, len(body))
		out = append(out, StreamedBody(true, body[off:end], end == len(body)))
	}
	return out
}

// HeaderOption is a set-header mutation with the value in raw_value, as upstream EPPs send, and
// append_action OVERWRITE_IF_EXISTS_OR_ADD, so a value the request carried is replaced (SPEC
// §9.3). Upstream v1.5.0 leaves append_action at its zero value, APPEND_IF_EXISTS_OR_ADD: build
// that with HeaderOptionAction.
func HeaderOption(k, v string) *corev3.HeaderValueOption {
	return HeaderOptionAction(k, v, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)
}

// HeaderOptionAction is a set-header mutation with the value in raw_value and the given
// append_action.
func HeaderOptionAction(k, v string, action corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}, AppendAction: action}
}

// StreamedBody is a request_body (request=true) or response_body streamed body mutation.
func StreamedBody(request bool, body []byte, eos bool) *extprocv3.ProcessingResponse {
	common := &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
		StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: eos},
	}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: common}}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: common}}}
}

// Immediate is an ImmediateResponse with status, headers and body.
func Immediate(status int, headers map[string]string, body []byte) *extprocv3.ProcessingResponse {
	var set []*corev3.HeaderValueOption
	for k, v := range headers {
		set = append(set, HeaderOption(k, v))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: set},
		Body:    body,
	}}}
}

// SubsetHint reads envoy.lb.subset_hint / x-gateway-destination-endpoint-subset from md:
// the list and whether the key was present.
func SubsetHint(md *corev3.Metadata) ([]string, bool) {
	ns, ok := md.GetFilterMetadata()["envoy.lb.subset_hint"]
	if !ok {
		return nil, false
	}
	v, ok := ns.GetFields()["x-gateway-destination-endpoint-subset"]
	if !ok {
		return nil, false
	}
	out := []string{}
	for _, e := range v.GetListValue().GetValues() {
		out = append(out, e.GetStringValue())
	}
	return out, true
}

// Served reads envoy.lb / x-gateway-destination-endpoint-served from md ("" if absent).
func Served(md *corev3.Metadata) string {
	return md.GetFilterMetadata()["envoy.lb"].GetFields()["x-gateway-destination-endpoint-served"].GetStringValue()
}
