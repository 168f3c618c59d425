// Package fleet runs N fake vLLM servers (fakes/vllm) like the pods of an InferencePool: each
// on its own loopback address (127.0.10.1, 127.0.10.2, …) and the same port, so an EPP sees N
// endpoints that differ only by IP. Where loopback aliases do not bind (macOS without
// `ifconfig lo0 alias`), the fleet falls back to distinct ports on 127.0.0.1; it detects this by
// trying to listen. Each member can be stopped, killed and restarted on the same address.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/fakes/vllm"
)

// Defaults of Options.
const (
	// DefaultIPPrefix is the loopback block the members' addresses come from: member i (from 0)
	// gets DefaultIPPrefix + (i+1).
	DefaultIPPrefix = "127.0.10."
	// DefaultPort is the port every member listens on in loopback mode (0 = pick a free one).
	DefaultPort = 0
	// DefaultNamespace is the x-inference-namespace of the members.
	DefaultNamespace = "default"
)

// Options configure a fleet.
type Options struct {
	// Count is the number of members (1–250).
	Count int
	// Base is the configuration every member starts from (Model is required). Port and Host are
	// set by the fleet; PodName defaults to "<NamePrefix><i>".
	Base vllm.Config
	// PerServer, when set, adjusts member i's configuration (latency profile, LoRA adapters,
	// pinned metrics, DPSize, …).
	PerServer func(i int, c *vllm.Config)
	// IPPrefix is the first three octets with a trailing dot; default DefaultIPPrefix.
	IPPrefix string
	// Port is the common port in loopback mode; 0 picks a free port once for the whole fleet.
	Port int
	// NamePrefix prefixes pod names; default "fake-vllm-".
	NamePrefix string
	// Namespace is every member's pod namespace; default DefaultNamespace.
	Namespace string
	// DistinctPorts forces the 127.0.0.1 distinct-port layout even where aliases work.
	DistinctPorts bool
	// Clock and Logger are passed to every server.
	Clock  clock.WithTicker
	Logger *slog.Logger
}

// Fleet is a running set of fake vLLM servers.
type Fleet struct {
	members  []*Member
	loopback bool
}

// Member is one fake vLLM server ("pod") of a fleet.
type Member struct {
	// Index is the member's position, from 0.
	Index int
	// Name is the pod name reported in x-inference-pod.
	Name string
	// Host is the member's IP address.
	Host string
	// Port is rank 0's port; data-parallel rank r listens on Port+r.
	Port int

	cfg  vllm.Config
	opts vllm.Options
	mu   sync.Mutex
	inst *vllm.Instance
}

// ValidateIPPrefix checks an Options.IPPrefix: three decimal octets and a trailing dot inside
// the loopback block 127.0.0.0/8, e.g. "127.0.10.". The error says what is wrong.
func ValidateIPPrefix(prefix string) error {
	if !strings.HasSuffix(prefix, ".") || strings.Count(prefix, ".") != 3 {
		return fmt.Errorf("%q is not three octets and a trailing dot (e.g. %q)", prefix, DefaultIPPrefix)
	}
	a, err := netip.ParseAddr(prefix + "1")
	if err != nil {
		return fmt.Errorf("%q is not three octets and a trailing dot (e.g. %q): %v", prefix, DefaultIPPrefix, err)
	}
	if !a.Is4() || !a.IsLoopback() {
		return fmt.Errorf("%q is not inside the loopback block 127.0.0.0/8", prefix)
	}
	return nil
}

// loopbackAliasesWork is LoopbackAliasesWork; tests replace it to exercise the fallback.
var loopbackAliasesWork = LoopbackAliasesWork

// LoopbackAliasesWork reports whether this host can listen on prefix+"1" (e.g. 127.0.10.1).
func LoopbackAliasesWork(prefix string) bool {
	ln, err := net.Listen("tcp", prefix+"1:0")
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// Start starts every member and returns once all listen (use WaitHealthy to wait for /health).
// On error, members already started are closed.
func Start(opts Options) (*Fleet, error) {
	if opts.Count < 1 || opts.Count > 250 {
		return nil, fmt.Errorf("fleet: Count must be in [1,250], got %d", opts.Count)
	}
	if opts.IPPrefix == "" {
		opts.IPPrefix = DefaultIPPrefix
	}
	if err := ValidateIPPrefix(opts.IPPrefix); err != nil {
		return nil, fmt.Errorf("fleet: IPPrefix: %w", err)
	}
	if opts.NamePrefix == "" {
		opts.NamePrefix = "fake-vllm-"
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	f := &Fleet{loopback: !opts.DistinctPorts && loopbackAliasesWork(opts.IPPrefix)}
	if !opts.DistinctPorts && !f.loopback && opts.Logger != nil {
		opts.Logger.Warn("fleet: loopback aliases do not bind here; members use distinct ports on 127.0.0.1 and the common port is ignored",
			"alias", opts.IPPrefix+"1", "port", opts.Port)
	}
	port := opts.Port
	for i := 0; i < opts.Count; i++ {
		cfg := opts.Base
		cfg.PodName = opts.NamePrefix + strconv.Itoa(i)
		cfg.PodNamespace = opts.Namespace
		cfg.ServedModelNames = append([]string(nil), opts.Base.ServedModelNames...)
		cfg.LoraModules = append([]vllm.LoraModule(nil), opts.Base.LoraModules...)
		if opts.PerServer != nil {
			opts.PerServer(i, &cfg)
		}
		m := &Member{Index: i, Name: cfg.PodName, opts: vllm.Options{Clock: opts.Clock, Logger: opts.Logger}}
		if f.loopback {
			m.Host = opts.IPPrefix + strconv.Itoa(i+1)
			cfg.Port = port
		} else {
			m.Host = "127.0.0.1"
			cfg.Port = 0
		}
		cfg.Host = m.Host
		m.cfg = cfg
		if err := m.Start(); err != nil {
			f.Close()
			return nil, fmt.Errorf("fleet: member %d (%s): %w", i, m.Host, err)
		}
		if f.loopback && port == 0 {
			port = m.Port
		}
		f.members = append(f.members, m)
	}
	return f, nil
}

// Loopback reports whether members have their own loopback IPs (else distinct ports on
// 127.0.0.1).
func (f *Fleet) Loopback() bool { return f.loopback }

// Members returns the members in order.
func (f *Fleet) Members() []*Member { return f.members }

// Member returns member i.
func (f *Fleet) Member(i int) *Member { return f.members[i] }

// WaitHealthy polls every running member's ranks' GET /health until all answer 200 or ctx ends.
func (f *Fleet) WaitHealthy(ctx context.Context) error {
	for _, m := range f.members {
		if err := m.WaitHealthy(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close stops every member at once.
func (f *Fleet) Close() {
	for _, m := range f.members {
		m.Kill()
	}
}

// Shutdown stops every member gracefully.
func (f *Fleet) Shutdown(ctx context.Context) error {
	var errs []error
	for _, m := range f.members {
		errs = append(errs, m.Stop(ctx))
	}
	return errors.Join(errs...)
}

// Config returns the member's configuration (Port is rank 0's port once started).
func (m *Member) Config() vllm.Config { return m.cfg }

// Addr is host:port of rank 0.
func (m *Member) Addr() string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }

// URL is http://Addr.
func (m *Member) URL() string { return "http://" + m.Addr() }

// RankURLs are the base URLs of every data-parallel rank: one per rank port, or only URL() with
// vllm.DataParallelInternal (every engine behind one port).
func (m *Member) RankURLs() []string {
	ranks := max(m.cfg.DPSize, 1)
	if m.cfg.DataParallelMode == vllm.DataParallelInternal {
		ranks = 1
	}
	var out []string
	for r := 0; r < ranks; r++ {
		out = append(out, "http://"+net.JoinHostPort(m.Host, strconv.Itoa(m.Port+r)))
	}
	return out
}

// Instance returns the running server, or nil when stopped.
func (m *Member) Instance() *vllm.Instance {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inst
}

// Running reports whether the member is serving.
func (m *Member) Running() bool { return m.Instance() != nil }

// Start starts a stopped member on its address (the same port after a restart). It is an error
// to start a running member.
func (m *Member) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inst != nil {
		return fmt.Errorf("member %s is already running", m.Name)
	}
	cfg := m.cfg
	if m.Port != 0 {
		cfg.Port = m.Port
	}
	inst, err := vllm.Start(cfg, m.opts)
	if err != nil {
		return err
	}
	m.inst = inst
	_, p, _ := net.SplitHostPort(inst.Ranks[0].Addr())
	m.Port, _ = strconv.Atoi(p)
	m.cfg.Port = m.Port
	return nil
}

// Stop shuts the member down gracefully (open requests may finish until ctx ends). Stopping a
// stopped member is a no-op.
func (m *Member) Stop(ctx context.Context) error {
	m.mu.Lock()
	inst := m.inst
	m.inst = nil
	m.mu.Unlock()
	if inst == nil {
		return nil
	}
	return inst.Shutdown(ctx)
}

// Kill stops the member at once, dropping open connections (a crashed pod).
func (m *Member) Kill() {
	m.mu.Lock()
	inst := m.inst
	m.inst = nil
	m.mu.Unlock()
	if inst != nil {
		inst.Close()
	}
}

// Restart kills the member and starts it again on the same address with empty state.
func (m *Member) Restart() error {
	m.Kill()
	return m.Start()
}

// WaitHealthy polls GET /health on every rank until 200 or ctx ends.
func (m *Member) WaitHealthy(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	for _, u := range m.RankURLs() {
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+"/health", nil)
			resp, err := client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("member %s: %s/health not healthy: %w (last error: %v)", m.Name, u, ctx.Err(), err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}
