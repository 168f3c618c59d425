package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

// TestProbePickHeadersOnly: an EPP that picks but answers request bodies with a plain
// CommonResponse (no streamed_response, as GIE v1.6.0's lwepp does) fails the body probe with a
// protocol violation and passes the headers-only probe, which sends no body at all.
func TestProbePickHeadersOnly(t *testing.T) {
	const pick = "127.0.10.1:8000"
	srv, err := extproctest.Start(extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		out := extproctest.PickResponses(pick, nil, nil, 0, false)
		if !seen.HeadersEOS {
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}})
		}
		return out
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	pool := []string{pick, "127.0.10.2:8000"}
	if _, err := ProbePick(ctx, srv.Addr(), nil, "m", pool, 5*time.Second, false); !errors.Is(err, extprocclient.ErrProtocol) {
		t.Fatalf("body probe: err = %v, want a protocol violation", err)
	}
	got, err := ProbePick(ctx, srv.Addr(), nil, "m", pool, 5*time.Second, true)
	if err != nil || got != pick {
		t.Fatalf("headers-only probe = %q, %v; want %s", got, err, pick)
	}
	seen := srv.Seen()
	last := seen[len(seen)-1]
	if !last.HeadersEOS || last.BodyChunks != 0 || last.Headers[":method"] != "GET" || last.Headers[":path"] != "/v1/models" {
		t.Errorf("headers-only probe sent %+v, want GET /v1/models with end_of_stream on the headers", last)
	}
}

// freeAddr returns a 127.0.0.1 address nothing listens on (a port just released).
func freeAddr(t *testing.T) string {
	t.Helper()
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0])
}

// TestWaitReadyNothingListening: with RefusedGrace, an address where every connection is refused
// fails after the grace with a *NotListeningError naming it, not after the full timeout; a target
// that accepts connections but never answers still gets the full timeout; without RefusedGrace
// (command targets) refusals wait the full timeout too.
func TestWaitReadyNothingListening(t *testing.T) {
	const grace, timeout = 500 * time.Millisecond, 4 * time.Second
	target := runningTarget{}
	pool := []string{"127.0.10.1:8000"}

	dead := freeAddr(t)
	start := time.Now()
	err := WaitReady(t.Context(), target, TargetAddrs{GRPC: dead, Health: dead}, ReadyProbe{RefusedGrace: grace}, "m", pool, timeout, 50*time.Millisecond)
	took := time.Since(start)
	var nl *NotListeningError
	if !errors.As(err, &nl) || nl.Addr != dead || !strings.Contains(err.Error(), "nothing is listening at "+dead) {
		t.Fatalf("refused address: err = %v, want a NotListeningError for %s", err, dead)
	}
	if took < grace || took > timeout/2 {
		t.Errorf("refused address: failed after %s, want between the grace %s and well before the timeout %s", took, grace, timeout)
	}

	// Accepts, never answers: not "nothing listening"; the full timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn // accepted, never answered, closed when the test ends
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	silent := ln.Addr().String()
	start = time.Now()
	err = WaitReady(t.Context(), target, TargetAddrs{GRPC: silent, Health: silent}, ReadyProbe{RefusedGrace: grace}, "m", pool, timeout, 50*time.Millisecond)
	if took := time.Since(start); errors.As(err, &nl) || err == nil || !strings.Contains(err.Error(), "not ready within") || took < timeout {
		t.Fatalf("silent listener: err = %v after %s, want 'not ready within %s' after the full timeout", err, took, timeout)
	}

	// No grace: refusals wait the full timeout.
	start = time.Now()
	err = WaitReady(t.Context(), target, TargetAddrs{GRPC: dead, Health: dead}, ReadyProbe{}, "m", pool, 2*time.Second, 50*time.Millisecond)
	if took := time.Since(start); errors.As(err, &nl) || err == nil || took < 2*time.Second {
		t.Fatalf("no grace: err = %v after %s, want the full 2s timeout", err, took)
	}
}

// TestWaitReadyHealthUnimplemented: a target whose health address is a gRPC server without
// grpc.health.v1 (here an ext_proc-only server) answers every Check Unimplemented; WaitReady gives
// up after unimplementedGrace with a *HealthUnimplementedError, not after the full timeout.
func TestWaitReadyHealthUnimplemented(t *testing.T) {
	srv, err := extproctest.Start(extproctest.Script{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	target := runningTarget{}
	const timeout = 30 * time.Second
	start := time.Now()
	err = WaitReady(t.Context(), target, TargetAddrs{GRPC: srv.Addr(), Health: srv.Addr()}, ReadyProbe{}, "m", []string{"127.0.10.1:8000"}, timeout, 50*time.Millisecond)
	took := time.Since(start)
	var unimpl *HealthUnimplementedError
	if !errors.As(err, &unimpl) || unimpl.Addr != srv.Addr() || !strings.Contains(err.Error(), "serves no gRPC health service at "+srv.Addr()) {
		t.Fatalf("err = %v, want a HealthUnimplementedError for %s", err, srv.Addr())
	}
	if took < unimplementedGrace || took > timeout/2 {
		t.Errorf("gave up after %s, want between %s and well before the timeout %s", took, unimplementedGrace, timeout)
	}
}

// runningTarget is an EPP the test started itself (as the address target: not a process, never
// exits); WaitReady only watches Exited.
type runningTarget struct{}

func (runningTarget) Name() string { return "address" }
func (runningTarget) Start(context.Context, TargetEnv) (TargetAddrs, error) {
	return TargetAddrs{}, errors.New("runningTarget: not started by the harness")
}
func (runningTarget) Exited() <-chan struct{}  { return nil }
func (runningTarget) ExitErr() error           { return nil }
func (runningTarget) Stop(time.Duration) error { return nil }
