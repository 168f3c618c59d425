package extprocclient

import (
	"fmt"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Phase is a kind of message the gateway sends and the EPP must answer, one for one, in
// FULL_DUPLEX_STREAMED mode.
type Phase int

const (
	// PhaseNone: nothing the gateway sent is waiting for an answer.
	PhaseNone Phase = iota
	// PhaseRequestHeaders: the request_headers message (answered by a request_headers response).
	PhaseRequestHeaders
	// PhaseRequestBody: request_body chunks (each answered by a streamed request_body response).
	PhaseRequestBody
	// PhaseResponseHeaders: the response_headers message.
	PhaseResponseHeaders
	// PhaseResponseBody: response_body chunks (each answered by a streamed response_body response).
	PhaseResponseBody
)

// String names the phase as the ext_proc messages do.
func (p Phase) String() string {
	switch p {
	case PhaseRequestHeaders:
		return "request_headers"
	case PhaseRequestBody:
		return "request_body"
	case PhaseResponseHeaders:
		return "response_headers"
	case PhaseResponseBody:
		return "response_body"
	}
	return "none"
}

// StallError is the error of a wait that ended without the EPP's answer (it wraps
// ErrMessageTimeout): which of the gateway's messages were left unanswered, and, when a
// StallWatch cut the wait short, how often the run had seen the same stall before.
type StallError struct {
	// Phase is the first unanswered phase of the current request.
	Phase Phase
	// Sent and Answered count the messages of Phase the gateway sent and the EPP answered (for
	// the headers phases 1 and 0).
	Sent, Answered int
	// HeadersAnswered reports, for a body phase, that the EPP answered the headers before it.
	HeadersAnswered bool
	// Waited is how long the wait lasted.
	Waited time.Duration
	// Stalls is how many waits for Phase the run's StallWatch saw end unanswered, this one
	// included; Short is true when this wait was cut to StallWatch.Short because the phase is
	// tripped.
	Stalls int
	Short  bool
}

func (e *StallError) Error() string {
	var what string
	switch e.Phase {
	case PhaseRequestHeaders:
		what = "the EPP answered none of this request's messages (no request_headers response)"
		if e.Sent > 1 {
			what = fmt.Sprintf("the EPP answered none of this request's messages (no request_headers response to the headers and %d body chunks)", e.Sent-1)
		}
	case PhaseRequestBody:
		what = fmt.Sprintf("the EPP answered the request_headers message but %d of the %d request_body chunks", e.Answered, e.Sent)
		if e.Answered == 0 {
			what = fmt.Sprintf("the EPP answered the request_headers message but none of the %d request_body chunks", e.Sent)
		}
		what += " (in FULL_DUPLEX_STREAMED mode the EPP MUST answer every body chunk with a streamed_response body " +
			"mutation, changed or not, the last with end_of_stream; answering only a changed body is BUFFERED mode's habit and stalls every request)"
	case PhaseResponseHeaders:
		what = "the EPP did not answer the response_headers message"
	case PhaseResponseBody:
		what = fmt.Sprintf("the EPP answered %d of the %d response_body chunks (in FULL_DUPLEX_STREAMED mode every response "+
			"body chunk MUST be answered with a streamed_response body mutation, the last with end_of_stream)", e.Answered, e.Sent)
	default:
		what = "no response from the EPP"
	}
	msg := fmt.Sprintf("%s within %v", what, e.Waited.Round(time.Millisecond))
	if e.Short {
		msg += fmt.Sprintf("; the run had seen the EPP leave %s unanswered %d times before, so this wait was cut short (stall watch)",
			e.Phase, e.Stalls-1)
	}
	return msg
}

// Unwrap returns ErrMessageTimeout, so errors.Is(err, ErrMessageTimeout) holds.
func (e *StallError) Unwrap() error { return ErrMessageTimeout }

// StallWatch remembers, across the streams of the clients that share it (one conformance run),
// which phase the EPP leaves unanswered: once Threshold waits in a row for the same phase have
// ended without an answer, the phase is tripped for the rest of the run and every later wait for
// it is cut to Short, so a run against an EPP that never answers, say, unchanged request bodies
// fails each test within Short instead of its full message timeout — also after the EPP answered
// the bodies it did change. An EPP that answers at all answers far within Short, so a trip costs
// a correct answer nothing. The zero value is not usable: use NewStallWatch. Safe for concurrent
// use.
type StallWatch struct {
	threshold int
	short     time.Duration

	mu      sync.Mutex
	streak  map[Phase]int  // stalls in a row, reset by an answer (before the trip)
	stalls  map[Phase]int  // stalls in all
	tripped map[Phase]bool // sticky
	last    map[Phase]bool // the latest wait for the phase stalled
}

// Stall watch defaults: two full waits in a row without an answer convince the run; later waits
// last 250 ms. An EPP answers a message within milliseconds, and only a phase the EPP already left unanswered twice for the whole
// message timeout is cut, so the bound costs a working EPP nothing; it makes a run against an EPP
// that never answers a body phase (one exchange per test, 60-odd tests) take seconds, not a minute.
const (
	DefaultStallThreshold = 2
	DefaultStallShort     = 250 * time.Millisecond
)

// NewStallWatch returns a StallWatch; threshold < 1 or short <= 0 take the defaults.
func NewStallWatch(threshold int, short time.Duration) *StallWatch {
	if threshold < 1 {
		threshold = DefaultStallThreshold
	}
	if short <= 0 {
		short = DefaultStallShort
	}
	return &StallWatch{threshold: threshold, short: short, streak: map[Phase]int{}, stalls: map[Phase]int{},
		tripped: map[Phase]bool{}, last: map[Phase]bool{}}
}

// bound is the wait for p: d, or Short once p is tripped.
func (w *StallWatch) bound(p Phase, d time.Duration) (time.Duration, bool) {
	if w == nil || p == PhaseNone {
		return d, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tripped[p] && (d <= 0 || d > w.short) {
		return w.short, true
	}
	return d, false
}

// stalled records a wait for p that ended unanswered and returns the number of stalls of p so far.
func (w *StallWatch) stalled(p Phase) int {
	if w == nil || p == PhaseNone {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.streak[p]++
	w.stalls[p]++
	w.last[p] = true
	if w.streak[p] >= w.threshold {
		w.tripped[p] = true
	}
	return w.stalls[p]
}

// answered records an answer of p.
func (w *StallWatch) answered(p Phase) {
	if w == nil || p == PhaseNone {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.streak[p], w.last[p] = 0, false
}

// Tripped reports whether waits for p are cut short (Threshold stalls in a row happened).
func (w *StallWatch) Tripped(p Phase) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tripped[p]
}

// Broken reports whether p is tripped and its latest wait stalled too, with the number of
// stalls of p so far: the run may give up on waits that poll the EPP (harness.Suite.BrokenCause).
func (w *StallWatch) Broken(p Phase) (bool, int) {
	if w == nil {
		return false, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tripped[p] && w.last[p], w.stalls[p]
}

// pending counts what the gateway sent for the stream's current request and what the EPP
// answered; a new request_headers message starts a new request. Guarded by Stream.mu.
type pending struct {
	reqHeaders, reqHeadersAnswered   bool
	reqChunks, reqChunksAnswered     int
	reqEOSAnswered                   bool
	respHeaders, respHeadersAnswered bool
	respChunks, respChunksAnswered   int
	respEOSAnswered                  bool
	immediate                        bool
}

// sent records an outgoing message.
func (p *pending) sent(msg *extprocv3.ProcessingRequest) {
	switch r := msg.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		*p = pending{reqHeaders: true}
		if r.RequestHeaders.GetEndOfStream() {
			p.reqEOSAnswered = true // nothing of the body to answer
		}
	case *extprocv3.ProcessingRequest_RequestBody:
		p.reqChunks++
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		p.respHeaders = true
		if r.ResponseHeaders.GetEndOfStream() {
			p.respEOSAnswered = true
		}
	case *extprocv3.ProcessingRequest_ResponseBody:
		p.respChunks++
	}
}

// received records an incoming message and returns the phase it answers.
func (p *pending) received(msg *extprocv3.ProcessingResponse) Phase {
	switch r := msg.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		p.reqHeadersAnswered = true
		return PhaseRequestHeaders
	case *extprocv3.ProcessingResponse_RequestBody:
		p.reqChunksAnswered++
		if r.RequestBody.GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
			p.reqEOSAnswered = true
		}
		return PhaseRequestBody
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		p.respHeadersAnswered = true
		return PhaseResponseHeaders
	case *extprocv3.ProcessingResponse_ResponseBody:
		p.respChunksAnswered++
		if r.ResponseBody.GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
			p.respEOSAnswered = true
		}
		return PhaseResponseBody
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		p.immediate = true
	}
	return PhaseNone
}

// outstanding returns the first phase the EPP has not answered in full, with its counts.
func (p *pending) outstanding() (ph Phase, sent, answered int) {
	switch {
	case p.immediate:
		return PhaseNone, 0, 0
	case p.reqHeaders && !p.reqHeadersAnswered:
		return PhaseRequestHeaders, 1 + p.reqChunks, 0
	case p.reqChunks > 0 && !p.reqEOSAnswered:
		return PhaseRequestBody, p.reqChunks, p.reqChunksAnswered
	case p.respHeaders && !p.respHeadersAnswered:
		return PhaseResponseHeaders, 1, 0
	case p.respChunks > 0 && !p.respEOSAnswered:
		return PhaseResponseBody, p.respChunks, p.respChunksAnswered
	}
	return PhaseNone, 0, 0
}
