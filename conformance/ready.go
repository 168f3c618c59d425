package conformance

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// HealthServiceNames are the gRPC health service names probed for readiness; SERVING on any of
// them counts (SPEC §5.1: "", inference-extension, liveness, readiness and the ext_proc service
// name; upstream deployments probe "inference-extension").
var HealthServiceNames = []string{"", "inference-extension", "envoy.service.ext_proc.v3.ExternalProcessor"}

// CheckHealth asks the gRPC health service at addr for each of HealthServiceNames and returns nil
// if any answers SERVING, else an error listing every answer.
func CheckHealth(ctx context.Context, addr string, tlsCfg *tls.Config) error {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("health %s: %w", addr, err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	var seen []string
	for _, name := range HealthServiceNames {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			seen = append(seen, fmt.Sprintf("%q: %v", name, err))
			continue
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		seen = append(seen, fmt.Sprintf("%q: %s", name, resp.GetStatus()))
	}
	return fmt.Errorf("health %s: not SERVING (%s)", addr, strings.Join(seen, "; "))
}

// ProbePick sends one chat completion for model through a fresh ext_proc stream and returns the
// pick, or an error when the EPP refused (ImmediateResponse), picked nothing, or picked an address
// outside pool. With headersOnly the probe is a GET /v1/models without a body (end_of_stream on
// request_headers), which an EPP must answer at the headers phase.
func ProbePick(ctx context.Context, addr string, tlsCfg *tls.Config, model string, pool []string, timeout time.Duration, headersOnly bool) (string, error) {
	c, err := extprocclient.Dial(addr, tlsCfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.MessageTimeout = timeout
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := c.Open(ctx)
	if err != nil {
		return "", err
	}
	defer st.Close()
	body, _ := json.Marshal(map[string]any{
		"model":      model,
		"messages":   []map[string]string{{"role": "user", "content": "eppkit readiness probe"}},
		"max_tokens": 1,
	})
	req := extprocclient.Request{
		Headers: extprocclient.RequestHeaders("POST", "/v1/chat/completions", "eppkit", body, nil),
		Body:    body,
	}
	if headersOnly {
		req = extprocclient.Request{Headers: extprocclient.RequestHeaders("GET", "/v1/models", "eppkit", nil, nil)}
	}
	d, err := st.Exchange(ctx, req)
	if d != nil && d.Immediate != nil {
		return "", fmt.Errorf("EPP answered %d: %s", d.Immediate.Status, strings.TrimSpace(string(d.Immediate.Body)))
	}
	if err != nil {
		return "", err
	}
	pick := d.Pick()
	if pick == "" {
		return "", errors.New("EPP returned no x-gateway-destination-endpoint")
	}
	for _, a := range strings.Split(pick, ",") {
		if !slices.Contains(pool, strings.TrimSpace(a)) {
			return pick, fmt.Errorf("EPP picked %s, not in the pool %v", a, pool)
		}
	}
	return pick, nil
}

// ReadyProbe says how WaitReady probes the target.
type ReadyProbe struct {
	// ExtProc dials the target's ext_proc address, Health its gRPC health address; nil = plaintext.
	ExtProc, Health *tls.Config
	// HeadersOnly makes the first pick a request without a body (see ProbePick), for EPPs whose
	// body handling is itself under test.
	HeadersOnly bool
}

// WaitReady polls until the target's gRPC health answers SERVING and a probe request gets a pick
// inside pool, or timeout passes, or the target exits (the error then says so).
func WaitReady(ctx context.Context, t Target, addrs TargetAddrs, tlsCfg ReadyProbe, model string, pool []string, timeout, poll time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	stage := "gRPC health SERVING"
	for {
		select {
		case <-t.Exited():
			return fmt.Errorf("target %s exited while waiting for %s: %v", t.Name(), stage, t.ExitErr())
		default:
		}
		attempt, acancel := context.WithTimeout(ctx, 2*time.Second)
		if err := CheckHealth(attempt, addrs.Health, tlsCfg.Health); err != nil {
			last = err
			stage = "gRPC health SERVING"
		} else {
			stage = "a first successful pick"
			if _, err := ProbePick(attempt, addrs.GRPC, tlsCfg.ExtProc, model, pool, 2*time.Second, tlsCfg.HeadersOnly); err != nil {
				last = err
			} else {
				acancel()
				return nil
			}
		}
		acancel()
		select {
		case <-ctx.Done():
			hint := tlsHint(last, tlsCfg.ExtProc, "--target-tls")
			if stage == "gRPC health SERVING" {
				hint = tlsHint(last, tlsCfg.Health, "--target-health-tls")
			}
			return fmt.Errorf("target %s not ready within %s (waiting for %s): %v%s", t.Name(), timeout, stage, last, hint)
		case <-t.Exited():
		case <-time.After(poll):
		}
	}
}

// tlsHint suggests flag (--target-tls or --target-health-tls) when the error looks like a TLS
// mismatch.
func tlsHint(err error, tlsCfg *tls.Config, flag string) string {
	if err == nil {
		return ""
	}
	switch msg := err.Error(); {
	case tlsCfg == nil && strings.Contains(msg, "server preface"):
		return " (the target may serve TLS: try " + flag + " insecure or ca:<file>)"
	case tlsCfg != nil && (strings.Contains(msg, "first record does not look like a TLS handshake") || strings.Contains(msg, "tls:")):
		return " (a TLS problem: does the target serve TLS, and does " + flag + " trust its certificate? plaintext targets need " + flag + " plaintext)"
	}
	return ""
}
