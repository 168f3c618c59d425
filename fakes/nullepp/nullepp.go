// Package nullepp is the null EPP, the floor of eppkit's picker-overhead measurements (`eppkit
// bench extproc --targets null`, started as `eppkit bench null-epp`): an ext_proc server that
// speaks the FULL_DUPLEX_STREAMED protocol correctly and decides nothing. It takes the endpoints
// round-robin, scrapes nothing and parses no body, so what a run measures against it is the cost
// of gRPC, the loopback, the driver and the machine's scheduler; an EPP's figure minus the null
// EPP's is what its decision adds.
package nullepp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

// ReadyMetric is the null EPP's gauge of the endpoints it was given, read by the matrix's
// readiness wait as it reads the other targets' ready-endpoint gauges.
const ReadyMetric = "eppkit_null_epp_endpoints"

// server is the picker-overhead matrix's floor: an ext_proc server that speaks the full-duplex
// streamed protocol correctly but decides nothing — it takes the endpoints round-robin, scrapes
// nothing and parses no body. What a run measures against it is the cost of gRPC, the loopback,
// the driver and this machine's scheduler, so an EPP's row minus the null row is what its
// decision adds.
type server struct {
	extprocv3.UnimplementedExternalProcessorServer
	endpoints []string // "ip:port", as picked
	next      atomic.Uint64
}

// Process implements ExternalProcessor/Process: per request, a request_headers response with
// the pick (header and envoy.lb metadata) and the body echoed as streamed request_body chunks of at
// most extprocclient.MaxStreamedChunk (62,000) bytes, as SPEC §5.2 bounds an EPP's; response phases are echoed unchanged.
func (n *server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	var body []byte
	var out []*extprocv3.ProcessingResponse
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		out = out[:0]
		switch r := msg.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			body = body[:0]
			if r.RequestHeaders.GetEndOfStream() {
				out = extproctest.PickResponses(n.pick(), nil, nil, 0, false)
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			body = append(body, r.RequestBody.GetBody()...)
			if r.RequestBody.GetEndOfStream() {
				out = extproctest.PickResponses(n.pick(), nil, body, extprocclient.MaxStreamedChunk, true)
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			out = append(out, extproctest.StreamedBody(false, r.ResponseBody.GetBody(), r.ResponseBody.GetEndOfStream()))
		}
		for _, resp := range out {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

func (n *server) pick() string {
	return n.endpoints[(n.next.Add(1)-1)%uint64(len(n.endpoints))]
}

// Serve serves the null EPP's ext_proc on grpcLn and its one gauge (ReadyMetric) on metricsLn,
// picking from endpoints (ip:port, at least one) round-robin, until either listener fails; it
// returns that error (closing both listeners ends it).
func Serve(endpoints []string, grpcLn, metricsLn net.Listener) error {
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, &server{endpoints: endpoints})
	reg := prometheus.NewRegistry()
	ready := prometheus.NewGauge(prometheus.GaugeOpts{Name: ReadyMetric, Help: "Endpoints the null EPP picks from (round-robin)."})
	ready.Set(float64(len(endpoints)))
	reg.MustRegister(ready)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	errc := make(chan error, 2)
	go func() { errc <- g.Serve(grpcLn) }()
	go func() { errc <- http.Serve(metricsLn, mux) }()
	err := <-errc
	g.Stop()
	return err
}

// ParseEndpoints parses a comma-separated list of ip:port (each port in 1–65535, at least one);
// errors name the --endpoints flag.
func ParseEndpoints(s string) ([]string, error) {
	var eps []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			if ap, err := netip.ParseAddrPort(e); err != nil || ap.Port() == 0 {
				return nil, fmt.Errorf("--endpoints: %q is not ip:port with a port in 1-65535", e)
			}
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("--endpoints: at least one ip:port is required")
	}
	return eps, nil
}

// ListenAndServe listens on grpcAddr and metricsAddr (host:port) and serves the null EPP for
// endpoints until ctx ends (then it returns nil) or a listener fails. Listen errors name the
// --grpc-port and --metrics-port flags.
func ListenAndServe(ctx context.Context, endpoints []string, grpcAddr, metricsAddr string) error {
	grpcLn, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return fmt.Errorf("--grpc-port: %w", err)
	}
	metricsLn, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		_ = grpcLn.Close()
		return fmt.Errorf("--metrics-port: %w", err)
	}
	stop := context.AfterFunc(ctx, func() {
		_ = grpcLn.Close()
		_ = metricsLn.Close()
	})
	defer stop()
	err = Serve(endpoints, grpcLn, metricsLn)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
