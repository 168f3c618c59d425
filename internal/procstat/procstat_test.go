package procstat

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestProcstat(t *testing.T) {
	if v, err := CPUSeconds(os.Getpid()); err != nil || v < 0 {
		t.Fatalf("CPUSeconds(self) = %v, %v", v, err)
	}
	if _, err := CPUSeconds(1 << 30); err == nil {
		t.Fatal("CPUSeconds of a missing pid returned no error")
	}
	one, five, fifteen, err := LoadAverage()
	if err != nil || one < 0 || five < 0 || fifteen < 0 {
		t.Fatalf("LoadAverage = %v %v %v, %v", one, five, fifteen, err)
	}
	// This test process has touched at least its heap and stack: more than 1 MiB and less than
	// the machine.
	if b, err := PeakRSS(); err != nil || b < 1<<20 || b > 1<<40 {
		t.Fatalf("PeakRSS = %d, %v", b, err)
	}
	if s := PeakRSSString(); !strings.HasSuffix(s, " MiB") {
		t.Fatalf("PeakRSSString = %q", s)
	}
	if f := strings.Fields(LoadAverageString()); len(f) != 3 {
		t.Fatalf("LoadAverageString = %q, want three fields", LoadAverageString())
	}
}

// TestExecutedPID starts `/bin/sh -c 'sleep 30; :'` (a line no shell execs) and expects the
// sleep's pid, and a process that is no shell to be its own.
func TestExecutedPID(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 30; :")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sh := cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		pid := ExecutedPID(sh)
		if pid != sh {
			// The child may be read between its fork and its exec, when it is still a copy of
			// the shell with no child: the same pid then becomes the sleep, so wait for that.
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			for err == nil && strings.TrimSpace(string(comm)) == "sh" && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
				comm, err = os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			}
			if err != nil || strings.TrimSpace(string(comm)) != "sleep" {
				t.Fatalf("ExecutedPID(%d) = %d (%q, %v), want the sleep", sh, pid, comm, err)
			}
			if ExecutedPID(pid) != pid {
				t.Fatalf("ExecutedPID of the sleep is not itself")
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("ExecutedPID(%d) stayed the shell", sh)
}
