// Package portforward reaches pods of a cluster whose pod network the test process cannot dial
// (kind, most existing clusters) through the API server's pods/portforward subresource, the way
// `kubectl port-forward` does: client-go's tools/portforward over an SPDY connection
// (transport/spdy) to POST /api/v1/namespaces/{ns}/pods/{pod}/portforward, which the API server
// proxies to the node's kubelet (/portForward/{ns}/{pod}).
//
// A Forward listens on 127.0.0.1 on a free port and carries every connection to one pod port. A
// forward dies with its pod or its SPDY connection (client-go closes the whole connection when one
// forwarded stream reports an error); Pool hands out a live forward per (namespace, pod, port) and
// starts a new one when the previous one has died, so callers only ask Pool.Addr again.
package portforward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// DefaultReadyTimeout bounds Start's wait for the local listener and the SPDY upgrade.
const DefaultReadyTimeout = 30 * time.Second

// Target is one pod port to forward to.
type Target struct {
	// Namespace and Pod name the pod.
	Namespace, Pod string
	// Port is the container port on the pod (1–65535).
	Port int
}

func (t Target) String() string { return fmt.Sprintf("%s/%s:%d", t.Namespace, t.Pod, t.Port) }

// Validate reports a target that cannot be forwarded to.
func (t Target) Validate() error {
	switch {
	case t.Namespace == "" || t.Pod == "":
		return fmt.Errorf("portforward %s: namespace and pod are required", t)
	case t.Port < 1 || t.Port > 65535:
		return fmt.Errorf("portforward %s: port %d out of range 1–65535", t, t.Port)
	}
	return nil
}

// URL is the API server URL of the target's pods/portforward subresource. A path prefix in
// cfg.Host (an API server behind a proxy path) is kept; a bare host:port means https.
func URL(cfg *rest.Config, t Target) (*url.URL, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host // rest.Config allows a bare host:port; client-go defaults it to https
	}
	base, err := url.Parse(host)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("portforward: API server %q: %v", cfg.Host, err)
	}
	return base.JoinPath("api", "v1", "namespaces", t.Namespace, "pods", t.Pod, "portforward"), nil
}

// Forward is one running port-forward: 127.0.0.1:<free port> → Target.
type Forward struct {
	target Target
	addr   string
	stop   context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

// Start opens the SPDY connection to the target's pods/portforward and a local listener on a free
// 127.0.0.1 port. It returns when the forward is ready (or after ctx ends or DefaultReadyTimeout);
// the forward then runs until Close, the pod goes away, or the connection breaks. errOut (nil =
// discarded) receives client-go's per-connection errors.
func Start(ctx context.Context, cfg *rest.Config, t Target, errOut io.Writer) (*Forward, error) {
	u, err := URL(cfg, t)
	if err != nil {
		return nil, err
	}
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("portforward %s: %w", t, err)
	}
	if errOut == nil {
		errOut = io.Discard
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	runCtx, stop := context.WithCancel(context.Background())
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddressesWithContext(runCtx, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(t.Port)}, ready, io.Discard, errOut)
	if err != nil {
		stop()
		return nil, fmt.Errorf("portforward %s: %w", t, err)
	}
	f := &Forward{target: t, stop: stop, done: make(chan struct{})}
	go func() {
		f.err = pf.ForwardPorts()
		if f.err == nil && runCtx.Err() == nil {
			f.err = errors.New("stopped")
		}
		close(f.done)
	}()
	timer := time.NewTimer(DefaultReadyTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case <-f.done:
		stop()
		return nil, fmt.Errorf("portforward %s: %w", t, f.err)
	case <-ctx.Done():
		f.Close()
		return nil, fmt.Errorf("portforward %s: %w", t, ctx.Err())
	case <-timer.C:
		f.Close()
		return nil, fmt.Errorf("portforward %s: not ready after %s", t, DefaultReadyTimeout)
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		f.Close()
		return nil, fmt.Errorf("portforward %s: local port: %v (%d ports)", t, err, len(ports))
	}
	f.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local)))
	return f, nil
}

// Addr is the local host:port that reaches the target.
func (f *Forward) Addr() string { return f.addr }

// Done is closed when the forward has stopped (Close, pod gone, connection lost).
func (f *Forward) Done() <-chan struct{} { return f.done }

// Err is why the forward stopped (nil while it runs, and after Close).
func (f *Forward) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// Close stops the forward and waits until its listener is closed.
func (f *Forward) Close() {
	f.stop()
	<-f.done
}

// Starter starts one forward; Pool uses Start unless a test gives another.
type Starter func(ctx context.Context, t Target) (*Forward, error)

// Pool keeps one live forward per Target. Safe for concurrent use.
type Pool struct {
	start Starter
	mu    sync.Mutex
	fwds  map[Target]*Forward
	// Started counts the forwards started (restarts included), for tests and logs.
	started int
}

// NewPool returns a pool forwarding through cfg's API server; errOut as for Start.
func NewPool(cfg *rest.Config, errOut io.Writer) *Pool {
	return NewPoolWith(func(ctx context.Context, t Target) (*Forward, error) { return Start(ctx, cfg, t, errOut) })
}

// NewPoolWith returns a pool that starts forwards with start.
func NewPoolWith(start Starter) *Pool {
	return &Pool{start: start, fwds: map[Target]*Forward{}}
}

// Addr returns the local address of a live forward to t, starting one when there is none or the
// previous one has stopped.
func (p *Pool) Addr(ctx context.Context, t Target) (string, error) {
	if err := t.Validate(); err != nil {
		return "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.fwds[t]; ok {
		select {
		case <-f.Done():
			delete(p.fwds, t)
		default:
			return f.Addr(), nil
		}
	}
	f, err := p.start(ctx, t)
	if err != nil {
		return "", err
	}
	p.started++
	p.fwds[t] = f
	return f.Addr(), nil
}

// Started is the number of forwards the pool has started.
func (p *Pool) Started() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// Forget closes and drops the forward to t, if any (for a pod known to be gone).
func (p *Pool) Forget(t Target) {
	p.mu.Lock()
	f, ok := p.fwds[t]
	delete(p.fwds, t)
	p.mu.Unlock()
	if ok {
		f.Close()
	}
}

// Close stops every forward.
func (p *Pool) Close() {
	p.mu.Lock()
	fwds := p.fwds
	p.fwds = map[Target]*Forward{}
	p.mu.Unlock()
	for _, f := range fwds {
		f.Close()
	}
}
