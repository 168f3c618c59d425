package local

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a process of the cluster recorded in the state file: its pid and its start time in
// clock ticks since boot (/proc/<pid>/stat field 22), so a pid reused by an unrelated process is
// never taken for ours.
type proc struct {
	PID   int    `json:"pid"`
	Start string `json:"start"`
}

// alive is true when the recorded process still runs (same pid and start time) and is not a
// zombie.
func (p proc) alive() bool {
	if p.PID <= 1 {
		return false
	}
	st, state, ok := procStat(p.PID)
	return ok && st == p.Start && state != "Z"
}

// procStat returns the start time (field 22) and state (field 3) of /proc/<pid>/stat.
func procStat(pid int) (start, state string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", "", false
	}
	return f[19], f[0], true
}

// recordProc returns the proc record of a running pid.
func recordProc(pid int) (proc, error) {
	st, _, ok := procStat(pid)
	if !ok {
		return proc{}, fmt.Errorf("pid %d: no /proc entry (the local provider needs Linux /proc)", pid)
	}
	return proc{PID: pid, Start: st}, nil
}

// findProcs returns the processes whose executable is exe and whose command line contains arg
// (how the etcd and kube-apiserver that envtest started are found again: by their binary and
// their --data-dir / --cert-dir under this cluster's state directory).
func findProcs(exe, arg string) []proc {
	entries, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if args[0] != exe {
			continue
		}
		for _, a := range args[1:] {
			if strings.Contains(a, arg) {
				if p, err := recordProc(pid); err == nil {
					out = append(out, p)
				}
				break
			}
		}
	}
	return out
}

// startDetached starts a cluster component that outlives this process: its own session (no
// signal from this process's terminal or process group reaches it), output appended to logPath.
// exited is closed when it exits while this process still runs; exitErr then holds the reason.
func startDetached(path string, args []string, env []string, logPath string) (p proc, exited chan struct{}, exitErr *error, err error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return proc{}, nil, nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "# %s started by the eppkit local provider: %s %s\n", time.Now().Format(time.RFC3339), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return proc{}, nil, nil, err
	}
	exited = make(chan struct{})
	var werr error
	go func() {
		werr = cmd.Wait()
		if werr == nil {
			werr = errors.New("exited with status 0")
		}
		close(exited)
	}()
	p, err = recordProc(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return proc{}, nil, nil, err
	}
	return p, exited, &werr, nil
}

// stopProc sends SIGTERM to a recorded process (and its process group when it leads one), waits
// up to timeout for it to go, then SIGKILLs it. A process that is not alive is left alone.
func stopProc(p proc, timeout time.Duration) {
	if !p.alive() {
		return
	}
	pgid, _ := syscall.Getpgid(p.PID)
	signal := func(sig syscall.Signal) {
		if pgid == p.PID {
			_ = syscall.Kill(-p.PID, sig)
		} else {
			_ = syscall.Kill(p.PID, sig)
		}
	}
	signal(syscall.SIGTERM)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	signal(syscall.SIGKILL)
	for i := 0; i < 100 && p.alive(); i++ {
		time.Sleep(50 * time.Millisecond)
	}
}

// podCIDRLocal reports whether the first pod address of cidr can be bound on this machine.
func podCIDRLocal(cidr netip.Prefix) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(cidr.Addr().Next().String(), "0"))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ensureLocalRoute makes the pod CIDR local (bindable) unless it already is: Linux accepts any
// address of a "local" route on lo (as for 127.0.0.0/8), so one `ip route add local <cidr> dev
// lo` is enough; it needs CAP_NET_ADMIN. added is true when this call added the route.
func ensureLocalRoute(cidr netip.Prefix) (added bool, err error) {
	if podCIDRLocal(cidr) {
		return false, nil
	}
	out, err := exec.Command("ip", "route", "add", "local", cidr.String(), "dev", "lo").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("pod CIDR %s is not local to this machine and `ip route add local %s dev lo` failed: %v: %s\n"+
			"Run it once with privileges (sudo ip route add local %s dev lo), or choose a loopback pod CIDR such as 127.1.0.0/24 "+
			"(pods then run, but the API server refuses loopback addresses in EndpointSlices, so Services get no endpoints)",
			cidr, cidr, err, strings.TrimSpace(string(out)), cidr)
	}
	if !podCIDRLocal(cidr) {
		return true, fmt.Errorf("pod CIDR %s: added a local route on lo but %s still cannot be bound", cidr, cidr.Addr().Next())
	}
	return true, nil
}

// removeLocalRoute undoes ensureLocalRoute's route.
func removeLocalRoute(cidr string) error {
	out, err := exec.Command("ip", "route", "del", "local", cidr, "dev", "lo").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip route del local %s dev lo: %v: %s", cidr, err, strings.TrimSpace(string(out)))
	}
	return nil
}
