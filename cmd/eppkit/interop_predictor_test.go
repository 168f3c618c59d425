package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPredictorParityBadFlagsExit3(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--requests", "0"}, "--requests"},
		{[]string{"--config-file", filepath.Join(dir, "none.yaml")}, "--config-file"},
		{[]string{"--bogus"}, "unknown flag"},
	} {
		code, out := runCLI(t, append([]string{"interop", "predictor-parity"}, tc.args...)...)
		if code != exitBadFlags || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d naming %s", tc.args, code, out, exitBadFlags, tc.want)
		}
	}
}

func TestScrapeHistogram(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `# TYPE inference_objective_request_predicted_ttft_seconds histogram
inference_objective_request_predicted_ttft_seconds_bucket{model_name="m",target_model_name="a",le="+Inf"} 3
inference_objective_request_predicted_ttft_seconds_sum{model_name="m",target_model_name="a"} 0.03
inference_objective_request_predicted_ttft_seconds_count{model_name="m",target_model_name="a"} 3
inference_objective_request_predicted_ttft_seconds_bucket{model_name="m",target_model_name="b",le="+Inf"} 1
inference_objective_request_predicted_ttft_seconds_sum{model_name="m",target_model_name="b"} 0.05
inference_objective_request_predicted_ttft_seconds_count{model_name="m",target_model_name="b"} 1
`)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	got, err := scrapeHistogram(context.Background(), addr, upstreamPredictedTTFT)
	if err != nil || got.count != 4 || got.sum < 0.0799 || got.sum > 0.0801 {
		t.Fatalf("scrapeHistogram = %+v, %v; want count 4, sum 0.08", got, err)
	}
	if got, err := scrapeHistogram(context.Background(), addr, "absent_family"); err != nil || got != (histogramTotals{}) {
		t.Fatalf("absent family = %+v, %v; want zeros", got, err)
	}
}

func TestProxyLogCount(t *testing.T) {
	var b strings.Builder
	l := &proxyLog{w: &b}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l.add(proxyEntry{at: t0, method: "POST", path: "/predict/bulk/strict", status: 200})
	l.add(proxyEntry{at: t0.Add(time.Second), method: "POST", path: "/predict/bulk/strict", status: 503})
	l.add(proxyEntry{at: t0.Add(2 * time.Second), method: "POST", path: "/predict/bulk/strict", status: 200})
	l.add(proxyEntry{at: t0.Add(2 * time.Second), method: "POST", path: "/add_training_data_bulk", status: 202})
	if n, bad := l.count("/predict/bulk/strict", t0.Add(time.Second), 200); n != 2 || bad != 1 {
		t.Errorf("count since t0+1s = %d, %d bad; want 2, 1", n, bad)
	}
	if !strings.Contains(b.String(), "2026-11-30T12:00:01Z POST /predict/bulk/strict 503\n") {
		t.Errorf("log lacks the 503 line:\n%s", b.String())
	}
}
