package portforward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// The forward itself is exercised end to end on kind clusters (suites/e2e and `eppkit conformance
// --target cluster`, which reach every pod through it); these are the pure parts.

func TestURL(t *testing.T) {
	tgt := Target{Namespace: "ns1", Pod: "epp-0", Port: 9090}
	for _, tc := range []struct{ host, want string }{
		{"https://127.0.0.1:6443", "https://127.0.0.1:6443/api/v1/namespaces/ns1/pods/epp-0/portforward"},
		{"https://127.0.0.1:6443/", "https://127.0.0.1:6443/api/v1/namespaces/ns1/pods/epp-0/portforward"},
		{"127.0.0.1:6443", "https://127.0.0.1:6443/api/v1/namespaces/ns1/pods/epp-0/portforward"},
		{"https://proxy.example/k8s/clusters/c1", "https://proxy.example/k8s/clusters/c1/api/v1/namespaces/ns1/pods/epp-0/portforward"},
	} {
		u, err := URL(&rest.Config{Host: tc.host}, tgt)
		if err != nil {
			t.Fatalf("%s: %v", tc.host, err)
		}
		if u.String() != tc.want {
			t.Errorf("URL(%q) = %s, want %s", tc.host, u, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		t    Target
		want string
	}{
		{Target{Pod: "p", Port: 1}, "namespace and pod are required"},
		{Target{Namespace: "n", Port: 1}, "namespace and pod are required"},
		{Target{Namespace: "n", Pod: "p"}, "port 0 out of range"},
		{Target{Namespace: "n", Pod: "p", Port: 65536}, "port 65536 out of range"},
	} {
		err := tc.t.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v.Validate() = %v, want %q", tc.t, err, tc.want)
		}
		if _, err := URL(&rest.Config{Host: "https://h"}, tc.t); err == nil {
			t.Errorf("URL accepted %v", tc.t)
		}
	}
	if err := (Target{Namespace: "n", Pod: "p", Port: 65535}).Validate(); err != nil {
		t.Error(err)
	}
}

// fakeForward is a Forward whose lifetime the test controls.
func fakeForward(t Target, n int) *Forward {
	_, stop := context.WithCancel(context.Background())
	return &Forward{target: t, addr: fmt.Sprintf("127.0.0.1:%d", 40000+n), stop: stop, done: make(chan struct{})}
}

func TestPoolReusesLiveAndRestartsDead(t *testing.T) {
	var started []*Forward
	p := NewPoolWith(func(_ context.Context, tgt Target) (*Forward, error) {
		if tgt.Pod == "broken" {
			return nil, errors.New("upgrade refused")
		}
		f := fakeForward(tgt, len(started))
		started = append(started, f)
		return f, nil
	})
	ctx := context.Background()
	a := Target{Namespace: "n", Pod: "a", Port: 80}
	b := Target{Namespace: "n", Pod: "b", Port: 80}
	addr1, _ := p.Addr(ctx, a)
	addr2, _ := p.Addr(ctx, a)
	addr3, _ := p.Addr(ctx, b)
	if addr1 != addr2 || addr1 == addr3 || p.Started() != 2 {
		t.Fatalf("addrs %s %s %s started %d: want a reused, b separate, 2 started", addr1, addr2, addr3, p.Started())
	}
	// a's forward dies (pod gone, connection lost): the next Addr starts a new one.
	started[0].err = errors.New("lost connection to pod")
	close(started[0].done)
	addr4, err := p.Addr(ctx, a)
	if err != nil || addr4 == addr1 || p.Started() != 3 {
		t.Fatalf("after a's forward died: %s %v started %d, want a new address and 3 started", addr4, err, p.Started())
	}
	if started[0].Err() == nil {
		t.Error("Err() of a stopped forward is nil")
	}
	if started[1].Err() != nil {
		t.Error("Err() of a running forward is not nil")
	}
	if _, err := p.Addr(ctx, Target{Namespace: "n", Pod: "broken", Port: 80}); err == nil || !strings.Contains(err.Error(), "upgrade refused") {
		t.Errorf("start error not returned: %v", err)
	}
	if _, err := p.Addr(ctx, Target{Namespace: "n", Pod: "a"}); err == nil {
		t.Error("Addr accepted port 0")
	}
	if p.Started() != 3 {
		t.Errorf("failed starts counted: %d", p.Started())
	}
}

// TestPodDialer: a pod IP is looked up, forwarded once and reused; an unknown IP is an error
// naming it.
func TestPodDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello"))
			_ = c.Close()
		}
	}()
	var started []Target
	pool := NewPoolWith(func(_ context.Context, tg Target) (*Forward, error) {
		started = append(started, tg)
		return &Forward{addr: ln.Addr().String(), target: tg, done: make(chan struct{})}, nil
	})
	lookup := func(_ context.Context, ns, ip string) (string, error) {
		if ns == "ns1" && ip == "10.244.0.7" {
			return "fake-vllm-abc", nil
		}
		return "", nil
	}
	dial := pool.PodDialer(lookup, "ns1")
	for i := 0; i < 2; i++ {
		c, err := dial(context.Background(), "tcp", "10.244.0.7:8000")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(c)
		_ = c.Close()
		if string(b) != "hello" {
			t.Fatalf("read %q through the forward", b)
		}
	}
	if want := []Target{{Namespace: "ns1", Pod: "fake-vllm-abc", Port: 8000}}; len(started) != 1 || started[0] != want[0] {
		t.Errorf("forwards started %v, want one to %v", started, want)
	}
	if _, err := dial(context.Background(), "tcp", "10.244.0.9:8000"); err == nil || !strings.Contains(err.Error(), "no running pod of namespace ns1 has IP 10.244.0.9") {
		t.Errorf("unknown IP: err = %v", err)
	}
}
