// Package gateway is an Envoy stand-in for endpoint pickers (EPPs): an HTTP data plane that asks
// an EPP over ext_proc (FULL_DUPLEX_STREAMED request and response bodies) where each request
// goes, forwards it there, and streams the response back through the EPP's response phases.
//
// It models what GIE's Envoy-based gateways do (GIE proposal 004 and upstream v1.5.0
// pkg/epp/handlers): one ext_proc stream per HTTP request; request headers, then the body in
// chunks, each with the subset hint filter metadata when there is one; the pick read from dynamic
// metadata envoy.lb / x-gateway-destination-endpoint (else from the header of that name) as
// Envoy's router sees it when the ext_proc filter releases the request headers — the
// request_headers response, or for a request with a body the first streamed body response that
// carries data (extprocclient.Decision.ReleasedAt cites the Envoy source); a pick delivered later
// is never routed on (503, x-eppkit-gateway-error: late-pick); the EPP's header mutations applied
// to the request's headers as Envoy's ext_proc filter applies them, or with append_action as
// Envoy's API defines it (Config.HeaderSemantics, extprocclient.ApplyHeaderMutation: raw_value
// read, remove before set, header mutations of body responses ignored); in strict mode a request
// that would reach the model server with a duplicated header is refused (502,
// x-eppkit-gateway-error: duplicated-header); the
// request forwarded to the pick's first address only, like Envoy's ORIGINAL_DST cluster (strict
// mode), or to the next address on a connection failure (lenient mode); the response headers and
// body chunks sent to the EPP with envoy.lb / x-gateway-destination-endpoint-served, and the EPP's
// streamed answers written to the client chunk by chunk (SSE stays streaming). Round-robin mode
// uses no EPP at all: the baseline for benchmarks.
//
// Failure handling follows Envoy's ext_proc filter (envoy/extensions/filters/http/ext_proc/v3
// ext_proc.proto, failure_mode_allow and status_on_error): with FailClose an unreachable EPP, a
// broken stream or a spurious response gives a local reply 500 (Config.StatusOnError), a message
// timeout 504; with FailOpen (GIE InferencePool failureMode FailOpen) the request goes round-robin
// over Config.Endpoints instead.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// Headers the gateway adds or reads.
const (
	// SubsetHintHeader on a client request carries a subset hint ("ip:port,ip:port"; an empty
	// value sends a present-but-empty hint). The gateway strips it before forwarding.
	SubsetHintHeader = "x-eppkit-subset-hint"
	// RoutedToHeader on the client response names the "ip:port" the request was forwarded to.
	RoutedToHeader = "x-eppkit-routed-to"
	// PodHeader is the model server's own name for itself (fake vLLM, llm-d-inference-sim).
	PodHeader = "x-inference-pod"
	// DestinationHeader is the EPP's pick header; never forwarded to the client.
	DestinationHeader = extprocclient.DestinationKey
	// GatewayErrorHeader on a local reply names what the gateway refused: "malformed-pick" (a
	// pick address that is not ip:port), "duplicated-header"
	// (strict mode: the request would reach the model server with a header twice) or
	// "late-pick" (the pick arrived after Envoy releases the request headers to the router).
	GatewayErrorHeader = "x-eppkit-gateway-error"
	// ScoresHeader on the client response shows, as a JSON object, the endpoint scores the EPP
	// published with its pick (dynamic metadata envoy.lb / x-gateway-destination-endpoint-scores,
	// llm-d-router v0.10.0 --emit-endpoint-scores), which a client of Envoy never sees; absent
	// when the EPP published none. For people trying an EPP by hand.
	ScoresHeader = "x-eppkit-endpoint-scores"
)

// Defaults of Config.
const (
	DefaultBodyChunkSize  = 16384
	DefaultMessageTimeout = 5 * time.Second
	// DefaultStatusOnError is Envoy's status_on_error default (500).
	DefaultStatusOnError = http.StatusInternalServerError
	// MaxBodyChunkSize bounds Config.BodyChunkSize (bytes): 1 MiB keeps every ext_proc message
	// well below gRPC's default 4 MiB maximum receive message size on the EPP side.
	MaxBodyChunkSize = 1 << 20
	// maxRequestBody bounds a client request body (bytes).
	maxRequestBody = 64 << 20
)

// Mode decides where a request goes.
type Mode int

const (
	// ModeStrict forwards to the first address of the pick only; a connection failure is a 503
	// (Envoy's ORIGINAL_DST behaviour). A request the EPP's header mutation would send with a
	// header it set appearing twice is refused with a 502 naming the header.
	ModeStrict Mode = iota
	// ModeLenient tries the pick's addresses in order until one accepts the connection, and
	// forwards duplicated headers as they are.
	ModeLenient
	// ModeRoundRobin uses no EPP: requests go round-robin over Config.Endpoints.
	ModeRoundRobin
)

// String returns "strict", "lenient" or "round-robin".
func (m Mode) String() string {
	switch m {
	case ModeStrict:
		return "strict"
	case ModeLenient:
		return "lenient"
	case ModeRoundRobin:
		return "round-robin"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode parses "strict", "lenient" or "round-robin".
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{ModeStrict, ModeLenient, ModeRoundRobin} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("gateway: mode must be strict, lenient or round-robin, got %q", s)
}

// FailureMode decides what happens when the EPP cannot answer.
type FailureMode int

const (
	// FailClose answers the client with a local reply: Config.StatusOnError (500), or 504
	// when the EPP did not answer within the message timeout.
	FailClose FailureMode = iota
	// FailOpen forwards the request round-robin over Config.Endpoints, without the EPP.
	FailOpen
)

// String returns "close" or "open".
func (f FailureMode) String() string {
	if f == FailOpen {
		return "open"
	}
	if f == FailClose {
		return "close"
	}
	return "FailureMode(" + strconv.Itoa(int(f)) + ")"
}

// ParseFailureMode parses "close"/"FailClose" or "open"/"FailOpen".
func ParseFailureMode(s string) (FailureMode, error) {
	switch s {
	case "close", "FailClose":
		return FailClose, nil
	case "open", "FailOpen":
		return FailOpen, nil
	}
	return 0, fmt.Errorf("gateway: failure mode must be close or open, got %q", s)
}

// Config configures a Gateway.
type Config struct {
	// EPPAddress is the EPP's ext_proc "host:port"; required unless Mode is ModeRoundRobin.
	EPPAddress string
	// EPPTLS is the TLS configuration towards the EPP; nil means plaintext
	// (see extprocclient.TLSConfig).
	EPPTLS *tls.Config
	// Mode: ModeStrict (default), ModeLenient or ModeRoundRobin.
	Mode Mode
	// FailureMode: FailClose (default) or FailOpen.
	FailureMode FailureMode
	// Endpoints are the pool's "ip:port" addresses for FailOpen and round-robin.
	Endpoints []string
	// BodyChunkSize is the request and response body chunk size sent to the EPP, in bytes;
	// default DefaultBodyChunkSize.
	BodyChunkSize int
	// MessageTimeout bounds each wait for an EPP response (Envoy's message_timeout); default
	// DefaultMessageTimeout. For body phases the bound starts once the last chunk was sent.
	MessageTimeout time.Duration
	// Stalls, when set, is the run's StallWatch (extprocclient.Client.Stalls): once the EPP has
	// left one phase unanswered several times in a row, the gateway's waits for it are cut short.
	Stalls *extprocclient.StallWatch
	// StatusOnError is the FailClose local-reply status; default DefaultStatusOnError (500).
	StatusOnError int
	// HeaderSemantics is how the EPP's header mutations are applied: SemanticsEnvoyExtProc
	// (default; Envoy's ext_proc filter as released: only the deprecated append, default
	// overwrite) or SemanticsAppendAction (append_action as Envoy's API defines it and
	// agentgateway applies it, so an EPP that leaves it at APPEND_IF_EXISTS_OR_ADD duplicates
	// headers the request carried).
	HeaderSemantics extprocclient.HeaderSemantics
	// Logger receives one line per failure; default discards.
	Logger *slog.Logger
	// AppProtocol is the InferencePool's spec.appProtocol (GIE api/v1 inferencepool_types.go):
	// AppProtocolHTTP or "" (default) forwards over HTTP/1.1, AppProtocolH2C over HTTP/2 with
	// prior knowledge (GIE #2162), which is how a gRPC model server (vLLM's gRPC engine API) is
	// reached. The client side always accepts both (NewServer).
	AppProtocol string
	// Dial, when set, opens every connection the gateway makes — to the EPP and to the endpoints
	// — for an "ip:port" address, e.g. through a Kubernetes port-forward to the pod with that IP
	// (suites/e2e on kind); nil dials the address directly.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// The InferencePool appProtocol values (GIE v1.5.0 api/v1 AppProtocolHTTP, AppProtocolH2C).
const (
	AppProtocolHTTP = "http"
	AppProtocolH2C  = "kubernetes.io/h2c"
)

// Gateway is the data plane. It is an http.Handler; Do serves programmatic requests.
type Gateway struct {
	cfg       Config
	epp       *extprocclient.Client
	transport *http.Transport
	retryOnce sync.Once
	retry     http.RoundTripper // keep-alives off; see roundTrip
	rr        atomic.Uint64
	log       *slog.Logger

	// malformed counts strict-mode requests in a row refused for a malformed pick
	// (MalformedPicks); malformedMsg is the last one's message.
	malformed    atomic.Int64
	malformedMu  sync.Mutex
	malformedMsg string
}

// New validates cfg and returns a Gateway. Errors name the offending field.
func New(cfg Config) (*Gateway, error) {
	if cfg.Mode < ModeStrict || cfg.Mode > ModeRoundRobin {
		return nil, fmt.Errorf("gateway: Mode %d is not a known mode", cfg.Mode)
	}
	if cfg.FailureMode != FailClose && cfg.FailureMode != FailOpen {
		return nil, fmt.Errorf("gateway: FailureMode %d is not a known failure mode", cfg.FailureMode)
	}
	if err := ValidateEndpoints(cfg.Endpoints); err != nil {
		return nil, fmt.Errorf("gateway: Endpoints: %w", err)
	}
	if cfg.Mode == ModeRoundRobin && len(cfg.Endpoints) == 0 {
		return nil, errors.New("gateway: Endpoints must not be empty in round-robin mode")
	}
	if cfg.Mode != ModeRoundRobin {
		if cfg.EPPAddress == "" {
			return nil, fmt.Errorf("gateway: EPPAddress is required in %s mode", cfg.Mode)
		}
		if err := validateHostPort(cfg.EPPAddress); err != nil {
			return nil, fmt.Errorf("gateway: EPPAddress %q: %w", cfg.EPPAddress, err)
		}
	}
	if cfg.AppProtocol != "" && cfg.AppProtocol != AppProtocolHTTP && cfg.AppProtocol != AppProtocolH2C {
		return nil, fmt.Errorf("gateway: AppProtocol %q must be %q, %q or empty (http)", cfg.AppProtocol, AppProtocolHTTP, AppProtocolH2C)
	}
	if cfg.BodyChunkSize < 0 || cfg.BodyChunkSize > MaxBodyChunkSize {
		return nil, fmt.Errorf("gateway: BodyChunkSize %d must be in 1–%d bytes (0 means %d)", cfg.BodyChunkSize, MaxBodyChunkSize, DefaultBodyChunkSize)
	}
	if cfg.MessageTimeout < 0 {
		return nil, fmt.Errorf("gateway: MessageTimeout %v must not be negative", cfg.MessageTimeout)
	}
	if cfg.HeaderSemantics != extprocclient.SemanticsAppendAction && cfg.HeaderSemantics != extprocclient.SemanticsEnvoyExtProc {
		return nil, fmt.Errorf("gateway: HeaderSemantics %d is not a known semantics", cfg.HeaderSemantics)
	}
	if cfg.StatusOnError != 0 && (cfg.StatusOnError < 400 || cfg.StatusOnError > 599) {
		return nil, fmt.Errorf("gateway: StatusOnError %d must be an HTTP error status in 400–599 (0 means %d)", cfg.StatusOnError, DefaultStatusOnError)
	}
	if cfg.BodyChunkSize == 0 {
		cfg.BodyChunkSize = DefaultBodyChunkSize
	}
	if cfg.MessageTimeout == 0 {
		cfg.MessageTimeout = DefaultMessageTimeout
	}
	if cfg.StatusOnError == 0 {
		cfg.StatusOnError = DefaultStatusOnError
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{
		cfg: cfg,
		log: cfg.Logger,
		transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true, // bytes pass through as the model server wrote them
		},
	}
	if cfg.AppProtocol == AppProtocolH2C {
		// HTTP/2 with prior knowledge only: an h2c pool is never spoken to in HTTP/1.1.
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		g.transport.Protocols = p
	}
	var dialOpts []grpc.DialOption
	if cfg.Dial != nil {
		g.transport.DialContext = cfg.Dial
		dialOpts = append(dialOpts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return cfg.Dial(ctx, "tcp", addr)
		}))
	}
	if cfg.Mode != ModeRoundRobin {
		c, err := extprocclient.Dial(cfg.EPPAddress, cfg.EPPTLS, dialOpts...)
		if err != nil {
			return nil, fmt.Errorf("gateway: EPPAddress: %w", err)
		}
		c.MessageTimeout = cfg.MessageTimeout
		c.Stalls = cfg.Stalls
		g.epp = c
	}
	return g, nil
}

// Close closes the EPP connection and idle upstream connections.
func (g *Gateway) Close() error {
	g.transport.CloseIdleConnections()
	if g.epp != nil {
		return g.epp.Close()
	}
	return nil
}

// Request is a programmatic request for Do.
type Request struct {
	// Method defaults to POST when Body is non-empty, else GET.
	Method string
	// Path with query; default "/".
	Path string
	// Headers are sent as given (one value each).
	Headers map[string]string
	// Body is the request body.
	Body []byte
	// SubsetHint: nil = no hint; empty non-nil = present but empty.
	SubsetHint []string
}

// Result is what the client saw, plus what the gateway knows about the routing.
type Result struct {
	// Status, Headers and Body are the client response.
	Status  int
	Headers http.Header
	Body    []byte
	// Endpoint is the "ip:port" the request was forwarded to ("" for a local or immediate reply).
	Endpoint string
	// PickHeader and PickMetadata are the EPP's pick as header and as dynamic metadata.
	PickHeader, PickMetadata string
	// Immediate reports that the EPP answered with an ImmediateResponse.
	Immediate bool
	// FailedOpen reports that the EPP failed and the request went round-robin (FailOpen).
	FailedOpen bool
	// ServedPod is the x-inference-pod response header of the model server.
	ServedPod string
	// Decision is the EPP's request-phase answer (nil without an EPP exchange).
	Decision *extprocclient.Decision
	// Trailers are the response's trailers (the upstream's, forwarded as Envoy does), nil when
	// it had none.
	Trailers http.Header
}

// Do serves one request through the gateway and returns the whole response. Local replies
// (FailClose, no destination, upstream down) are Results with their status; the error is
// non-nil only when ctx ended or the response was aborted midway (then Result holds what was
// received).
func (g *Gateway) Do(ctx context.Context, req *Request) (*Result, error) {
	in := &inbound{method: req.Method, path: req.Path, host: "eppkit-gateway", header: http.Header{}, body: req.Body, hint: req.SubsetHint}
	if in.method == "" {
		in.method = http.MethodGet
		if len(req.Body) > 0 {
			in.method = http.MethodPost
		}
	}
	if in.path == "" {
		in.path = "/"
	}
	for k, v := range req.Headers {
		if strings.EqualFold(k, "host") {
			in.host = v
			continue
		}
		in.header.Set(k, v)
	}
	rec := &recorder{header: http.Header{}}
	out := g.serve(ctx, in, rec)
	res := &Result{Status: rec.status, Headers: rec.header, Body: rec.body, Endpoint: out.endpoint, Immediate: out.immediate,
		FailedOpen: out.failedOpen, Decision: out.decision, ServedPod: rec.header.Get(PodHeader)}
	if out.decision != nil {
		res.PickHeader, res.PickMetadata = out.decision.PickHeader, out.decision.PickMetadata
	}
	if res.Status == 0 && out.err == nil {
		res.Status = http.StatusOK
	}
	for k, vs := range rec.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if res.Trailers == nil {
				res.Trailers = http.Header{}
			}
			res.Trailers[http.CanonicalHeaderKey(name)] = vs
			delete(res.Headers, k)
		}
	}
	if out.err == nil && ctx.Err() != nil {
		out.err = ctx.Err()
	}
	return res, out.err
}

// NewServer returns an http.Server for g that accepts HTTP/1.1 and HTTP/2 with prior knowledge
// (h2c) on one listener, as Envoy's listeners for GIE do: gRPC clients connect to it as they
// connect to a gRPC server.
func NewServer(g *Gateway) *http.Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, Protocols: p}
}

// ServeHTTP is the data plane.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil {
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxRequestBody {
		http.Error(w, "request body over 64 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	in := &inbound{method: r.Method, path: r.URL.RequestURI(), host: r.Host, header: r.Header.Clone(), body: body}
	if vals, ok := r.Header[http.CanonicalHeaderKey(SubsetHintHeader)]; ok {
		in.hint = ParseSubsetHint(strings.Join(vals, ","))
		in.header.Del(SubsetHintHeader)
	}
	out := g.serve(r.Context(), in, &writerSink{w: w, rc: http.NewResponseController(w)})
	if out.err != nil && out.aborted {
		// The response was cut midway: reset the client connection as Envoy does.
		panic(http.ErrAbortHandler)
	}
}

// ParseSubsetHint parses a SubsetHintHeader value: comma-separated addresses, blanks dropped;
// an empty value gives an empty non-nil slice.
func ParseSubsetHint(v string) []string {
	out := []string{}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// nextEndpoint returns the next round-robin endpoint ("" when there are none).
func (g *Gateway) nextEndpoint() string {
	if len(g.cfg.Endpoints) == 0 {
		return ""
	}
	i := g.rr.Add(1) - 1
	return g.cfg.Endpoints[i%uint64(len(g.cfg.Endpoints))]
}

// ValidateEndpoints checks that every address is a literal "ip:port" (IPv6 in brackets, no
// hostnames, port 1–65535) and that none repeats, as reference-epp's --endpoints does
// (reference/discovery/static.go). The error names the offending entry by index.
func ValidateEndpoints(addrs []string) error {
	seen := make(map[netip.AddrPort]int, len(addrs))
	for i, raw := range addrs {
		ap, err := netip.ParseAddrPort(raw)
		if err != nil {
			return fmt.Errorf("[%d] %q is not ip:port (no hostnames; IPv6 in brackets): %v", i, raw, err)
		}
		if ap.Port() == 0 {
			return fmt.Errorf("[%d] %q: port must be in 1–65535", i, raw)
		}
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		if j, dup := seen[ap]; dup {
			return fmt.Errorf("[%d] %q duplicates [%d]", i, raw, j)
		}
		seen[ap] = i
	}
	return nil
}

// validateHostPort checks "host:port" with a non-empty host and a port in 1–65535.
func validateHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %v", err)
	}
	if host == "" {
		return errors.New("empty host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not in 1–65535", port)
	}
	return nil
}
