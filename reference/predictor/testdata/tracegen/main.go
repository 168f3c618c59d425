// Command tracegen collects a latency trace from a fake vLLM fleet (fakes/fleet + fakes/vllm) for
// evaluating the predictor: it sends streaming completions at a varying Poisson rate to randomly
// chosen members, records each request's features at dispatch the way an EPP sees them (waiting,
// running and KV use from a 50 ms /metrics scrape; prompt tokens it dispatched to the member whose
// first token has not arrived) and the measured TTFT and TPOT, and writes one upstream
// TrainingEntry JSON object per line.
//
//	go run ./reference/predictor/testdata/tracegen -n 1500 -seed 1 -out reference/predictor/testdata/fleet-trace.jsonl
//
// input_token_length is the server's usage.prompt_tokens; prefix_cache_score is
// usage.prompt_tokens_details.cached_tokens / prompt_tokens (known after the fact here; an EPP
// estimates it from its prefix index before dispatch).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/reference/predictor"
)

type memberState struct {
	mu                  sync.Mutex
	waiting, running    int
	kv                  float64
	prefillTokensInFlit int64
}

func main() {
	n := flag.Int("n", 1500, "requests to send")
	seed := flag.Uint64("seed", 1, "random seed (arrivals, prompts, routing, the fleet's jitter)")
	members := flag.Int("members", 4, "fleet size")
	out := flag.String("out", "fleet-trace.jsonl", "output JSONL path")
	flag.Parse()
	if err := run(*n, *seed, *members, *out); err != nil {
		fmt.Fprintf(os.Stderr, "tracegen (seed %d): %v\n", *seed, err)
		os.Exit(1)
	}
}

func run(n int, seed uint64, count int, out string) error {
	base := vllm.DefaultConfig()
	base.Model = "trace-model"
	base.MaxNumSeqs = 8
	base.MaxModelLen = 16384
	base.EnableKVCache = true
	base.EnablePromptTokensDetails = true // the trace records cached tokens
	base.Seed = int64(seed)
	base.Latency = vllm.Latency{
		PrefillOverhead:         vllm.Duration(15 * time.Millisecond),
		PrefillTimePerToken:     vllm.Duration(150 * time.Microsecond),
		PrefillTimeStdDev:       vllm.Duration(4 * time.Millisecond),
		InterTokenLatency:       vllm.Duration(12 * time.Millisecond),
		InterTokenLatencyStdDev: vllm.Duration(2 * time.Millisecond),
		TimeFactorUnderLoad:     2.0,
	}
	f, err := fleet.Start(fleet.Options{Count: count, Base: base, Logger: slog.New(slog.DiscardHandler),
		PerServer: func(i int, c *vllm.Config) { c.KVCacheSize = 1024 + 768*i; c.Seed = int64(seed) + int64(i) }})
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.WaitHealthy(ctx); err != nil {
		return err
	}
	urls := make([]string, count)
	states := make([]*memberState, count)
	for i, m := range f.Members() {
		urls[i] = fmt.Sprintf("http://%s:%d", m.Host, m.Port)
		states[i] = &memberState{}
		go scrape(ctx, urls[i], states[i])
	}
	time.Sleep(200 * time.Millisecond)

	rng := rand.New(rand.NewPCG(seed, 99))
	systemPrompts := make([]string, 16)
	for i := range systemPrompts {
		systemPrompts[i] = words(rng, 100+rng.IntN(1400))
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	fo, err := os.Create(out)
	if err != nil {
		return err
	}
	defer fo.Close()
	w := bufio.NewWriter(fo)
	var wmu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	failures := 0
	for i := range n {
		// Rate ramps 4 → 40 req/s and back, twice, so queues build up and drain.
		phase := float64(i) / float64(n) * 4 * math.Pi
		rate := 4 + 36*(1-math.Cos(phase))/2
		time.Sleep(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		mi := rng.IntN(count)
		prompt := words(rng, 20+rng.IntN(400))
		if rng.Float64() < 0.6 {
			prompt = systemPrompts[rng.IntN(len(systemPrompts))] + " " + prompt
		}
		maxTokens := 10 + rng.IntN(120)
		st := states[mi]
		st.mu.Lock()
		est := int64(len(strings.Fields(prompt)))
		e := predictor.TrainingEntry{KVCachePercentage: st.kv, NumRequestWaiting: st.waiting, NumRequestRunning: st.running,
			PrefillTokensInFlight: st.prefillTokensInFlit, Timestamp: time.Now().UTC()}
		st.prefillTokensInFlit += est
		st.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			firstSeen := false
			release := func() {
				if !firstSeen {
					firstSeen = true
					st.mu.Lock()
					st.prefillTokensInFlit -= est
					st.mu.Unlock()
				}
			}
			defer release()
			ttft, tpot, prompt, cached, err := send(ctx, client, urls[mi], prompt, maxTokens, release)
			if err != nil {
				wmu.Lock()
				failures++
				wmu.Unlock()
				return
			}
			e.InputTokenLength = prompt
			if prompt > 0 {
				e.PrefixCacheScore = math.Min(1, float64(cached)/float64(prompt))
			}
			e.ActualTTFT, e.ActualTPOT = ttft, tpot
			b, _ := json.Marshal(e)
			wmu.Lock()
			_, _ = w.Write(append(b, '\n'))
			wmu.Unlock()
		}()
	}
	wg.Wait()
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "tracegen: %d requests (%d failed) in %v, seed %d → %s\n", n, failures, time.Since(start).Round(time.Second), seed, out)
	return nil
}

var vocabulary = strings.Fields("the a of to and in is for on with as by at from that this it be are was model token cache prefix queue decode prefill latency gateway endpoint picker request server cluster pool route score filter")

func words(rng *rand.Rand, k int) string {
	var b strings.Builder
	for i := range k {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
		b.WriteString(fmt.Sprint(rng.IntN(50)))
	}
	return b.String()
}

// scrape polls the member's /metrics every 50 ms like an EPP's data layer.
func scrape(ctx context.Context, url string, st *memberState) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			continue
		}
		gauge := func(name string) float64 {
			for _, m := range fams[name].GetMetric() {
				return m.GetGauge().GetValue()
			}
			return 0
		}
		st.mu.Lock()
		st.waiting = int(gauge(vllm.MetricWaiting))
		st.running = int(gauge(vllm.MetricRunning))
		st.kv = math.Max(0, math.Min(1, gauge(vllm.MetricKVCacheUsage)))
		st.mu.Unlock()
	}
}

// send streams one completion; it returns TTFT and TPOT in ms and the usage's prompt and cached
// token counts. first is called when the first token arrives.
func send(ctx context.Context, c *http.Client, url, prompt string, maxTokens int, first func()) (ttft, tpot float64, promptTokens, cached int, err error) {
	body, _ := json.Marshal(map[string]any{"model": "trace-model", "prompt": prompt, "max_tokens": maxTokens,
		"stream": true, "stream_options": map[string]bool{"include_usage": true}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	var tFirst, tEnd time.Time
	completion := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *vllm.Usage `json:"usage"`
		}
		if json.Unmarshal([]byte(data), &ev) != nil {
			continue
		}
		if len(ev.Choices) > 0 && ev.Choices[0].Text != "" {
			now := time.Now()
			if tFirst.IsZero() {
				tFirst = now
				first()
			}
			tEnd = now
		}
		if ev.Usage != nil {
			promptTokens, completion, cached = ev.Usage.PromptTokens, ev.Usage.CompletionTokens, ev.Usage.Cached()
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, 0, err
	}
	if tFirst.IsZero() {
		return 0, 0, 0, 0, fmt.Errorf("no token streamed")
	}
	ttft = float64(tFirst.Sub(t0).Microseconds()) / 1000
	if completion > 1 {
		tpot = float64(tEnd.Sub(tFirst).Microseconds()) / 1000 / float64(completion-1)
	}
	return ttft, tpot, promptTokens, cached, nil
}
