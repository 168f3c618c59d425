package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchNullEPPCommand) }

// nullEPPReadyMetric is the null EPP's gauge of the endpoints it was given, read by the matrix's
// readiness wait as it reads the other targets' ready-endpoint gauges.
const nullEPPReadyMetric = "eppkit_null_epp_endpoints"

// nullEPP is the picker-overhead matrix's floor: an ext_proc server that speaks the full-duplex
// streamed protocol correctly but decides nothing — it takes the endpoints round-robin, scrapes
// nothing and parses no body. What a run measures against it is the cost of gRPC, the loopback,
// the driver and this machine's scheduler, so an EPP's row minus the null row is what its
// decision adds.
type nullEPP struct {
	extprocv3.UnimplementedExternalProcessorServer
	endpoints []string // "ip:port", as picked
	next      atomic.Uint64
}

// Process implements ExternalProcessor/Process: per request, a request_headers response with
// the pick (header and envoy.lb metadata) and the body echoed as streamed request_body chunks of at
// most extprocclient.MaxStreamedChunk (62,000) bytes, as SPEC §5.2 bounds an EPP's; response phases are echoed unchanged.
func (n *nullEPP) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
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

func (n *nullEPP) pick() string {
	return n.endpoints[(n.next.Add(1)-1)%uint64(len(n.endpoints))]
}

// serveNullEPP serves the null EPP's ext_proc on grpcLn and its one gauge on metricsLn until
// either listener fails; it returns that error.
func serveNullEPP(endpoints []string, grpcLn, metricsLn net.Listener) error {
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, &nullEPP{endpoints: endpoints})
	reg := prometheus.NewRegistry()
	ready := prometheus.NewGauge(prometheus.GaugeOpts{Name: nullEPPReadyMetric, Help: "Endpoints the null EPP picks from (round-robin)."})
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

func newBenchNullEPPCommand() *cobra.Command {
	var endpoints, bind string
	var grpcPort, metricsPort int
	cmd := &cobra.Command{
		Use:   "null-epp --endpoints ip:port,... --grpc-port P --metrics-port M",
		Short: "Serve the picker-overhead floor: an ext_proc server that picks round-robin and decides nothing",
		Long: `Serve ext_proc with the full-duplex streamed protocol answered correctly but no decision made:
the endpoints are taken round-robin, nothing is scraped, the body is echoed unparsed. It is the
'null' target of 'eppkit bench extproc --targets', which starts it itself; measured the same way
as an EPP, it gives the floor this machine, gRPC and the driver set, so an EPP's figures can be
read as floor + what its decision adds.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var eps []string
			for _, e := range strings.Split(endpoints, ",") {
				if e = strings.TrimSpace(e); e != "" {
					if ap, err := netip.ParseAddrPort(e); err != nil || ap.Port() == 0 {
						return fmt.Errorf("--endpoints: %q is not ip:port with a port in 1-65535", e)
					}
					eps = append(eps, e)
				}
			}
			if len(eps) == 0 {
				return errors.New("--endpoints: at least one ip:port is required")
			}
			grpcLn, err := net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(grpcPort)))
			if err != nil {
				return fmt.Errorf("--grpc-port: %w", err)
			}
			metricsLn, err := net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(metricsPort)))
			if err != nil {
				_ = grpcLn.Close()
				return fmt.Errorf("--metrics-port: %w", err)
			}
			ctx, stop := signalContext()
			defer stop()
			go func() {
				<-ctx.Done()
				_ = grpcLn.Close()
				_ = metricsLn.Close()
			}()
			err = serveNullEPP(eps, grpcLn, metricsLn)
			if ctx.Err() != nil {
				return nil
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&endpoints, "endpoints", "", "Endpoints to pick from, round-robin (ip:port, comma-separated)")
	fl.StringVar(&bind, "bind-address", "127.0.0.1", "Address to listen on")
	fl.IntVar(&grpcPort, "grpc-port", 9002, "ext_proc gRPC port")
	fl.IntVar(&metricsPort, "metrics-port", 9090, "Port of /metrics (the "+nullEPPReadyMetric+" gauge)")
	cmd.Hidden = true // started by the matrix; documented there
	return cmd
}
