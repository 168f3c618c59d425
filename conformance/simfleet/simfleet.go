// Package simfleet runs a pool of llm-d-inference-sim processes (github.com/llm-d/llm-d-inference-sim,
// built by `eppkit tools build sim`) as the model servers of a conformance run (`eppkit conformance
// --fleet sim`, make interop-sim).
//
// The simulator listens on every address of its host (pkg/communication/http.go, newListener:
// net.Listen("tcp4", ":<port>")), so two instances cannot share a network namespace on one port.
// Each member therefore gets its own network namespace (`ip netns add`) and a veth pair: the host
// end holds 10.233.<block>.<4i+1>/30 and the namespace end 10.233.<block>.<4i+2>/30, so the pool is N
// endpoints that differ only by IP and share one port, like the pods of an InferencePool. The
// block is the first /24 of 10.233.0.0/16 (from one derived from the process id) that no local
// address or route uses. Namespaces are named eppkit-sim-<pid>-<i>; Close removes them with their
// processes, and Start first removes the namespaces of earlier runs whose process no longer exists
// (a run killed with SIGKILL).
//
// Metrics: every member starts in the simulator's fake-metrics mode (--fake-metrics, the gauges at
// Baseline), because the simulator refuses fake-metrics updates through POST /admin/config while it
// reports real metrics (pkg/llm-d-inference-sim/context.go, ApplyConfigUpdate) and ignores an
// explicit null (pkg/common/config.go, Configuration.Update): a test pins a member's load with
// {"fake-metrics": {...}} and unpins it by posting Baseline again.
//
// Linux only; it needs CAP_NET_ADMIN (root) and iproute2's `ip`. Without them Start and Preflight
// return an error wrapping ErrNoPrivileges.
package simfleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/eppkit/eppkit/internal/logtail"
	"github.com/eppkit/eppkit/internal/supervisor"
)

// Defaults of Options.
const (
	// DefaultPort is the port every member listens on inside its namespace (vLLM's default).
	DefaultPort = 8000
	// DefaultMaxModelLen is the simulator's --max-model-len: large enough for the conformance
	// tests' longest prompts (the simulator's own default, 1024 tokens, refuses them).
	DefaultMaxModelLen = 32768
	// DefaultMaxNumSeqs is --max-num-seqs (the fake fleet's MaxNumSeqs).
	DefaultMaxNumSeqs = 16
	// DefaultStartTimeout bounds Start's wait for every member's GET /health.
	DefaultStartTimeout = 60 * time.Second
	// NamePrefix prefixes the network namespace names: eppkit-sim-<pid>-<member>.
	NamePrefix = "eppkit-sim-"
	// subnetSecondOctet: members live in 10.233.<block>.0/24.
	subnetSecondOctet = 233
	// maxMembers is how many /30 blocks fit in one /24.
	maxMembers = 63
)

// ErrNoPrivileges is wrapped by Start and Preflight when a network namespace or veth pair cannot
// be created for lack of privileges (not root, no CAP_NET_ADMIN, a container without them) or
// because `ip` is missing.
var ErrNoPrivileges = errors.New("network namespaces need root (CAP_NET_ADMIN) and iproute2's ip")

// Baseline is the fake-metrics state of an unpinned member: no running or waiting request, an
// empty KV cache and no LoRA adapter running. Members start with it (--fake-metrics) and
// Unpin posts it back. Keys: the simulator's fake-metrics schema (pkg/common/config_fake_metrics.go).
func Baseline() map[string]any {
	return map[string]any{"running-requests": 0, "waiting-requests": 0, "kv-cache-usage": 0, "loras": []any{}}
}

// Options configure Start.
type Options struct {
	// Binary is the llm-d-inference-sim executable (required).
	Binary string
	// Count is the number of members (1–63).
	Count int
	// Model is the base model every member serves (required).
	Model string
	// Adapters are the LoRA adapters member i serves (--lora-modules), may be nil.
	Adapters [][]string
	// Seed seeds member i with Seed+i (--seed).
	Seed int64
	// Port, MaxModelLen and MaxNumSeqs default to the Default* constants.
	Port, MaxModelLen, MaxNumSeqs int
	// PodNamePrefix names member i's pod "<PodNamePrefix><i>" (POD_NAME, which the simulator
	// returns as x-inference-pod); default "sim-".
	PodNamePrefix string
	// PodNamespace is POD_NAMESPACE; default "default".
	PodNamespace string
	// LogDir receives sim-<i>.log (stdout and stderr of member i); default os.TempDir().
	LogDir string
	// StartTimeout defaults to DefaultStartTimeout.
	StartTimeout time.Duration
	// IP is the iproute2 binary; default "ip".
	IP string
	// Logger receives progress; nil discards.
	Logger *slog.Logger
}

// Member is one simulator process in its own network namespace.
type Member struct {
	// Index is the member's position, from 0.
	Index int
	// Name is its pod name (POD_NAME, the x-inference-pod response header).
	Name string
	// Host is its IP (the namespace end of the veth pair), Port its listening port.
	Host string
	Port int
	// NetNS is the network namespace name; HostLink the host end of the veth pair.
	NetNS, HostLink string
	// LogPath is the process's log file.
	LogPath string

	proc *supervisor.Process // nil before startProcess
}

// Addr is host:port.
func (m *Member) Addr() string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }

// Fleet is a running set of simulators.
type Fleet struct {
	members []*Member
	ip      string
	log     *slog.Logger
	// netns are the namespaces created so far (Close removes them even after a failed Start).
	netns     []string
	hostLinks []string
	closeOnce sync.Once
}

// Members returns the members in order.
func (f *Fleet) Members() []*Member { return f.members }

// Preflight creates and removes one network namespace with a veth pair, to learn whether this
// process may (the error wraps ErrNoPrivileges when it may not).
func Preflight(ctx context.Context, ipCmd string) error {
	if ipCmd == "" {
		ipCmd = "ip"
	}
	ns := fmt.Sprintf("%s%d-probe", NamePrefix, os.Getpid())
	hostLink, nsLink := linkNames(os.Getpid(), 99)
	if err := run(ctx, ipCmd, "netns", "add", ns); err != nil {
		return privilegeError(err)
	}
	defer func() { _ = run(context.Background(), ipCmd, "netns", "del", ns) }()
	if err := run(ctx, ipCmd, "link", "add", hostLink, "type", "veth", "peer", "name", nsLink, "netns", ns); err != nil {
		return privilegeError(err)
	}
	_ = run(context.Background(), ipCmd, "link", "del", hostLink)
	return nil
}

// Start creates a network namespace and veth pair per member, starts the simulators and waits
// until every one answers GET /health with 200. On error everything created so far is removed.
func Start(ctx context.Context, opts Options) (f *Fleet, err error) {
	if opts.Binary == "" || opts.Model == "" {
		return nil, errors.New("simfleet: Binary and Model are required")
	}
	if opts.Count < 1 || opts.Count > maxMembers {
		return nil, fmt.Errorf("simfleet: Count must be in [1,%d], got %d", maxMembers, opts.Count)
	}
	if _, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("simfleet: the simulator binary: %w", err)
	}
	setDefaults(&opts)
	f = &Fleet{ip: opts.IP, log: opts.Logger}
	defer func() {
		if err != nil {
			f.Close()
			f = nil
		}
	}()
	ReapStale(ctx, opts.IP, opts.Logger)
	block, err := freeBlock(ctx, opts.IP)
	if err != nil {
		return f, err
	}
	pid := os.Getpid()
	for i := 0; i < opts.Count; i++ {
		m, err := f.addNamespace(ctx, pid, block, i)
		if err != nil {
			return f, err
		}
		m.Port = opts.Port
		m.Name = opts.PodNamePrefix + strconv.Itoa(i)
		f.members = append(f.members, m)
	}
	for _, m := range f.members {
		if err := f.startProcess(m, opts); err != nil {
			return f, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	for _, m := range f.members {
		if err := m.waitHealthy(wctx); err != nil {
			return f, err
		}
	}
	opts.Logger.Info("simulator fleet ready", "members", len(f.members), "block", fmt.Sprintf("10.%d.%d.0/24", subnetSecondOctet, block))
	return f, nil
}

func setDefaults(o *Options) {
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.MaxModelLen == 0 {
		o.MaxModelLen = DefaultMaxModelLen
	}
	if o.MaxNumSeqs == 0 {
		o.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if o.PodNamePrefix == "" {
		o.PodNamePrefix = "sim-"
	}
	if o.PodNamespace == "" {
		o.PodNamespace = "default"
	}
	if o.LogDir == "" {
		o.LogDir = os.TempDir()
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.IP == "" {
		o.IP = "ip"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// linkNames are the host and namespace ends of member i's veth pair (at most 15 bytes, IFNAMSIZ).
func linkNames(pid, i int) (host, ns string) {
	p := strconv.Itoa(pid % 10_000_000)
	return "es" + p + "h" + strconv.Itoa(i), "es" + p + "n" + strconv.Itoa(i)
}

// addNamespace creates member i's namespace and veth pair and addresses both ends.
func (f *Fleet) addNamespace(ctx context.Context, pid, block, i int) (*Member, error) {
	ns := fmt.Sprintf("%s%d-%d", NamePrefix, pid, i)
	hostLink, nsLink := linkNames(pid, i)
	hostIP := fmt.Sprintf("10.%d.%d.%d", subnetSecondOctet, block, 4*i+1)
	nsIP := fmt.Sprintf("10.%d.%d.%d", subnetSecondOctet, block, 4*i+2)
	if err := run(ctx, f.ip, "netns", "add", ns); err != nil {
		return nil, fmt.Errorf("simfleet: member %d: %w", i, privilegeError(err))
	}
	f.netns = append(f.netns, ns)
	steps := [][]string{
		{"link", "add", hostLink, "type", "veth", "peer", "name", nsLink, "netns", ns},
		{"addr", "add", hostIP + "/30", "dev", hostLink},
		{"link", "set", hostLink, "up"},
		{"-n", ns, "addr", "add", nsIP + "/30", "dev", nsLink},
		{"-n", ns, "link", "set", nsLink, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	}
	for j, args := range steps {
		if err := run(ctx, f.ip, args...); err != nil {
			return nil, fmt.Errorf("simfleet: member %d: %w", i, privilegeError(err))
		}
		if j == 0 {
			f.hostLinks = append(f.hostLinks, hostLink)
		}
	}
	return &Member{Index: i, Host: nsIP, NetNS: ns, HostLink: hostLink}, nil
}

// args are the simulator's flags for m (pkg/common/parser.go of llm-d-inference-sim v0.10.2).
func args(m *Member, o Options) ([]string, error) {
	fake, err := json.Marshal(Baseline())
	if err != nil {
		return nil, err
	}
	a := []string{
		"--port", strconv.Itoa(m.Port),
		"--model", o.Model,
		"--max-num-seqs", strconv.Itoa(o.MaxNumSeqs),
		"--max-model-len", strconv.Itoa(o.MaxModelLen),
		"--seed", strconv.FormatInt(o.Seed+int64(m.Index), 10),
		// A model name that exists on huggingface.co would make the simulator fetch its
		// tokenizer (pkg/tokenizer/tokenizer.go, New); the namespace has no route out anyway.
		"--force-dummy-tokenizer",
		"--fake-metrics", string(fake),
	}
	var adapters []string
	if m.Index < len(o.Adapters) {
		adapters = o.Adapters[m.Index]
	}
	if len(adapters) > 0 {
		a = append(a, "--max-loras", strconv.Itoa(len(adapters)), "--lora-modules")
		for _, name := range adapters {
			b, err := json.Marshal(map[string]string{"name": name, "path": "/eppkit/" + name, "base_model_name": o.Model})
			if err != nil {
				return nil, err
			}
			a = append(a, string(b))
		}
	}
	return a, nil
}

// startProcess runs the simulator inside m's namespace (`ip netns exec`), in its own process
// group, killed by the kernel if this process dies first (Pdeathsig).
func (f *Fleet) startProcess(m *Member, o Options) error {
	simArgs, err := args(m, o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
		return fmt.Errorf("simfleet: log dir: %w", err)
	}
	m.LogPath = filepath.Join(o.LogDir, fmt.Sprintf("sim-%d.log", m.Index))
	m.proc, err = supervisor.Start(supervisor.Spec{Path: f.ip, Args: append([]string{"netns", "exec", m.NetNS, o.Binary}, simArgs...),
		Env: append(os.Environ(), "POD_NAME="+m.Name, "POD_NAMESPACE="+o.PodNamespace, "POD_IP="+m.Host), LogPath: m.LogPath,
		KillWithParent: true})
	if err != nil {
		return fmt.Errorf("simfleet: start member %d: %w", m.Index, err)
	}
	o.Logger.Info("started simulator", "member", m.Index, "pod", m.Name, "addr", m.Addr(), "netns", m.NetNS, "pid", m.proc.PID(), "log", m.LogPath)
	return nil
}

// waitHealthy polls GET /health until 200; it fails early, with the end of the log, when the
// process exits.
func (m *Member) waitHealthy(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	u := "http://" + m.Addr() + "/health"
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		last = err
		select {
		case <-m.proc.Exited():
			return fmt.Errorf("simfleet: member %d (%s) exited before it was healthy: %v\n--- last lines of %s ---\n%s",
				m.Index, m.Name, m.proc.ExitErr(), m.LogPath, logtail.String(m.LogPath, 20))
		case <-ctx.Done():
			return fmt.Errorf("simfleet: member %d (%s): %s not healthy: %w (last: %v)\n--- last lines of %s ---\n%s",
				m.Index, m.Name, u, ctx.Err(), last, m.LogPath, logtail.String(m.LogPath, 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Exited reports whether member m's process has exited.
func (m *Member) Exited() bool { return m.proc != nil && !m.proc.Running() }

// Close stops every process (SIGTERM to its process group, SIGKILL after 2 s), kills anything
// left in the namespaces and removes them with their veth pairs. Safe to call more than once.
func (f *Fleet) Close() {
	if f == nil {
		return
	}
	f.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, m := range f.members {
			if m.proc != nil {
				wg.Add(1)
				go func() { defer wg.Done(); _ = m.proc.Stop(2 * time.Second) }()
			}
		}
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, ns := range f.netns {
			removeNamespace(ctx, f.ip, ns)
		}
		for _, l := range f.hostLinks {
			// Removing the namespace removes its end and so the pair; this catches a pair whose
			// peer never reached the namespace.
			_ = runQuiet(ctx, f.ip, "link", "del", l)
		}
		f.log.Info("simulator fleet removed", "namespaces", len(f.netns))
	})
}

// removeNamespace kills every process left in ns and deletes it.
func removeNamespace(ctx context.Context, ipCmd, ns string) {
	if out, err := exec.CommandContext(ctx, ipCmd, "netns", "pids", ns).Output(); err == nil {
		for _, p := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = runQuiet(ctx, ipCmd, "netns", "del", ns)
}

var staleName = regexp.MustCompile(`^` + regexp.QuoteMeta(NamePrefix) + `(\d+)-(\d+|probe)$`)

// ReapStale removes the namespaces (and their processes) of earlier runs whose process no longer
// exists: a run killed with SIGKILL cannot clean up after itself.
func ReapStale(ctx context.Context, ipCmd string, log *slog.Logger) {
	if ipCmd == "" {
		ipCmd = "ip"
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	out, err := exec.CommandContext(ctx, ipCmd, "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		mm := staleName.FindStringSubmatch(fields[0])
		if mm == nil {
			continue
		}
		pid, _ := strconv.Atoi(mm[1])
		if pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		log.Info("removing a stale simulator namespace of a run that no longer exists", "netns", fields[0], "pid", pid)
		removeNamespace(ctx, ipCmd, fields[0])
	}
}

// freeBlock returns a third octet b such that no local address or route is inside
// 10.233.b.0/24, starting from one derived from the process id (concurrent runs rarely collide).
func freeBlock(ctx context.Context, ipCmd string) (int, error) {
	addrs, err := exec.CommandContext(ctx, ipCmd, "-o", "-4", "addr", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("simfleet: %s addr show: %w", ipCmd, privilegeError(err))
	}
	routes, _ := exec.CommandContext(ctx, ipCmd, "-o", "-4", "route", "show", "table", "all").Output()
	used := string(addrs) + "\n" + string(routes)
	start := os.Getpid() % 256
	for k := 0; k < 256; k++ {
		b := (start + k) % 256
		if !strings.Contains(used, fmt.Sprintf(" 10.%d.%d.", subnetSecondOctet, b)) {
			return b, nil
		}
	}
	return 0, fmt.Errorf("simfleet: every /24 of 10.%d.0.0/16 is in use on this host", subnetSecondOctet)
}

// run runs ip with args; the error carries its stderr.
func run(ctx context.Context, ipCmd string, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, ipCmd, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return &cmdError{args: append([]string{ipCmd}, args...), err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return nil
}

func runQuiet(ctx context.Context, ipCmd string, args ...string) error {
	cmd := exec.CommandContext(ctx, ipCmd, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	return cmd.Run()
}

type cmdError struct {
	args   []string
	err    error
	stderr string
}

func (e *cmdError) Error() string {
	return fmt.Sprintf("%s: %v: %s", strings.Join(e.args, " "), e.err, e.stderr)
}

func (e *cmdError) Unwrap() error { return e.err }

// privilegeError wraps err with ErrNoPrivileges when it says the operation is not permitted or
// ip is missing.
func privilegeError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if errors.Is(err, exec.ErrNotFound) || strings.Contains(msg, "Operation not permitted") ||
		strings.Contains(msg, "Permission denied") || strings.Contains(msg, "must be root") {
		return fmt.Errorf("%w: %v", ErrNoPrivileges, err)
	}
	return err
}
