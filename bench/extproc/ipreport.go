package extproc

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/bench/inferenceperf"
	"github.com/eppkit/eppkit/internal/version"
)

// InferencePerfRun turns a decision-latency run (recorded with Options.Record) into an
// inference-perf run: each decision is one request whose response is the pick, so
// request_latency is the decision latency from its actual start (schedule_delay holds the open
// loop's lateness), requests_per_sec is decisions/s, and there are no tokens to time (TTFT, TPOT
// and ITL are null, as inference-perf writes them for unstreamed responses). input tokens are
// the prompt's bytes ÷ 4 (the reference's estimate, SPEC §4.1); request bodies are not kept (they
// are seeded: --seed reproduces them), only their size. A refused decision is an HTTP error with
// the ImmediateResponse's status; a stream that broke or timed out a client error.
func InferencePerfRun(rep *Report) inferenceperf.Run {
	run := inferenceperf.Run{Requests: make([]inferenceperf.Request, len(rep.Records))}
	for i, rc := range rep.Records {
		q := inferenceperf.Request{Scheduled: secs(rc.Scheduled), Start: secs(rc.Started), End: secs(rc.Ended),
			RequestBytes: rc.BodyBytes, InputTokens: rc.BodyBytes / 4}
		if status, ok := strings.CutPrefix(rc.Kind, "immediate-"); ok {
			code, _ := strconv.Atoi(status)
			q.Error = inferenceperf.HTTPError(code, rc.Message)
		} else if rc.Kind != "" {
			q.Error = &inferenceperf.Error{Type: kindErrorType(rc.Kind), Msg: rc.Message}
		}
		run.Requests[i] = q
	}
	run.Stages = []inferenceperf.Stage{{Rate: rep.TargetRate, DurationS: rep.DurationSeconds, Concurrency: rep.Concurrency}}
	loadType := "poisson"
	if rep.Mode == "open-fixed" {
		loadType = "constant"
	} else if rep.Mode == "closed" {
		loadType = "concurrent"
	}
	run.Config = map[string]any{
		"api":  map[string]any{"type": "completion", "streaming": false},
		"load": map[string]any{"type": loadType, "stages": []map[string]any{{"rate": rep.TargetRate, "duration": rep.DurationSeconds, "concurrency_level": rep.Concurrency}}},
		"report": map[string]any{"request_lifecycle": map[string]any{"summary": true, "per_stage": true, "per_request": true,
			"percentiles": inferenceperf.DefaultPercentiles}},
		"eppkit": map[string]any{"version": version.Version(), "command": "eppkit bench extproc", "epp": rep.EPP, "mode": rep.Mode,
			"prompt_bytes": rep.PromptBytes, "streams": rep.Streams, "seed": rep.Seed,
			"note": "written by eppkit bench extproc, not by inference-perf: a request is one EPP decision over ext_proc"},
	}
	return run
}

func secs(t interface{ UnixNano() int64 }) float64 { return float64(t.UnixNano()) / 1e9 }

// kindErrorType names a failed decision's error kind as inference-perf names exception classes.
func kindErrorType(kind string) string {
	switch kind {
	case "timeout":
		return "TimeoutError"
	case "stream-closed":
		return "StreamClosedError"
	case "protocol":
		return "ProtocolError"
	case "no-pick":
		return "NoPickError"
	}
	return "StreamError"
}

// WriteInferencePerf writes rep's inference-perf report into dir (created when missing) and
// returns the files written; rep must have been recorded (Options.Record).
func WriteInferencePerf(dir string, rep *Report) ([]string, error) {
	if len(rep.Records) == 0 {
		return nil, fmt.Errorf("inference-perf report of %s: no decision was recorded", rep.EPP)
	}
	return inferenceperf.Write(dir, InferencePerfRun(rep))
}

// CellReportDir is where a matrix cell's inference-perf report goes under dir.
func CellReportDir(dir string, c MatrixCell) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%s-%dep-%dB", c.Target, c.Pages, c.Endpoints, c.PromptBytes))
}
