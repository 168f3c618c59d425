package tests

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

// requiredHealthServices are the gRPC health service names GIE proposal 004 ("Health Checking")
// lists: liveness, readiness and the ext_proc service. The names some deployments probe besides
// ("" and "inference-extension", SPEC §5.1) are not part of the protocol and not required here.
var requiredHealthServices = []string{"liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"}

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPHealth",
		Description: "A ready EPP MUST answer the standard gRPC health Check with SERVING for the services liveness, readiness " +
			"and envoy.service.ext_proc.v3.ExternalProcessor.",
		Level:         conformance.LevelMUST,
		Profile:       conformance.ProfileEPP,
		Preconditions: []string{"the harness knows the EPP's gRPC health address (--health-address for an address target)"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol) as of GIE v1.6.2, Health Checking (added in GIE v1.6.0 " +
			"by GIE PR #2514; v1.5.0 has no health rule); gRPC doc/health-checking.md; SPEC §5.1",
		Run: runEPPHealth,
	})
}

func runEPPHealth(t harness.TestingT, s *harness.Suite) {
	if s.HealthAddress == "" {
		t.Fatalf("precondition: no gRPC health address for the target")
	}
	creds := insecure.NewCredentials()
	if s.HealthTLS != nil {
		creds = credentials.NewTLS(s.HealthTLS)
	}
	conn, err := grpc.NewClient(s.HealthAddress, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatalf("dial the health service at %s: %v", s.HealthAddress, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	for _, name := range requiredHealthServices {
		// The harness waited for readiness already, so SERVING must hold on consecutive checks
		// within one request timeout.
		harness.MustEventually(t, s, s.Timeouts.Request.D(), s.Timeouts.RequiredConsecutiveSuccesses, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
			defer cancel()
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
			if err != nil {
				return fmt.Errorf("health Check(%q) at %s: %w", name, s.HealthAddress, err)
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("health Check(%q) at %s: %s, want SERVING", name, s.HealthAddress, resp.GetStatus())
			}
			return nil
		})
		t.Logf("health Check(%q) at %s: SERVING", name, s.HealthAddress)
	}
}
