// Package predictorparity is `eppkit interop predictor-parity` (make interop-predictor-parity):
// the upstream EPP v1.5.0 with its predicted-latency plugins, its PREDICTION_SERVER_URL and
// TRAINING_SERVER_URL pointing at `eppkit predictor` through a logging proxy, must get its
// predictions from the trained model once the predictor has fitted on the EPP's own training
// entries (reports/interop/predictor-parity).
package predictorparity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/conformance/target"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/internal/promscrape"
	"github.com/eppkit/eppkit/internal/supervisor"
	"github.com/eppkit/eppkit/internal/toolcache"
	"github.com/eppkit/eppkit/reference/predictor"
)

// UpstreamPredictedTTFT is the upstream EPP v1.5.0's histogram of the TTFT predictions it used
// (pkg/epp/metrics/metrics.go, requestPredictedTTFT; recorded only for a successful prediction).
const UpstreamPredictedTTFT = "inference_objective_request_predicted_ttft_seconds"

// Options configure Run; each field names the `eppkit interop predictor-parity` flag it mirrors.
type Options struct {
	// EPP is the upstream EPP v1.5.0 binary (--epp; "" = `eppkit tools path gie epp`).
	EPP string
	// ConfigFile is the EPP's EndpointPickerConfig (--config-file; required).
	ConfigFile string
	// LogDir receives the EPP's, the predictor's and the proxy's logs (--log-dir; required).
	LogDir string
	// Report, when set, receives a Markdown summary (--report).
	Report string
	// MinSamples is the predictor's --min-samples (--min-samples, ≥ 1); MaxWarmup bounds the
	// requests sent while waiting for its fit (--max-warmup, ≥ 1) and WarmupTimeout that wait
	// (--warmup-timeout); Requests are sent after the fit, each of which must get a trained
	// prediction (--requests, ≥ 1); Timeout bounds the whole run (--timeout).
	MinSamples, MaxWarmup, Requests int
	WarmupTimeout, Timeout          time.Duration
	// Seed seeds the fakes (--seed; 0 = from the clock).
	Seed int64
	// Eppkit is the eppkit binary that runs `eppkit predictor` ("" = this executable).
	Eppkit string
	// Out receives progress lines and the verdict; Logger the harness's log (nil discards each).
	Out    io.Writer
	Logger *slog.Logger
}

// Run runs the check. Its error is a *conformance.ExitError: ExitTestFailed when parity does
// not hold, ExitHarness when the predictor, the harness or the EPP could not start,
// ExitBadOptions for an invalid option.
// proxyLog is the predictor proxy's request log: one line per request, kept in memory too.
type proxyLog struct {
	mu    sync.Mutex
	w     io.Writer
	lines []proxyEntry
}

type proxyEntry struct {
	at     time.Time
	method string
	path   string
	status int
}

func (l *proxyLog) add(e proxyEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, e)
	fmt.Fprintf(l.w, "%s %s %s %d\n", e.at.UTC().Format(time.RFC3339Nano), e.method, e.path, e.status)
}

// count returns how many requests for path arrived at or after since, and how many of those did
// not answer okStatus.
func (l *proxyLog) count(path string, since time.Time, okStatus int) (n, bad int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.lines {
		if e.path != path || e.at.Before(since) {
			continue
		}
		n++
		if e.status != okStatus {
			bad++
		}
	}
	return n, bad
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func Run(ctx context.Context, f Options) error {
	out := f.Out
	if out == nil {
		out = io.Discard
	}
	if f.MinSamples < 1 || f.Requests < 1 || f.MaxWarmup < 1 {
		return &conformance.ExitError{Code: conformance.ExitBadOptions, Err: errors.New("--min-samples, --requests and --max-warmup must be ≥ 1")}
	}
	if _, err := os.Stat(f.ConfigFile); err != nil {
		return &conformance.ExitError{Code: conformance.ExitBadOptions, Err: fmt.Errorf("--config-file: %w", err)}
	}
	if f.EPP == "" {
		p, err := toolcache.Path("gie", "epp")
		if err != nil {
			return &conformance.ExitError{Code: conformance.ExitHarness, Err: err}
		}
		f.EPP = p
	}
	if f.Seed == 0 {
		f.Seed = time.Now().UnixNano() % 1_000_000_000
	}
	if err := os.MkdirAll(f.LogDir, 0o755); err != nil {
		return &conformance.ExitError{Code: conformance.ExitHarness, Err: err}
	}
	self := f.Eppkit
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return &conformance.ExitError{Code: conformance.ExitHarness, Err: err}
		}
		self = exe
	}
	ctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	harnessErr := func(format string, a ...any) error {
		return &conformance.ExitError{Code: conformance.ExitHarness, Err: fmt.Errorf(format, a...)}
	}
	failed := func(err error) error { return &conformance.ExitError{Code: conformance.ExitTestFailed, Err: err} }

	// 1. eppkit predictor, as a process on a free port of 127.0.0.1, healthy once GET /healthz
	// answers 200.
	ports, err := harness.FreePorts(1)
	if err != nil {
		return harnessErr("%v", err)
	}
	predictorURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	pproc, err := supervisor.Start(supervisor.Spec{Path: self, LogPath: filepath.Join(f.LogDir, "predictor.log"),
		Args: []string{"predictor", "--port", strconv.Itoa(ports[0]), "--min-samples", strconv.Itoa(f.MinSamples),
			"--retrain-every", "10", "--retrain-interval", "1s"}})
	if err != nil {
		return harnessErr("start eppkit predictor: %v", err)
	}
	defer func() { _ = pproc.Stop(10 * time.Second) }()
	if err := waitHealthy(ctx, pproc, predictorURL+"/healthz", 30*time.Second); err != nil {
		return harnessErr("%v", err)
	}
	predictorTarget, err := url.Parse(predictorURL)
	if err != nil {
		return harnessErr("%v", err)
	}
	fmt.Fprintf(out, "eppkit predictor at %s (min-samples %d)\n", predictorURL, f.MinSamples)

	// 2. A logging reverse proxy in front of it: the predictor's request log.
	rlogFile, err := os.Create(filepath.Join(f.LogDir, "predictor-requests.log"))
	if err != nil {
		return harnessErr("%v", err)
	}
	defer rlogFile.Close()
	rlog := &proxyLog{w: rlogFile}
	rp := httputil.NewSingleHostReverseProxy(predictorTarget)
	// Proxy errors (an EPP stopped mid-request at the end of the run) go to the request log.
	rp.ErrorLog = log.New(rlogFile, "proxy: ", log.LstdFlags)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return harnessErr("%v", err)
	}
	proxy := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(rec, r)
		rlog.add(proxyEntry{at: time.Now(), method: r.Method, path: r.URL.Path, status: rec.status})
	})}
	go func() { _ = proxy.Serve(ln) }()
	defer proxy.Close()
	proxyURL := "http://" + ln.Addr().String()

	// 3. The harness with the upstream EPP, its predictor URLs pointing at the proxy. Training
	// entries are flushed every second (LATENCY_FLUSH_INTERVAL_SEC) and the client refreshes the
	// server status every second (LATENCY_METRICS_INTERVAL_SEC; sidecars/latencypredictorasync/types.go).
	tmpl := fmt.Sprintf("PREDICTION_SERVER_URL=%s TRAINING_SERVER_URL=%s LATENCY_FLUSH_INTERVAL_SEC=1 LATENCY_METRICS_INTERVAL_SEC=1 "+
		"KUBECONFIG={{.Kubeconfig}} exec %s --pool-name {{.PoolName}} --pool-namespace {{.PoolNamespace}} "+
		"--secure-serving=false --metrics-endpoint-auth=false --tracing=false --config-file {{.ConfigFile}} "+
		"--grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}",
		proxyURL, proxyURL, conformance.ShellQuote(f.EPP))
	tgt, err := target.NewCommandTarget("upstream-epp-v1.5.0-predicted-latency", tmpl)
	if err != nil {
		return harnessErr("%v", err)
	}
	src, err := conformance.NewEndpointSource("apiserver")
	if err != nil {
		return harnessErr("%v", err)
	}
	logger := f.Logger
	// No Eppkit: the harness would start a predictor sidecar of its own for {{.PredictorURL}},
	// which this target does not use (it is given the proxy above).
	suite, err := harness.Start(ctx, harness.Config{Target: tgt, Source: src,
		ConfigFile: f.ConfigFile, LogDir: f.LogDir, Seed: f.Seed, Logger: logger})
	if err != nil {
		return harnessErr("the harness could not start: %v", err)
	}
	defer suite.Close()
	if suite.MetricsAddress == "" {
		return harnessErr("the EPP has no metrics address")
	}
	fmt.Fprintf(out, "upstream EPP v1.5.0 ready: ext_proc %s, metrics %s, predictor proxy %s (seed %d)\n",
		suite.TargetAddress, suite.MetricsAddress, proxyURL, f.Seed)

	// Each output token in a read of its own. v1.5.0 sends a training entry with a TPOT only for a
	// stream whose tokens it saw arrive after the first; with the fleet's default latencies a
	// 16-token stream mostly reaches it in one read (at edb65fa, 4 of 1,631 entries carried a TPOT
	// and the 2-minute warm-up ran out in CI). 5 ms before the first token and between tokens
	// keeps a request under 100 ms.
	if err := setStreamLatency(suite, map[string]any{"time-to-first-token": "5ms", "inter-token-latency": "5ms"}); err != nil {
		return harnessErr("%v", err)
	}

	send := func(i int) error {
		body, _ := json.Marshal(map[string]any{
			"model": suite.ModelName, "stream": true, "max_tokens": 16,
			"stream_options": map[string]any{"include_usage": true},
			"messages":       []map[string]string{{"role": "user", "content": fmt.Sprintf("predictor parity %d-%d: tell me about endpoint pickers", f.Seed, i)}},
		})
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		defer rcancel()
		res, err := suite.Gateway.Do(rctx, &gateway.Request{Path: "/v1/chat/completions", Body: body, Headers: map[string]string{
			"Content-Type": "application/json", "x-slo-ttft-ms": "5000", "x-slo-tpot-ms": "1000"}})
		if err != nil {
			return err
		}
		if res.Status != http.StatusOK {
			return fmt.Errorf("request %d: status %d: %s", i, res.Status, strings.TrimSpace(string(res.Body)))
		}
		return nil
	}
	ready := func() bool {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, predictorURL+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}

	// 4. Warm-up until the predictor has fitted on the EPP's training entries.
	start := time.Now()
	warm := 0
	for ; !ready(); warm++ {
		if warm >= f.MaxWarmup || time.Since(start) > f.WarmupTimeout || ctx.Err() != nil {
			tr, _ := rlog.count("/add_training_data_bulk", start, http.StatusAccepted)
			return failed(fmt.Errorf("the predictor did not train within %d requests (%s): %d training posts from the EPP; logs in %s",
				warm, time.Since(start).Round(time.Millisecond), tr, f.LogDir))
		}
		if err := send(warm); err != nil {
			return failed(fmt.Errorf("warm-up: %w", err))
		}
		// Pace the warm-up so the EPP's one-second training flushes and the predictor's refits
		// keep up, rather than sending thousands of requests in the first seconds.
		time.Sleep(20 * time.Millisecond)
	}
	trained := time.Now()
	trainPosts, trainBad := rlog.count("/add_training_data_bulk", start, http.StatusAccepted)
	fmt.Fprintf(out, "predictor trained after %d requests (%s); training posts from the EPP: %d (%d not 202)\n",
		warm, trained.Sub(start).Round(time.Millisecond), trainPosts, trainBad)

	// 5. Requests answered by the trained model.
	before, err := predictedTTFT(ctx, suite.MetricsAddress)
	if err != nil {
		return failed(err)
	}
	for i := 0; i < f.Requests; i++ {
		if err := send(warm + i); err != nil {
			return failed(err)
		}
	}
	// The EPP records a request's predicted TTFT when it handles the end of the response, which
	// can trail the client's response by a little: poll for up to 10 s.
	var after histogramTotals
	for deadline := time.Now().Add(10 * time.Second); ; {
		if after, err = predictedTTFT(ctx, suite.MetricsAddress); err != nil {
			return failed(err)
		}
		if after.count-before.count >= float64(f.Requests) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	predicts, predictBad := rlog.count("/predict/bulk/strict", trained, http.StatusOK)
	dCount, dSum := after.count-before.count, after.sum-before.sum
	meanMS := 0.0
	if dCount > 0 {
		meanMS = dSum / dCount * 1000
	}
	// Every request after the fit must have been predicted by the trained model (the proxy log),
	// and the EPP must have used those predictions: its predicted-TTFT histogram grew and its mean
	// is not the untrained prior. v1.5.0 records a predicted TTFT only for a response whose first
	// token came before the end of the stream (requestcontrol_hooks.go, ResponseBody in
	// streamingMode); with every token in a read of its own (setStreamLatency above) each request
	// is recorded, so every one is required.
	pass := predicts >= f.Requests && predictBad == 0 && dCount >= float64(f.Requests) &&
		math.Abs(meanMS-float64(predictor.DefaultPriorTTFTms)) > 0.1*float64(predictor.DefaultPriorTTFTms)
	verdict := "PASS"
	if !pass {
		verdict = "FAIL"
	}
	summary := fmt.Sprintf("predictor parity %s: after the fit, %d requests; the EPP called /predict/bulk/strict %d times (%d not 200) and recorded %.0f predicted TTFTs (%s count %.0f → %.0f, mean %.1f ms; the predictor's untrained prior is %.0f ms)",
		verdict, f.Requests, predicts, predictBad, dCount, UpstreamPredictedTTFT, before.count, after.count, meanMS, float64(predictor.DefaultPriorTTFTms))
	fmt.Fprintln(out, summary)
	if f.Report != "" {
		md := report(f, warm, trained.Sub(start), trainPosts, trainBad, summary)
		if err := os.WriteFile(f.Report, []byte(md), 0o644); err != nil {
			return harnessErr("--report: %v", err)
		}
	}
	if !pass {
		return failed(errors.New("predictor parity does not hold; logs in " + f.LogDir))
	}
	return nil
}

type histogramTotals struct{ count, sum float64 }

// predictedTTFT reads UpstreamPredictedTTFT's count and sum (over its series) from the EPP's
// /metrics at addr; a family that does not exist yet counts as zero.
func predictedTTFT(ctx context.Context, addr string) (histogramTotals, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fams, err := promscrape.Get(rctx, nil, "http://"+addr+"/metrics")
	if err != nil {
		return histogramTotals{}, fmt.Errorf("scrape the EPP's metrics: %w", err)
	}
	var t histogramTotals
	t.count, t.sum = fams.Histogram(UpstreamPredictedTTFT)
	return t, nil
}

// waitHealthy polls url until it answers 200, the process exits, ctx ends or timeout passes.
func waitHealthy(ctx context.Context, p *supervisor.Process, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-p.Exited():
			return fmt.Errorf("eppkit predictor exited at start (%v); see %s", p.ExitErr(), p.LogPath())
		default:
		}
		if resp, err := client.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("eppkit predictor not healthy at %s within %s; see %s", url, timeout, p.LogPath())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func report(f Options, warm int, took time.Duration, posts, bad int, summary string) string {
	var b strings.Builder
	b.WriteString("# Predictor parity: upstream EPP v1.5.0 against `eppkit predictor`\n\n")
	fmt.Fprintf(&b, "Generated by `eppkit interop predictor-parity` (make interop-predictor-parity), seed %d, %s.\n\n", f.Seed, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- EPP config: `%s`; predictor: `eppkit predictor --min-samples %d --retrain-every 10 --retrain-interval 1s`.\n", f.ConfigFile, f.MinSamples)
	fmt.Fprintf(&b, "- The predictor trained after %d requests (%s) on %d training posts from the EPP (%d not answered 202).\n", warm, took.Round(time.Millisecond), posts, bad)
	fmt.Fprintf(&b, "- %s.\n", summary)
	b.WriteString("\nLogs (not committed): the EPP's `target.log`, `predictor.log` and the proxy's `predictor-requests.log` (one line per request: time, method, path, status) under `" + f.LogDir + "`.\n")
	return b.String()
}

// setStreamLatency sets the latency keys on every fake of the suite's pool through its admin API
// (harness.Suite.SetLatency, run under a harness.Recorder: its failure ends only the goroutine).
// The fleet is torn down with the suite, so nothing is restored.
func setStreamLatency(suite *harness.Suite, keys map[string]any) error {
	rec := harness.NewRecorder("predictor-parity")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, a := range suite.Endpoints() {
			suite.SetLatency(rec, a, keys)
		}
	}()
	<-done
	if r := rec.Record(); r.Failed {
		return fmt.Errorf("set the fleet's latency: %s", r.FirstFailure)
	}
	return nil
}
