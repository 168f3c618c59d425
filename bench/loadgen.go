package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Outcome is what the load generator saw of one request. Times are milliseconds.
type Outcome struct {
	// ID is the workload request's ID; Step the ladder step it was scheduled in.
	ID   int `json:"id"`
	Step int `json:"step"`
	// ScheduledMs is the planned send time from the start of the run; SentMs the actual one
	// (later when the concurrency cap held it back or the machine was slow).
	ScheduledMs float64 `json:"scheduled_ms"`
	SentMs      float64 `json:"sent_ms"`
	// TTFTMs is the time from sending to the first output token; E2EMs to the end of the stream.
	TTFTMs float64 `json:"ttft_ms"`
	E2EMs  float64 `json:"e2e_ms"`
	// ITLMs are the gaps between successive output-token chunks.
	ITLMs []float64 `json:"itl_ms,omitempty"`
	// PromptTokens, OutputTokens and CachedTokens come from the final usage chunk
	// (prompt_tokens_details.cached_tokens: prompt tokens served from the prefix cache); when it
	// is missing OutputTokens counts token chunks and the others are the workload's values / 0.
	PromptTokens int `json:"prompt_tokens"`
	OutputTokens int `json:"output_tokens"`
	CachedTokens int `json:"cached_tokens"`
	// Status is the HTTP status (0 when no response arrived); Error says what failed.
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
	// Endpoint is the serving pod (x-inference-pod), "" when unknown.
	Endpoint string `json:"endpoint,omitempty"`
	// SLO is the request's SLO (Request.SLO): nil for a batch request.
	SLO *SLOs `json:"slo,omitempty"`
}

// OK reports whether the request completed with status 200 and at least one token.
func (o *Outcome) OK() bool { return o.Error == "" && o.Status == http.StatusOK && o.OutputTokens > 0 }

// LoadConfig configures RunLoad.
type LoadConfig struct {
	// BaseURL is the gateway's base URL (http://host:port); requests go to /v1/completions.
	BaseURL string
	// Model is the base model name, used for requests whose Model is "".
	Model string
	// Requests are sent in order, request i at Arrivals[i]; len(Requests) ≥ len(Arrivals).
	Requests []Request
	Arrivals []Arrival
	// MaxConcurrency caps requests in flight (0 = no cap); an arrival beyond the cap waits for a
	// slot, as vLLM's --max-concurrency.
	MaxConcurrency int
	// Timeout bounds one request (default 2 minutes).
	Timeout time.Duration
	// Progress receives a progress bar ("" description); nil shows none.
	Progress    io.Writer
	Description string
	// Monitor, when set, is sampled during the run (CPU, queues, prefix counters).
	Monitor *Monitor
}

// Load is the raw result of RunLoad.
type Load struct {
	// Outcomes are indexed like the arrivals.
	Outcomes []Outcome
	// Duration is from the first send to the last response's end.
	Duration time.Duration
	// Samples are the monitor's samples (nil without a monitor).
	Samples []Sample
}

// RunLoad sends the requests open-loop at their arrival times and waits for every response.
// It returns an error only for bad configuration or when ctx ends first (with what completed).
func RunLoad(ctx context.Context, cfg LoadConfig) (*Load, error) {
	if len(cfg.Requests) < len(cfg.Arrivals) {
		return nil, fmt.Errorf("load: %d requests for %d arrivals", len(cfg.Requests), len(cfg.Arrivals))
	}
	if cfg.MaxConcurrency < 0 {
		return nil, fmt.Errorf("--max-concurrency must not be negative, got %d", cfg.MaxConcurrency)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	var bar *progressbar.ProgressBar
	if cfg.Progress != nil {
		bar = progressbar.NewOptions(len(cfg.Arrivals), progressbar.OptionSetWriter(cfg.Progress),
			progressbar.OptionSetDescription(cfg.Description), progressbar.OptionShowCount(),
			progressbar.OptionThrottle(250*time.Millisecond), progressbar.OptionSetWidth(30),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionOnCompletion(func() { fmt.Fprintln(cfg.Progress) }))
	}

	out := make([]Outcome, len(cfg.Arrivals))
	var sem chan struct{}
	if cfg.MaxConcurrency > 0 {
		sem = make(chan struct{}, cfg.MaxConcurrency)
	}
	start := time.Now()
	if cfg.Monitor != nil {
		cfg.Monitor.Start(ctx, start)
	}
	var wg sync.WaitGroup
	var lastEnd time.Duration
	var mu sync.Mutex
	timer := time.NewTimer(0)
	<-timer.C
	var runErr error
schedule:
	for i, a := range cfg.Arrivals {
		if d := a.At - time.Since(start); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				runErr = ctx.Err()
				break schedule
			}
		}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				runErr = ctx.Err()
				break schedule
			}
		}
		wg.Add(1)
		go func(i int, a Arrival) {
			defer wg.Done()
			o := &out[i]
			o.ID, o.Step, o.ScheduledMs = cfg.Requests[i].ID, a.Step, ms(a.At)
			sendOne(ctx, client, cfg, &cfg.Requests[i], start, o)
			if sem != nil {
				<-sem
			}
			end := time.Duration((o.SentMs + o.E2EMs) * float64(time.Millisecond))
			mu.Lock()
			lastEnd = max(lastEnd, end)
			mu.Unlock()
			if bar != nil {
				_ = bar.Add(1)
			}
		}(i, a)
	}
	wg.Wait()
	if bar != nil {
		_ = bar.Finish()
	}
	l := &Load{Outcomes: out}
	if cfg.Monitor != nil {
		l.Samples = cfg.Monitor.Stop()
	}
	first := time.Duration(0)
	if len(out) > 0 {
		first = time.Duration(out[0].SentMs * float64(time.Millisecond))
	}
	l.Duration = lastEnd - first
	return l, runErr
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// completionBody is the /v1/completions request (vLLM bench serve's openai-completions backend
// sends the same fields).
type completionBody struct {
	Model         string         `json:"model"`
	Prompt        string         `json:"prompt"`
	MaxTokens     int            `json:"max_tokens"`
	Stream        bool           `json:"stream"`
	StreamOptions map[string]any `json:"stream_options"`
	IgnoreEOS     bool           `json:"ignore_eos"`
	Temperature   float64        `json:"temperature"`
}

// streamChunk is the part of an SSE completion chunk the generator reads.
type streamChunk struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// CompletionBody is the /v1/completions body the load generator sends for r: its model (r.Model,
// or baseModel when that is ""), prompt and max_tokens, streamed with usage and ignore_eos. The
// fleet simulation hands the same bytes to the EPP it drives in process.
func CompletionBody(r *Request, baseModel string) []byte {
	model := r.Model
	if model == "" {
		model = baseModel
	}
	body, _ := json.Marshal(completionBody{Model: model, Prompt: r.Prompt, MaxTokens: r.OutputTokens, Stream: true,
		StreamOptions: map[string]any{"include_usage": true}, IgnoreEOS: true})
	return body
}

// sendOne sends r and fills o.
func sendOne(ctx context.Context, client *http.Client, cfg LoadConfig, r *Request, start time.Time, o *Outcome) {
	body := CompletionBody(r, cfg.Model)
	o.PromptTokens, o.SLO = r.PromptTokens, r.SLO
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, strings.TrimRight(cfg.BaseURL, "/")+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		o.Error = err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range r.Headers() {
		req.Header.Set(k, v)
	}
	sent := time.Now()
	o.SentMs = ms(sent.Sub(start))
	resp, err := client.Do(req)
	if err != nil {
		o.Error = err.Error()
		o.E2EMs = ms(time.Since(sent))
		return
	}
	defer resp.Body.Close()
	o.Status = resp.StatusCode
	o.Endpoint = resp.Header.Get("x-inference-pod")
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		o.Error = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		o.E2EMs = ms(time.Since(sent))
		return
	}
	rd := bufio.NewReaderSize(resp.Body, 16*1024)
	var last time.Time
	chunks, done := 0, false
	for {
		line, err := rd.ReadBytes('\n')
		now := time.Now()
		if len(line) > 0 {
			l := bytes.TrimSpace(line)
			if data, ok := bytes.CutPrefix(l, []byte("data:")); ok {
				data = bytes.TrimSpace(data)
				if bytes.Equal(data, []byte("[DONE]")) {
					done = true
				} else {
					var c streamChunk
					if jerr := json.Unmarshal(data, &c); jerr != nil {
						o.Error = "bad SSE chunk: " + jerr.Error()
						break
					}
					if len(c.Choices) > 0 && c.Choices[0].Text != "" {
						if chunks == 0 {
							o.TTFTMs = ms(now.Sub(sent))
						} else {
							o.ITLMs = append(o.ITLMs, ms(now.Sub(last)))
						}
						last = now
						chunks++
					}
					if c.Usage != nil {
						o.PromptTokens = c.Usage.PromptTokens
						o.OutputTokens = c.Usage.CompletionTokens
						if c.Usage.PromptTokensDetails != nil {
							o.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
						}
					}
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				o.Error = "reading the stream: " + err.Error()
			}
			break
		}
	}
	o.E2EMs = ms(time.Since(sent))
	if o.OutputTokens == 0 {
		o.OutputTokens = chunks
	}
	if o.Error == "" && !done {
		o.Error = "stream ended without data: [DONE]"
	}
}
