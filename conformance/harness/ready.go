package harness

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

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
	unimplemented := 0
	for _, name := range HealthServiceNames {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			if status.Code(err) == codes.Unimplemented {
				unimplemented++
			}
			seen = append(seen, fmt.Sprintf("%q: %v", name, err))
			continue
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		seen = append(seen, fmt.Sprintf("%q: %s", name, resp.GetStatus()))
	}
	err = fmt.Errorf("health %s: not SERVING (%s)", addr, strings.Join(seen, "; "))
	if unimplemented == len(HealthServiceNames) {
		return &HealthUnimplementedError{Addr: addr, Err: err}
	}
	return err
}

// HealthUnimplementedError is CheckHealth's error when the server at Addr answered every Check with
// Unimplemented: it speaks gRPC but serves no grpc.health.v1.Health there (a gRPC server
// registers its services before it serves, so waiting does not change that).
type HealthUnimplementedError struct {
	Addr string
	Err  error
}

func (e *HealthUnimplementedError) Error() string { return e.Err.Error() }

func (e *HealthUnimplementedError) Unwrap() error { return e.Err }

// unimplementedGrace is how long WaitReady lets every health Check be answered Unimplemented before
// it gives up: long enough for a server that swaps listeners at start-up, far shorter than
// targetReady.
const unimplementedGrace = 5 * time.Second

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
	// RefusedGrace, when > 0, makes WaitReady give up early with a *NotListeningError once every
	// TCP connection to the target's health or ext_proc address has been refused for this long
	// without a break: nothing listens there (an address target whose EPP is not running). A
	// target that accepts connections but is not ready yet still gets the full timeout. 0 (command
	// targets: a starting process needs time to bind its ports) waits the full timeout.
	RefusedGrace time.Duration
}

// DefaultRefusedGrace is the default of TimeoutConfig.TargetRefused, the RefusedGrace the harness
// gives an address target (--target address): an EPP that is running refuses no connection, so
// five seconds of refusals mean none is there.
const DefaultRefusedGrace = 5 * time.Second

// NotListeningError is WaitReady's error when every connection to Addr was refused for the whole
// RefusedGrace: nothing listens there.
type NotListeningError struct {
	// Addr is the refusing host:port; Role says which of the target's addresses it is
	// ("ext_proc" or "gRPC health").
	Addr, Role string
	// For is how long connections were refused without a break.
	For time.Duration
	// Err is the last dial error (ECONNREFUSED).
	Err error
}

func (e *NotListeningError) Error() string {
	return fmt.Sprintf("nothing is listening at %s (the target's %s address): every connection was refused for %s (%v)",
		e.Addr, e.Role, e.For.Round(100*time.Millisecond), e.Err)
}

// Unwrap returns the dial error.
func (e *NotListeningError) Unwrap() error { return e.Err }

// refusalWatch tracks, per address, since when every TCP connection has been refused.
type refusalWatch struct {
	grace time.Duration
	addrs []string // distinct, health first
	roles map[string]string
	since map[string]time.Time
}

func newRefusalWatch(addrs TargetAddrs, grace time.Duration) *refusalWatch {
	w := &refusalWatch{grace: grace, roles: map[string]string{}, since: map[string]time.Time{}}
	for _, a := range []struct{ addr, role string }{{addrs.Health, "gRPC health"}, {addrs.GRPC, "ext_proc"}} {
		if a.addr == "" {
			continue
		}
		if _, dup := w.roles[a.addr]; dup {
			continue
		}
		w.addrs = append(w.addrs, a.addr)
		w.roles[a.addr] = a.role
	}
	return w
}

// check dials every address once; it returns a *NotListeningError for the first address whose
// connections have all been refused for at least the grace, else nil.
func (w *refusalWatch) check(ctx context.Context) error {
	for _, addr := range w.addrs {
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(ctx, "tcp", addr)
		switch {
		case err == nil:
			_ = conn.Close()
			delete(w.since, addr)
		case errors.Is(err, syscall.ECONNREFUSED):
			now := time.Now()
			first, ok := w.since[addr]
			if !ok {
				w.since[addr] = now
				continue
			}
			if now.Sub(first) >= w.grace {
				return &NotListeningError{Addr: addr, Role: w.roles[addr], For: now.Sub(first), Err: err}
			}
		default:
			delete(w.since, addr) // a timeout or another error is not proof that nothing listens
		}
	}
	return nil
}

// WaitReady polls until the target's gRPC health answers SERVING and a probe request gets a pick
// inside pool, or timeout passes, or the target exits (the error then says so), or, with
// tlsCfg.RefusedGrace, nothing listens at its addresses (a *NotListeningError).
func WaitReady(ctx context.Context, t Target, addrs TargetAddrs, tlsCfg ReadyProbe, model string, pool []string, timeout, poll time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	stage := "gRPC health SERVING"
	var unimplSince time.Time // when an unbroken run of all-Unimplemented health answers began
	var refused *refusalWatch
	if tlsCfg.RefusedGrace > 0 {
		refused = newRefusalWatch(addrs, tlsCfg.RefusedGrace)
	}
	for {
		select {
		case <-t.Exited():
			return fmt.Errorf("target %s exited while waiting for %s: %v", t.Name(), stage, t.ExitErr())
		default:
		}
		attempt, acancel := context.WithTimeout(ctx, 2*time.Second)
		if refused != nil {
			if err := refused.check(attempt); err != nil {
				acancel()
				return err
			}
		}
		if err := CheckHealth(attempt, addrs.Health, tlsCfg.Health); err != nil {
			last = err
			stage = "gRPC health SERVING"
			var unimpl *HealthUnimplementedError
			switch {
			case !errors.As(err, &unimpl):
				unimplSince = time.Time{}
			case unimplSince.IsZero():
				unimplSince = time.Now()
			case time.Since(unimplSince) >= unimplementedGrace:
				acancel()
				return fmt.Errorf("target %s serves no gRPC health service at %s: every Check answered Unimplemented for %s: %w",
					t.Name(), addrs.Health, time.Since(unimplSince).Round(100*time.Millisecond), err)
			}
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
