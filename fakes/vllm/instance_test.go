package vllm

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartPortZeroRetriesTakenRankPort: with --port 0 and data-parallel ranks, a taken port next
// to the picked rank-0 port (what broke a CI run: "rank 1: listen 127.0.0.1:44896: bind: address
// already in use") makes Start pick another rank-0 port, not fail.
func TestStartPortZeroRetriesTakenRankPort(t *testing.T) {
	cfg, _, err := ParseArgs([]string{"--model", "m", "--port", "0", "--host", "127.0.0.1",
		"--data-parallel-size", "3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	taken := 0
	listen = func(network, addr string) (net.Listener, error) {
		if !strings.HasSuffix(addr, ":0") && taken < 2 {
			taken++ // the first two later-rank ports are "in use"
			return nil, &net.OpError{Op: "listen", Net: network, Err: syscall.EADDRINUSE}
		}
		return net.Listen(network, addr)
	}
	t.Cleanup(func() { listen = net.Listen })
	inst, err := Start(cfg, Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = inst.Shutdown(ctx)
	}()
	if taken != 2 || len(inst.Ranks) != 3 {
		t.Fatalf("taken=%d ranks=%d, want 2 taken ports met and 3 ranks", taken, len(inst.Ranks))
	}
	p0 := inst.Ranks[0].ln.Addr().(*net.TCPAddr).Port
	for i, r := range inst.Ranks {
		if p := r.ln.Addr().(*net.TCPAddr).Port; p != p0+i {
			t.Errorf("rank %d on port %d, want %d", i, p, p0+i)
		}
	}
}

// TestStartFixedPortTakenFails: with a fixed --port, a taken rank port is an error naming it,
// with no retry on other ports.
func TestStartFixedPortTakenFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	cfg, _, err := ParseArgs([]string{"--model", "m", "--port", strconv.Itoa(port), "--host", "127.0.0.1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "rank 0: listen 127.0.0.1:"+strconv.Itoa(port)) || errors.Is(err, errPortTaken) {
		t.Fatalf("Start on a taken port: %v", err)
	}
}
