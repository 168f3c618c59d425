// Package procstat reads the /proc figures eppkit's benchmarks report, through prometheus/procfs:
// a process's CPU time, this process's peak resident set size and the machine's load average.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// CPUSeconds is process pid's CPU time, user + system, in seconds (/proc/<pid>/stat).
func CPUSeconds(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}

// LoadAverage is the 1-, 5- and 15-minute load average (/proc/loadavg).
func LoadAverage() (one, five, fifteen float64, err error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, 0, err
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return 0, 0, 0, err
	}
	return l.Load1, l.Load5, l.Load15, nil
}

// LoadAverageString is LoadAverage as /proc/loadavg writes it ("0.52 0.58 0.59"), "" when it
// cannot be read.
func LoadAverageString() string {
	one, five, fifteen, err := LoadAverage()
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%.2f %.2f %.2f", one, five, fifteen)
}

// PeakRSS is this process's peak resident set size in bytes (VmHWM of /proc/self/status).
func PeakRSS() (uint64, error) {
	p, err := procfs.Self()
	if err != nil {
		return 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, err
	}
	return st.VmHWM, nil
}

// PeakRSSString is PeakRSS in MiB ("412 MiB"), "unknown" when it cannot be read.
func PeakRSSString() string {
	b, err := PeakRSS()
	if err != nil || b == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

// shells are the command names ExecutedPID looks through.
var shells = map[string]bool{"sh": true, "dash": true, "bash": true}

// ExecutedPID is the process a `/bin/sh -c LINE` with process id pid runs LINE as: pid itself
// when the shell exec'd it (bash does for a simple command; dash, Debian's /bin/sh, does not) or
// pid is no shell, else its only child, followed down while that is again a shell with one child
// (/proc/<pid>/task/<pid>/children). A shell with no child or several is returned as it is: the
// caller then measures the shell.
func ExecutedPID(pid int) int {
	for range 8 {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || !shells[strings.TrimSpace(string(comm))] {
			return pid
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		f := strings.Fields(string(b))
		if err != nil || len(f) != 1 {
			return pid
		}
		child, err := strconv.Atoi(f[0])
		if err != nil {
			return pid
		}
		pid = child
	}
	return pid
}
