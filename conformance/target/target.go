// Package target holds the conformance suite's built-in targets: CommandTarget (an EPP started
// from a command template, the "command" and "reference" targets) and AddressTarget (an EPP
// already running at an address). The cluster target is conformance/cluster/clustertarget.
package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/internal/logtail"
	"github.com/eppkit/eppkit/internal/supervisor"
)

// ReferenceCommand is the command template of the "reference" target: eppkit's own
// reference-epp (the binary in {{.Eppkit}}), told the pool by the endpoint source. cmd/ and
// suites/ register the "reference" target with it (this package never imports reference/).
const ReferenceCommand = `{{.Eppkit}} reference-epp --grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}} --emit-endpoint-scores` +
	`{{if .Endpoints}} --endpoints {{.Endpoints}} --objectives ` + harness.SheddableObjective + `=-1,` + harness.CriticalObjective + `=10` +
	`{{if .ModelRewritesFile}} --model-rewrites {{.ModelRewritesFile}}{{end}}{{end}}` +
	`{{if .Kubeconfig}} --kubeconfig {{.Kubeconfig}} --pool-name {{.PoolName}} --pool-namespace {{.PoolNamespace}}{{end}}` +
	`{{if .ConfigFile}} --config-file {{.ConfigFile}}{{end}}{{if .PredictorURL}} --predictor-url {{.PredictorURL}}{{end}} --seed {{.Seed}}`

// CommandTarget runs the EPP as a process from a text/template command line, executed by
// /bin/sh -c in its own process group; output goes to <LogDir>/target.log; Stop sends SIGTERM to
// the group, then SIGKILL.
type CommandTarget struct {
	name string
	tmpl *template.Template
	text string
	flag string // the flag that gave the template, named in errors ("--command")

	mu      sync.Mutex
	proc    *supervisor.Process // nil before Start
	logPath string
}

// NewCommandTarget parses the template; an empty or malformed template is an error naming
// --command. Unknown fields ({{.Foo}}) are errors at parse-check time.
func NewCommandTarget(name, text string) (*CommandTarget, error) {
	return NewCommandTargetFlag("--command", name, text)
}

// NewCommandTargetFlag is NewCommandTarget for a template given by another flag (`bench extproc
// --command-target`): its errors, and Render's, name flag instead of --command.
func NewCommandTargetFlag(flag, name, text string) (*CommandTarget, error) {
	if strings.TrimSpace(text) == "" {
		return nil, errors.New(flag + ": required for target " + name + " (a command template such as '{{.Eppkit}} reference-epp --endpoints {{.Endpoints}} --grpc-port {{.GRPCPort}}')")
	}
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	// Check the fields exist by rendering against a zero environment.
	if err := t.Execute(new(bytes.Buffer), harness.TargetEnv{}); err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return &CommandTarget{name: name, tmpl: t, text: text, flag: flag}, nil
}

// Name implements harness.Target.
func (c *CommandTarget) Name() string { return c.name }

// Render returns the command line for env.
func (c *CommandTarget) Render(env harness.TargetEnv) (string, error) {
	var b bytes.Buffer
	if err := c.tmpl.Execute(&b, env); err != nil {
		return "", fmt.Errorf("%s: %w", c.flag, err)
	}
	return strings.TrimSpace(b.String()), nil
}

// UsesHealthPort reports whether the command template mentions {{.HealthPort}}. When it does not,
// the EPP cannot know the health port eppkit picked, so Start gives the ext_proc address as the
// health address, and ReadinessHint explains a readiness failure.
func (c *CommandTarget) UsesHealthPort() bool { return strings.Contains(c.text, ".HealthPort") }

// UsesField reports whether the command template mentions the TargetEnv field name
// ("PredictorURL" for {{.PredictorURL}}).
func (c *CommandTarget) UsesField(name string) bool { return strings.Contains(c.text, "."+name) }

// ReceivesPredictorURL implements harness.PredictorURLReceiver: the template mentions
// {{.PredictorURL}}.
func (c *CommandTarget) ReceivesPredictorURL() bool { return c.UsesField("PredictorURL") }

// ReadinessHint implements harness.ReadinessHinter: the hint added to a readiness failure of a
// command target whose template has no {{.HealthPort}}, "" when it has one.
func (c *CommandTarget) ReadinessHint() string {
	if c.UsesHealthPort() {
		return ""
	}
	return "hint: the --command template has no {{.HealthPort}}, so eppkit probes gRPC health on the EPP's ext_proc port " +
		"({{.GRPCPort}}); an EPP that serves health on a port of its own (the upstream EPP: --grpc-health-port, default 9003) " +
		"must be given that port: add --grpc-health-port {{.HealthPort}} (or your EPP's equivalent flag) to the template"
}

// LogPath is the target's log file (after Start).
func (c *CommandTarget) LogPath() string { return c.logPath }

// Start implements harness.Target.
func (c *CommandTarget) Start(ctx context.Context, env harness.TargetEnv) (harness.TargetAddrs, error) {
	line, err := c.Render(env)
	if err != nil {
		return harness.TargetAddrs{}, err
	}
	if env.LogDir == "" {
		env.LogDir = os.TempDir()
	}
	if err := os.MkdirAll(env.LogDir, 0o755); err != nil {
		return harness.TargetAddrs{}, fmt.Errorf("target log dir: %w", err)
	}
	c.logPath = filepath.Join(env.LogDir, "target.log")
	proc, err := supervisor.Start(supervisor.Shell(line, c.logPath))
	if err != nil {
		return harness.TargetAddrs{}, fmt.Errorf("target %s: %w", c.name, err)
	}
	c.mu.Lock()
	c.proc = proc
	c.mu.Unlock()
	a := harness.TargetAddrs{
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

// NewInstance implements harness.InstanceStarter: a CommandTarget with the same name and template.
func (c *CommandTarget) NewInstance() harness.Target {
	return &CommandTarget{name: c.name, tmpl: c.tmpl, text: c.text, flag: c.flag}
}

// PID is the process id of the started command: the /bin/sh running it, which is the EPP itself
// only when the shell execs it (procstat.ExecutedPID finds the EPP under a shell that did not);
// 0 before Start.
func (c *CommandTarget) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return 0
	}
	return c.proc.PID()
}

// Exited implements harness.Target: nil before Start.
func (c *CommandTarget) Exited() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	return c.proc.Exited()
}

// ExitErr implements harness.Target.
func (c *CommandTarget) ExitErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	return c.proc.ExitErr()
}

// Stop implements harness.Target: SIGTERM to the process group, SIGKILL after timeout.
func (c *CommandTarget) Stop(timeout time.Duration) error {
	c.mu.Lock()
	proc := c.proc
	c.mu.Unlock()
	if proc == nil {
		return nil
	}
	if err := proc.Stop(timeout); err != nil {
		return fmt.Errorf("target %s: %w", c.name, err)
	}
	return nil
}

// LogTail returns the last n lines of the target's log, for error messages.
func (c *CommandTarget) LogTail(n int) string { return logtail.String(c.logPath, n) }

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

// Name implements harness.Target.
func (a *AddressTarget) Name() string { return "address" }

// Start implements harness.Target.
func (a *AddressTarget) Start(context.Context, harness.TargetEnv) (harness.TargetAddrs, error) {
	return harness.TargetAddrs{GRPC: a.addr, Health: a.health, AlreadyRunning: true}, nil
}

// Exited implements harness.Target: never.
func (a *AddressTarget) Exited() <-chan struct{} { return nil }

// ExitErr implements harness.Target.
func (a *AddressTarget) ExitErr() error { return nil }

// Stop implements harness.Target.
func (a *AddressTarget) Stop(time.Duration) error { return nil }
