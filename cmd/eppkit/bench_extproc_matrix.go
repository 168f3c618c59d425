package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/eppkit/eppkit/conformance/apiserver"
	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/internal/toolcache"
)

// Targets of the picker-overhead matrix (`eppkit bench extproc --targets ...`).
const (
	matrixTargetReference = "reference"
	matrixTargetUpstream  = "upstream"
	// matrixTargetNull is the floor: `eppkit bench null-epp`, which answers the protocol and
	// decides nothing (bench_extproc_null.go).
	matrixTargetNull = "null"
)

// matrixOptions configure a picker-overhead matrix: every target × endpoint count × prompt size,
// each cell one extprocBenchOptions run against an EPP this command starts.
type matrixOptions struct {
	Targets         []string
	EndpointCounts  []int
	PromptSizes     []int
	RefreshInterval time.Duration
	UpstreamEPP     string // path of the upstream EPP binary ("" = the tools cache's gie epp)
	LogDir          string // where the EPP logs go
	Output          string // JSON report file ("" = none)
	Settle          time.Duration
	Bench           extprocBenchOptions // per-cell load (rate or concurrency, duration, warm-up, seed)
}

// matrixCell is one measured cell.
type matrixCell struct {
	Target      string              `json:"target"`
	Endpoints   int                 `json:"endpoints"`
	PromptBytes int                 `json:"prompt_bytes"`
	Report      *extprocBenchReport `json:"report,omitempty"`
	Error       string              `json:"error,omitempty"`
}

// matrixRatio compares the reference with the upstream EPP in one (endpoints, prompt) cell:
// reference ÷ upstream for each figure.
type matrixRatio struct {
	Endpoints          int     `json:"endpoints"`
	PromptBytes        int     `json:"prompt_bytes"`
	DecisionsPerSecond float64 `json:"decisions_per_second"`
	P50                float64 `json:"latency_p50"`
	P99                float64 `json:"latency_p99"`
	CPUPerDecision     float64 `json:"epp_cpu_per_decision"`
}

// matrixOverFloor is one EPP cell read against the null target's cell of the same size: the
// EPP's figure minus the floor's. The latency fields are differences of percentiles (p50 − p50),
// not percentiles of per-decision differences: a guide to what the decision adds, not a bound.
type matrixOverFloor struct {
	Target         string  `json:"target"`
	Endpoints      int     `json:"endpoints"`
	PromptBytes    int     `json:"prompt_bytes"`
	P50Ms          float64 `json:"latency_p50_ms"`
	P99Ms          float64 `json:"latency_p99_ms"`
	CPUPerDecision float64 `json:"epp_cpu_per_decision_ms"`
}

// matrixReport is the JSON result of a matrix run.
type matrixReport struct {
	Started                 time.Time         `json:"started"`
	Mode                    string            `json:"mode"`
	Concurrency             int               `json:"concurrency,omitempty"`
	TargetRate              float64           `json:"target_rate,omitempty"`
	DurationSeconds         float64           `json:"duration_seconds"`
	RefreshIntervalSeconds  float64           `json:"refresh_metrics_interval_seconds"`
	Cells                   []matrixCell      `json:"cells"`
	RatiosReferenceUpstream []matrixRatio     `json:"ratios_reference_over_upstream,omitempty"`
	OverNullFloor           []matrixOverFloor `json:"over_null_floor,omitempty"`
}

func parseIntList(flag, s string, lo int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < lo {
			return nil, fmt.Errorf("%s: %q is not an integer ≥ %d", flag, f, lo)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: empty list", flag)
	}
	return out, nil
}

func validateMatrix(m *matrixOptions) error {
	seen := map[string]bool{}
	for _, t := range m.Targets {
		if t != matrixTargetReference && t != matrixTargetUpstream && t != matrixTargetNull {
			return fmt.Errorf("--targets: %q is not %s, %s or %s", t, matrixTargetReference, matrixTargetUpstream, matrixTargetNull)
		}
		if seen[t] {
			return fmt.Errorf("--targets: %q listed twice", t)
		}
		seen[t] = true
	}
	for _, n := range m.EndpointCounts {
		if n > maxMatrixEndpoints {
			return fmt.Errorf("--endpoint-counts: %d is more than %d", n, maxMatrixEndpoints)
		}
	}
	if m.RefreshInterval <= 0 {
		return fmt.Errorf("--refresh-metrics-interval must be positive, got %v", m.RefreshInterval)
	}
	if m.Settle < 0 {
		return fmt.Errorf("--settle must not be negative, got %v", m.Settle)
	}
	if seen[matrixTargetUpstream] && m.UpstreamEPP == "" {
		p, err := toolcache.Path("gie", "epp")
		if err != nil {
			return fmt.Errorf("--targets upstream needs the upstream EPP binary (--upstream-epp, or `eppkit tools build gie`): %w", err)
		}
		m.UpstreamEPP = p
	}
	return nil
}

// maxMatrixEndpoints bounds --endpoint-counts: the metrics servers take loopback addresses
// 127.1.x.y (x < 40, y in 1..250).
const maxMatrixEndpoints = 10000

// matrixAddr is the loopback address of metrics server i: 127.1.<i/250>.<i%250+1>.
func matrixAddr(i int) string { return fmt.Sprintf("127.1.%d.%d", i/250, i%250+1) }

// metricsFleet serves a fixed vLLM /metrics page on each of N loopback addresses, one port
// shared by all (as the pods of an InferencePool). The pages are rendered once by fake vLLM
// servers in gauge-only mode with pinned metrics (queue i%5, running i%7, KV usage (i%10)/10), so
// they are exactly what `eppkit fake-vllm --gauge-only --fake-metrics ...` serves, without a model
// server behind them: the bench measures the picker, not the fleet. Each page is served by a
// pageServer, whose whole answer is precomputed, because the fleet shares the machine with the
// EPP under test (100 endpoints scraped every 50 ms is 2,000 requests/s).
type metricsFleet struct {
	Addrs []string // "ip:port"
	srvs  []*pageServer
}

func startMetricsFleet(n int) (*metricsFleet, error) {
	pages, err := renderMetricsPages(n)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		f, err := listenMetricsFleet(pages)
		if err == nil {
			return f, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("metrics servers on 127.1.x.y: %w", lastErr)
}

func listenMetricsFleet(pages [][]byte) (*metricsFleet, error) {
	first, err := net.Listen("tcp", net.JoinHostPort(matrixAddr(0), "0"))
	if err != nil {
		return nil, err
	}
	port := first.Addr().(*net.TCPAddr).Port
	f := &metricsFleet{}
	lns := []net.Listener{first}
	for i := 1; i < len(pages); i++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(matrixAddr(i), strconv.Itoa(port)))
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	for i, ln := range lns {
		srv := newPageServer(ln, "/metrics", "text/plain; version=0.0.4; charset=utf-8", pages[i])
		f.srvs = append(f.srvs, srv)
		f.Addrs = append(f.Addrs, ln.Addr().String())
		go srv.serve()
	}
	return f, nil
}

func (f *metricsFleet) Close() {
	for _, s := range f.srvs {
		s.close()
	}
}

// pageServer answers every HTTP/1.1 GET of one path with one fixed page and anything else with
// 404, on keep-alive connections, writing a precomputed answer (status line, Content-Type,
// Content-Length, body) in one write. It reads request lines and headers (a request body, which
// no scraper sends, is skipped by its Content-Length) and honours "Connection: close". It is a
// load fixture, not a general HTTP server.
type pageServer struct {
	ln            net.Listener
	pagePath      string
	page, missing []byte

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func newPageServer(ln net.Listener, path, contentType string, page []byte) *pageServer {
	answer := func(status, ctype string, body []byte) []byte {
		return append(fmt.Appendf(nil, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", status, ctype, len(body)), body...)
	}
	return &pageServer{ln: ln, page: answer("200 OK", contentType, page),
		missing: answer("404 Not Found", "text/plain; charset=utf-8", []byte("404 page not found\n")),
		conns:   map[net.Conn]struct{}{}, pagePath: path}
}

func (p *pageServer) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go p.handle(c)
	}
}

func (p *pageServer) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
}

func (p *pageServer) handle(c net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		_ = c.Close()
	}()
	br := bufio.NewReaderSize(c, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		// "GET /metrics HTTP/1.1"
		fields := bytes.Fields(line)
		if len(fields) != 3 {
			return
		}
		target := fields[1]
		if i := bytes.IndexByte(target, '?'); i >= 0 {
			target = target[:i]
		}
		ok := string(fields[0]) == http.MethodGet && string(target) == p.pagePath
		closeAfter, bodyLen := string(fields[2]) == "HTTP/1.0", 0
		for {
			h, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			h = bytes.TrimRight(h, "\r\n")
			if len(h) == 0 {
				break
			}
			name, value, _ := bytes.Cut(h, []byte(":"))
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Connection")):
				closeAfter = bytes.EqualFold(value, []byte("close"))
			case bytes.EqualFold(name, []byte("Content-Length")):
				if bodyLen, err = strconv.Atoi(string(value)); err != nil || bodyLen < 0 {
					return
				}
			}
		}
		if _, err := br.Discard(bodyLen); err != nil {
			return
		}
		answer := p.page
		if !ok {
			answer = p.missing
		}
		if _, err := c.Write(answer); err != nil || closeAfter {
			return
		}
	}
}

// renderMetricsPages renders the gauge-only /metrics page of n fake vLLM servers with pinned
// metrics (see metricsFleet).
func renderMetricsPages(n int) ([][]byte, error) {
	pages := make([][]byte, n)
	for i := range pages {
		cfg := vllm.DefaultConfig()
		cfg.Model = "meta-llama/Llama-3.1-8B-Instruct"
		cfg.GaugeOnly = true
		cfg.PodName = fmt.Sprintf("bench-%d", i)
		cfg.FakeMetrics = &vllm.FakeMetrics{WaitingRequests: int64(i % 5), RunningRequests: int64(i % 7), KVCacheUsage: float64(i%10) / 10}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("fake vLLM config: %w", err)
		}
		s, err := vllm.NewServer(cfg, 0, nil, vllm.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		_ = s.Close()
		if rec.Code != http.StatusOK {
			return nil, fmt.Errorf("fake vLLM /metrics: HTTP %d", rec.Code)
		}
		pages[i] = rec.Body.Bytes()
	}
	return pages, nil
}

// eppProcess is one EPP started for a row of the matrix.
type eppProcess struct {
	cmd         *exec.Cmd
	grpcAddr    string
	metricsURL  string
	readyMetric string // the EPP's own gauge of ready endpoints
	done        chan struct{}
	waitErr     error
}

func (p *eppProcess) stop() {
	if p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func startEPPProcess(name string, args, env []string, logPath string) (*eppProcess, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &eppProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p, nil
}

// waitReady waits until the EPP's own metrics report n ready endpoints.
func (p *eppProcess) waitReady(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("the EPP exited: %v", p.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		v, err := scrapeGauge(ctx, p.metricsURL, p.readyMetric)
		if err != nil {
			last = err.Error()
			continue
		}
		last = fmt.Sprintf("%s = %v", p.readyMetric, v)
		if int(v) == n {
			return nil
		}
	}
	return fmt.Errorf("not ready after %v: %s", timeout, last)
}

// scrapeGauge returns the first sample of family name in the text exposition at url.
func scrapeGauge(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != ' ' && line[len(name)] != '{') {
			continue
		}
		rest := line[len(name):]
		if strings.HasPrefix(rest, "{") {
			rest = rest[strings.LastIndexByte(rest, '}')+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		return strconv.ParseFloat(f[0], 64)
	}
	return 0, fmt.Errorf("%s not in %s", name, url)
}

// runMatrix runs every cell and prints one table; w gets progress lines and the table.
func runMatrix(ctx context.Context, w io.Writer, m matrixOptions) (*matrixReport, error) {
	if err := validateMatrix(&m); err != nil {
		return nil, err
	}
	if m.LogDir == "" {
		d, err := os.MkdirTemp("", "eppkit-bench-extproc-")
		if err != nil {
			return nil, err
		}
		m.LogDir = d
	} else if err := os.MkdirAll(m.LogDir, 0o755); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	rep := &matrixReport{Started: time.Now().UTC(), DurationSeconds: m.Bench.Duration.Seconds(),
		RefreshIntervalSeconds: m.RefreshInterval.Seconds()}
	if m.Bench.Rate > 0 {
		rep.Mode, rep.TargetRate = "open-"+m.Bench.Arrival, m.Bench.Rate
	} else {
		rep.Mode, rep.Concurrency = "closed", m.Bench.Concurrency
	}
	fmt.Fprintf(w, "picker overhead: targets %v, endpoints %v, prompts %v bytes, %s, %v per cell (+%v warm-up), metrics refresh %v; logs in %s\n",
		m.Targets, m.EndpointCounts, m.PromptSizes, loadDescription(m.Bench), m.Bench.Duration, m.Bench.Warmup, m.RefreshInterval, m.LogDir)

	var cp *apiserver.ControlPlane
	defer func() {
		if cp != nil {
			_ = cp.Stop()
		}
	}()
	for _, n := range m.EndpointCounts {
		fleet, err := startMetricsFleet(n)
		if err != nil {
			return nil, err
		}
		for _, target := range m.Targets {
			if target == matrixTargetUpstream && cp == nil {
				fmt.Fprintf(w, "starting kube-apiserver + etcd for the upstream EPP's InferencePool discovery…\n")
				ctrllog.SetLogger(logr.Discard()) // envtest's client logs through it; nothing to say here
				cp, err = apiserver.StartControlPlane(ctx, apiserver.ControlPlaneOptions{Dir: filepath.Join(m.LogDir, "apiserver"), KeepDir: true})
				if err != nil {
					fleet.Close()
					return nil, fmt.Errorf("upstream target: %w", err)
				}
			}
			cells, err := runMatrixRow(ctx, w, m, self, cp, target, fleet)
			rep.Cells = append(rep.Cells, cells...)
			if err != nil && ctx.Err() != nil {
				fleet.Close()
				return nil, ctx.Err()
			}
		}
		fleet.Close()
	}
	rep.RatiosReferenceUpstream = matrixRatios(rep.Cells)
	rep.OverNullFloor = matrixOverNull(rep.Cells)
	printMatrix(w, rep)
	if m.Output != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(m.Output, append(b, '\n'), 0o644); err != nil {
			return nil, fmt.Errorf("--output: %w", err)
		}
		fmt.Fprintf(w, "wrote %s\n", m.Output)
	}
	return rep, nil
}

func loadDescription(o extprocBenchOptions) string {
	if o.Rate > 0 {
		return fmt.Sprintf("open loop %.0f/s (%s)", o.Rate, o.Arrival)
	}
	return fmt.Sprintf("closed loop, concurrency %d", o.Concurrency)
}

// runMatrixRow starts one target's EPP on the fleet and measures every prompt size against it.
// A start failure becomes an error cell per prompt size.
func runMatrixRow(ctx context.Context, w io.Writer, m matrixOptions, self string, cp *apiserver.ControlPlane,
	target string, fleet *metricsFleet) ([]matrixCell, error) {
	n := len(fleet.Addrs)
	fail := func(err error) ([]matrixCell, error) {
		fmt.Fprintf(w, "  %s, %d endpoints: %v\n", target, n, err)
		var cells []matrixCell
		for _, size := range m.PromptSizes {
			cells = append(cells, matrixCell{Target: target, Endpoints: n, PromptBytes: size, Error: err.Error()})
		}
		return cells, err
	}
	ports, err := freePortsFor(3)
	if err != nil {
		return fail(err)
	}
	grpcPort, healthPort, metricsPort := ports[0], ports[1], ports[2]
	logPath := filepath.Join(m.LogDir, fmt.Sprintf("%s-%d.log", target, n))
	var p *eppProcess
	switch target {
	case matrixTargetReference:
		stale := max(time.Second, 4*m.RefreshInterval)
		p, err = startEPPProcess(self, []string{"reference-epp", "--endpoints", strings.Join(fleet.Addrs, ","),
			"--grpc-port", strconv.Itoa(grpcPort), "--grpc-health-port", strconv.Itoa(healthPort),
			"--metrics-port", strconv.Itoa(metricsPort), "--bind-address", "127.0.0.1",
			"--refresh-metrics-interval", m.RefreshInterval.String(), "--stale-threshold", stale.String(),
			"--log-level", "warn"}, nil, logPath)
		if p != nil {
			p.readyMetric = "eppkit_epp_pool_ready_endpoints"
		}
	case matrixTargetUpstream:
		pool := fmt.Sprintf("bench-%d", n)
		fmt.Fprintf(w, "  creating InferencePool %s with %d Pods…\n", pool, n)
		if _, err := apiserver.NewPool(ctx, cp, apiserver.Options{PoolName: pool, Endpoints: fleet.Addrs}); err != nil {
			return fail(fmt.Errorf("creating the InferencePool: %w", err))
		}
		// Flags as `make conformance-upstream`; the kubeconfig comes from $KUBECONFIG (v1.5.0 has
		// no --kubeconfig flag). The staleness threshold keeps its 2s default unless the refresh
		// interval needs more.
		stale := max(2*time.Second, 4*m.RefreshInterval)
		p, err = startEPPProcess(m.UpstreamEPP, []string{"--pool-name", pool, "--pool-namespace", apiserver.DefaultPoolNamespace,
			"--secure-serving=false", "--metrics-endpoint-auth=false", "--tracing=false",
			"--grpc-port", strconv.Itoa(grpcPort), "--grpc-health-port", strconv.Itoa(healthPort),
			"--metrics-port", strconv.Itoa(metricsPort), "--refresh-metrics-interval", m.RefreshInterval.String(),
			"--metrics-staleness-threshold", stale.String()}, []string{"KUBECONFIG=" + cp.KubeconfigPath}, logPath)
		if p != nil {
			p.readyMetric = "inference_pool_ready_pods"
		}
	case matrixTargetNull:
		p, err = startEPPProcess(self, []string{"bench", "null-epp", "--endpoints", strings.Join(fleet.Addrs, ","),
			"--grpc-port", strconv.Itoa(grpcPort), "--metrics-port", strconv.Itoa(metricsPort), "--bind-address", "127.0.0.1"}, nil, logPath)
		if p != nil {
			p.readyMetric = nullEPPReadyMetric
		}
	}
	if err != nil {
		return fail(err)
	}
	defer p.stop()
	p.grpcAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort))
	p.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	if err := p.waitReady(ctx, n, 3*time.Minute); err != nil {
		return fail(fmt.Errorf("%w (log: %s)", err, logPath))
	}
	// Let every endpoint be scraped at least twice before measuring.
	if err := sleepCtx(ctx, m.Settle+2*m.RefreshInterval); err != nil {
		return fail(err)
	}
	var cells []matrixCell
	for _, size := range m.PromptSizes {
		o := m.Bench
		o.EPP, o.PromptBytes, o.PID = p.grpcAddr, size, p.cmd.Process.Pid
		r, err := runExtprocBench(ctx, o)
		c := matrixCell{Target: target, Endpoints: n, PromptBytes: size, Report: r}
		if err == nil && r != nil {
			err = errNoDecision(r)
		}
		if err != nil {
			c.Error = err.Error()
		}
		cells = append(cells, c)
		fmt.Fprintf(w, "  %s\n", cellLine(c))
		if ctx.Err() != nil {
			return cells, ctx.Err()
		}
	}
	return cells, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func freePortsFor(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func cellLine(c matrixCell) string {
	head := fmt.Sprintf("%-9s %5d endpoints %6d B", c.Target, c.Endpoints, c.PromptBytes)
	if c.Error != "" {
		return head + "  error: " + c.Error
	}
	r := c.Report
	return fmt.Sprintf("%s  %8.1f/s  p50 %7.3f  p99 %7.3f  p99.9 %7.3f ms  errors %d  EPP CPU %.3f ms/decision  load %.1f",
		head, r.DecisionsPerSec, r.LatencyMs.P50, r.LatencyMs.P99, r.LatencyMs.P999, r.Errors, r.EPPCPUPerDecisionMs, r.LoadAverage)
}

// matrixRatios pairs reference and upstream cells of equal size.
func matrixRatios(cells []matrixCell) []matrixRatio {
	type key struct{ n, size int }
	ref, up := map[key]*extprocBenchReport{}, map[key]*extprocBenchReport{}
	var order []key
	for _, c := range cells {
		if c.Report == nil || c.Error != "" {
			continue
		}
		k := key{c.Endpoints, c.PromptBytes}
		switch c.Target {
		case matrixTargetReference:
			ref[k] = c.Report
			order = append(order, k)
		case matrixTargetUpstream:
			up[k] = c.Report
		}
	}
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	var out []matrixRatio
	for _, k := range order {
		r, u := ref[k], up[k]
		if u == nil {
			continue
		}
		out = append(out, matrixRatio{Endpoints: k.n, PromptBytes: k.size,
			DecisionsPerSecond: div(r.DecisionsPerSec, u.DecisionsPerSec),
			P50:                div(r.LatencyMs.P50, u.LatencyMs.P50), P99: div(r.LatencyMs.P99, u.LatencyMs.P99),
			CPUPerDecision: div(r.EPPCPUPerDecisionMs, u.EPPCPUPerDecisionMs)})
	}
	return out
}

// matrixOverNull reads every non-null cell against the null cell of equal size, when there is one.
func matrixOverNull(cells []matrixCell) []matrixOverFloor {
	type key struct{ n, size int }
	floor := map[key]*extprocBenchReport{}
	for _, c := range cells {
		if c.Target == matrixTargetNull && c.Report != nil && c.Error == "" {
			floor[key{c.Endpoints, c.PromptBytes}] = c.Report
		}
	}
	var out []matrixOverFloor
	for _, c := range cells {
		f := floor[key{c.Endpoints, c.PromptBytes}]
		if c.Target == matrixTargetNull || c.Report == nil || c.Error != "" || f == nil {
			continue
		}
		out = append(out, matrixOverFloor{Target: c.Target, Endpoints: c.Endpoints, PromptBytes: c.PromptBytes,
			P50Ms: c.Report.LatencyMs.P50 - f.LatencyMs.P50, P99Ms: c.Report.LatencyMs.P99 - f.LatencyMs.P99,
			CPUPerDecision: c.Report.EPPCPUPerDecisionMs - f.EPPCPUPerDecisionMs})
	}
	return out
}

func printMatrix(w io.Writer, rep *matrixReport) {
	fmt.Fprintf(w, "\n%-9s %9s %8s %10s %9s %9s %9s %7s %12s %12s %6s\n", "target", "endpoints", "prompt", "decisions/s",
		"p50 ms", "p99 ms", "p99.9 ms", "errors", "EPP CPU ms/d", "drv CPU ms/d", "load")
	for _, c := range rep.Cells {
		if c.Error != "" || c.Report == nil {
			fmt.Fprintf(w, "%-9s %9d %8d  error: %s\n", c.Target, c.Endpoints, c.PromptBytes, c.Error)
			continue
		}
		r := c.Report
		fmt.Fprintf(w, "%-9s %9d %8d %10.1f %9.3f %9.3f %9.3f %7d %12.3f %12.3f %6.1f\n", c.Target, c.Endpoints, c.PromptBytes,
			r.DecisionsPerSec, r.LatencyMs.P50, r.LatencyMs.P99, r.LatencyMs.P999, r.Errors, r.EPPCPUPerDecisionMs,
			r.ClientCPUPerDecisionMs, r.LoadAverage)
	}
	if len(rep.RatiosReferenceUpstream) > 0 {
		fmt.Fprintf(w, "\nreference ÷ upstream  %9s %8s %12s %9s %9s %14s\n", "endpoints", "prompt", "decisions/s", "p50", "p99", "CPU/decision")
		for _, r := range rep.RatiosReferenceUpstream {
			fmt.Fprintf(w, "%-20s  %9d %8d %12.2f %9.2f %9.2f %14.2f\n", "", r.Endpoints, r.PromptBytes, r.DecisionsPerSecond, r.P50, r.P99, r.CPUPerDecision)
		}
	}
	if len(rep.OverNullFloor) > 0 {
		fmt.Fprintf(w, "\nminus the null floor (differences of percentiles)\n%-9s %9s %8s %9s %9s %14s\n", "target", "endpoints", "prompt", "p50 ms", "p99 ms", "EPP CPU ms/d")
		for _, r := range rep.OverNullFloor {
			fmt.Fprintf(w, "%-9s %9d %8d %+9.3f %+9.3f %+14.3f\n", r.Target, r.Endpoints, r.PromptBytes, r.P50Ms, r.P99Ms, r.CPUPerDecision)
		}
	}
}

var errMatrixAndEPP = errors.New("--epp and --targets cannot both be set: --epp measures a running EPP, --targets starts its own")

// matrixFlags holds the raw flag values of the matrix mode.
type matrixFlags struct {
	targets, counts, sizes string
	m                      matrixOptions
}

func (f *matrixFlags) options(bench extprocBenchOptions) (matrixOptions, error) {
	m := f.m
	m.Bench = bench
	for _, t := range strings.Split(f.targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			m.Targets = append(m.Targets, t)
		}
	}
	var err error
	if m.EndpointCounts, err = parseIntList("--endpoint-counts", f.counts, 1); err != nil {
		return m, err
	}
	if m.PromptSizes, err = parseIntList("--prompt-sizes", f.sizes, 1); err != nil {
		return m, err
	}
	return m, nil
}
