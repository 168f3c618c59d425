package extproc

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

// TestSummarizeLinearInterpolation: the percentiles are internal/percentile's (numpy's "linear",
// as vLLM's benchmark); before issue 19 this report alone used nearest rank (p50 500, p90 900,
// p99 990, p99.9 999 for this sample), so its p99 differed from eppkit bench's.
func TestSummarizeLinearInterpolation(t *testing.T) {
	var s []time.Duration
	for i := 1000; i >= 1; i-- { // 1..1000 ms, reversed
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	got := summarize(s)
	want := LatencySummaryMs{P50: 500.5, P90: 900.1, P95: 950.05, P99: 990.01, P999: 999.001, Max: 1000, Mean: 500.5}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("summarize (-want +got):\n%s", d)
	}
	if (summarize(nil) != LatencySummaryMs{}) {
		t.Error("summarize(nil) is not zero")
	}
}

func TestExtprocBench(t *testing.T) {
	pick := extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		if !strings.Contains(string(seen.Body), `"prompt"`) || len(seen.Body) < 2048 {
			return []*extprocv3.ProcessingResponse{extproctest.Immediate(400, nil, []byte("bad body"))}
		}
		return extproctest.PickResponses("10.0.0.1:8000", nil, seen.Body, 0, true)
	}}
	shed := extproctest.Script{OnRequest: func(*extproctest.Seen) []*extprocv3.ProcessingResponse {
		return []*extprocv3.ProcessingResponse{extproctest.Immediate(503, nil, nil)}
	}}
	cases := []struct {
		name       string
		script     extproctest.Script
		opts       Options
		minOK      int
		maxOK      int
		wantErrors map[string]int // nil = none; a key with -1 = any positive count
	}{
		{name: "closed loop, stream per decision", script: pick,
			// The scripted EPP runs in this process: --epp-pid is our own pid.
			// minOK is one decision per worker: on a machine at load 30 with -race a decision here
			// has taken 300 ms.
			opts: Options{Concurrency: 4, Duration: time.Second, PID: os.Getpid()}, minOK: 4, maxOK: 1 << 30},
		{name: "closed loop, reused streams", script: pick,
			opts: Options{Concurrency: 4, Streams: 2, Duration: time.Second, Response: true}, minOK: 4, maxOK: 1 << 30},
		// Fixed arrivals at 200/s for 0.5 s: 100 scheduled (±1 at the window edge).
		{name: "open loop fixed", script: pick,
			opts: Options{Rate: 200, Arrival: "fixed", Duration: 500 * time.Millisecond}, minOK: 99, maxOK: 101},
		{name: "immediate responses are errors", script: shed,
			opts: Options{Concurrency: 2, Duration: 200 * time.Millisecond}, minOK: 0, maxOK: 0, wantErrors: map[string]int{"immediate-503": -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := extproctest.Start(tc.script)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			o := tc.opts
			o.EPP, o.Arrival, o.PromptBytes, o.ChunkSize, o.Timeout, o.MaxInflight, o.Seed = srv.Addr(), benchFirstNonEmpty(o.Arrival, "poisson"), 2048, 16384, 2*time.Second, 4096, 7
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if o.PID > 0 && (rep.EPPCPUSeconds <= 0 || rep.EPPCPUPerDecisionMs <= 0) {
				t.Errorf("with --epp-pid: EPP CPU %vs, %v ms/decision; want both > 0", rep.EPPCPUSeconds, rep.EPPCPUPerDecisionMs)
			}
			if rep.Decisions < tc.minOK || rep.Decisions > tc.maxOK {
				t.Errorf("decisions %d, want in [%d,%d]; report %+v", rep.Decisions, tc.minOK, tc.maxOK, rep)
			}
			if tc.wantErrors == nil && rep.Errors != 0 {
				t.Errorf("errors %v, want none", rep.ErrorKinds)
			}
			for k := range tc.wantErrors {
				if rep.ErrorKinds[k] <= 0 {
					t.Errorf("error kinds %v, want %s > 0", rep.ErrorKinds, k)
				}
			}
			// A run in which every decision failed is an error of the command (exit ≠ 0) that
			// quotes the first failure; a run with successes is not.
			if err := ErrNoDecision(rep); (rep.Decisions == 0) != (err != nil) {
				t.Errorf("errNoDecision = %v with %d decisions, %d errors", err, rep.Decisions, rep.Errors)
			}
			if tc.wantErrors != nil && !strings.Contains(rep.FirstError, "ImmediateResponse 503") {
				t.Errorf("first error %q, want the ImmediateResponse 503", rep.FirstError)
			}
			if rep.Decisions > 0 && (rep.LatencyMs.P50 <= 0 || rep.LatencyMs.P99 < rep.LatencyMs.P50 || rep.Picks["10.0.0.1:8000"] != rep.Decisions) {
				t.Errorf("latency %+v picks %v", rep.LatencyMs, rep.Picks)
			}
		})
	}
}

func TestExtprocBenchValidation(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "--epp"},
		{Options{EPP: "x:1", Rate: -1}, "--rate"},
		{Options{EPP: "x:1", Arrival: "burst", Concurrency: 1}, "--arrival"},
		{Options{EPP: "x:1", Arrival: "fixed", Concurrency: 1, Duration: time.Second, PromptBytes: 0}, "--prompt-bytes"},
	} {
		if _, err := Run(context.Background(), tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %s", tc.o, err, tc.want)
		}
	}
}

func benchFirstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
