package main

import (
	"net"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/fakes/nullepp"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchNullEPPCommand) }

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
			eps, err := nullepp.ParseEndpoints(endpoints)
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			return nullepp.ListenAndServe(ctx, eps, net.JoinHostPort(bind, strconv.Itoa(grpcPort)), net.JoinHostPort(bind, strconv.Itoa(metricsPort)))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&endpoints, "endpoints", "", "Endpoints to pick from, round-robin (ip:port, comma-separated)")
	fl.StringVar(&bind, "bind-address", "127.0.0.1", "Address to listen on")
	fl.IntVar(&grpcPort, "grpc-port", 9002, "ext_proc gRPC port")
	fl.IntVar(&metricsPort, "metrics-port", 9090, "Port of /metrics (the "+nullepp.ReadyMetric+" gauge)")
	cmd.Hidden = true // started by the matrix; documented there
	return cmd
}
