package extproc

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/fakes/nullepp"
	"github.com/eppkit/eppkit/internal/promscrape"
)

// TestNullEPP drives the null EPP with the decision-latency driver: every decision must be a
// protocol-correct pick (the driver checks the full-duplex streamed answers, including a 70,000-byte
// body echoed in two chunks and the response phases), taken round-robin.
func TestNullEPP(t *testing.T) {
	eps := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- nullepp.Serve(eps, grpcLn, metricsLn) }()
	defer func() {
		_ = grpcLn.Close()
		_ = metricsLn.Close()
		<-done
	}()

	fams, err := promscrape.Get(context.Background(), nil, "http://"+metricsLn.Addr().String()+"/metrics")
	if v, ok := fams.First(nullepp.ReadyMetric); err != nil || !ok || v != 3 {
		t.Fatalf("%s = %v, %v; want 3", nullepp.ReadyMetric, v, err)
	}
	for _, size := range []int{2048, 70000} {
		o := Options{EPP: grpcLn.Addr().String(), Arrival: "poisson", Concurrency: 3, Duration: 500 * time.Millisecond,
			PromptBytes: size, ChunkSize: 16384, Timeout: 5 * time.Second, MaxInflight: 4096, Seed: 11, Response: true}
		rep, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Errors != 0 || rep.Decisions < 3 {
			t.Fatalf("prompt %d B: %d decisions, errors %v; want ≥ 3 and none", size, rep.Decisions, rep.ErrorKinds)
		}
		// Round-robin: concurrent decisions end out of order, so over a window the counts differ by
		// up to the concurrency; require each endpoint picked and none more than a third above the
		// mean once there are enough decisions for that to be meaningful (≥ 30; a quiet machine
		// runs thousands in the 0.5 s).
		if rep.Decisions < 30 {
			t.Logf("prompt %d B: only %d decisions (loaded machine?); spread not checked", size, rep.Decisions)
			continue
		}
		for _, ep := range eps {
			if n := rep.Picks[ep]; n == 0 || float64(n) > 1.34*float64(rep.Decisions)/3+1 {
				t.Errorf("prompt %d B: picks %v over %d decisions; want each endpoint about a third", size, rep.Picks, rep.Decisions)
			}
		}
	}
}

func TestMatrixOverNull(t *testing.T) {
	rep := func(dps, p50, p99, cpu float64) *Report {
		return &Report{DecisionsPerSec: dps, LatencyMs: LatencySummaryMs{P50: p50, P99: p99}, EPPCPUPerDecisionMs: cpu}
	}
	cells := []MatrixCell{
		{Target: "null", Pages: PagesMinimal, Endpoints: 100, PromptBytes: 2048, Report: rep(8000, 1.0, 2.0, 0.3)},
		{Target: "reference", Pages: PagesMinimal, Endpoints: 100, PromptBytes: 2048, Report: rep(6000, 1.25, 4.0, 0.8)},
		{Target: "reference", Pages: PagesRealistic, Endpoints: 100, PromptBytes: 2048, Report: rep(5000, 1.5, 4.0, 0.9)}, // no floor cell with these pages
		{Target: "reference", Pages: PagesMinimal, Endpoints: 100, PromptBytes: 32768, Report: rep(4000, 2, 5, 1)},        // no floor cell
		{Target: "upstream", Pages: PagesMinimal, Endpoints: 100, PromptBytes: 2048, Error: "not ready"},
	}
	got := matrixOverNull(cells)
	if len(got) != 1 || got[0].Target != "reference" || got[0].Pages != PagesMinimal || got[0].DecisionsPerSecond != 0.75 ||
		got[0].P50Ms != 0.25 || got[0].P99Ms != 2 || got[0].CPUPerDecision != 0.5 {
		t.Fatalf("matrixOverNull = %+v, want one minimal-pages reference row: 0.75x decisions/s, +0.25 / +2 ms, +0.5 ms CPU", got)
	}
	var sb strings.Builder
	PrintMatrix(&sb, &MatrixReport{Cells: cells, OverNullFloor: got})
	if !strings.Contains(sb.String(), "against the null floor") || !strings.Contains(sb.String(), "+0.250") || !strings.Contains(sb.String(), "0.75") {
		t.Errorf("printMatrix lacks the floor section:\n%s", sb.String())
	}
}
