// Package supervisor runs and stops the child processes eppkit starts: a command target's EPP,
// the predictor sidecar, the EPPs of the picker-overhead matrix, the simulators of the sim fleet.
// Each child gets its own process group (so a stop reaches what a shell started), its output goes
// to one log file, its exit is observable as a channel, and a stop is SIGTERM to the group, then
// SIGKILL after a grace period.
package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/eppkit/eppkit/internal/logtail"
)

// Spec says what to run.
type Spec struct {
	// Path is the program; Args its arguments (without the program name).
	Path string
	Args []string
	// Env is the child's environment; nil inherits this process's.
	Env []string
	// LogPath receives the child's stdout and stderr, after a first line "# <command line>"
	// (required). The file is truncated unless Append is set (a restarted child keeps its
	// predecessor's log).
	LogPath string
	Append  bool
	// KillWithParent asks the kernel to SIGKILL the child when the thread that started it exits
	// (Linux Pdeathsig), so a child outlives no crash of this process; for children that must
	// never be left behind (processes in network namespaces).
	KillWithParent bool
}

// Process is a started child.
type Process struct {
	spec    Spec
	cmd     *exec.Cmd
	exited  chan struct{}
	mu      sync.Mutex
	exitErr error
}

// Shell returns the Spec that runs line with /bin/sh -c.
func Shell(line, logPath string) Spec {
	return Spec{Path: "/bin/sh", Args: []string{"-c", line}, LogPath: logPath}
}

// CommandLine is the command line the log's first line shows: the shell line for Shell specs,
// else the program and its arguments.
func (s Spec) CommandLine() string {
	if s.Path == "/bin/sh" && len(s.Args) == 2 && s.Args[0] == "-c" {
		return s.Args[1]
	}
	return strings.TrimSpace(s.Path + " " + strings.Join(s.Args, " "))
}

// Start starts the child. Errors name the program.
func Start(s Spec) (*Process, error) {
	if s.LogPath == "" {
		return nil, fmt.Errorf("supervisor: start %s: no log path", s.Path)
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if s.Append {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	logf, err := os.OpenFile(s.LogPath, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", s.Path, err)
	}
	fmt.Fprintf(logf, "# %s\n", s.CommandLine())
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = s.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s.KillWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", s.Path, err)
	}
	p := &Process{spec: s, cmd: cmd, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		_ = logf.Close()
		if err == nil {
			err = errors.New("exited with status 0")
		}
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(p.exited)
	}()
	return p, nil
}

// PID is the child's process id (also its process group id).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the child has exited (and been reaped).
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitErr is why the child exited ("exited with status 0" for a clean exit); nil while it runs.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Running reports whether the child has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// LogPath is the child's log file.
func (p *Process) LogPath() string { return p.spec.LogPath }

// Signal sends sig to the child's process group (SIGSTOP and SIGCONT pause and resume it). It is
// an error once the child has exited.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return fmt.Errorf("%s: not running (%v)", p.spec.Path, p.ExitErr())
	}
	return syscall.Kill(-p.PID(), sig)
}

// Stop ends the child: SIGTERM to its process group, then SIGKILL when it is still running after
// grace. It returns once the child has exited; the error says when it had to be killed. Stopping
// an exited child does nothing.
func (p *Process) Stop(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	<-p.exited
	return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", p.spec.Path, grace)
}

// Kill ends the child at once (SIGKILL to its process group, as a crash would) and returns once
// it has exited.
func (p *Process) Kill() error {
	if !p.Running() {
		return nil
	}
	err := syscall.Kill(-p.PID(), syscall.SIGKILL)
	<-p.exited
	return err
}

// LogTail returns the last n lines of the child's log ("" when it cannot be read).
func (p *Process) LogTail(n int) string { return logtail.String(p.spec.LogPath, n) }

// WithoutEnv returns env (NAME=value entries) without the variables named, for a child that
// must not inherit them (EPPKIT_SEED, when the driver sets each child's seed itself).
func WithoutEnv(env []string, names ...string) []string {
	var out []string
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		if !slices.Contains(names, k) {
			out = append(out, e)
		}
	}
	return out
}

// ExitCode is the exit code of a finished exec.Cmd from its Run/Wait error: 0 for nil, -1 when it
// did not run (or was killed by a signal).
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
