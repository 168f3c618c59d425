package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseIntList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr string
	}{
		{in: "10,100, 1000", want: []int{10, 100, 1000}},
		{in: "2048", want: []int{2048}},
		{in: "", wantErr: "empty list"},
		{in: "10,x", wantErr: `"x" is not an integer ≥ 1`},
		{in: "0", wantErr: `"0" is not an integer ≥ 1`},
	}
	for _, tc := range tests {
		got, err := parseIntList("--endpoint-counts", tc.in, 1)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--endpoint-counts") {
				t.Errorf("parseIntList(%q) error = %v, want one naming the flag and containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseIntList(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("parseIntList(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestValidateMatrix(t *testing.T) {
	base := matrixOptions{Targets: []string{"reference"}, EndpointCounts: []int{10}, PromptSizes: []int{2048}, RefreshInterval: 1e9}
	tests := []struct {
		name    string
		mutate  func(*matrixOptions)
		wantErr string
	}{
		{name: "ok", mutate: func(*matrixOptions) {}},
		{name: "unknown target", mutate: func(m *matrixOptions) { m.Targets = []string{"nginx"} }, wantErr: `--targets: "nginx"`},
		{name: "twice", mutate: func(m *matrixOptions) { m.Targets = []string{"reference", "reference"} }, wantErr: "listed twice"},
		{name: "too many endpoints", mutate: func(m *matrixOptions) { m.EndpointCounts = []int{20000} }, wantErr: "--endpoint-counts"},
		{name: "interval", mutate: func(m *matrixOptions) { m.RefreshInterval = 0 }, wantErr: "--refresh-metrics-interval"},
		{name: "null floor", mutate: func(m *matrixOptions) { m.Targets = []string{"null", "reference"} }},
		{name: "upstream binary given", mutate: func(m *matrixOptions) { m.Targets = []string{"upstream"}; m.UpstreamEPP = "/bin/true" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			tc.mutate(&m)
			err := validateMatrix(&m)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("validateMatrix: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("validateMatrix error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestScrapeGauge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("# HELP eppkit_epp_pool_ready_endpoints Ready endpoints.\n# TYPE eppkit_epp_pool_ready_endpoints gauge\n" +
			"eppkit_epp_pool_ready_endpoints_other 7\neppkit_epp_pool_ready_endpoints 100\n" +
			"inference_pool_ready_pods{name=\"bench-10\"} 10\n"))
	}))
	defer srv.Close()
	for name, want := range map[string]float64{"eppkit_epp_pool_ready_endpoints": 100, "inference_pool_ready_pods": 10} {
		got, err := scrapeGauge(context.Background(), srv.URL, name)
		if err != nil || got != want {
			t.Errorf("scrapeGauge(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := scrapeGauge(context.Background(), srv.URL, "absent"); err == nil {
		t.Error("scrapeGauge(absent) returned no error")
	}
}

func TestMatrixRatios(t *testing.T) {
	rep := func(dps, p50, p99, cpu float64) *extprocBenchReport {
		return &extprocBenchReport{DecisionsPerSec: dps, LatencyMs: latencySummaryMs{P50: p50, P99: p99}, EPPCPUPerDecisionMs: cpu}
	}
	cells := []matrixCell{
		{Target: "reference", Endpoints: 100, PromptBytes: 2048, Report: rep(1000, 1, 4, 0.2)},
		{Target: "upstream", Endpoints: 100, PromptBytes: 2048, Report: rep(500, 2, 8, 0.8)},
		{Target: "reference", Endpoints: 10, PromptBytes: 2048, Report: rep(1000, 1, 4, 0.2)},
		{Target: "upstream", Endpoints: 10, PromptBytes: 2048, Error: "not ready"},
	}
	want := []matrixRatio{{Endpoints: 100, PromptBytes: 2048, DecisionsPerSecond: 2, P50: 0.5, P99: 0.5, CPUPerDecision: 0.25}}
	if diff := cmp.Diff(want, matrixRatios(cells)); diff != "" {
		t.Fatalf("matrixRatios (-want +got):\n%s", diff)
	}
}

func TestRenderMetricsPages(t *testing.T) {
	pages, err := renderMetricsPages(3)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"vllm:num_requests_waiting{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 2", "vllm:kv_cache_usage_perc"} {
		if !strings.Contains(string(pages[2]), want) {
			t.Errorf("page 2 lacks %q (check %d):\n%s", want, i, pages[2])
		}
	}
}

func TestProcessCPU(t *testing.T) {
	v, err := processCPU(os.Getpid())
	if err != nil || v < 0 {
		t.Fatalf("processCPU(self) = %v, %v", v, err)
	}
	if _, err := processCPU(1 << 30); err == nil {
		t.Fatal("processCPU of a missing pid returned no error")
	}
}
