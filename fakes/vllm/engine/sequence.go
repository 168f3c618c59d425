package engine

import (
	"context"
	"io"
	"time"

	"k8s.io/utils/clock"
)

// Event is one output token of a Sequence.
type Event struct {
	// Index is the 0-based index of the output token (0 for the one event of a PrefillOnly
	// request, which carries no token).
	Index int
	// Final is true for the last token (Index == MaxTokens − 1), and for the prefill-done event
	// of a PrefillOnly request.
	Final bool
	// FinishReason is "stop" or "length" on the final event, "" otherwise.
	FinishReason string
	// At is the engine-clock time the token was due; tokens arrive in At order.
	At time.Time
	// Buffered is how many later tokens were already due and produced when Next returned this one:
	// the next Buffered calls of Next return at once. A streaming consumer that fell behind uses
	// it to write those tokens together and flush once.
	Buffered int
}

type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateDone     // every token produced, resources released
	stateAborted  // ended early by Close, ctx or engine close
	stateRejected // never queued (ErrQueueFull)
)

// Sequence is one submitted request: its tokens come out of Next. Next must not be called from
// two goroutines at once; every other method is safe for concurrent use.
type Sequence struct {
	e      *Engine
	req    Request
	finish string
	prompt int
	hashes []uint64 // chained hashes of full prompt blocks (nil with caching off)
	// ext are vLLM's hashes of the same blocks and ids their tokens, kept only for KV events.
	ext []uint64
	ids []uint32

	totalBlocks int
	stopCtx     func() bool
	wake        chan struct{}
	timer       clock.Timer // reused by Next for the whole stream

	// Guarded by e.mu.
	id           uint64
	state        seqState
	err          error
	qPrev, qNext *Sequence
	heapIdx      int
	due          time.Duration // next token's due time (running)
	arrival      time.Duration
	admitAt      time.Duration
	firstDue     time.Duration
	endAt        time.Duration
	admitted     bool
	cached       int
	emitted      int
	blocks       []int32
	events       []Event // produced, not yet returned by Next
	head         int
	blocked      bool
}

// pushEvent queues ev for Next.
func (s *Sequence) pushEvent(ev Event) {
	if s.head == len(s.events) {
		s.events, s.head = s.events[:0], 0
	}
	s.events = append(s.events, ev)
}

// signal wakes a Next blocked on s, if any. It is needed when s is admitted or aborted; a
// consumer waiting for a token sleeps on a timer armed for the token's due time.
func (s *Sequence) signal() {
	if !s.blocked {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Next returns the sequence's next token event, blocking on the engine clock until it is due:
// the first call returns after the TTFT, later ones after the inter-token latency. Tokens that
// fell due while nobody called Next are returned at once, in order, each with its own due time
// in At. After the Final event Next returns io.EOF.
//
// Errors: ctx.Err() when ctx is cancelled while waiting (the sequence is then aborted);
// ErrAborted after Close; the cause of the Submit context's cancellation; ErrEngineClosed.
func (s *Sequence) Next(ctx context.Context) (Event, error) {
	e := s.e
	e.mu.Lock()
	for {
		now := e.now()
		e.advanceLocked(now)
		if s.head < len(s.events) {
			ev := s.events[s.head]
			s.head++
			ev.Buffered = len(s.events) - s.head
			e.mu.Unlock()
			return ev, nil
		}
		switch s.state {
		case stateDone:
			e.mu.Unlock()
			return Event{}, io.EOF
		case stateAborted, stateRejected:
			err := s.err
			e.mu.Unlock()
			return Event{}, err
		}
		// Arm the timer before marking the sequence blocked and unlocking, so that a test that
		// sees Blocked() and then steps a FakeClock always finds the timer registered.
		var tc <-chan time.Time
		if s.state == stateRunning {
			wait := s.due - now // > 0: advanceLocked processed everything due by now
			if s.timer == nil {
				s.timer = e.clock.NewTimer(wait)
			} else {
				s.timer.Reset(wait)
			}
			tc = s.timer.C()
		}
		s.blocked = true
		e.mu.Unlock()

		fired := false
		select {
		case <-tc:
			fired = true
		case <-s.wake: // admitted, aborted, or the engine closed (which aborts every sequence)
		case <-ctx.Done():
		}
		if tc != nil && !fired {
			s.timer.Stop()
		}

		e.mu.Lock()
		s.blocked = false
		if err := ctx.Err(); err != nil {
			e.advanceLocked(e.now())
			e.abortLocked(s, err)
			e.mu.Unlock()
			return Event{}, err
		}
	}
}

// Close releases the sequence's running slot and blocks, or takes it off the queue, aborting it
// if it has not finished. It is idempotent; after it Next returns ErrAborted (or io.EOF if the
// sequence had finished).
func (s *Sequence) Close() {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked(e.now())
	e.abortLocked(s, ErrAborted)
}

// Blocked reports whether a Next call is parked waiting for the clock or for admission. Tests
// driving a FakeClock use it to know a consumer goroutine is waiting before they Step.
func (s *Sequence) Blocked() bool {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.blocked
}

// PromptTokens is the number of prompt tokens (dummy tokenizer).
func (s *Sequence) PromptTokens() int { return s.prompt }

// CachedTokens is the number of prompt tokens served from the prefix cache; valid once the
// sequence has been admitted (0 before).
func (s *Sequence) CachedTokens() int {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.cached
}

// QueueWait is the time from Submit to admission; 0 until admitted.
func (s *Sequence) QueueWait() time.Duration {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if !s.admitted {
		return 0
	}
	return s.admitAt - s.arrival
}

// TTFT is the time from Submit to the first token's due time (queue wait + prefill); 0 until
// admitted.
func (s *Sequence) TTFT() time.Duration {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if !s.admitted {
		return 0
	}
	return s.firstDue - s.arrival
}
