package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/internal/promscrape"
	"github.com/eppkit/eppkit/reference/predictor"
)

// startPredictorCommand runs `eppkit predictor --port 0 args...` in process and returns its URL;
// the server stops at test cleanup.
func startPredictorCommand(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	cmd := newPredictorCommand()
	cmd.SetArgs(append([]string{"--port", "0"}, args...))
	cmd.SetOut(pw)
	cmd.SetErr(io.Discard)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); _ = pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if err != nil {
		cancel()
		t.Fatalf("predictor did not print its URL: %v (exit: %v)", err, <-done)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("predictor exited with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("predictor did not stop within 10s of cancel")
		}
	})
	return strings.TrimSpace(line)
}

func postJSON(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	resp, err := http.Post(url, "application/json", rd)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// TestPredictorCommandOverHTTP is the acceptance test of `eppkit predictor`: strict bulk
// predictions and 202 training in the upstream JSON shape, predictions that change after
// training, readiness, coefficients on /metrics, and 400/422 with the server still serving.
func TestPredictorCommandOverHTTP(t *testing.T) {
	const seed = 42
	url := startPredictorCommand(t, "--min-samples", "50", "--retrain-every", "50")
	reqs := []map[string]any{
		{"kv_cache_percentage": 0.2, "input_token_length": 1000, "num_request_waiting": 0, "num_request_running": 2,
			"num_tokens_generated": 0, "prefix_cache_score": 0.0, "prefill_tokens_in_flight": 0, "decode_tokens_in_flight": 0},
		{"kv_cache_percentage": 0.8, "input_token_length": 1000, "num_request_waiting": 6, "num_request_running": 8,
			"num_tokens_generated": 0, "prefix_cache_score": 0.5, "prefill_tokens_in_flight": 3000, "decode_tokens_in_flight": 0},
	}
	strict := func() []map[string]any {
		t.Helper()
		code, body := postJSON(t, url+"/predict/bulk/strict", map[string]any{"requests": reqs})
		if code != http.StatusOK {
			t.Fatalf("strict: status %d: %s", code, body)
		}
		var out map[string]any
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"predictions", "total_requests", "successful_predictions", "failed_predictions", "processing_time_ms"} {
			if _, ok := out[k]; !ok {
				t.Fatalf("strict answer lacks %q: %s", k, body)
			}
		}
		preds := out["predictions"].([]any)
		if len(preds) != len(reqs) {
			t.Fatalf("%d predictions for %d requests", len(preds), len(reqs))
		}
		var ps []map[string]any
		for _, p := range preds {
			m := p.(map[string]any)
			for _, k := range []string{"ttft_ms", "tpot_ms", "predicted_at", "model_type", "quantile", "last_model_load"} {
				if _, ok := m[k]; !ok {
					t.Fatalf("prediction lacks %q: %v", k, m)
				}
			}
			ps = append(ps, m)
		}
		return ps
	}
	before := strict()
	if before[0]["ttft_ms"] != before[1]["ttft_ms"] || before[0]["last_model_load"] != nil {
		t.Fatalf("untrained predictions should be the prior for both rows: %v", before)
	}

	// Train from a known law: TTFT grows with uncached tokens and the queue.
	rng := rand.New(rand.NewPCG(seed, 0))
	var entries []predictor.TrainingEntry
	for range 300 {
		e := predictor.TrainingEntry{KVCachePercentage: rng.Float64(), InputTokenLength: rng.IntN(3000),
			NumRequestWaiting: rng.IntN(10), NumRequestRunning: rng.IntN(10), PrefixCacheScore: rng.Float64(),
			NumTokensGenerated: rng.IntN(200), Timestamp: time.Now()}
		e.ActualTTFT = 20 + 0.05*(1-e.PrefixCacheScore)*float64(e.InputTokenLength) + 30*float64(e.NumRequestWaiting) + rng.NormFloat64()
		e.ActualTPOT = 5 + 1.5*float64(e.NumRequestRunning) + 0.1*rng.NormFloat64()
		entries = append(entries, e)
	}
	code, body := postJSON(t, url+"/add_training_data_bulk", predictor.BulkTrainingRequest{Entries: entries})
	if code != http.StatusAccepted || !strings.Contains(string(body), "Accepted 300 training samples.") {
		t.Fatalf("add_training_data_bulk: status %d body %s, want 202 and the upstream message", code, body)
	}

	// The fit runs in the background; wait for readiness.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready 10s after 300 samples (last /readyz %d)", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	after := strict()
	t0, t1 := after[0]["ttft_ms"].(float64), after[1]["ttft_ms"].(float64)
	// Row 1 has 6 waiting (≈ +180 ms) and half the uncached tokens (≈ −25 ms): it must be slower.
	if !(t1 > t0+100) || after[0]["last_model_load"] == nil || t0 == before[0]["ttft_ms"].(float64) {
		t.Fatalf("seed=%d: predictions after training %v (before %v): want row 1 ≫ row 0 and a last_model_load", seed, after, before)
	}

	// /status and /metrics.
	resp, err := http.Get(url + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st predictor.ServerStatusResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !st.IsReady || st.ModelType != "bayesian_ridge" || st.ObjectiveType != "quantile" || st.Quantile != 0.9 {
		t.Fatalf("/status = %+v", st)
	}
	resp, err = http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	fams, err := promscrape.Parse(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	coef := map[string]float64{}
	for _, m := range fams["ttft_coef"].GetMetric() {
		coef[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	if c := coef["num_request_waiting"] + coef["is_queued"]; c < 20 || c > 40 {
		t.Errorf("seed=%d: ttft_coef waiting+is_queued = %v, want ≈ 30", seed, c)
	}
	if fams["ttft_intercept"] == nil || fams["tpot_intercept"] == nil || fams["training_samples_count"] == nil {
		t.Errorf("/metrics lacks intercepts or bucket counts: %v", keys(fams))
	}

	// Bad input: precise messages, and the server keeps serving.
	for _, tc := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/predict/bulk/strict", `{"requests": [`, 400, "malformed JSON"},
		{"/predict/bulk/strict", `{"requests": []}`, 422, "body.requests: must hold 1 to 10000 items"},
		{"/predict/bulk/strict", `{"requests": [{"kv_cache_percentage": 0.1}]}`, 422, "requests[0].input_token_length: field required"},
		{"/predict/bulk/strict", `{"requests": [{"kv_cache_percentage": 2, "input_token_length": 1, "num_request_waiting": 0, "num_request_running": 0, "num_tokens_generated": 0, "prefix_cache_score": 0}]}`, 422, "requests[0].kv_cache_percentage: must be in [0,1]"},
		{"/predict", `{"kv_cache_percentage": "high"}`, 422, "body.input_token_length: field required"},
		{"/add_training_data_bulk", `{"entries": [{"kv_cache_percentage": 0.1, "input_token_length": 1, "num_request_waiting": 0, "num_request_running": 0, "num_tokens_generated": 0, "prefix_cache_score": 0, "actual_ttft_ms": -3, "actual_tpot_ms": 1}]}`, 422, "entries[0].actual_ttft_ms"},
		{"/add_training_data_bulk", `not json`, 400, "malformed JSON"},
	} {
		code, body := postJSON(t, url+tc.path, tc.body)
		if code != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("POST %s %s: %d %s, want %d naming %q", tc.path, tc.body, code, body, tc.code, tc.want)
		}
	}
	if got := strict(); got[0]["ttft_ms"] != after[0]["ttft_ms"] {
		t.Errorf("after refused requests the predictions changed: %v vs %v", got, after)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestPredictorFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--port", "70000"}, "--port"},
		{[]string{"--objective", "median"}, "--objective"},
		{[]string{"--quantile", "1.5"}, "--quantile"},
		{[]string{"--features", "trees"}, "--features"},
		{[]string{"--quantile-method", "median"}, "--quantile-method"},
		{[]string{"--min-samples", "1"}, "--min-samples"},
		{[]string{"--retrain-every", "-1"}, "--retrain-every"},
		{[]string{"--max-per-bucket", "-2"}, "--max-per-bucket"},
		{[]string{"--fake", "--prior-ttft-ms", "-1"}, "--fake"},
	} {
		cmd := newPredictorCommand()
		cmd.SetArgs(tc.args)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}
