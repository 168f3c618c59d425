package harness

import (
	"log/slog"
	"net"

	"github.com/eppkit/eppkit/fakes/gateway"
)

// H2CGateway starts a second gateway stand-in in front of the run's EPP and pool, with the pool
// described as an InferencePool whose spec.appProtocol is kubernetes.io/h2c (GIE v1.5.0 api/v1
// AppProtocolH2C, GIE #2162): it forwards to the picked endpoint over HTTP/2 with prior knowledge,
// which is how a gRPC model server (vLLM's gRPC engine API) is reached, and it serves HTTP/1.1
// and h2c on a loopback listener, so a gRPC client connects to it as to a gRPC server. It returns
// the listener's host:port; everything stops in t.Cleanup. The fake vLLM and llm-d-inference-sim
// serve gRPC on their HTTP port, so the run's fleet is an h2c pool as it is.
//
// On a FleetVariant pool with AppProtocol kubernetes.io/h2c the endpoint source describes the pool
// so (apiserver: the InferencePool's spec.appProtocol). On the run's own pool the source
// describes it as the run started it (appProtocol unset, i.e. http): an EPP that selects its
// parser by the pool's appProtocol rather than by the request path would not see h2c there.
func (s *Suite) H2CGateway(t TestingT) string {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if s.cfg.Logger != nil {
		log = slog.New(errorsOnly{s.cfg.Logger.Handler()})
	}
	gw, err := gateway.New(gateway.Config{EPPAddress: s.TargetAddress, EPPTLS: s.TargetTLS, Mode: gateway.ModeStrict,
		Endpoints: s.Endpoints(), MessageTimeout: s.Timeouts.Request.D(), Logger: log, Dial: s.cfg.EndpointDial,
		Stalls: s.Stalls, AppProtocol: gateway.AppProtocolH2C})
	if err != nil {
		t.Fatalf("h2c gateway: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = gw.Close()
		t.Fatalf("h2c gateway: listen: %v", err)
	}
	srv := gateway.NewServer(gw)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = gw.Close()
	})
	return ln.Addr().String()
}
