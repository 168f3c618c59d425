package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eppkit/eppkit/internal/procstat"
	"github.com/eppkit/eppkit/internal/promscrape"
)

// Fake vLLM metric names the monitor reads (vLLM's names; fakes/vllm/metrics.go).
const (
	metricWaiting      = "vllm:num_requests_waiting"
	metricRunning      = "vllm:num_requests_running"
	metricPrefixQuery  = "vllm:prefix_cache_queries_total"
	metricPrefixHits   = "vllm:prefix_cache_hits_total"
	metricKVCacheUsage = "vllm:kv_cache_usage_perc"
	metricTTFT         = "vllm:time_to_first_token_seconds"
	metricQueueTime    = "vllm:request_queue_time_seconds"
)

// EndpointSample is one scrape of one endpoint's /metrics.
type EndpointSample struct {
	// Waiting and Running are vllm:num_requests_waiting / _running; KV is
	// vllm:kv_cache_usage_perc in [0,1].
	Waiting float64 `json:"waiting"`
	Running float64 `json:"running"`
	KV      float64 `json:"kv"`
	// PrefixQueries and PrefixHits are the prefix cache counters (tokens).
	PrefixQueries float64 `json:"prefix_queries"`
	PrefixHits    float64 `json:"prefix_hits"`
	// TTFTSum and TTFTCount are the endpoint's own TTFT histogram (vllm:time_to_first_token_seconds:
	// queue wait + prefill in its engine, s), QueueSum its queue-time histogram's sum (s); they are
	// 0 when the fake runs gauge-only.
	TTFTSum   float64 `json:"ttft_sum"`
	TTFTCount float64 `json:"ttft_count"`
	QueueSum  float64 `json:"queue_sum"`
	// OK is false when the scrape failed.
	OK bool `json:"ok"`
}

// Sample is one monitor tick.
type Sample struct {
	// AtMs is the time from the start of the run.
	AtMs float64 `json:"at_ms"`
	// CPUBusy and CPUTotal are the machine's cumulative busy and total jiffies from /proc/stat
	// (busy = total − idle − iowait), for CPU use between two samples.
	CPUBusy  uint64 `json:"cpu_busy"`
	CPUTotal uint64 `json:"cpu_total"`
	// SelfCPU is this process's cumulative user + system CPU time (load generator, gateway and
	// fleet run in it; the EPP does not), in jiffies like CPUTotal.
	SelfCPU uint64 `json:"self_cpu"`
	// Endpoints maps an endpoint name to its scrape.
	Endpoints map[string]EndpointSample `json:"endpoints"`
}

// Monitor samples machine CPU (/proc/stat) and each endpoint's Prometheus metrics at an
// interval during a run.
type Monitor struct {
	// Endpoints maps endpoint names (x-inference-pod) to their metrics URLs.
	Endpoints map[string]string
	// Interval between samples; default 500 ms.
	Interval time.Duration

	mu      sync.Mutex
	samples []Sample
	start   time.Time
	cancel  context.CancelFunc
	done    chan struct{}
	client  *http.Client
}

// Start begins sampling; start is the run's time origin.
func (m *Monitor) Start(ctx context.Context, start time.Time) {
	if m.Interval <= 0 {
		m.Interval = 500 * time.Millisecond
	}
	m.client = &http.Client{Timeout: 2 * time.Second}
	m.start = start
	ctx, m.cancel = context.WithCancel(ctx)
	m.done = make(chan struct{})
	go func() {
		defer close(m.done)
		t := time.NewTicker(m.Interval)
		defer t.Stop()
		for {
			m.sample(ctx, start)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends sampling, takes a last sample and returns every sample.
func (m *Monitor) Stop() []Sample {
	if m.cancel == nil {
		return nil
	}
	m.cancel()
	<-m.done
	// A last sample after every request ended, so counters and histograms cover them all.
	m.sample(context.Background(), m.start)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.samples
}

func (m *Monitor) sample(ctx context.Context, start time.Time) {
	s := Sample{AtMs: ms(time.Since(start)), Endpoints: map[string]EndpointSample{}}
	s.CPUBusy, s.CPUTotal, _ = ReadProcStat()
	s.SelfCPU, _ = readSelfCPU()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for name, url := range m.Endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			es := scrape(ctx, m.client, url)
			mu.Lock()
			s.Endpoints[name] = es
			mu.Unlock()
		}()
	}
	wg.Wait()
	m.mu.Lock()
	m.samples = append(m.samples, s)
	m.mu.Unlock()
}

// scrape reads the monitor's metrics from a Prometheus text endpoint (internal/promscrape);
// series are summed over labels. A failed scrape is a sample with OK false.
func scrape(ctx context.Context, c *http.Client, url string) EndpointSample {
	fams, err := promscrape.Get(ctx, c, url)
	if err != nil {
		return EndpointSample{}
	}
	es := EndpointSample{Waiting: fams.Sum(metricWaiting), Running: fams.Sum(metricRunning), KV: fams.Sum(metricKVCacheUsage),
		PrefixQueries: fams.Sum(metricPrefixQuery), PrefixHits: fams.Sum(metricPrefixHits), OK: true}
	es.TTFTCount, es.TTFTSum = fams.Histogram(metricTTFT)
	_, es.QueueSum = fams.Histogram(metricQueueTime)
	return es
}

// ReadProcStat returns the machine's cumulative busy and total CPU jiffies from the "cpu" line
// of /proc/stat (busy = total − idle − iowait; steal and guest are counted as in the total).
func ReadProcStat() (busy, total uint64, err error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cpu ") {
			continue
		}
		return parseCPULine(line)
	}
	return 0, 0, fmt.Errorf("/proc/stat: no cpu line")
}

// parseCPULine parses "cpu user nice system idle iowait irq softirq steal guest guest_nice".
// guest and guest_nice are already inside user and nice, so they are not added again.
func parseCPULine(line string) (busy, total uint64, err error) {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: malformed cpu line %q", line)
	}
	var v []uint64
	for _, s := range f[1:] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: malformed cpu line %q: %v", line, err)
		}
		v = append(v, n)
	}
	for i, n := range v {
		if i >= 8 { // guest, guest_nice
			break
		}
		total += n
	}
	idle := v[3]
	if len(v) > 4 {
		idle += v[4]
	}
	return total - idle, total, nil
}

// readSelfCPU returns utime + stime of this process from /proc/self/stat (clock ticks, the unit of
// /proc/stat's jiffies).
func readSelfCPU() (uint64, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	return parseSelfStat(string(b))
}

// parseSelfStat reads fields 14 (utime) and 15 (stime) of a /proc/<pid>/stat line; the command
// name in parentheses may contain spaces, so fields are counted after the last ')'.
func parseSelfStat(line string) (uint64, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/self/stat: malformed %q", line)
	}
	f := strings.Fields(line[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/self/stat: malformed %q", line)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/self/stat: malformed %q", line)
	}
	return u + s, nil
}

// LoadAverage returns the 1-, 5- and 15-minute load average as /proc/loadavg writes it ("" when
// unreadable; internal/procstat).
func LoadAverage() string { return procstat.LoadAverageString() }
