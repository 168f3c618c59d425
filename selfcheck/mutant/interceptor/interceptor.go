// Package interceptor is the mutant interceptor: an Envoy ext_proc v3 proxy that stands between a
// gateway and ANY endpoint picker (EPP) and breaks exactly one rule of the endpoint picker
// protocol on the wire, so that the conformance test of that rule can be shown to fail against
// it (the protocol mutants of the mutant matrix, selfcheck/mutant and reports/mutants.md).
//
// Every ExternalProcessor/Process stream the gateway opens is mirrored by one stream to the EPP;
// messages pass through in order, unchanged unless the selected mutant rewrites them. With no
// mutant the interceptor is transparent: an EPP passes through it exactly the tests it passes on
// its own, which the matrix checks with a baseline run. The gRPC health service is proxied too,
// so the interceptor can stand in for the EPP on both its ports.
//
// The header and metadata names are those of the protocol (GIE proposal 004; upstream v1.5.0
// pkg/epp/metadata/consts.go) as fakes/gateway/extprocclient spells them; the interceptor knows
// nothing of any EPP's internals.
package interceptor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/eppkit/eppkit/selfcheck/mutant"
)

// Options configure an Interceptor.
type Options struct {
	// Upstream is the EPP's ext_proc address, host:port (plaintext gRPC). Required.
	Upstream string
	// UpstreamHealth is the EPP's gRPC health address; "" means Upstream.
	UpstreamHealth string
	// Mutant is the protocol mutant to apply (one of Mutants()); "" or "none" forwards every
	// message unchanged.
	Mutant mutant.Name
	// SheddableObjective names an InferenceObjective the EPP knows as sheddable (priority < 0).
	// Required by the critical-shed mutant, which presents every request as that objective.
	SheddableObjective string
	// Logger receives one line per stream the mutant changed; nil means discard.
	Logger *slog.Logger
}

// Interceptor is a running ext_proc proxy. Close it when done.
type Interceptor struct {
	extprocv3.UnimplementedExternalProcessorServer
	opts   Options
	rule   rule
	log    *slog.Logger
	conn   *grpc.ClientConn
	health *grpc.ClientConn
	api    extprocv3.ExternalProcessorClient
	srv    *grpc.Server
	lis    net.Listener

	// picks are the distinct pick values seen so far, in order (header-metadata-disagree).
	picksMu sync.Mutex
	picks   []string
	// started is when Start returned (serving-before-endpoints).
	started time.Time
}

// Mutants returns the protocol mutants the interceptor implements, sorted.
func Mutants() []mutant.Name {
	out := make([]mutant.Name, 0, len(rules))
	for n := range rules {
		if n != "" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Start listens on listen (host:port; port 0 picks a free one) and serves until Close. Errors:
// Upstream empty, a mutant the interceptor does not implement, critical-shed without
// SheddableObjective, or the listener cannot be opened. The upstream EPP is dialled lazily: an
// EPP that is not up yet shows as errors on the streams, as it would without the interceptor.
func Start(listen string, opts Options) (*Interceptor, error) {
	if opts.Upstream == "" {
		return nil, errors.New("interceptor: Options.Upstream (the EPP's ext_proc address) is required")
	}
	if opts.Mutant == "none" {
		opts.Mutant = ""
	}
	r, ok := rules[opts.Mutant]
	if !ok {
		return nil, fmt.Errorf("interceptor: %q is not a protocol mutant (have %v)", opts.Mutant, Mutants())
	}
	if opts.Mutant == mutant.CriticalShed && opts.SheddableObjective == "" {
		return nil, errors.New("interceptor: critical-shed needs Options.SheddableObjective")
	}
	if opts.UpstreamHealth == "" {
		opts.UpstreamHealth = opts.Upstream
	}
	i := &Interceptor{opts: opts, rule: r, log: opts.Logger}
	if i.log == nil {
		i.log = slog.New(slog.DiscardHandler)
	}
	var err error
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	if i.conn, err = grpc.NewClient(opts.Upstream, creds); err != nil {
		return nil, fmt.Errorf("interceptor: upstream %s: %w", opts.Upstream, err)
	}
	if i.health, err = grpc.NewClient(opts.UpstreamHealth, creds); err != nil {
		_ = i.conn.Close()
		return nil, fmt.Errorf("interceptor: upstream health %s: %w", opts.UpstreamHealth, err)
	}
	i.api = extprocv3.NewExternalProcessorClient(i.conn)
	if i.lis, err = net.Listen("tcp", listen); err != nil {
		_ = i.conn.Close()
		_ = i.health.Close()
		return nil, fmt.Errorf("interceptor: listen %s: %w", listen, err)
	}
	i.srv = grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(i.srv, i)
	healthpb.RegisterHealthServer(i.srv, &healthProxy{c: healthpb.NewHealthClient(i.health)})
	go func() { _ = i.srv.Serve(i.lis) }()
	i.started = time.Now()
	return i, nil
}

// Addr is the interceptor's listen address, host:port.
func (i *Interceptor) Addr() string { return i.lis.Addr().String() }

// Close stops serving (open streams end) and closes the connections to the EPP.
func (i *Interceptor) Close() error {
	i.srv.Stop()
	return errors.Join(i.conn.Close(), i.health.Close())
}

// Process implements ExternalProcessor/Process: one stream to the EPP per gateway stream.
func (i *Interceptor) Process(down extprocv3.ExternalProcessor_ProcessServer) error {
	parent := down.Context()
	if i.rule.detach {
		// The EPP's stream outlives the gateway's: it is cancelled only when the EPP ends it.
		parent = context.WithoutCancel(parent)
	}
	ctx, cancel := context.WithCancel(parent)
	detached := false
	defer func() {
		if !detached {
			cancel()
		}
	}()
	if md, ok := metadata.FromIncomingContext(down.Context()); ok {
		ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	}
	up, err := i.api.Process(ctx)
	if err != nil {
		return status.Convert(err).Err()
	}
	st := &stream{i: i}
	// failed carries an error the mutant ends the gateway's stream with from the request side.
	failed := make(chan error, 1)
	go func() {
		for {
			msg, err := down.Recv()
			if errors.Is(err, io.EOF) {
				_ = up.CloseSend()
				return
			}
			if err != nil {
				if !i.rule.detach {
					cancel()
				}
				return
			}
			if err := st.request(msg); err != nil {
				failed <- err
				cancel()
				return
			}
			if err := up.Send(msg); err != nil {
				return // the EPP's side ended: its status comes from up.Recv
			}
		}
	}()
	for {
		resp, err := up.Recv()
		if err != nil {
			select {
			case ferr := <-failed:
				return ferr
			default:
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return status.Convert(err).Err()
		}
		out, end := st.response(resp)
		for _, m := range out {
			if err := down.Send(m); err != nil {
				if i.rule.detach {
					// The gateway is gone; the EPP's stream lives on until the EPP ends it.
					detached = true
					go func() {
						defer cancel()
						for {
							if _, err := up.Recv(); err != nil {
								return
							}
						}
					}()
				}
				return err
			}
		}
		if end != nil {
			return end.err
		}
	}
}

// ending is how a mutant ends the gateway's stream after a response: err nil = status OK.
type ending struct{ err error }

// stream is the state of one proxied stream. request runs on the receiving goroutine and
// response on the handler's, so the fields they share are guarded by mu.
type stream struct {
	i *Interceptor

	mu sync.Mutex
	// hadRequestID and objective describe the request whose request_headers came last.
	hadRequestID  bool
	objective     string
	llmdObjective string
	// sse is true when the current response's content-type is text/event-stream; line is its
	// incomplete last SSE line.
	sse  bool
	line []byte
	// held are request_body responses held back until end_of_stream (body-not-chunked,
	// body-not-streamed-back); returned is the body they carry (body-not-streamed-back).
	held     []*extprocv3.ProcessingResponse
	returned []byte
	// path and body are the current request's :path and the request body received so far.
	path string
	body []byte
	// refusal is the message the mutant refuses the current request with ("" = none; refuseWhen).
	// dropping is set once a refusal's ImmediateResponse went to the gateway, until the EPP's last
	// answer to that request (its request_body response with end_of_stream, or an
	// ImmediateResponse of its own) has been dropped. The gateway may send its next request as
	// soon as it has the refusal, so the next request's refusal can be set while dropping is.
	refusal  string
	dropping bool
	// hint is the current request's subset hint as the gateway sent it (nil = none).
	hint []string
	// bodyEnded is true once the current request's last request message (headers-only, or the
	// body chunk with end_of_stream) has arrived; headersOnly when that was the headers.
	bodyEnded, headersOnly bool
	// heldResponse are response_body answers held back until end_of_stream (response-held-to-end).
	heldResponse []*extprocv3.ProcessingResponse
	// latePick is the pick late-pick took off the request_headers response.
	latePick string
	// rewriteTarget and incomingModel are the current request's model-name rewrite header and
	// its body's model; respChunks the response body chunks the gateway sent and the mutant has
	// not answered yet, respDone set once it answered the last (replayResponseChunks).
	rewriteTarget, incomingModel string
	respChunks                   []chunkOf
	respDone                     bool
}

// request records what the mutant needs of a gateway message and rewrites it; an error ends the
// gateway's stream with that status.
func (st *stream) request(msg *extprocv3.ProcessingRequest) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch r := msg.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		h := r.RequestHeaders.GetHeaders()
		st.hadRequestID = headerValue(h, headerRequestID) != ""
		st.objective = headerValue(h, headerObjective)
		st.llmdObjective = headerValue(h, headerLLMDObjective)
		st.held, st.returned = nil, nil
		st.path, st.body = headerValue(h, headerPath), nil
		st.hint, st.heldResponse = nil, nil
		st.headersOnly = r.RequestHeaders.GetEndOfStream()
		st.bodyEnded = st.headersOnly
	case *extprocv3.ProcessingRequest_RequestBody:
		st.body = append(st.body, r.RequestBody.GetBody()...)
		st.bodyEnded = st.bodyEnded || r.RequestBody.GetEndOfStream()
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		st.sse = strings.Contains(strings.ToLower(headerValue(r.ResponseHeaders.GetHeaders(), "content-type")), "text/event-stream")
		st.line = nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		if st.sse {
			st.line = lastLine(st.line, r.ResponseBody.GetBody())
		}
	}
	if hint, ok := subsetHint(msg); ok {
		st.hint = hint
	}
	if st.i.rule.request == nil {
		return nil
	}
	return st.i.rule.request(st, msg)
}

// response rewrites one EPP message into what the gateway receives (possibly nothing, or several
// messages) and says whether the stream ends after them.
func (st *stream) response(resp *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, *ending) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.i.rule.response == nil {
		return []*extprocv3.ProcessingResponse{resp}, nil
	}
	return st.i.rule.response(st, resp)
}

// lastLine returns the incomplete last line after appending chunk to line (SSE lines end at \n).
func lastLine(line, chunk []byte) []byte {
	if k := bytes.LastIndexByte(chunk, '\n'); k >= 0 {
		return append([]byte(nil), chunk[k+1:]...)
	}
	return append(line, chunk...)
}

// healthProxy forwards grpc.health.v1 to the EPP's health service.
type healthProxy struct {
	healthpb.UnimplementedHealthServer
	c healthpb.HealthClient
}

func (h *healthProxy) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	resp, err := h.c.Check(ctx, req)
	if err != nil {
		return nil, status.Convert(err).Err()
	}
	return resp, nil
}

func (h *healthProxy) List(ctx context.Context, req *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	resp, err := h.c.List(ctx, req)
	if err != nil {
		return nil, status.Convert(err).Err()
	}
	return resp, nil
}

func (h *healthProxy) Watch(req *healthpb.HealthCheckRequest, down healthpb.Health_WatchServer) error {
	up, err := h.c.Watch(down.Context(), req)
	if err != nil {
		return status.Convert(err).Err()
	}
	for {
		resp, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.Canceled {
				return nil
			}
			return status.Convert(err).Err()
		}
		if err := down.Send(resp); err != nil {
			return err
		}
	}
}
