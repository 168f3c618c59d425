// Package extprocclient is a scripted Envoy ext_proc v3 client: it dials an endpoint picker (EPP),
// opens ExternalProcessor/Process streams and plays the gateway's side of the protocol the way
// Envoy does with request and response bodies in FULL_DUPLEX_STREAMED mode: request headers
// (end_of_stream set for a headers-only request), request body chunks, response headers and
// response body chunks, each carrying the gateway's filter metadata, and it collects the EPP's
// ProcessingResponses (header mutations, dynamic metadata, streamed body mutations,
// ImmediateResponse).
//
// Two levels of API:
//   - Stream.Send / Stream.Recv and the Send* helpers, for tests that script every message;
//   - Stream.Exchange (request phases → Decision) and Stream.Respond (response phases →
//     ResponseResult), for callers that want "the pick" of one request. Several requests may run
//     one after the other on one stream.
//
// Wire shapes follow upstream GIE v1.5.0 (kubernetes-sigs/gateway-api-inference-extension):
// pkg/epp/metadata/consts.go (metadata namespaces and keys), pkg/epp/handlers/request.go and
// server.go (header response with x-gateway-destination-endpoint, Content-Length and dynamic
// metadata envoy.lb; body responses as StreamedBodyResponse chunks), pkg/common/envoy/chunking.go
// (62,000-byte chunks) and test/integration/util.go (the subset hint as a list value).
package extprocclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// Metadata namespaces and keys of the endpoint picker protocol (GIE proposal 004; upstream
// v1.5.0 pkg/epp/metadata/consts.go).
const (
	// SubsetHintNamespace is the filter-metadata namespace of the subset hint the gateway sends.
	SubsetHintNamespace = "envoy.lb.subset_hint"
	// SubsetHintKey holds the candidate "ip:port" list (a list value) inside SubsetHintNamespace.
	SubsetHintKey = "x-gateway-destination-endpoint-subset"
	// DestinationNamespace is the namespace of the pick in the EPP's dynamic metadata and of the
	// served endpoint in the gateway's response-phase filter metadata.
	DestinationNamespace = "envoy.lb"
	// DestinationKey is the pick: a request header set by the EPP and a dynamic-metadata key in
	// DestinationNamespace; the value is a comma list of "ip:port".
	DestinationKey = "x-gateway-destination-endpoint"
	// ServedKey holds the "ip:port" that served the request, in DestinationNamespace of the
	// response-phase filter metadata.
	ServedKey = "x-gateway-destination-endpoint-served"
	// MaxStreamedChunk is the largest body chunk upstream EPPs return (pkg/common/envoy/chunking.go).
	MaxStreamedChunk = 62000
	// DefaultMessageTimeout bounds each wait for a ProcessingResponse when no timeout is given.
	DefaultMessageTimeout = 5 * time.Second
)

// ErrMessageTimeout is returned (wrapped) when no ProcessingResponse arrived within the message
// timeout.
var ErrMessageTimeout = errors.New("ext_proc message timeout")

// ErrProtocol is returned (wrapped) when the EPP sent a response the FULL_DUPLEX_STREAMED protocol
// does not allow at that point (a spurious response, a non-streamed body mutation, …).
var ErrProtocol = errors.New("ext_proc protocol violation")

// Client holds one gRPC connection to an EPP. It is safe for concurrent use; each Open starts an
// independent stream on the shared connection.
type Client struct {
	conn *grpc.ClientConn
	api  extprocv3.ExternalProcessorClient
	// MessageTimeout bounds each wait for a response (Stream.Recv and the helpers); default
	// DefaultMessageTimeout. Set it before opening streams.
	MessageTimeout time.Duration
	// Stalls, when set, is shared by every stream of the client (and of other clients of the
	// same run): after the EPP has left one phase unanswered several times in a row, waits for
	// that phase are cut short (StallWatch). Set it before opening streams.
	Stalls *StallWatch
}

// Dial connects to an EPP at addr ("host:port"). tlsCfg nil means plaintext; otherwise the
// connection uses TLS with that configuration (see TLSConfig). Extra gRPC dial options are
// appended. The connection is made lazily; errors show up on the first stream.
func Dial(addr string, tlsCfg *tls.Config, opts ...grpc.DialOption) (*Client, error) {
	if addr == "" {
		return nil, errors.New("extprocclient: EPP address is empty")
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts...)
	conn, err := grpc.NewClient(addr, all...)
	if err != nil {
		return nil, fmt.Errorf("extprocclient: dial %s: %w", addr, err)
	}
	return &Client{conn: conn, api: extprocv3.NewExternalProcessorClient(conn), MessageTimeout: DefaultMessageTimeout}, nil
}

// Conn returns the underlying gRPC connection (for health checks).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection and every stream on it.
func (c *Client) Close() error { return c.conn.Close() }

// Open starts an ExternalProcessor/Process stream. The stream lives until ctx ends or Close is
// called. Open itself does not wait for the EPP; a dead EPP shows up as an error from the first
// Send or Recv.
func (c *Client) Open(ctx context.Context) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	raw, err := c.api.Process(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("extprocclient: open Process stream: %w", err)
	}
	s := &Stream{raw: raw, cancel: cancel, timeout: c.MessageTimeout, notify: make(chan struct{}, 1), first: true, watch: c.Stalls}
	if s.timeout <= 0 {
		s.timeout = DefaultMessageTimeout
	}
	go s.receive()
	return s, nil
}

// Stream is one ext_proc stream. Send* methods must be called from one goroutine at a time, and
// so must Recv; a sender and a receiver may run concurrently. Received messages are queued
// without bound so a slow reader never stalls the EPP's sends.
type Stream struct {
	raw     extprocv3.ExternalProcessor_ProcessClient
	cancel  context.CancelFunc
	timeout time.Duration
	first   bool // the next message is the first of the stream (carries protocol_config)

	stopTimer []*time.Timer // owned by the (single) receiving goroutine

	sendMu sync.Mutex
	// sent are the request headers of the latest SendRequest (the header map Envoy mutates).
	sent []Header

	watch *StallWatch

	mu     sync.Mutex
	pend   pending // what the current request's messages got back (StallError)
	queue  []*extprocv3.ProcessingResponse
	recErr error // terminal receive error (io.EOF when the EPP closed the stream cleanly)
	notify chan struct{}
}

func (s *Stream) receive() {
	for {
		msg, err := s.raw.Recv()
		s.mu.Lock()
		if err != nil {
			s.recErr = err
		} else {
			s.queue = append(s.queue, msg)
			s.watch.answered(s.pend.received(msg))
		}
		s.mu.Unlock()
		select {
		case s.notify <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// SetMessageTimeout changes the bound on each wait for a response on this stream (> 0).
func (s *Stream) SetMessageTimeout(d time.Duration) {
	if d > 0 {
		s.timeout = d
	}
}

// Send sends one raw ProcessingRequest. The first message of a stream gets a protocol_config
// announcing FULL_DUPLEX_STREAMED request and response bodies, as Envoy sends, unless it has one.
func (s *Stream) Send(msg *extprocv3.ProcessingRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.first {
		s.first = false
		if msg.ProtocolConfig == nil {
			msg.ProtocolConfig = &extprocv3.ProtocolConfiguration{
				RequestBodyMode:  filterpb.ProcessingMode_FULL_DUPLEX_STREAMED,
				ResponseBodyMode: filterpb.ProcessingMode_FULL_DUPLEX_STREAMED,
			}
		}
	}
	s.mu.Lock()
	s.pend.sent(msg)
	s.mu.Unlock()
	if err := s.raw.Send(msg); err != nil {
		if err == io.EOF {
			// grpc-go reports the stream's real status through Recv, which the receive
			// goroutine owns: wait briefly for it.
			if rerr := s.terminalErr(time.Second); rerr != nil && rerr != io.EOF {
				return fmt.Errorf("extprocclient: send: stream closed: %w", rerr)
			}
		}
		return fmt.Errorf("extprocclient: send: %w", err)
	}
	return nil
}

// terminalErr returns the receive goroutine's terminal error, waiting up to d for it.
func (s *Stream) terminalErr(d time.Duration) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		err := s.recErr
		s.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case <-s.notify:
			// A message may have been queued rather than an error; put the wake-up back for Recv.
			select {
			case s.notify <- struct{}{}:
			default:
			}
			time.Sleep(time.Millisecond)
		case <-deadline.C:
			return nil
		}
	}
}

// Recv waits for the next ProcessingResponse, at most the message timeout (then an error wrapping
// ErrMessageTimeout). When the EPP has closed the stream it returns io.EOF (clean close) or the
// gRPC status error.
func (s *Stream) Recv(ctx context.Context) (*extprocv3.ProcessingResponse, error) {
	return s.RecvWithin(ctx, s.timeout)
}

// RecvWithin is Recv with an explicit bound; d <= 0 waits until ctx ends.
func (s *Stream) RecvWithin(ctx context.Context, d time.Duration) (*extprocv3.ProcessingResponse, error) {
	return s.RecvArmed(ctx, nil, d)
}

// RecvArmed waits for the next response without a bound until armed is closed, then at most d
// more (d <= 0: until ctx ends). A nil armed starts the bound at once. Gateways use it for body
// phases, where the EPP may hold responses until the last chunk: the message timeout starts
// when the last chunk has been sent.
func (s *Stream) RecvArmed(ctx context.Context, armed <-chan struct{}, d time.Duration) (*extprocv3.ProcessingResponse, error) {
	var timer <-chan time.Time
	var (
		armedAt time.Time
		bound   time.Duration
		short   bool
		phase   Phase
	)
	arm := func() {
		s.mu.Lock()
		phase, _, _ = s.pend.outstanding()
		s.mu.Unlock()
		bound, short = s.watch.bound(phase, d)
		if bound > 0 {
			t := time.NewTimer(bound)
			timer = t.C
			armedAt = time.Now()
			s.stopTimer = append(s.stopTimer[:0], t)
		}
	}
	defer func() {
		for _, t := range s.stopTimer {
			t.Stop()
		}
		s.stopTimer = s.stopTimer[:0]
	}()
	if armed == nil {
		arm()
	}
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			msg := s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return msg, nil
		}
		err := s.recErr
		s.mu.Unlock()
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && !armedAt.IsZero() {
				// The caller's deadline cancelled the stream itself (its status is then
				// DeadlineExceeded): a stall like any other, named and counted.
				if serr := s.deadlineStall(ctx, armedAt, short, phase); serr != nil {
					return nil, serr
				}
			}
			return nil, err
		}
		select {
		case <-s.notify:
		case <-armed:
			armed = nil
			arm()
		case <-timer:
			s.mu.Lock()
			ph, sent, answered := s.pend.outstanding()
			headers := s.pend.reqHeadersAnswered
			if ph == PhaseResponseBody {
				headers = s.pend.respHeadersAnswered
			}
			s.mu.Unlock()
			if ph == PhaseNone {
				return nil, fmt.Errorf("extprocclient: no response within %v: %w", bound, ErrMessageTimeout)
			}
			return nil, fmt.Errorf("extprocclient: %w", &StallError{Phase: ph, Sent: sent, Answered: answered, HeadersAnswered: headers,
				Waited: time.Since(armedAt), Stalls: s.watch.stalled(ph), Short: short && ph == phase})
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && !armedAt.IsZero() {
				// The caller's deadline ended the wait first: still a stall of the phase, named
				// and counted like a message timeout.
				if serr := s.deadlineStall(ctx, armedAt, short, phase); serr != nil {
					return nil, serr
				}
			}
			return nil, ctx.Err()
		}
	}
}

// deadlineStall is the StallError of a wait the caller's deadline ended (wrapping both the
// context's error and ErrMessageTimeout), nil when nothing was outstanding.
func (s *Stream) deadlineStall(ctx context.Context, armedAt time.Time, short bool, phase Phase) error {
	s.mu.Lock()
	ph, sent, answered := s.pend.outstanding()
	s.mu.Unlock()
	if ph == PhaseNone {
		return nil
	}
	return fmt.Errorf("extprocclient: %w: %w", ctx.Err(), &StallError{Phase: ph, Sent: sent, Answered: answered,
		Waited: time.Since(armedAt), Stalls: s.watch.stalled(ph), Short: short && ph == phase})
}

// CloseSend half-closes the stream (the gateway has no more messages), as Envoy does when the
// HTTP request is complete.
func (s *Stream) CloseSend() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.raw.CloseSend()
}

// Close cancels the stream; pending and later calls fail.
func (s *Stream) Close() { s.cancel() }

// Header is one header as Envoy sends it: lower-case key (pseudo-headers start with ':'), value
// carried in raw_value.
type Header struct {
	Key, Value string
}

// HeaderMap converts headers to the proto shape (values in RawValue, as Envoy sends them).
func HeaderMap(headers []Header) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, 0, len(headers))}
	for _, h := range headers {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: h.Key, RawValue: []byte(h.Value)})
	}
	return hm
}

// Metadata is the gateway's filter metadata attached to every message of a request.
type Metadata struct {
	// SubsetHint, when non-nil, is sent as envoy.lb.subset_hint /
	// x-gateway-destination-endpoint-subset (a list of "ip:port" strings); an empty non-nil
	// slice sends the key with an empty list ("present but empty").
	SubsetHint []string
	// Served, when non-empty, is sent as envoy.lb / x-gateway-destination-endpoint-served
	// ("ip:port"). Only meaningful on response-phase messages.
	Served string
}

// Proto builds the metadata_context, or nil when there is nothing to send.
func (m Metadata) Proto() *corev3.Metadata {
	if m.SubsetHint == nil && m.Served == "" {
		return nil
	}
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	if m.SubsetHint != nil {
		list := make([]*structpb.Value, len(m.SubsetHint))
		for i, a := range m.SubsetHint {
			list[i] = structpb.NewStringValue(a)
		}
		md.FilterMetadata[SubsetHintNamespace] = &structpb.Struct{Fields: map[string]*structpb.Value{
			SubsetHintKey: structpb.NewListValue(&structpb.ListValue{Values: list}),
		}}
	}
	if m.Served != "" {
		md.FilterMetadata[DestinationNamespace] = &structpb.Struct{Fields: map[string]*structpb.Value{
			ServedKey: structpb.NewStringValue(m.Served),
		}}
	}
	return md
}

// SendRequestHeaders sends request_headers; endOfStream marks a request without a body.
func (s *Stream) SendRequestHeaders(headers []Header, endOfStream bool, md Metadata) error {
	return s.Send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: HeaderMap(headers), EndOfStream: endOfStream}},
		MetadataContext: md.Proto(),
	})
}

// SendRequestBody sends one request_body chunk (HttpBody{body, end_of_stream}).
func (s *Stream) SendRequestBody(chunk []byte, endOfStream bool, md Metadata) error {
	return s.Send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: endOfStream}},
		MetadataContext: md.Proto(),
	})
}

// SendResponseHeaders sends response_headers (include ":status"); endOfStream marks a response
// without a body.
func (s *Stream) SendResponseHeaders(headers []Header, endOfStream bool, md Metadata) error {
	return s.Send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: HeaderMap(headers), EndOfStream: endOfStream}},
		MetadataContext: md.Proto(),
	})
}

// SendResponseBody sends one response_body chunk.
func (s *Stream) SendResponseBody(chunk []byte, endOfStream bool, md Metadata) error {
	return s.Send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: endOfStream}},
		MetadataContext: md.Proto(),
	})
}

// SendResponseTrailers sends the response's trailers (Envoy's response_trailers, sent when the
// upstream response ends with trailers and the processing mode asks for them: the body's last
// response_body message then has end_of_stream false). A gRPC upstream's grpc-status is here.
func (s *Stream) SendResponseTrailers(trailers []Header, md Metadata) error {
	return s.Send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: HeaderMap(trailers)}},
		MetadataContext: md.Proto(),
	})
}

// TLSConfig builds the client TLS configuration for an EPP: insecureSkipVerify accepts any
// certificate (self-signed serving certs, as upstream EPPs generate); otherwise caPEM, when
// non-empty, is the only trusted root. serverName overrides the name checked (empty = from the
// address).
func TLSConfig(insecureSkipVerify bool, caPEM []byte, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, NextProtos: []string{"h2"}}
	if insecureSkipVerify {
		cfg.InsecureSkipVerify = true //nolint:gosec // explicit user choice for self-signed EPP certs
		return cfg, nil
	}
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("extprocclient: CA file holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// ParseTLSSpec parses a command-line TLS choice for an EPP connection: "plaintext" or "" (nil
// config), "insecure" (TLS, any certificate) or "ca:<file>" (TLS, the PEM file is the only
// root). flag names the option in errors (e.g. "--epp-tls").
func ParseTLSSpec(flag, s string) (*tls.Config, error) {
	switch {
	case s == "" || s == "plaintext":
		return nil, nil
	case s == "insecure":
		return TLSConfig(true, nil, "")
	case strings.HasPrefix(s, "ca:"):
		pem, err := os.ReadFile(strings.TrimPrefix(s, "ca:"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		cfg, err := TLSConfig(false, pem, "")
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", flag, s, err)
		}
		return cfg, nil
	}
	return nil, fmt.Errorf("%s %q: want plaintext, insecure or ca:<file>", flag, s)
}
