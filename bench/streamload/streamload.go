// Package streamload is a streaming load client for a model server (`eppkit fake-vllm loadtest`,
// run from a process of its own): N workers send streaming requests of one API (chat
// completions, completions, Anthropic messages or OpenAI responses: Options.API) back to back
// and measure the time to the first token and the gaps between tokens, and the CPU the client
// and, given its pid, the server spent. It is how the fake vLLM server's timing accuracy and CPU
// cost are measured; it is the CLI's only streaming load client (`eppkit bench`'s serving load
// generator, bench, drives policies through the gateway instead).
package streamload

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eppkit/eppkit/internal/percentile"
	"github.com/eppkit/eppkit/internal/procstat"
)

// Options configure Run; each field names the `eppkit fake-vllm loadtest` flag it mirrors.
type Options struct {
	// URL is the server's base URL (--url); Model the model of every request (--model).
	URL, Model string
	// Concurrency is the number of workers (--concurrency), Rounds the requests each sends one
	// after another (--rounds), MaxTokens every request's max_tokens (--max-tokens); all ≥ 1.
	Concurrency, Rounds, MaxTokens int
	// ServerPID, when > 0, is the server's process: its CPU over the run is reported
	// (--server-pid).
	ServerPID int
	// Ramp spreads the workers' first requests evenly over this span (--ramp; 0: all at once).
	Ramp time.Duration
	// PromptTokens, when > 0, makes every request's prompt unique and PromptTokens tokens long
	// (--prompt-tokens): words "w<worker>r<round>t<k> ", one dummy-tokenizer token each, so
	// each request fills new KV blocks and, once the pool is full, evicts others (the load that
	// KV events publish). 0 sends one short prompt every time.
	PromptTokens int
	// API is the streaming API to load (--api): chat (default), completions, messages
	// (Anthropic) or responses (OpenAI Responses).
	API string
}

// api is one streaming API the load client drives: its path, request body and the SSE data
// lines that carry one output token each.
type api struct {
	path  string
	body  func(model, prompt string, maxTokens int) string
	token func(line []byte) bool
}

// apis are the streaming APIs Run can drive, by Options.API name.
var apis = map[string]api{
	"chat": {"/v1/chat/completions", func(m, p string, n int) string {
		return fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, m, n, p)
	}, func(l []byte) bool {
		return bytes.HasPrefix(l, []byte("data: {")) && bytes.Contains(l, []byte(`"content":`)) && !bytes.Contains(l, []byte(`"role"`))
	}},
	"completions": {"/v1/completions", func(m, p string, n int) string {
		return fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"prompt":%q}`, m, n, p)
	}, func(l []byte) bool {
		// A token chunk has text; vLLM's last one also carries the finish_reason, OpenAI's
		// separate finishing chunk (--stream-finish openai) has none.
		return bytes.HasPrefix(l, []byte("data: {")) && bytes.Contains(l, []byte(`"text":"`)) && !bytes.Contains(l, []byte(`"text":"",`))
	}},
	"messages": {"/v1/messages", func(m, p string, n int) string {
		return fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, m, n, p)
	}, func(l []byte) bool { return bytes.HasPrefix(l, []byte(`data: {"type":"content_block_delta"`)) }},
	"responses": {"/v1/responses", func(m, p string, n int) string {
		return fmt.Sprintf(`{"model":%q,"stream":true,"max_output_tokens":%d,"input":%q}`, m, n, p)
	}, func(l []byte) bool { return bytes.HasPrefix(l, []byte(`data: {"type":"response.output_text.delta"`)) }},
}

// Result is what Run measured.
type Result struct {
	requests, errors, tokens int
	gaps, ttfts              []time.Duration
	wall                     time.Duration
	clientCPU, serverCPU     float64 // percent of one core; serverCPU < 0 without a server pid
	firstErr                 string
}

// Errors is the number of failed requests (a transport error, a status other than 200, or a
// stream without exactly MaxTokens tokens).
func (r *Result) Errors() int { return r.errors }

// String is the report: counts, the inter-token gap and TTFT percentiles (internal/percentile)
// and the CPU of client and server, one figure a line.
func (r *Result) String() string {
	pct := func(d []time.Duration, p float64) time.Duration { return percentile.Durations(d, p*100) }
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

// Run sends the load and measures it. Errors are only those of reading the CPU times; failed
// requests are counted in the Result.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Concurrency < 1 || o.Rounds < 1 || o.MaxTokens < 1 {
		return nil, fmt.Errorf("--concurrency, --rounds and --max-tokens must be at least 1")
	}
	if o.API == "" {
		o.API = "chat"
	}
	la, ok := apis[o.API]
	if !ok {
		return nil, fmt.Errorf("--api must be one of %s, got %q", strings.Join(slices.Sorted(maps.Keys(apis)), ", "), o.API)
	}
	url, model, concurrency, rounds, maxTokens, serverPID, ramp := o.URL, o.Model, o.Concurrency, o.Rounds, o.MaxTokens, o.ServerPID, o.Ramp
	tr := &http.Transport{MaxIdleConns: concurrency, MaxIdleConnsPerHost: concurrency,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	client := &http.Client{Transport: tr}
	body := la.body(model, "measure the inter token gap", maxTokens)
	bodyOf := func(w, r int) string {
		if o.PromptTokens <= 0 {
			return body
		}
		var p strings.Builder
		for k := range o.PromptTokens {
			fmt.Fprintf(&p, "w%dr%dt%d ", w, r, k)
		}
		return la.body(model, p.String(), maxTokens)
	}
	res := &Result{serverCPU: -1}
	var mu sync.Mutex
	c0, err := procstat.CPUSeconds(os.Getpid())
	if err != nil {
		return nil, err
	}
	var s0 float64
	if serverPID > 0 {
		if s0, err = procstat.CPUSeconds(serverPID); err != nil {
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
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+la.path, strings.NewReader(bodyOf(w, r)))
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
					if !la.token(line) {
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
	c1, _ := procstat.CPUSeconds(os.Getpid())
	res.clientCPU = (c1 - c0) / res.wall.Seconds() * 100
	if serverPID > 0 {
		s1, _ := procstat.CPUSeconds(serverPID)
		res.serverCPU = (s1 - s0) / res.wall.Seconds() * 100
	}
	return res, nil
}
