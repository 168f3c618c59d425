package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/eppkit/eppkit/internal/supervisor"
)

// PredictorSidecar is a latency predictor (`eppkit predictor`, the upstream sidecar API) that the
// harness runs beside the target and hands to it as {{.PredictorURL}}, so a test can take it
// away (StopPredictor) and check that the EPP keeps serving. The reference target uses it with
// --predictor-url; other targets may ignore it. Its model needs 50 samples before it is ready,
// like manifests/epp-configs/conformance.yaml's in-process one.
type PredictorSidecar struct {
	bin     string
	port    int
	logPath string

	mu   sync.Mutex
	proc *supervisor.Process // nil when not started or killed
}

// predictorArgs are the sidecar's flags after --port.
var predictorArgs = []string{"--min-samples", "50", "--retrain-every", "50", "--retrain-interval", "1s"}

// startPredictorSidecar starts `<eppkit> predictor` on a free port of 127.0.0.1 and waits for
// GET /healthz; its output goes to <logDir>/predictor.log.
func startPredictorSidecar(ctx context.Context, eppkit, logDir string, timeout time.Duration) (*PredictorSidecar, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	if logDir == "" {
		logDir = os.TempDir()
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("predictor sidecar: %w", err)
	}
	p := &PredictorSidecar{bin: eppkit, port: ports[0], logPath: filepath.Join(logDir, "predictor.log")}
	if err := p.Start(ctx, timeout); err != nil {
		return nil, err
	}
	return p, nil
}

// URL is the sidecar's base URL.
func (p *PredictorSidecar) URL() string { return "http://127.0.0.1:" + strconv.Itoa(p.port) }

// Running reports whether the sidecar process runs.
func (p *PredictorSidecar) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc != nil
}

// Start (re)starts the sidecar on its port and waits until GET /healthz answers 200 (at most
// timeout). Starting a running sidecar is a no-op.
func (p *PredictorSidecar) Start(ctx context.Context, timeout time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil {
		return nil
	}
	args := append([]string{"predictor", "--port", strconv.Itoa(p.port)}, predictorArgs...)
	proc, err := supervisor.Start(supervisor.Spec{Path: p.bin, Args: args, LogPath: p.logPath, Append: true})
	if err != nil {
		return fmt.Errorf("predictor sidecar: %w", err)
	}
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-proc.Exited():
			return fmt.Errorf("predictor sidecar exited at start (%v); see %s", proc.ExitErr(), p.logPath)
		default:
		}
		resp, err := client.Get(p.URL() + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.proc = proc
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = proc.Kill()
			return errors.Join(fmt.Errorf("predictor sidecar not healthy at %s within %s; see %s", p.URL(), timeout, p.logPath), err, ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill stops the sidecar at once (SIGKILL), as a crash would.
func (p *PredictorSidecar) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil {
		return nil
	}
	err := p.proc.Kill()
	p.proc = nil
	return err
}

// PredictorURL returns the base URL of the harness's predictor sidecar, "" when there is none.
func (s *Suite) PredictorURL() string {
	if s.predictor == nil {
		return ""
	}
	return s.predictor.URL()
}

// StopPredictor kills the predictor sidecar the target was given ({{.PredictorURL}}) and starts
// it again in t.Cleanup (with a fresh, untrained model). It returns false, doing nothing, when
// the harness runs no sidecar.
func (s *Suite) StopPredictor(t TestingT) bool {
	t.Helper()
	if s.predictor == nil {
		return false
	}
	if err := s.predictor.Kill(); err != nil {
		t.Fatalf("kill the predictor sidecar: %v", err)
	}
	t.Cleanup(func() {
		if err := s.predictor.Start(context.Background(), s.Timeouts.HarnessStart.D()); err != nil {
			t.Errorf("restart the predictor sidecar: %v", err)
		}
	})
	return true
}

// Pause stops the sidecar process with SIGSTOP: the kernel still accepts connections on its
// port, but nothing answers, as with a hung predictor server. Resume undoes it. Pausing a
// sidecar that does not run is an error.
func (p *PredictorSidecar) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused sidecar (SIGCONT).
func (p *PredictorSidecar) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *PredictorSidecar) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil {
		return errors.New("predictor sidecar: not running")
	}
	return p.proc.Signal(sig)
}

// PausePredictor makes the predictor sidecar the target was given ({{.PredictorURL}}) hang
// (PredictorSidecar.Pause) and returns the function that resumes it; t.Cleanup resumes it too.
// ok is false, doing nothing, when the harness runs no sidecar.
func (s *Suite) PausePredictor(t TestingT) (resume func(), ok bool) {
	t.Helper()
	if s.predictor == nil || !s.predictor.Running() {
		return nil, false
	}
	if err := s.predictor.Pause(); err != nil {
		t.Fatalf("pause the predictor sidecar: %v", err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := s.predictor.Resume(); err != nil {
				t.Errorf("resume the predictor sidecar: %v", err)
			}
		})
	}
	t.Cleanup(resume)
	return resume, true
}
