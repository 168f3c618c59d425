package extproc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// DefaultProfileWindow is the default length of the CPU profile taken at a target's highest
// sustained rate (--profile-window).
const DefaultProfileWindow = 15 * time.Second

// ProfileTopEntries is how many cumulative entries of each profile are printed.
const ProfileTopEntries = 15

// profileWarmup is how long the re-run cell runs before the profile starts, and profileMargin
// how long it runs past the profile's end, so the profile covers steady load only.
const (
	profileWarmup = time.Second
	profileMargin = 2 * time.Second
)

// ProfileFileName is the CPU profile file of a target at one pool and prompt size:
// <target>_<pages>_<n>ep_<bytes>B.pprof.
func ProfileFileName(target, pages string, endpoints, promptBytes int) string {
	return fmt.Sprintf("%s_%s_%dep_%dB.pprof", target, pages, endpoints, promptBytes)
}

// ProfileSustained profiles p, the EPP of one matrix row whose ladder cells are cells: for each
// prompt size, it re-runs the highest sustained rate (SustainedRates under m.P95BoundMs) for
// m.ProfileWindow plus a second of warm-up and two of margin while fetching
// /debug/pprof/profile?seconds=<window> from the EPP, writes the profile to m.ProfileDir
// (ProfileFileName) and prints the top ProfileTopEntries cumulative entries of `go tool pprof`.
// A target without net/http/pprof (every one but the reference) or without a sustained rate
// gets a line saying no profile is available. A failed profile is printed and returned; the
// caller goes on unless ctx ended.
func ProfileSustained(ctx context.Context, w io.Writer, m MatrixOptions, p *eppProcess, cells []MatrixCell) error {
	var firstErr error
	for _, s := range SustainedRates(cells, m.P95BoundMs) {
		head := fmt.Sprintf("  profile %s, %s pages, %d endpoints, %d B", s.Target, s.Pages, s.Endpoints, s.PromptBytes)
		if p.pprofAddr == "" {
			fmt.Fprintf(w, "%s: no profile available (%s serves no net/http/pprof this command can reach; the reference does, with EPPKIT_PPROF_ADDR)\n", head, s.Target)
			continue
		}
		if s.MaxRate <= 0 {
			fmt.Fprintf(w, "%s: no profile available (no rate of the ladder was sustained)\n", head)
			continue
		}
		path := filepath.Join(m.ProfileDir, ProfileFileName(s.Target, s.Pages, s.Endpoints, s.PromptBytes))
		fmt.Fprintf(w, "%s: re-running %.0f/s for a %v CPU profile…\n", head, s.MaxRate, m.ProfileWindow)
		rep, err := profileAt(ctx, m, p, s.PromptBytes, s.MaxRate, path)
		if err == nil {
			fmt.Fprintf(w, "  wrote %s (%.1f decisions/s, p95 %.3f ms during the profile)\n", path, rep.DecisionsPerSec, rep.LatencyMs.P95)
			var top string
			top, err = PprofTop(ctx, path, ProfileTopEntries)
			if err == nil {
				for _, l := range strings.Split(strings.TrimRight(top, "\n"), "\n") {
					fmt.Fprintf(w, "    %s\n", l)
				}
			}
		}
		if err != nil {
			fmt.Fprintf(w, "%s: %v\n", head, err)
			if firstErr == nil {
				firstErr = err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return firstErr
}

// profileAt runs the decision load at rate with prompts of size bytes against p while it fetches
// p's CPU profile for m.ProfileWindow into path; it returns the load's report.
func profileAt(ctx context.Context, m MatrixOptions, p *eppProcess, size int, rate float64, path string) (*Report, error) {
	o := m.Bench
	o.EPP, o.PromptBytes, o.PID, o.Rate, o.Record = p.grpcAddr, size, p.pid(), rate, false
	o.Warmup, o.Duration = profileWarmup, m.ProfileWindow+profileMargin
	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := Run(ctx, o)
		done <- result{r, err}
	}()
	perr := func() error {
		if err := sleepCtx(ctx, profileWarmup); err != nil {
			return err
		}
		secs := int(m.ProfileWindow / time.Second)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.pprofAddr, secs)
		cctx, cancel := context.WithTimeout(ctx, m.ProfileWindow+30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("fetching %s: %w", url, err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return fmt.Errorf("reading %s: %w", url, err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d: %.200s", url, resp.StatusCode, b)
		}
		return os.WriteFile(path, b, 0o644)
	}()
	res := <-done
	if perr != nil {
		return nil, perr
	}
	if res.err != nil {
		return nil, fmt.Errorf("the load during the profile: %w", res.err)
	}
	return res.rep, nil
}

// PprofTop is the output of `go tool pprof -top -cum -nodecount=n path`: the profile's header
// and its n entries of largest cumulative CPU time. The go command must be on $PATH.
func PprofTop(ctx context.Context, path string, n int) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", fmt.Sprintf("-nodecount=%d", n), path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof -top -cum %s: %w: %.500s", path, err, out)
	}
	return string(out), nil
}
