package extproc

import (
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
		got, err := ParseIntList("--endpoint-counts", tc.in, 1)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--endpoint-counts") {
				t.Errorf("ParseIntList(%q) error = %v, want one naming the flag and containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseIntList(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseIntList(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestValidateMatrix(t *testing.T) {
	base := MatrixOptions{Targets: []string{"reference"}, EndpointCounts: []int{10}, PromptSizes: []int{2048}, RefreshInterval: 1e9}
	tests := []struct {
		name    string
		mutate  func(*MatrixOptions)
		wantErr string
	}{
		{name: "ok", mutate: func(*MatrixOptions) {}},
		{name: "unknown target", mutate: func(m *MatrixOptions) { m.Targets = []string{"nginx"} }, wantErr: `--targets: "nginx"`},
		{name: "twice", mutate: func(m *MatrixOptions) { m.Targets = []string{"reference", "reference"} }, wantErr: "listed twice"},
		{name: "too many endpoints", mutate: func(m *MatrixOptions) { m.EndpointCounts = []int{20000} }, wantErr: "--endpoint-counts"},
		{name: "interval", mutate: func(m *MatrixOptions) { m.RefreshInterval = 0 }, wantErr: "--refresh-metrics-interval"},
		{name: "null floor", mutate: func(m *MatrixOptions) { m.Targets = []string{"null", "reference"} }},
		{name: "upstream binary given", mutate: func(m *MatrixOptions) { m.Targets = []string{"upstream"}; m.UpstreamEPP = "/bin/true" }},
		{name: "both page kinds", mutate: func(m *MatrixOptions) { m.Pages = []string{PagesMinimal, PagesRealistic} }},
		{name: "unknown pages", mutate: func(m *MatrixOptions) { m.Pages = []string{"huge"} }, wantErr: `--metrics-pages: "huge"`},
		{name: "pages twice", mutate: func(m *MatrixOptions) { m.Pages = []string{PagesRealistic, PagesRealistic} }, wantErr: `--metrics-pages: "realistic" listed twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			tc.mutate(&m)
			err := m.Validate()
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestMatrixRatios(t *testing.T) {
	rep := func(dps, p50, p99, cpu float64) *Report {
		return &Report{DecisionsPerSec: dps, LatencyMs: LatencySummaryMs{P50: p50, P99: p99}, EPPCPUPerDecisionMs: cpu}
	}
	cells := []MatrixCell{
		{Target: "reference", Pages: PagesMinimal, Endpoints: 100, PromptBytes: 2048, Report: rep(1000, 1, 4, 0.2)},
		{Target: "upstream", Pages: PagesMinimal, Endpoints: 100, PromptBytes: 2048, Report: rep(500, 2, 8, 0.8)},
		{Target: "reference", Pages: PagesRealistic, Endpoints: 100, PromptBytes: 2048, Report: rep(900, 1, 4, 0.3)}, // paired with its own kind only
		{Target: "upstream", Pages: PagesRealistic, Endpoints: 100, PromptBytes: 2048, Report: rep(100, 2, 8, 2.4)},
		{Target: "reference", Pages: PagesMinimal, Endpoints: 10, PromptBytes: 2048, Report: rep(1000, 1, 4, 0.2)},
		{Target: "upstream", Pages: PagesMinimal, Endpoints: 10, PromptBytes: 2048, Error: "not ready"},
	}
	want := []MatrixRatio{{Pages: PagesMinimal, Endpoints: 100, PromptBytes: 2048, DecisionsPerSecond: 2, P50: 0.5, P99: 0.5, CPUPerDecision: 0.25},
		{Pages: PagesRealistic, Endpoints: 100, PromptBytes: 2048, DecisionsPerSecond: 9, P50: 0.5, P99: 0.5, CPUPerDecision: 0.125}}
	if diff := cmp.Diff(want, matrixRatios(cells)); diff != "" {
		t.Fatalf("matrixRatios (-want +got):\n%s", diff)
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
