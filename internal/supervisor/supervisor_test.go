package supervisor

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitLogged waits until the child's log holds a line want (the first line, the command line,
// does not count).
func waitLogged(t *testing.T, p *Process, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.LogTail(20)+"\n", "\n"+want+"\n") {
		if time.Now().After(deadline) {
			t.Fatalf("log never held %q:\n%s", want, p.LogTail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStopReachesTheShellsChildren: Stop's SIGTERM goes to the process group, so a sleep the
// shell started ends too, well before the grace.
func TestStopReachesTheShellsChildren(t *testing.T) {
	p, err := Start(Shell("echo started; sleep 30; echo never", filepath.Join(t.TempDir(), "x.log")))
	if err != nil {
		t.Fatal(err)
	}
	waitLogged(t, p, "started")
	if !strings.HasPrefix(p.LogTail(5), "# echo started; sleep 30") {
		t.Errorf("log does not start with the command line:\n%s", p.LogTail(5))
	}
	start := time.Now()
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Stop took %s: SIGTERM did not reach the sleep", d)
	}
	if p.Running() || p.ExitErr() == nil {
		t.Fatalf("after Stop: running %v, exit %v", p.Running(), p.ExitErr())
	}
	if err := p.Stop(time.Second); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestStopKillsAfterGrace: a child that ignores SIGTERM is killed after the grace, and Stop says so.
func TestStopKillsAfterGrace(t *testing.T) {
	p, err := Start(Shell(`trap "" TERM; echo armed; while :; do sleep 0.05; done`, filepath.Join(t.TempDir(), "x.log")))
	if err != nil {
		t.Fatal(err)
	}
	waitLogged(t, p, "armed")
	start := time.Now()
	err = p.Stop(300 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Stop = %v, want a killed error", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("killed after %s, before the grace", d)
	}
}

// TestExitAndSignals: an exit is observed with its status; SIGSTOP/SIGCONT reach the child; a
// signal to an exited child is an error; Append keeps the previous log.
func TestExitAndSignals(t *testing.T) {
	log := filepath.Join(t.TempDir(), "x.log")
	p, err := Start(Shell("echo first; exit 7", log))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("exit 7 not observed")
	}
	if err := p.ExitErr(); err == nil || !strings.Contains(err.Error(), "7") {
		t.Fatalf("ExitErr = %v, want status 7", err)
	}
	if err := p.Signal(syscall.SIGSTOP); err == nil {
		t.Fatal("Signal to an exited child succeeded")
	}
	spec := Shell("echo second; sleep 30", log)
	spec.Append = true
	q, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Kill()
	waitLogged(t, q, "second")
	if !strings.Contains(q.LogTail(10), "first") {
		t.Errorf("Append lost the first child's log:\n%s", q.LogTail(10))
	}
	if err := q.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := q.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := q.Kill(); err != nil || q.Running() {
		t.Fatalf("Kill = %v, running %v", err, q.Running())
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(Spec{Path: "/bin/true"}); err == nil || !strings.Contains(err.Error(), "no log path") {
		t.Errorf("no log path: %v", err)
	}
	if _, err := Start(Spec{Path: "/does/not/exist", LogPath: filepath.Join(t.TempDir(), "x.log")}); err == nil ||
		!strings.Contains(err.Error(), "/does/not/exist") {
		t.Errorf("missing program: %v", err)
	}
}
