package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// TargetEnv are the values a target is started with; a command target's template sees them as
// {{.Eppkit}}, {{.Endpoints}}, {{.GRPCPort}}, {{.HealthPort}}, {{.MetricsPort}}, {{.Kubeconfig}},
// {{.PoolName}}, {{.PoolNamespace}}, {{.ConfigFile}}, and {{.Seed}}.
type TargetEnv struct {
	// Eppkit is the absolute path of the running eppkit binary.
	Eppkit string
	// Endpoints is the comma-separated ip:port pool (static source), "" otherwise.
	Endpoints string
	// GRPCPort, HealthPort and MetricsPort are free ports on 127.0.0.1 the target should listen
	// on (ext_proc gRPC, gRPC health, Prometheus).
	GRPCPort, HealthPort, MetricsPort int
	// Kubeconfig, PoolName, PoolNamespace locate the InferencePool (apiserver source).
	Kubeconfig, PoolName, PoolNamespace string
	// ConfigFile is the EndpointPickerConfig file given with --config-file ("" = the target's default).
	ConfigFile string
	// Seed is the run's seed, for targets that take one (the reference's --seed).
	Seed int64
	// LogDir is where a command target writes its log (target.log).
	LogDir string
	// PredictorURL is the base URL of the latency predictor sidecar the harness runs
	// (`eppkit predictor`, upstream's sidecar API), "" when it runs none. The reference passes it
	// as --predictor-url; the PredictedLatencyPredictorDown test kills it.
	PredictorURL string
}

// TargetAddrs are where a started target listens.
type TargetAddrs struct {
	// GRPC is the ext_proc address (host:port).
	GRPC string
	// Health is the gRPC health address; often equal to GRPC for external EPPs.
	Health string
	// Metrics is the Prometheus host:port, "" when unknown.
	Metrics string
}

// Target is an EPP the suite runs against.
type Target interface {
	// Name is the --target value.
	Name() string
	// Start launches (or locates) the EPP and returns its addresses. It does not wait for
	// readiness (see WaitReady).
	Start(ctx context.Context, env TargetEnv) (TargetAddrs, error)
	// Exited returns a closed channel once a target process has exited (nil for targets that are
	// not processes), and ExitErr the reason.
	Exited() <-chan struct{}
	ExitErr() error
	// Stop stops what Start started (graceful, then forced after timeout).
	Stop(timeout time.Duration) error
}

// ReferenceCommand is the command template of the "reference" target: eppkit's own
// reference-epp (the binary in {{.Eppkit}}), told the pool by the endpoint source. cmd/ and
// suites/ register the "reference" target with it (this package never imports reference/).
const ReferenceCommand = `{{.Eppkit}} reference-epp --grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}` +
	`{{if .Endpoints}} --endpoints {{.Endpoints}} --objectives ` + SheddableObjective + `=-1{{end}}` +
	`{{if .Kubeconfig}} --kubeconfig {{.Kubeconfig}} --pool-name {{.PoolName}} --pool-namespace {{.PoolNamespace}}{{end}}` +
	`{{if .ConfigFile}} --config-file {{.ConfigFile}}{{end}}{{if .PredictorURL}} --predictor-url {{.PredictorURL}}{{end}} --seed {{.Seed}}`

// TargetOptions are the flags a target factory may use.
type TargetOptions struct {
	// Command is the --command template (command target).
	Command string
	// Address is --address: an already-running EPP's ext_proc host:port (address target).
	Address string
	// HealthAddress is the gRPC health host:port of an address target ("" = Address).
	HealthAddress string
}

// TargetFactory builds a target from the flags; errors name the missing flag.
type TargetFactory func(opts TargetOptions) (Target, error)

var (
	targetsMu sync.Mutex
	targets   = map[string]TargetFactory{
		"command": func(o TargetOptions) (Target, error) { return NewCommandTarget("command", o.Command) },
		"address": func(o TargetOptions) (Target, error) { return NewAddressTarget(o.Address, o.HealthAddress) },
	}
)

// RegisterTarget adds a named target (cmd/ and suites/ register "reference", since this package
// must not import reference/). It panics on a duplicate name.
func RegisterTarget(name string, f TargetFactory) {
	targetsMu.Lock()
	defer targetsMu.Unlock()
	if _, dup := targets[name]; dup {
		panic("conformance.RegisterTarget: duplicate target " + name)
	}
	targets[name] = f
}

// TargetNames lists the registered targets, sorted.
func TargetNames() []string {
	targetsMu.Lock()
	defer targetsMu.Unlock()
	var out []string
	for n := range targets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// NewTarget builds the named target.
func NewTarget(name string, opts TargetOptions) (Target, error) {
	targetsMu.Lock()
	f, ok := targets[name]
	targetsMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("--target: unknown target %q (have %v)", name, TargetNames())
	}
	return f(opts)
}

// CommandTarget runs the EPP as a process from a text/template command line, executed by
// /bin/sh -c in its own process group; output goes to <LogDir>/target.log; Stop sends SIGTERM to
// the group, then SIGKILL.
type CommandTarget struct {
	name string
	tmpl *template.Template
	text string

	mu      sync.Mutex
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	exitErr error
}

// NewCommandTarget parses the template; an empty or malformed template is an error naming
// --command. Unknown fields ({{.Foo}}) are errors at parse-check time.
func NewCommandTarget(name, text string) (*CommandTarget, error) {
	if strings.TrimSpace(text) == "" {
		return nil, errors.New("--command: required for target " + name + " (a command template such as '{{.Eppkit}} reference-epp --endpoints {{.Endpoints}} --grpc-port {{.GRPCPort}}')")
	}
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("--command: %w", err)
	}
	// Check the fields exist by rendering against a zero environment.
	if err := t.Execute(new(bytes.Buffer), TargetEnv{}); err != nil {
		return nil, fmt.Errorf("--command: %w", err)
	}
	return &CommandTarget{name: name, tmpl: t, text: text}, nil
}

// Name implements Target.
func (c *CommandTarget) Name() string { return c.name }

// Render returns the command line for env.
func (c *CommandTarget) Render(env TargetEnv) (string, error) {
	var b bytes.Buffer
	if err := c.tmpl.Execute(&b, env); err != nil {
		return "", fmt.Errorf("--command: %w", err)
	}
	return strings.TrimSpace(b.String()), nil
}

// UsesHealthPort reports whether the command template mentions {{.HealthPort}}. When it does not,
// the EPP cannot know the health port eppkit picked, so Start gives the ext_proc address as the
// health address, and HealthPortHint explains a readiness failure.
func (c *CommandTarget) UsesHealthPort() bool { return strings.Contains(c.text, ".HealthPort") }

// HealthPortHint is the hint added to a readiness failure of a command target whose template
// has no {{.HealthPort}}, "" when it has one.
func (c *CommandTarget) HealthPortHint() string {
	if c.UsesHealthPort() {
		return ""
	}
	return "hint: the --command template has no {{.HealthPort}}, so eppkit probes gRPC health on the EPP's ext_proc port " +
		"({{.GRPCPort}}); an EPP that serves health on a port of its own (the upstream EPP: --grpc-health-port, default 9003) " +
		"must be given that port: add --grpc-health-port {{.HealthPort}} (or your EPP's equivalent flag) to the template"
}

// LogPath is the target's log file (after Start).
func (c *CommandTarget) LogPath() string { return c.logPath }

// Start implements Target.
func (c *CommandTarget) Start(ctx context.Context, env TargetEnv) (TargetAddrs, error) {
	line, err := c.Render(env)
	if err != nil {
		return TargetAddrs{}, err
	}
	if env.LogDir == "" {
		env.LogDir = os.TempDir()
	}
	if err := os.MkdirAll(env.LogDir, 0o755); err != nil {
		return TargetAddrs{}, fmt.Errorf("target log dir: %w", err)
	}
	c.logPath = filepath.Join(env.LogDir, "target.log")
	logf, err := os.Create(c.logPath)
	if err != nil {
		return TargetAddrs{}, fmt.Errorf("target log: %w", err)
	}
	fmt.Fprintf(logf, "# %s\n", line)
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return TargetAddrs{}, fmt.Errorf("start target %s: %w", c.name, err)
	}
	c.mu.Lock()
	c.cmd, c.exited = cmd, make(chan struct{})
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		c.mu.Lock()
		if err == nil {
			err = errors.New("exited with status 0")
		}
		c.exitErr = err
		c.mu.Unlock()
		close(c.exited)
	}()
	a := TargetAddrs{
		GRPC:   net.JoinHostPort("127.0.0.1", strconv.Itoa(env.GRPCPort)),
		Health: net.JoinHostPort("127.0.0.1", strconv.Itoa(env.HealthPort)),
	}
	if !c.UsesHealthPort() {
		// The EPP was never told the free port eppkit picked for health, so nothing can listen
		// there: probe its ext_proc port, where some EPPs serve gRPC health too.
		a.Health = a.GRPC
	}
	if env.MetricsPort > 0 {
		a.Metrics = net.JoinHostPort("127.0.0.1", strconv.Itoa(env.MetricsPort))
	}
	return a, nil
}

// Exited implements Target.
func (c *CommandTarget) Exited() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exited
}

// ExitErr implements Target.
func (c *CommandTarget) ExitErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitErr
}

// Stop implements Target: SIGTERM to the process group, SIGKILL after timeout.
func (c *CommandTarget) Stop(timeout time.Duration) error {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-exited
	return fmt.Errorf("target %s did not stop within %s; killed", c.name, timeout)
}

// LogTail returns the last n lines of the target's log, for error messages.
func (c *CommandTarget) LogTail(n int) string {
	if c.logPath == "" {
		return ""
	}
	f, err := os.Open(c.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// AddressTarget is an EPP that is already running at a fixed address; Start and Stop do nothing.
type AddressTarget struct {
	addr, health string
}

// NewAddressTarget checks addr (and health, "" = addr) are host:port.
func NewAddressTarget(addr, health string) (*AddressTarget, error) {
	if addr == "" {
		return nil, errors.New("--address: required for target address (the EPP's ext_proc host:port)")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("--address %q: %w", addr, err)
	}
	if health == "" {
		health = addr
	} else if _, _, err := net.SplitHostPort(health); err != nil {
		return nil, fmt.Errorf("--health-address %q: %w", health, err)
	}
	return &AddressTarget{addr: addr, health: health}, nil
}

// Name implements Target.
func (a *AddressTarget) Name() string { return "address" }

// Start implements Target.
func (a *AddressTarget) Start(context.Context, TargetEnv) (TargetAddrs, error) {
	return TargetAddrs{GRPC: a.addr, Health: a.health}, nil
}

// Exited implements Target: never.
func (a *AddressTarget) Exited() <-chan struct{} { return nil }

// ExitErr implements Target.
func (a *AddressTarget) ExitErr() error { return nil }

// Stop implements Target.
func (a *AddressTarget) Stop(time.Duration) error { return nil }

// ParseTargetTLS parses --target-tls: "plaintext" (nil config), "insecure" (TLS, any
// certificate) or "ca:<file>" (TLS, that PEM file is the only root).
func ParseTargetTLS(s string) (*tls.Config, error) {
	switch {
	case s == "" || s == "plaintext":
		return nil, nil
	case s == "insecure":
		return extprocclient.TLSConfig(true, nil, "")
	case strings.HasPrefix(s, "ca:"):
		path := strings.TrimPrefix(s, "ca:")
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--target-tls: %w", err)
		}
		cfg, err := extprocclient.TLSConfig(false, pem, "")
		if err != nil {
			return nil, fmt.Errorf("--target-tls %s: %w", s, err)
		}
		return cfg, nil
	default:
		return nil, fmt.Errorf("--target-tls %q: want plaintext, insecure or ca:<file>", s)
	}
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1 (listen on :0, then close; a port
// may in principle be taken again before the target binds it).
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
