package main

import (
	"bufio"
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
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/internal/toolcache"
	"github.com/eppkit/eppkit/reference/predictor"
)

func init() { subcommands = append(subcommands, newInteropCommand) }

// newInteropCommand is `eppkit interop`: checks against upstream binaries that are not
// conformance tests (make interop; reports/interop/README.md).
func newInteropCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "interop",
		Short: "Interop checks against upstream binaries that are not conformance tests (make interop)",
	}
	cmd.AddCommand(newPredictorParityCommand(), newSimPreflightCommand())
	return cmd
}

// predictorParityFlags are the flags of `eppkit interop predictor-parity`.
type predictorParityFlags struct {
	epp, configFile, logDir, report string
	minSamples, warmup, requests    int
	timeout, warmupTimeout          time.Duration
	seed                            int64
}

// upstreamPredictedTTFT is the upstream EPP v1.5.0's histogram of the TTFT predictions it used
// (pkg/epp/metrics/metrics.go, requestPredictedTTFT; recorded only for a successful prediction).
const upstreamPredictedTTFT = "inference_objective_request_predicted_ttft_seconds"

func newPredictorParityCommand() *cobra.Command {
	var f predictorParityFlags
	cmd := &cobra.Command{
		Use:   "predictor-parity",
		Short: "The upstream EPP v1.5.0 with its predicted-latency plugins against `eppkit predictor`",
		Long: `Starts ` + "`eppkit predictor`" + `, a logging proxy in front of it, the harness (fake fleet, local
kube-apiserver with the InferencePool, fake gateway) and the upstream EPP v1.5.0 with its
predicted-latency plugins (--config-file) and PREDICTION_SERVER_URL / TRAINING_SERVER_URL pointing at
the proxy. It sends requests with x-slo-ttft-ms / x-slo-tpot-ms until the predictor has trained on
the EPP's training entries and answers from a fitted model (its /readyz), then sends --requests
more and checks that every one got a prediction from the trained model: the proxy's request log
shows the EPP's /predict/bulk/strict calls answered 200 after the fit (at least one a request), and
the EPP's own ` + upstreamPredictedTTFT + ` grew (v1.5.0 records only responses whose first token came before the end of the stream) with a
mean away from the predictor's untrained prior.

Exit codes: 0 parity holds, 1 it does not, 2 the predictor, harness or EPP could not start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPredictorParity(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.epp, "epp", "", "the upstream EPP v1.5.0 binary (default: `eppkit tools path gie epp`)")
	fl.StringVar(&f.configFile, "config-file", "manifests/epp-configs/upstream-v1.5.0-predicted-latency.yaml", "the EPP's EndpointPickerConfig")
	fl.StringVar(&f.logDir, "log-dir", "out/interop/predictor-parity", "directory for the EPP's, the predictor's and the proxy's logs")
	fl.StringVar(&f.report, "report", "", "write a Markdown summary to this file")
	fl.IntVar(&f.minSamples, "min-samples", 20, "the predictor's --min-samples (training entries before its first fit)")
	fl.IntVar(&f.warmup, "max-warmup", 5000, "at most this many requests while waiting for the predictor's fit")
	fl.DurationVar(&f.warmupTimeout, "warmup-timeout", 2*time.Minute, "at most this long while waiting for the predictor's fit (requests are paced 20 ms apart)")
	fl.IntVar(&f.requests, "requests", 40, "requests sent after the fit, each of which must get a trained prediction")
	fl.DurationVar(&f.timeout, "timeout", 4*time.Minute, "overall bound")
	fl.Int64Var(&f.seed, "seed", 0, "seed for the fakes (0 = from the clock)")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return badFlags("%v", err) })
	return cmd
}

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

func runPredictorParity(cmd *cobra.Command, f predictorParityFlags) error {
	out := cmd.OutOrStdout()
	if f.minSamples < 1 || f.requests < 1 || f.warmup < 1 {
		return badFlags("--min-samples, --requests and --max-warmup must be ≥ 1")
	}
	if _, err := os.Stat(f.configFile); err != nil {
		return badFlags("--config-file: %v", err)
	}
	if f.epp == "" {
		p, err := toolcache.Path("gie", "epp")
		if err != nil {
			return &exitError{code: exitHarness, err: err}
		}
		f.epp = p
	}
	if f.seed == 0 {
		f.seed = time.Now().UnixNano() % 1_000_000_000
	}
	if err := os.MkdirAll(f.logDir, 0o755); err != nil {
		return &exitError{code: exitHarness, err: err}
	}
	self, err := os.Executable()
	if err != nil {
		return &exitError{code: exitHarness, err: err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	harnessErr := func(format string, a ...any) error {
		return &exitError{code: exitHarness, err: fmt.Errorf(format, a...)}
	}

	// 1. eppkit predictor, as a process; it prints its URL on stdout.
	plog, err := os.Create(filepath.Join(f.logDir, "predictor.log"))
	if err != nil {
		return harnessErr("%v", err)
	}
	defer plog.Close()
	pcmd := exec.Command(self, "predictor", "--port", "0", "--min-samples", fmt.Sprint(f.minSamples),
		"--retrain-every", "10", "--retrain-interval", "1s")
	pcmd.Stderr = plog
	pout, err := pcmd.StdoutPipe()
	if err != nil {
		return harnessErr("%v", err)
	}
	if err := pcmd.Start(); err != nil {
		return harnessErr("start eppkit predictor: %v", err)
	}
	defer func() {
		_ = pcmd.Process.Signal(syscall.SIGTERM)
		_ = pcmd.Wait()
	}()
	urlCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pout)
		if sc.Scan() {
			urlCh <- strings.TrimSpace(sc.Text())
		}
		close(urlCh)
		_, _ = io.Copy(plog, pout)
	}()
	var predictorURL string
	select {
	case predictorURL = <-urlCh:
	case <-time.After(30 * time.Second):
	}
	target, err := url.Parse(predictorURL)
	if predictorURL == "" || err != nil {
		return harnessErr("eppkit predictor printed no URL within 30 s (log %s)", plog.Name())
	}
	fmt.Fprintf(out, "eppkit predictor at %s (min-samples %d)\n", predictorURL, f.minSamples)

	// 2. A logging reverse proxy in front of it: the predictor's request log.
	rlogFile, err := os.Create(filepath.Join(f.logDir, "predictor-requests.log"))
	if err != nil {
		return harnessErr("%v", err)
	}
	defer rlogFile.Close()
	rlog := &proxyLog{w: rlogFile}
	rp := httputil.NewSingleHostReverseProxy(target)
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
		proxyURL, proxyURL, conformance.ShellQuote(f.epp))
	tgt, err := conformance.NewCommandTarget("upstream-epp-v1.5.0-predicted-latency", tmpl)
	if err != nil {
		return harnessErr("%v", err)
	}
	src, err := conformance.NewEndpointSource("apiserver")
	if err != nil {
		return harnessErr("%v", err)
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	// No Eppkit: the harness would start a predictor sidecar of its own for {{.PredictorURL}},
	// which this target does not use (it is given the proxy above).
	suite, err := conformance.StartHarness(ctx, conformance.HarnessConfig{Target: tgt, Source: src,
		ConfigFile: f.configFile, LogDir: f.logDir, Seed: f.seed, Logger: logger})
	if err != nil {
		return harnessErr("the harness could not start: %v", err)
	}
	defer suite.Close()
	if suite.MetricsAddress == "" {
		return harnessErr("the EPP has no metrics address")
	}
	fmt.Fprintf(out, "upstream EPP v1.5.0 ready: ext_proc %s, metrics %s, predictor proxy %s (seed %d)\n",
		suite.TargetAddress, suite.MetricsAddress, proxyURL, f.seed)

	send := func(i int) error {
		body, _ := json.Marshal(map[string]any{
			"model": suite.ModelName, "stream": true, "max_tokens": 16,
			"stream_options": map[string]any{"include_usage": true},
			"messages":       []map[string]string{{"role": "user", "content": fmt.Sprintf("predictor parity %d-%d: tell me about endpoint pickers", f.seed, i)}},
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
		if warm >= f.warmup || time.Since(start) > f.warmupTimeout || ctx.Err() != nil {
			tr, _ := rlog.count("/add_training_data_bulk", start, http.StatusAccepted)
			return &exitError{code: exitTestFailed, err: fmt.Errorf("the predictor did not train within %d requests (%s): %d training posts from the EPP; logs in %s",
				warm, time.Since(start).Round(time.Millisecond), tr, f.logDir)}
		}
		if err := send(warm); err != nil {
			return &exitError{code: exitTestFailed, err: fmt.Errorf("warm-up: %w", err)}
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
	before, err := scrapeHistogram(ctx, suite.MetricsAddress, upstreamPredictedTTFT)
	if err != nil {
		return &exitError{code: exitTestFailed, err: err}
	}
	for i := 0; i < f.requests; i++ {
		if err := send(warm + i); err != nil {
			return &exitError{code: exitTestFailed, err: err}
		}
	}
	// The EPP records a request's predicted TTFT when it handles the end of the response, which
	// can trail the client's response by a little: poll for up to 10 s.
	var after histogramTotals
	for deadline := time.Now().Add(10 * time.Second); ; {
		if after, err = scrapeHistogram(ctx, suite.MetricsAddress, upstreamPredictedTTFT); err != nil {
			return &exitError{code: exitTestFailed, err: err}
		}
		if after.count-before.count >= float64(f.requests) || time.Now().After(deadline) {
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
	// streamingMode), so the count trails the requests — by how much depends on how the fake's
	// stream is cut into reads (16 of 40 in a quiet-machine CI run, 40 of 40 under load): at least
	// one recorded prediction is required, and their mean must not be the prior.
	pass := predicts >= f.requests && predictBad == 0 && dCount >= 1 &&
		math.Abs(meanMS-float64(predictor.DefaultPriorTTFTms)) > 0.1*float64(predictor.DefaultPriorTTFTms)
	verdict := "PASS"
	if !pass {
		verdict = "FAIL"
	}
	summary := fmt.Sprintf("predictor parity %s: after the fit, %d requests; the EPP called /predict/bulk/strict %d times (%d not 200) and recorded %.0f predicted TTFTs (%s count %.0f → %.0f, mean %.1f ms; the predictor's untrained prior is %.0f ms)",
		verdict, f.requests, predicts, predictBad, dCount, upstreamPredictedTTFT, before.count, after.count, meanMS, float64(predictor.DefaultPriorTTFTms))
	fmt.Fprintln(out, summary)
	if f.report != "" {
		md := predictorParityReport(f, warm, trained.Sub(start), trainPosts, trainBad, summary)
		if err := os.WriteFile(f.report, []byte(md), 0o644); err != nil {
			return harnessErr("--report: %v", err)
		}
	}
	if !pass {
		return &exitError{code: exitTestFailed, err: errors.New("predictor parity does not hold; logs in " + f.logDir)}
	}
	return nil
}

type histogramTotals struct{ count, sum float64 }

// scrapeHistogram sums the count and sum of every series of the histogram family name at
// addr's /metrics; a family that does not exist yet counts as zero.
func scrapeHistogram(ctx context.Context, addr, name string) (histogramTotals, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return histogramTotals{}, fmt.Errorf("scrape the EPP's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return histogramTotals{}, fmt.Errorf("scrape the EPP's metrics: status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return histogramTotals{}, fmt.Errorf("parse the EPP's metrics: %w", err)
	}
	var t histogramTotals
	if fam, ok := fams[name]; ok {
		for _, m := range fam.GetMetric() {
			t.count += float64(m.GetHistogram().GetSampleCount())
			t.sum += m.GetHistogram().GetSampleSum()
		}
	}
	return t, nil
}

func predictorParityReport(f predictorParityFlags, warm int, took time.Duration, posts, bad int, summary string) string {
	var b strings.Builder
	b.WriteString("# Predictor parity: upstream EPP v1.5.0 against `eppkit predictor`\n\n")
	fmt.Fprintf(&b, "Generated by `eppkit interop predictor-parity` (make interop-predictor-parity), seed %d, %s.\n\n", f.seed, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- EPP config: `%s`; predictor: `eppkit predictor --min-samples %d --retrain-every 10 --retrain-interval 1s`.\n", f.configFile, f.minSamples)
	fmt.Fprintf(&b, "- The predictor trained after %d requests (%s) on %d training posts from the EPP (%d not answered 202).\n", warm, took.Round(time.Millisecond), posts, bad)
	fmt.Fprintf(&b, "- %s.\n", summary)
	b.WriteString("\nLogs (not committed): the EPP's `target.log`, `predictor.log` and the proxy's `predictor-requests.log` (one line per request: time, method, path, status) under `" + f.logDir + "`.\n")
	return b.String()
}
