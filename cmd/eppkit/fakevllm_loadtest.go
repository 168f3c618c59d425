package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

// newFakeVLLMLoadtestCommand is a hidden streaming load client used to measure the fake's
// timing accuracy and CPU cost from a separate process.
func newFakeVLLMLoadtestCommand() *cobra.Command {
	var (
		url         string
		model       string
		concurrency int
		rounds      int
		maxTokens   int
		serverPID   int
		timeout     time.Duration
		ramp        time.Duration
	)
	cmd := &cobra.Command{
		Use:    "loadtest --url URL --model NAME --concurrency N",
		Short:  "Streaming load client: inter-token gap percentiles and CPU of client and server",
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if concurrency < 1 || rounds < 1 || maxTokens < 1 {
				return fmt.Errorf("--concurrency, --rounds and --max-tokens must be at least 1")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			res, err := runLoad(ctx, url, model, concurrency, rounds, maxTokens, serverPID, ramp)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), res)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "url", "http://127.0.0.1:8000", "Server base URL")
	f.StringVar(&model, "model", "m", "Model name")
	f.IntVar(&concurrency, "concurrency", 200, "Concurrent streams")
	f.IntVar(&rounds, "rounds", 1, "Requests per stream worker, one after another")
	f.IntVar(&maxTokens, "max-tokens", 100, "max_tokens of every request (random mode emits exactly this many)")
	f.IntVar(&serverPID, "server-pid", 0, "PID of the server process, to report its CPU over the run")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "Overall timeout")
	f.DurationVar(&ramp, "ramp", 0, "Spread the workers' first requests evenly over this span (0: all at once)")
	return cmd
}

// cpuTicks returns utime+stime of pid (0 = self) in clock ticks, from /proc/<pid>/stat.
func cpuTicks(pid int) (int64, error) {
	p := "/proc/self/stat"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	// Fields after the ")" of the command name: state is field 3; utime 14, stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: unexpected format", p)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("%s: unexpected format", p)
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	s, _ := strconv.ParseInt(fields[12], 10, 64)
	return u + s, nil
}

const clkTck = 100 // USER_HZ on Linux

type loadResult struct {
	requests, errors, tokens int
	gaps, ttfts              []time.Duration
	wall                     time.Duration
	clientCPU, serverCPU     float64 // percent of one core
	firstErr                 string
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(p * float64(len(d)-1))
	return d[i]
}

func (r *loadResult) String() string {
	slices.Sort(r.gaps)
	slices.Sort(r.ttfts)
	var b strings.Builder
	fmt.Fprintf(&b, "requests %d, errors %d, tokens %d, wall %v\n", r.requests, r.errors, r.tokens, r.wall.Round(time.Millisecond))
	if r.firstErr != "" {
		fmt.Fprintf(&b, "first error: %s\n", r.firstErr)
	}
	fmt.Fprintf(&b, "inter-token gap (n=%d): p50 %v p90 %v p99 %v p99.9 %v max %v\n", len(r.gaps),
		pct(r.gaps, 0.5), pct(r.gaps, 0.9), pct(r.gaps, 0.99), pct(r.gaps, 0.999), pct(r.gaps, 1))
	fmt.Fprintf(&b, "TTFT (n=%d): p50 %v p99 %v max %v\n", len(r.ttfts), pct(r.ttfts, 0.5), pct(r.ttfts, 0.99), pct(r.ttfts, 1))
	fmt.Fprintf(&b, "client CPU %.1f%% of one core\n", r.clientCPU)
	if r.serverCPU >= 0 {
		fmt.Fprintf(&b, "server CPU %.1f%% of one core\n", r.serverCPU)
	}
	return b.String()
}

func runLoad(ctx context.Context, url, model string, concurrency, rounds, maxTokens, serverPID int, ramp time.Duration) (*loadResult, error) {
	tr := &http.Transport{MaxIdleConns: concurrency, MaxIdleConnsPerHost: concurrency,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	client := &http.Client{Transport: tr}
	body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"measure the inter token gap"}]}`, model, maxTokens)
	res := &loadResult{serverCPU: -1}
	var mu sync.Mutex
	c0, err := cpuTicks(0)
	if err != nil {
		return nil, err
	}
	var s0 int64
	if serverPID > 0 {
		if s0, err = cpuTicks(serverPID); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(ramp * time.Duration(w) / time.Duration(concurrency))
			gaps := make([]time.Duration, 0, rounds*maxTokens)
			var ttfts []time.Duration
			var tokens, errs int
			var firstErr string
			for r := 0; r < rounds; r++ {
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					errs++
					firstErr = err.Error()
					continue
				}
				if resp.StatusCode != http.StatusOK {
					errs++
					firstErr = resp.Status
					resp.Body.Close()
					continue
				}
				br := bufio.NewReaderSize(resp.Body, 4096)
				var prev time.Time
				n := 0
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						break
					}
					if !bytes.HasPrefix(line, []byte("data: {")) || !bytes.Contains(line, []byte(`"content":`)) ||
						bytes.Contains(line, []byte(`"role"`)) {
						continue
					}
					now := time.Now()
					if n == 0 {
						ttfts = append(ttfts, now.Sub(t0))
					} else {
						gaps = append(gaps, now.Sub(prev))
					}
					prev = now
					n++
				}
				resp.Body.Close()
				tokens += n
				if n != maxTokens {
					errs++
					firstErr = fmt.Sprintf("stream had %d tokens, want %d", n, maxTokens)
				}
			}
			mu.Lock()
			res.requests += rounds
			res.errors += errs
			res.tokens += tokens
			res.gaps = append(res.gaps, gaps...)
			res.ttfts = append(res.ttfts, ttfts...)
			if firstErr != "" && res.firstErr == "" {
				res.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.wall = time.Since(start)
	c1, _ := cpuTicks(0)
	res.clientCPU = float64(c1-c0) / clkTck / res.wall.Seconds() * 100
	if serverPID > 0 {
		s1, _ := cpuTicks(serverPID)
		res.serverCPU = float64(s1-s0) / clkTck / res.wall.Seconds() * 100
	}
	return res, nil
}
