package target

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/eppkit/eppkit/conformance/harness"
)

// NewInstanceWithArgs implements harness.ArgsInstanceStarter: a new, not yet started
// CommandTarget running the same template with extra appended to its command line (the run's
// --leader-election-args for the replicas of harness.Suite.StartReplicas). extra may use the
// template's fields.
func (c *CommandTarget) NewInstanceWithArgs(extra string) (harness.Target, error) {
	if strings.TrimSpace(extra) == "" {
		return c.NewInstance(), nil
	}
	t, err := NewCommandTargetFlag(c.flag, c.name, c.text+" "+extra)
	if err != nil {
		return nil, fmt.Errorf("--leader-election-args: %w", err)
	}
	return t, nil
}

// Signal implements harness.Signaller: sig to the process group of the started command (SIGTERM
// for a drain, SIGKILL for a crash); it does not wait.
func (c *CommandTarget) Signal(sig syscall.Signal) error {
	c.mu.Lock()
	proc := c.proc
	c.mu.Unlock()
	if proc == nil {
		return fmt.Errorf("target %s: not started", c.name)
	}
	return proc.Signal(sig)
}
