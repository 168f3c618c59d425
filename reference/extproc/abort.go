package extproc

import (
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// An abort is not a natural end (issue 33). A response that ends with trailers carrying a
// non-zero grpc-status — a gRPC model server that aborted the request (vLLM's gRPC API answers
// errors so), or a data plane that ends the response with an error status — is a failed request:
// its plugins see it as they see an abandoned one (ResponseComplete with EndOfStream false: no
// latency training sample, no usage taken as a completed response's), it leaves the in-flight
// count, and it is counted as aborted, never as completed.

// Outcome labels of Server.Outcomes.
const (
	OutcomeCompleted = "completed"
	OutcomeAborted   = "aborted"
	OutcomeAbandoned = "abandoned"
)

// Outcomes returns how many scheduled requests ended each way: completed (the response's natural
// end: end_of_stream, or trailers with grpc-status 0 or none), aborted (trailers with a non-zero
// grpc-status) and abandoned (the stream or the request ended before the response did).
func (s *Server) Outcomes() map[string]int64 {
	return map[string]int64{OutcomeCompleted: s.completed.Load(), OutcomeAborted: s.aborted.Load(), OutcomeAbandoned: s.abandoned.Load()}
}

func (s *Server) countOutcome(eos, aborted bool) {
	switch {
	case aborted:
		s.aborted.Add(1)
	case eos:
		s.completed.Add(1)
	default:
		s.abandoned.Add(1)
	}
}

// abortStatus reads grpc-status (and grpc-message) from the response trailers: aborted when it
// is present and not "0".
func abortStatus(tr *extprocv3.HttpTrailers) (code, msg string, aborted bool) {
	h := headerMap(tr.GetTrailers())
	code = strings.TrimSpace(h["grpc-status"])
	return code, h["grpc-message"], code != "" && code != "0"
}

// abort ends the current request as failed: the response ended with grpc-status code.
func (st *stream) abort(code, msg string) {
	r := st.cur
	if r == nil || r.ended {
		return
	}
	r.aborted = true
	requestID := ""
	if r.res != nil {
		requestID = r.res.Request.RequestID
	}
	st.s.logger.Info("ext_proc: response aborted (non-zero grpc-status in its trailers); recorded as failed",
		"requestID", requestID, "grpcStatus", code, "grpcMessage", msg)
	st.complete(false)
}
