package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// inbound is a client request with its body read.
type inbound struct {
	method, path, host string
	header             http.Header
	body               []byte
	hint               []string
}

// outcome is what the gateway did with a request.
type outcome struct {
	endpoint   string
	immediate  bool
	failedOpen bool
	decision   *extprocclient.Decision
	err        error
	aborted    bool // the client response was cut after its headers were written
}

// sink is where the client response goes: an http.ResponseWriter or a recorder.
type sink interface {
	Header() http.Header
	WriteHeader(status int)
	Write(p []byte) (int, error)
	Flush()
}

type writerSink struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *writerSink) Header() http.Header         { return s.w.Header() }
func (s *writerSink) WriteHeader(status int)      { s.w.WriteHeader(status) }
func (s *writerSink) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s *writerSink) Flush()                      { _ = s.rc.Flush() }

type recorder struct {
	header http.Header
	status int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body = append(r.body, p...)
	return len(p), nil
}
func (r *recorder) Flush() {}

// hopHeaders are not forwarded in either direction (RFC 9110 §7.6.1), nor is Content-Length,
// which the gateway sets from the body it actually sends.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length"}

func stripHop(h http.Header) {
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// localReply writes a gateway-generated response (JSON with a message).
func localReply(s sink, status int, msg string) {
	body, _ := json.Marshal(map[string]string{"error": msg, "source": "eppkit-gateway"})
	s.Header().Set("Content-Type", "application/json")
	s.Header().Set("Content-Length", strconv.Itoa(len(body)))
	s.WriteHeader(status)
	_, _ = s.Write(body)
}

func (g *Gateway) serve(ctx context.Context, in *inbound, out sink) outcome {
	if g.cfg.Mode == ModeRoundRobin {
		return g.roundRobin(ctx, in, out, false)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := g.epp.Open(ctx)
	if err != nil {
		return g.eppFailed(ctx, in, out, err)
	}
	defer func() {
		// Half-close first so the EPP sees a clean end of stream, as when Envoy finishes a request.
		_ = st.CloseSend()
		st.Close()
	}()
	d, err := st.Exchange(ctx, extprocclient.Request{
		Headers:    eppRequestHeaders(in),
		Body:       in.body,
		ChunkSize:  g.cfg.BodyChunkSize,
		SubsetHint: in.hint,
	})
	if err != nil {
		o := g.eppFailed(ctx, in, out, err)
		o.decision = d
		return o
	}
	res := outcome{decision: d}
	if d.Immediate != nil {
		res.immediate = true
		status := d.Immediate.Status
		if status == 0 {
			status = http.StatusOK // Envoy's default for an ImmediateResponse without status
		}
		for k, v := range d.Immediate.Headers {
			out.Header().Set(k, v)
		}
		out.Header().Set("Content-Length", strconv.Itoa(len(d.Immediate.Body)))
		out.WriteHeader(status)
		_, _ = out.Write(d.Immediate.Body)
		return res
	}
	rt, err := d.Routing(g.cfg.HeaderSemantics)
	if err != nil {
		// Envoy rejects the mutation and answers status_on_error (ext_proc.cc handleErrorResponse).
		g.log.Warn("EPP header mutation rejected", "err", err)
		localReply(out, g.cfg.StatusOnError, "ext_proc: the EPP's header mutation was rejected: "+err.Error())
		return res
	}
	for _, w := range rt.Report.Warnings {
		g.log.Warn("EPP header mutation", "warning", w)
	}
	if g.cfg.Mode == ModeStrict {
		if dups := rt.Headers.Duplicates(rt.Report.Touched); len(dups) > 0 {
			msg := duplicateReport(rt.Headers, dups, g.cfg.HeaderSemantics)
			g.log.Warn("request would reach the model server with a duplicated header", "headers", dups)
			out.Header().Set(GatewayErrorHeader, "duplicated-header")
			localReply(out, http.StatusBadGateway, msg)
			return res
		}
	}
	addrs := splitPick(rt.Pick())
	if len(addrs) == 0 {
		// ORIGINAL_DST without a destination: Envoy answers 503 "no healthy upstream".
		msg := "the EPP returned no destination endpoint"
		switch {
		case !rt.Released:
			msg = "the EPP's responses never released the request headers to the router (no request_headers response, or no body data after it)"
		case d.Pick() != "":
			msg = fmt.Sprintf("the EPP's pick %q arrived after Envoy released the request headers to the router "+
				"(the request_headers response, or the first streamed body chunk after it), so the router never saw it", d.Pick())
			out.Header().Set(GatewayErrorHeader, "late-pick")
		}
		localReply(out, http.StatusServiceUnavailable, msg)
		return res
	}
	for _, a := range addrs {
		if problem := addrProblem(a); problem != "" {
			// Envoy's original-destination routing cannot parse it either: no host, 503.
			from := "the header " + DestinationHeader
			if rt.Metadata != "" {
				from = "the dynamic metadata " + extprocclient.DestinationNamespace + "/" + extprocclient.DestinationKey + " (the router reads it first)"
			}
			msg := fmt.Sprintf("the EPP's pick %q in %s cannot be routed: %s", rt.Pick(), from, problem)
			g.noteMalformed(msg)
			out.Header().Set(GatewayErrorHeader, "malformed-pick")
			localReply(out, http.StatusServiceUnavailable, msg)
			return res
		}
	}
	g.malformed.Store(0)
	body := in.body
	if d.Body != nil {
		body = d.Body
	}
	if cls := rt.Headers.Values("content-length"); slices.Contains(rt.Report.Touched, "content-length") && len(cls) == 1 && cls[0] != strconv.Itoa(len(body)) {
		g.log.Warn("EPP Content-Length does not match the mutated body", "content-length", cls[0], "body", len(body))
		localReply(out, http.StatusBadGateway, fmt.Sprintf("the EPP set Content-Length %s but returned a %d-byte body", cls[0], len(body)))
		return res
	}
	if g.cfg.Mode == ModeStrict {
		addrs = addrs[:1]
	}
	hdr, path, host := upstreamHeaders(rt.Headers)
	resp, endpoint, err := g.forward(ctx, in.method, path, host, hdr, body, addrs)
	if err != nil {
		if ctx.Err() != nil {
			res.err = ctx.Err()
			return res
		}
		g.log.Warn("upstream connect failed", "addresses", addrs, "err", err)
		localReply(out, http.StatusServiceUnavailable, "upstream connect error: "+err.Error())
		return res
	}
	res.endpoint = endpoint
	defer resp.Body.Close()
	if scores := endpointScores(rt.Released, d); scores != "" {
		out.Header().Set(ScoresHeader, scores)
	}
	g.responsePhases(ctx, st, in, resp, endpoint, out, &res)
	return res
}

// endpointScores returns the envoy.lb / x-gateway-destination-endpoint-scores struct of the
// routing metadata as compact JSON, "" when there is none (ScoresHeader).
func endpointScores(released bool, d *extprocclient.Decision) string {
	if !released {
		return ""
	}
	v := d.RoutingMetadata.GetFields()[extprocclient.DestinationNamespace].GetStructValue().GetFields()["x-gateway-destination-endpoint-scores"]
	if v.GetStructValue() == nil {
		return ""
	}
	b, err := json.Marshal(v.GetStructValue().AsMap())
	if err != nil {
		return ""
	}
	return string(b)
}

// eppFailed applies the failure mode to an EPP error in the request phases.
func (g *Gateway) eppFailed(ctx context.Context, in *inbound, out sink, err error) outcome {
	if ctx.Err() != nil {
		return outcome{err: ctx.Err()}
	}
	g.log.Warn("ext_proc failed", "failure-mode", g.cfg.FailureMode, "err", err)
	if g.cfg.FailureMode == FailOpen {
		return g.roundRobin(ctx, in, out, true)
	}
	status := g.cfg.StatusOnError
	if errors.Is(err, extprocclient.ErrMessageTimeout) {
		status = http.StatusGatewayTimeout // Envoy: 504 for the timeout case
	}
	localReply(out, status, "ext_proc: "+err.Error())
	return outcome{}
}

// roundRobin forwards in unchanged to the next endpoint, without ext_proc.
func (g *Gateway) roundRobin(ctx context.Context, in *inbound, out sink, failedOpen bool) outcome {
	res := outcome{failedOpen: failedOpen}
	addr := g.nextEndpoint()
	if addr == "" {
		localReply(out, http.StatusServiceUnavailable, "no endpoints configured for fail-open")
		return res
	}
	hdr := in.header.Clone()
	stripHop(hdr)
	resp, endpoint, err := g.forward(ctx, in.method, in.path, in.host, hdr, in.body, []string{addr})
	if err != nil {
		if ctx.Err() != nil {
			res.err = ctx.Err()
			return res
		}
		localReply(out, http.StatusServiceUnavailable, "upstream connect error: "+err.Error())
		return res
	}
	defer resp.Body.Close()
	res.endpoint = endpoint
	h := out.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	stripHop(h)
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	h.Del(DestinationHeader)
	h.Set(RoutedToHeader, endpoint)
	out.WriteHeader(resp.StatusCode)
	if err := copyFlush(out, resp.Body); err != nil {
		res.err, res.aborted = err, true
		return res
	}
	for k, vs := range resp.Trailer { // a gRPC server's grpc-status among them
		for _, v := range vs {
			out.Header().Add(http.TrailerPrefix+k, v)
		}
	}
	return res
}

// copyFlush copies r to the client, flushing after every read so streams stay streaming.
func copyFlush(out sink, r io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				return werr
			}
			out.Flush()
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("gateway: reading the upstream body: %w", err)
		}
	}
}

// forward sends the request to the first address that accepts it.
func (g *Gateway) forward(ctx context.Context, method, path, host string, hdr http.Header, body []byte, addrs []string) (*http.Response, string, error) {
	var errs []error
	for _, addr := range addrs {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, bytes.NewReader(body))
		if err != nil {
			return nil, "", err
		}
		req.Header = hdr.Clone()
		if g.cfg.AppProtocol == AppProtocolH2C && isGRPC(req.Header) {
			// The one TE value HTTP/2 allows; gRPC servers expect it (PROTOCOL-HTTP2.md), and
			// Envoy sends it to gRPC upstreams. Stripped above as a hop-by-hop header.
			req.Header.Set("Te", "trailers")
		}
		req.Host = host
		req.ContentLength = int64(len(body))
		if len(body) == 0 {
			req.Body = http.NoBody
		}
		resp, err := g.roundTrip(req)
		if err == nil {
			return resp, addr, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", errors.Join(errs...)
}

// isGRPC reports whether a request's content type is gRPC's ("application/grpc", optionally
// followed by "+proto" or ";…").
func isGRPC(h http.Header) bool {
	ct := h.Get("Content-Type")
	return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;")
}

// eppRequestHeaders are the headers Envoy sends to ext_proc: pseudo-headers, then the client's
// (lower-case, one entry per value), with content-length of the body read.
func eppRequestHeaders(in *inbound) []extprocclient.Header {
	hs := []extprocclient.Header{{Key: ":authority", Value: in.host}, {Key: ":path", Value: in.path},
		{Key: ":method", Value: in.method}, {Key: ":scheme", Value: "http"}}
	h := in.header.Clone()
	stripHop(h)
	for k, vs := range h {
		for _, v := range vs {
			hs = append(hs, extprocclient.Header{Key: strings.ToLower(k), Value: v})
		}
	}
	if len(in.body) > 0 {
		hs = append(hs, extprocclient.Header{Key: "content-length", Value: strconv.Itoa(len(in.body))})
	}
	return hs
}

// upstreamHeaders turns the mutated request header list into the forwarded request: :path and
// :authority become the path and Host, other pseudo-headers, hop-by-hop headers and
// Content-Length (set from the body actually sent) are dropped, and every other entry is sent,
// repeated names as repeated header lines.
func upstreamHeaders(hl extprocclient.HeaderList) (http.Header, string, string) {
	h := http.Header{}
	var path, host string
	for _, e := range hl {
		switch {
		case e.Key == ":path":
			path = e.Value
		case e.Key == ":authority" || e.Key == "host":
			host = e.Value
		case strings.HasPrefix(e.Key, ":"):
		default:
			h.Add(e.Key, e.Value)
		}
	}
	stripHop(h)
	return h, path, host
}

// duplicateReport explains a duplicated header: its values and the append rule that made them.
func duplicateReport(hl extprocclient.HeaderList, dups []string, sem extprocclient.HeaderSemantics) string {
	parts := make([]string, len(dups))
	for i, name := range dups {
		parts[i] = fmt.Sprintf("%s: %q", name, hl.Values(name))
	}
	return fmt.Sprintf("the request would reach the model server with a duplicated header (%s): the EPP's header mutation "+
		"appended to a value the request already carried; set append_action OVERWRITE_IF_EXISTS_OR_ADD (header semantics %s; SPEC §9.3)",
		strings.Join(parts, "; "), sem)
}

func splitPick(pick string) []string {
	var out []string
	for _, a := range strings.Split(pick, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// responsePhases streams the upstream response through the EPP's response phases to the client.
func (g *Gateway) responsePhases(ctx context.Context, st *extprocclient.Stream, in *inbound, resp *http.Response, endpoint string, out sink, res *outcome) {
	md := extprocclient.Metadata{SubsetHint: in.hint, Served: endpoint}
	rh := []extprocclient.Header{{Key: ":status", Value: strconv.Itoa(resp.StatusCode)}}
	for k, vs := range resp.Header {
		for _, v := range vs {
			rh = append(rh, extprocclient.Header{Key: strings.ToLower(k), Value: v})
		}
	}
	if resp.ContentLength >= 0 {
		rh = append(rh, extprocclient.Header{Key: "content-length", Value: strconv.FormatInt(resp.ContentLength, 10)})
	}
	noBody := resp.ContentLength == 0 || in.method == http.MethodHead
	headersSent := make(chan struct{})
	p := &pump{}
	pumpDone := make(chan struct{})
	sendErr := st.SendResponseHeaders(rh, noBody, md)
	close(headersSent)
	if noBody || sendErr != nil {
		close(pumpDone)
	} else {
		p.trailer = func() http.Header { return resp.Trailer }
		go p.run(st, resp.Body, g.cfg.BodyChunkSize, md, pumpDone)
	}

	wroteHeader := false
	written := 0
	gotHeaders := false
	rr := &extprocclient.ResponseResult{}
	fail := func(err error) {
		// The EPP failed during the response phases.
		g.log.Warn("ext_proc failed in the response phases", "failure-mode", g.cfg.FailureMode, "err", err)
		if g.cfg.FailureMode != FailOpen {
			_ = resp.Body.Close() // unblock the pump if the upstream stalls
		}
		p.stop(st, pumpDone)
		if g.cfg.FailureMode == FailOpen {
			if !wroteHeader {
				_ = writeResponseHeader(out, resp.StatusCode, resp.Header, nil, endpoint, true, g.cfg.HeaderSemantics)
				wroteHeader = true
			}
			sent := p.bytes()
			if written < len(sent) {
				_, _ = out.Write(sent[written:])
				out.Flush()
			}
			if err := copyFlush(out, resp.Body); err != nil {
				res.err, res.aborted = err, true
			}
			return
		}
		if !wroteHeader {
			status := g.cfg.StatusOnError
			if errors.Is(err, extprocclient.ErrMessageTimeout) {
				status = http.StatusGatewayTimeout
			}
			localReply(out, status, "ext_proc: "+err.Error())
			return
		}
		res.err, res.aborted = fmt.Errorf("gateway: ext_proc failed after the response started: %w", err), true
	}
	if sendErr != nil {
		fail(sendErr)
		return
	}
	for {
		// The header response is due once the headers are sent; body responses may be held by the
		// EPP until the last chunk, so their timeout starts when the pump has finished.
		armed := pumpDone
		if !gotHeaders {
			armed = headersSent
		}
		select {
		case <-pumpDone:
			if uerr := p.upstreamErr(); uerr != nil {
				// The upstream broke mid-body: reset the client as Envoy does.
				res.err, res.aborted = uerr, wroteHeader
				if !wroteHeader {
					localReply(out, http.StatusBadGateway, uerr.Error())
				}
				return
			}
		default:
		}
		msg, err := st.RecvArmed(ctx, armed, g.cfg.MessageTimeout)
		if err != nil {
			if ctx.Err() != nil {
				p.stop(st, pumpDone)
				res.err, res.aborted = ctx.Err(), wroteHeader
				return
			}
			if uerr := p.upstreamErr(); uerr != nil {
				res.err, res.aborted = uerr, true
				if !wroteHeader {
					localReply(out, http.StatusBadGateway, uerr.Error())
					res.aborted = false
				}
				return
			}
			fail(err)
			return
		}
		before := len(rr.Body)
		done, err := rr.Add(msg, &gotHeaders, noBody)
		if err != nil {
			fail(err)
			return
		}
		if rr.Immediate != nil {
			p.stop(st, pumpDone)
			res.immediate = true
			if wroteHeader {
				res.err, res.aborted = errors.New("gateway: ImmediateResponse after the response started"), true
				return
			}
			for k, v := range rr.Immediate.Headers {
				out.Header().Set(k, v)
			}
			out.Header().Set("Content-Length", strconv.Itoa(len(rr.Immediate.Body)))
			status := rr.Immediate.Status
			if status == 0 {
				status = http.StatusOK
			}
			out.WriteHeader(status)
			_, _ = out.Write(rr.Immediate.Body)
			return
		}
		if gotHeaders && !wroteHeader {
			if err := writeResponseHeader(out, resp.StatusCode, resp.Header, rr, endpoint, noBody, g.cfg.HeaderSemantics); err != nil {
				p.stop(st, pumpDone)
				g.log.Warn("EPP response header mutation rejected", "err", err)
				localReply(out, g.cfg.StatusOnError, "ext_proc: the EPP's response header mutation was rejected: "+err.Error())
				return
			}
			wroteHeader = true
		}
		if chunk := rr.Body[before:]; len(chunk) > 0 {
			if _, err := out.Write(chunk); err != nil {
				p.stop(st, pumpDone)
				res.err, res.aborted = err, true
				return
			}
			written += len(chunk)
			out.Flush()
			// The body is already written; keep only what is needed to compare lengths.
			rr.Body = rr.Body[:0]
		}
		if noBody && gotHeaders || done {
			<-pumpDone
			// The upstream's trailers reach the client as Envoy forwards them (a gRPC server's
			// grpc-status among them).
			for k, vs := range resp.Trailer {
				for _, v := range vs {
					out.Header().Add(http.TrailerPrefix+k, v)
				}
			}
			return
		}
	}
}

// writeResponseHeader writes the client response headers: the upstream's minus hop-by-hop and
// the pick header, with the EPP's response_headers mutation applied with the gateway's header
// semantics (as on the request side) and x-eppkit-routed-to. It returns the mutation's error
// without writing anything; the caller answers status_on_error as Envoy does.
func writeResponseHeader(out sink, status int, upstream http.Header, rr *extprocclient.ResponseResult, endpoint string, keepLength bool, sem extprocclient.HeaderSemantics) error {
	cl := upstream.Get("Content-Length")
	hl := extprocclient.HeaderList{{Key: ":status", Value: strconv.Itoa(status)}}
	for k, vs := range upstream {
		for _, v := range vs {
			hl = append(hl, extprocclient.Header{Key: strings.ToLower(k), Value: v})
		}
	}
	if rr != nil {
		for _, msg := range rr.Responses {
			if rh, ok := msg.Response.(*extprocv3.ProcessingResponse_ResponseHeaders); ok {
				if _, err := extprocclient.ApplyHeaderMutation(&hl, rh.ResponseHeaders.GetResponse().GetHeaderMutation(), sem); err != nil {
					return err
				}
				break
			}
		}
	}
	h := out.Header()
	for _, e := range hl {
		if e.Key == ":status" {
			if n, err := strconv.Atoi(e.Value); err == nil && n >= 100 && n <= 599 {
				status = n
			}
			continue
		}
		if !strings.HasPrefix(e.Key, ":") {
			h.Add(e.Key, e.Value)
		}
	}
	stripHop(h)
	if keepLength && cl != "" && h.Get("Content-Length") == "" {
		h.Set("Content-Length", cl)
	}
	h.Del(DestinationHeader)
	h.Set(RoutedToHeader, endpoint)
	out.WriteHeader(status)
	return nil
}

// pump reads the upstream body and sends it to the EPP as response_body chunks.
type pump struct {
	// trailer returns the upstream response's trailers, known once its body has been read to
	// the end (http.Response.Trailer).
	trailer func() http.Header

	mu      sync.Mutex
	sent    []byte // everything read from upstream (for FailOpen replay)
	stopped bool
	err     error // upstream read error
}

func (p *pump) run(st *extprocclient.Stream, body io.Reader, chunk int, md extprocclient.Metadata, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, chunk)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.sent = append(p.sent, buf[:n]...)
			stopped := p.stopped
			p.mu.Unlock()
			if stopped {
				return
			}
			if serr := st.SendResponseBody(append([]byte(nil), buf[:n]...), false, md); serr != nil {
				return
			}
		}
		if err == io.EOF {
			p.mu.Lock()
			stopped := p.stopped
			p.mu.Unlock()
			if stopped {
				return
			}
			// A response that ends with trailers ends its ext_proc exchange with them (Envoy's
			// response_trailers; the last body message had end_of_stream false), else with an
			// empty end_of_stream body chunk.
			var tr []extprocclient.Header
			if p.trailer != nil {
				for k, vs := range p.trailer() {
					for _, v := range vs {
						tr = append(tr, extprocclient.Header{Key: strings.ToLower(k), Value: v})
					}
				}
			}
			if len(tr) > 0 {
				_ = st.SendResponseTrailers(tr, md)
			} else {
				_ = st.SendResponseBody(nil, true, md)
			}
			return
		}
		if err != nil {
			p.mu.Lock()
			p.err = fmt.Errorf("gateway: reading the upstream body: %w", err)
			p.mu.Unlock()
			return
		}
	}
}

// stop makes the pump send nothing more to the EPP, unblocks it and waits for it to exit.
func (p *pump) stop(st *extprocclient.Stream, done <-chan struct{}) {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	st.Close()
	<-done
}

func (p *pump) bytes() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent
}

func (p *pump) upstreamErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// roundTrip sends req once, and once more on a new connection when the first attempt went out on
// a pooled keep-alive connection that the model server closed before any response byte arrived
// (io.EOF / connection reset). That is the keep-alive close race every HTTP/1.1 client meets: the
// server closes an idle connection (e.g. on its own graceful shutdown) just as the client reuses
// it. net/http retries it only for idempotent methods, and completions are POSTs; Envoy's HTTP/1
// pool detects most such closes before reuse. Without the retry a conformance test would count a
// transport race of the stand-in as a routing failure of the EPP under test. A request sent on a
// fresh connection is never retried, so a model server that really resets requests (fake vLLM
// failure type "reset") still shows as a 503.
func (g *Gateway) roundTrip(req *http.Request) (*http.Response, error) {
	reused := false
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
	resp, err := g.transport.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if err == nil || !reused || !closedBeforeResponse(err) || req.GetBody == nil || req.Context().Err() != nil {
		return resp, err
	}
	retry := req.Clone(req.Context())
	body, gerr := req.GetBody()
	if gerr != nil {
		return nil, err
	}
	retry.Body = body
	if req.ContentLength == 0 {
		retry.Body = http.NoBody
	}
	g.log.Debug("retrying on a new connection: the reused one was closed before a response", "url", req.URL.String(), "err", err)
	return g.retryTransport().RoundTrip(retry)
}

// closedBeforeResponse reports whether err is the peer closing the connection before any response
// byte: a bare EOF or a connection reset.
func closedBeforeResponse(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// retryTransport returns a transport that does not share g.transport's idle pool, so the retry of
// roundTrip dials a new connection rather than taking another possibly stale pooled one.
func (g *Gateway) retryTransport() http.RoundTripper {
	g.retryOnce.Do(func() {
		t := g.transport.Clone()
		t.DisableKeepAlives = true
		g.retry = t
	})
	return g.retry
}

// addrProblem says why addr is not an ip:port the router can send to ("" when it is).
func addrProblem(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil && net.ParseIP(addr) != nil:
		return fmt.Sprintf("%q has no port", addr)
	case err != nil:
		return fmt.Sprintf("%q is not ip:port: %v", addr, err)
	case net.ParseIP(host) == nil:
		return fmt.Sprintf("%q: %q is not an IP address", addr, host)
	case port == "":
		return fmt.Sprintf("%q has an empty port", addr)
	}
	return ""
}

// noteMalformed counts a malformed pick in a row and keeps its message.
func (g *Gateway) noteMalformed(msg string) {
	g.malformedMu.Lock()
	g.malformedMsg = msg
	g.malformedMu.Unlock()
	g.malformed.Add(1)
}

// MalformedPicks returns how many requests in a row the EPP answered with a pick that is not a
// list of ip:port (the gateway refused them with 503, "malformed-pick"), and the last message; a
// request forwarded since resets the count.
func (g *Gateway) MalformedPicks() (int, string) {
	g.malformedMu.Lock()
	defer g.malformedMu.Unlock()
	return int(g.malformed.Load()), g.malformedMsg
}
