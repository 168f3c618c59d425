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
	// HeadersOnly makes the probe a request without a body (see ProbePick), for EPPs whose
	// body handling is itself under test.
	HeadersOnly bool
	// Stalls, when set, learns from the probes which ext_proc phase the EPP leaves unanswered
	// (the run's StallWatch), so the first test need not wait the full timeout to find out.
	Stalls *extprocclient.StallWatch
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

// Readiness is what the harness saw while it waited for the target: when its readiness health
// service first answered SERVING, how it answered the probes after that, and the probe that made
// it ready. The MUST test EPPReadyRoutes judges it; the readiness wait itself judges nothing
// about the pick.
type Readiness struct {
	// ServingAt is when a Check of a protocol readiness name (ReadinessServiceNames) first
	// answered SERVING (zero if never: the harness was satisfied by another name).
	ServingAt time.Time
	// ReadyAt is when a probe stream answered with something other than a 503 refusal.
	ReadyAt time.Time
	// Refusals counts the probes refused with ImmediateResponse 503 after ServingAt;
	// FirstRefusal is the first one's body.
	Refusals     int
	FirstRefusal string
	// Probe is the probe's answer at ReadyAt (a pick in any form, a refusal other than 503, or
	// nothing but the headers answered); ProbeErr the error that came with it ("" if none).
	Probe    *extprocclient.Decision
	ProbeErr string
}

// Gap is how long the EPP refused requests with 503 after its health first answered SERVING.
func (r *Readiness) Gap() time.Duration {
	if r == nil || r.Refusals == 0 || r.ServingAt.IsZero() || r.ReadyAt.IsZero() {
		return 0
	}
	return r.ReadyAt.Sub(r.ServingAt)
}

// ReadinessServiceNames are the health names GIE proposal 004 gives the readiness criteria
// ("Returns SERVING if the EPP datastore has synced"): readiness and the ext_proc service.
var ReadinessServiceNames = []string{"readiness", "envoy.service.ext_proc.v3.ExternalProcessor"}

// readinessServing reports whether one of ReadinessServiceNames answers SERVING at addr.
func readinessServing(ctx context.Context, addr string, tlsCfg *tls.Config) bool {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return false
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for _, name := range ReadinessServiceNames {
		if resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name}); err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return true
		}
	}
	return false
}

// probeStream sends one chat completion (headersOnly: a GET /v1/models without a body) through a
// fresh ext_proc stream and returns what came back. answered is true when the EPP answered any
// message of it (the request_headers message, a body chunk, an ImmediateResponse).
func probeStream(ctx context.Context, addr string, tlsCfg *tls.Config, model string, timeout time.Duration, headersOnly bool, stalls *extprocclient.StallWatch) (d *extprocclient.Decision, answered bool, err error) {
	c, err := extprocclient.Dial(addr, tlsCfg)
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	c.MessageTimeout = timeout
	c.Stalls = stalls
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := c.Open(ctx)
	if err != nil {
		return nil, false, err
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
	d, err = st.Exchange(ctx, req)
	return d, d != nil && len(d.Responses) > 0, err
}

// WaitReady polls until the target's gRPC health answers SERVING and a probe stream answers
// (WaitReadyRecord), or timeout passes, or the target exits, or, with tlsCfg.RefusedGrace,
// nothing listens at its addresses (a *NotListeningError).
func WaitReady(ctx context.Context, t Target, addrs TargetAddrs, tlsCfg ReadyProbe, model string, pool []string, timeout, poll time.Duration) error {
	_, err := WaitReadyRecord(ctx, t, addrs, tlsCfg, model, timeout, poll)
	return err
}

// mismatchGrace is how long WaitReady lets a connection mistake that waiting cannot fix (TLS
// against plaintext, an HTTP/1 server, a server without ext_proc) persist before it gives up.
const mismatchGrace = 3 * time.Second

// WaitReadyRecord polls until the target is ready and returns what it saw. Ready means only that
// the EPP answers: its gRPC health says SERVING for one of HealthServiceNames, and an ext_proc
// stream answers a probe request with anything but an ImmediateResponse 503 (an EPP still
// learning its pool refuses with 503; it is waited for, and the refusals after SERVING are
// recorded for EPPReadyRoutes). What the answer holds — a pick in the header or the metadata, in
// the right form, the body streamed back — is judged by the MUST tests, not here. It gives up
// when timeout passes (the error names the stage and, for connection failures, the mistake:
// DiagnoseConnection), when the target exits, when every health Check is Unimplemented for
// unimplementedGrace, when a connection mistake persists for mismatchGrace, or, with
// tlsCfg.RefusedGrace, when nothing listens (a *NotListeningError).
func WaitReadyRecord(ctx context.Context, t Target, addrs TargetAddrs, tlsCfg ReadyProbe, model string, timeout, poll time.Duration) (*Readiness, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rec := &Readiness{}
	var last error
	stage := "gRPC health SERVING"
	var unimplSince time.Time // when an unbroken run of all-Unimplemented health answers began
	var refused *refusalWatch
	if tlsCfg.RefusedGrace > 0 {
		refused = newRefusalWatch(addrs, tlsCfg.RefusedGrace)
	}
	var mistake *ConnectionError
	var mistakeSince, lastDiag time.Time
	diagnose := func(addr string, tc *tls.Config, role, flag string, extProc bool) {
		if time.Since(lastDiag) < time.Second {
			return
		}
		lastDiag = time.Now()
		dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
		defer dcancel()
		found := DiagnoseConnection(dctx, addr, tc, role, flag, extProc, time.Second)
		switch {
		case found == nil || found.Kind == ConnRefused:
			mistake, mistakeSince = found, time.Time{}
		case mistake == nil || mistake.Kind != found.Kind:
			mistake, mistakeSince = found, time.Now()
		}
	}
	for {
		select {
		case <-t.Exited():
			return rec, fmt.Errorf("target %s exited while waiting for %s: %v", t.Name(), stage, t.ExitErr())
		default:
		}
		attempt, acancel := context.WithTimeout(ctx, 2*time.Second)
		if refused != nil {
			if err := refused.check(attempt); err != nil {
				acancel()
				return rec, err
			}
		}
		if err := CheckHealth(attempt, addrs.Health, tlsCfg.Health); err != nil {
			last = err
			stage = "gRPC health SERVING"
			var unimpl *HealthUnimplementedError
			switch {
			case !errors.As(err, &unimpl):
				unimplSince = time.Time{}
				if looksLikeTransport(err) || strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "preface") {
					diagnose(addrs.Health, tlsCfg.Health, "gRPC health", healthFlag(addrs), false)
				}
			case unimplSince.IsZero():
				unimplSince = time.Now()
			case time.Since(unimplSince) >= unimplementedGrace:
				acancel()
				return rec, fmt.Errorf("target %s serves no gRPC health service at %s: every Check answered Unimplemented for %s: %w",
					t.Name(), addrs.Health, time.Since(unimplSince).Round(100*time.Millisecond), err)
			}
		} else {
			if rec.ServingAt.IsZero() && readinessServing(attempt, addrs.Health, tlsCfg.Health) {
				rec.ServingAt = time.Now()
			}
			stage = "an ext_proc stream that answers"
			d, answered, err := probeStream(attempt, addrs.GRPC, tlsCfg.ExtProc, model, 2*time.Second, tlsCfg.HeadersOnly, tlsCfg.Stalls)
			switch {
			case answered && d.Immediate != nil && d.Immediate.Status == 503:
				if !rec.ServingAt.IsZero() {
					rec.Refusals++
				}
				if rec.FirstRefusal == "" && !rec.ServingAt.IsZero() {
					rec.FirstRefusal = strings.TrimSpace(string(d.Immediate.Body))
				}
				last = fmt.Errorf("health answers SERVING, but the EPP refused the probe request with ImmediateResponse 503: %s",
					strings.TrimSpace(string(d.Immediate.Body)))
				stage = "an ext_proc stream that answers with anything but 503 (health answers SERVING)"
			case answered:
				acancel()
				rec.ReadyAt, rec.Probe = time.Now(), d
				if err != nil {
					rec.ProbeErr = err.Error()
				}
				return rec, nil
			default:
				last = err
				if last == nil {
					last = errors.New("the probe stream got no answer")
				}
				if isExtProcUnimplemented(err) {
					diagnose(addrs.GRPC, tlsCfg.ExtProc, "ext_proc", "--target-tls", true)
					if mistake == nil || mistake.Kind != ConnNoExtProc {
						mistake, mistakeSince = &ConnectionError{Addr: addrs.GRPC, Role: "ext_proc", Kind: ConnNoExtProc,
							Detail: status.Convert(errors.Unwrap(err)).Message(), Flag: "--target-tls"}, time.Now()
					}
				} else if looksLikeTransport(err) || strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "preface") {
					diagnose(addrs.GRPC, tlsCfg.ExtProc, "ext_proc", "--target-tls", true)
				}
			}
		}
		acancel()
		if mistake != nil && mistake.Kind != ConnRefused && !mistakeSince.IsZero() && time.Since(mistakeSince) >= mismatchGrace {
			return rec, fmt.Errorf("target %s not ready (waiting for %s): %w (last error: %v)", t.Name(), stage, mistake, last)
		}
		select {
		case <-ctx.Done():
			if mistake != nil {
				return rec, fmt.Errorf("target %s not ready within %s (waiting for %s): %w (last error: %v)", t.Name(), timeout, stage, mistake, last)
			}
			hint := tlsHint(last, tlsCfg.ExtProc, "--target-tls")
			if strings.HasPrefix(stage, "gRPC health") {
				hint = tlsHint(last, tlsCfg.Health, "--target-health-tls")
			}
			return rec, fmt.Errorf("target %s not ready within %s (waiting for %s): %v%s", t.Name(), timeout, stage, last, hint)
		case <-t.Exited():
		case <-time.After(poll):
		}
	}
}

// healthFlag is the TLS flag of the health address: --target-health-tls when it has its own.
func healthFlag(addrs TargetAddrs) string {
	if addrs.Health != addrs.GRPC {
		return "--target-health-tls"
	}
	return "--target-tls"
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
