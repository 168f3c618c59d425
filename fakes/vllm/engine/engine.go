package engine

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Errors returned by Submit and Sequence.Next.
var (
	// ErrQueueFull: the request could not run at once and the waiting queue already holds
	// MaxWaitingQueueLength requests (the simulator answers 429).
	ErrQueueFull = errors.New("engine: waiting queue is full")
	// ErrPromptTooLong: prompt tokens + MaxTokens exceed MaxModelLen (the simulator and vLLM
	// answer 400 with a context-length error). Returned wrapped with the numbers.
	ErrPromptTooLong = errors.New("engine: prompt and output exceed the context window (MaxModelLen)")
	// ErrEngineClosed: the engine was closed; Submit refuses work and every open sequence ends
	// with this error.
	ErrEngineClosed = errors.New("engine: engine closed")
	// ErrAborted: Next was called on a sequence that Close aborted before it finished.
	ErrAborted = errors.New("engine: sequence aborted")
)

// Finish reasons reported on the final Event (OpenAI finish_reason values).
const (
	FinishStop   = "stop"
	FinishLength = "length"
)

// loopMinGap is the shortest interval between two wake-ups of the engine's background
// goroutine. The goroutine only processes events nobody is waiting for (consumers blocked in
// Next wake themselves on time), so this bounds its cost at 1,000 wake-ups a second under any
// load without delaying any token a consumer waits for. Event times stay exact.
const loopMinGap = time.Millisecond

// Request is one inference request given to Submit.
type Request struct {
	// ID is the caller's request id, kept for debugging; it need not be unique.
	ID string
	// Model is the base model name; it is part of the root block hash.
	Model string
	// LoRA is the LoRA adapter name, or "" for the base model. It is part of the root block hash
	// and takes one of MaxLoras adapter slots while the request runs.
	LoRA string
	// Prompt is the text to tokenize with Tokenize (for chat, the rendered conversation).
	// Ignored when TokenIDs is non-nil.
	Prompt string
	// TokenIDs, when non-nil, is the prompt as token ids, taken as given (an OpenAI prompt or
	// embeddings input of integers): each id is one prompt token and is hashed as is.
	TokenIDs []uint32
	// MaxTokens is the number of output tokens to produce: at least 1, or 0 with PrefillOnly.
	MaxTokens int
	// PrefillOnly makes a pooling request (vLLM's pooling runner behind /v1/embeddings): it
	// takes a running slot and the KV blocks of its prompt like any request, is prefilled, and
	// ends at the prefill time with a single Final event (Index 0) and no output token.
	// MaxTokens must be 0.
	PrefillOnly bool
	// FinishReason is the finish reason the final Event reports: "stop" when the output ended by
	// itself, "length" when the client's max_tokens cut it; "" means "length".
	// Added beside the brief's API: the engine cannot know why the output has MaxTokens tokens.
	FinishReason string
	// CacheSalt is vLLM's cache_salt: requests with different salts never share cache blocks.
	CacheSalt string
	// LoRAID is the adapter's id as vLLM numbers loaded adapters (lora_int_id, from 1), reported
	// as lora_id in BlockStored events; 0 for the base model.
	LoRAID int
}

// Stats is a snapshot of an engine, cheap to take (one short lock hold).
type Stats struct {
	// Running is the number of requests admitted and not yet finished (vllm:num_requests_running).
	Running int
	// Waiting is the number of queued requests (vllm:num_requests_waiting).
	Waiting int
	// KVUsage is the fraction in [0,1] of KV blocks held by running requests
	// (vllm:kv_cache_usage_perc).
	KVUsage float64
	// RunningLoRAs are the adapters with running requests, sorted
	// (vllm:lora_requests_info running_lora_adapters).
	RunningLoRAs []string
	// WaitingLoRAs are the adapters with queued requests, sorted (waiting_lora_adapters).
	WaitingLoRAs []string
	// MaxLoras is Config.MaxLoras (max_lora).
	MaxLoras int
	// BlockSize is tokens per block and NumGPUBlocks the pool size in blocks
	// (vllm:cache_config_info block_size, num_gpu_blocks).
	BlockSize, NumGPUBlocks int
	// PrefixCacheQueries and PrefixCacheHits count prompt tokens looked up in, and found in, the
	// prefix cache at admission (vllm:prefix_cache_queries, vllm:prefix_cache_hits). Both stay 0
	// when prefix caching is off.
	PrefixCacheQueries, PrefixCacheHits int64
	// PromptTokens counts prompt tokens of requests whose first token was produced
	// (vllm:prompt_tokens_total); GenerationTokens counts output tokens produced
	// (vllm:generation_tokens_total).
	PromptTokens, GenerationTokens int64
}

// Engine schedules requests on a modelled vLLM server. It is safe for concurrent use; see the
// package documentation for the model.
type Engine struct {
	cfg   Config
	clock clock.WithTicker
	start time.Time // epoch: due times are offsets from it

	scratch sync.Pool // *scratch for tokenizing and hashing outside the lock
	// hashers are VLLMBlockHashers for the event hashes (Config.KVEvents), used outside the lock.
	hashers sync.Pool

	mu          sync.Mutex
	closed      bool
	rng         *rand.Rand
	pool        *blockPool
	nextID      uint64
	qHead       *Sequence // waiting queue, FIFO, intrusive
	qTail       *Sequence
	waiting     int
	running     int
	loraRunning map[string]int
	loraWaiting map[string]int
	events      seqHeap // running sequences by next due time
	counters    Stats   // only the counter fields are used

	loopArmed  bool
	loopTarget time.Duration
	kick       chan struct{}
	done       chan struct{}
	loopDone   chan struct{}
}

type scratch struct {
	ids []uint32
	buf []byte
}

// New validates cfg and starts an engine. Errors name the offending Config field. Close it
// when done.
func New(cfg Config) (*Engine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	e := &Engine{
		cfg:         cfg,
		clock:       clk,
		start:       clk.Now(),
		rng:         rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)),
		pool:        newBlockPool(cfg.KVCacheSize),
		loraRunning: map[string]int{},
		loraWaiting: map[string]int{},
		kick:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		loopDone:    make(chan struct{}),
	}
	e.scratch.New = func() any { return &scratch{} }
	e.hashers.New = func() any { return NewVLLMBlockHasher(cfg.KVEventsHashSeed) }
	e.pool.events = cfg.KVEvents != nil && cfg.EnablePrefixCaching
	if cfg.Stepped {
		close(e.loopDone)
	} else {
		go e.loop()
	}
	return e, nil
}

// now is the engine time: the clock's time since the epoch.
func (e *Engine) now() time.Duration { return e.clock.Since(e.start) }

// Submit tokenizes and hashes r's prompt and enqueues it (FIFO); it runs at once when a slot,
// an adapter slot and KV blocks are free. The returned Sequence delivers its tokens through
// Next; Close it when done with it.
//
// ctx governs the sequence's whole life: when it is cancelled, the sequence is aborted (removed
// from the queue, or its slot and blocks released). Errors: ctx.Err() if ctx is already done;
// an error naming the Request field for bad input (MaxTokens < 1, or ≠ 0 with PrefillOnly;
// unknown FinishReason);
// ErrPromptTooLong (wrapped) when prompt tokens + MaxTokens > MaxModelLen; ErrQueueFull;
// ErrEngineClosed.
func (e *Engine) Submit(ctx context.Context, r Request) (*Sequence, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch {
	case r.PrefillOnly && r.MaxTokens != 0:
		return nil, fmt.Errorf("engine: Request.MaxTokens must be 0 with PrefillOnly, got %d", r.MaxTokens)
	case !r.PrefillOnly && r.MaxTokens < 1:
		return nil, fmt.Errorf("engine: Request.MaxTokens must be at least 1, got %d", r.MaxTokens)
	}
	finish := r.FinishReason
	switch finish {
	case "":
		finish = FinishLength
		if r.PrefillOnly {
			finish = FinishStop
		}
	case FinishStop, FinishLength:
	default:
		return nil, fmt.Errorf("engine: Request.FinishReason must be %q, %q or empty, got %q", FinishStop, FinishLength, r.FinishReason)
	}

	sc := e.scratch.Get().(*scratch)
	if r.TokenIDs != nil {
		sc.ids = append(sc.ids[:0], r.TokenIDs...)
	} else {
		sc.ids = appendTokenIDs(sc.ids[:0], r.Prompt)
	}
	prompt := len(sc.ids)
	if prompt+r.MaxTokens > e.cfg.MaxModelLen {
		e.scratch.Put(sc)
		return nil, fmt.Errorf("%w: %d prompt tokens + %d output tokens > %d", ErrPromptTooLong, prompt, r.MaxTokens, e.cfg.MaxModelLen)
	}
	s := &Sequence{
		e:           e,
		req:         r,
		finish:      finish,
		prompt:      prompt,
		totalBlocks: ceilDiv(prompt+r.MaxTokens, e.cfg.BlockSize),
		heapIdx:     -1,
		wake:        make(chan struct{}, 1),
	}
	if e.cfg.EnablePrefixCaching {
		var root uint64
		root, sc.buf = rootHashBuf(r.Model, r.LoRA, r.CacheSalt, sc.buf)
		s.hashes, sc.buf = appendBlockHashes(make([]uint64, 0, prompt/e.cfg.BlockSize), root, sc.ids, e.cfg.BlockSize, sc.buf)
		if e.pool.events {
			h := e.hashers.Get().(*VLLMBlockHasher)
			s.ext = h.Append(make([]uint64, 0, len(s.hashes)), sc.ids, e.cfg.BlockSize, r.LoRA, r.CacheSalt)
			e.hashers.Put(h)
			s.ids = append([]uint32(nil), sc.ids[:len(s.hashes)*e.cfg.BlockSize]...)
		}
	}
	e.scratch.Put(sc)
	// The prompt is tokenized and hashed; the sequence does not keep its text (a queue of
	// thousands of long prompts would otherwise hold them all).
	s.req.Prompt = ""

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrEngineClosed
	}
	now := e.now()
	e.advanceLocked(now)
	s.id = e.nextID
	e.nextID++
	s.arrival = now
	e.enqueueLocked(s)
	e.tryAdmitLocked(now)
	if s.state == stateWaiting && e.waiting > e.cfg.MaxWaitingQueueLength {
		e.dequeueLocked(s)
		s.state = stateRejected
		return nil, ErrQueueFull
	}
	s.stopCtx = context.AfterFunc(ctx, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.advanceLocked(e.now())
		e.abortLocked(s, context.Cause(ctx))
	})
	return s, nil
}

// Stats returns a snapshot after bringing the engine up to date with its clock.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	e.advanceLocked(e.now())
	st := e.counters
	st.Running = e.running
	st.Waiting = e.waiting
	st.KVUsage = float64(e.pool.used) / float64(e.pool.capacity)
	st.RunningLoRAs = sortedKeys(e.loraRunning)
	st.WaitingLoRAs = sortedKeys(e.loraWaiting)
	e.mu.Unlock()
	st.MaxLoras = e.cfg.MaxLoras
	st.BlockSize = e.cfg.BlockSize
	st.NumGPUBlocks = e.cfg.KVCacheSize
	return st
}

func sortedKeys(m map[string]int) []string {
	if len(m) == 0 {
		return []string{}
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// NextDue brings the engine up to date with its clock and returns the engine-clock time of its
// next event: the next output token (or the first token, after the prefill) of a running
// sequence. ok is false when no sequence runs; waiting sequences have no due time of their own,
// they are admitted when a running one finishes. A driver of a Stepped engine advances the
// clock to the returned time and calls NextDue again.
func (e *Engine) NextDue() (at time.Time, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked(e.now())
	if len(e.events) == 0 {
		return time.Time{}, false
	}
	return e.start.Add(e.events[0].due), true
}

// PromptHashes is a prompt as an engine's prefix cache sees it: its length in tokens and the
// chained hashes of its full blocks. HashPrompt makes one; CachedPrefixTokens looks it up.
type PromptHashes struct {
	// Tokens is the prompt's length in tokens (Tokenize).
	Tokens int
	// Hashes are the chained hashes of the prompt's full blocks, root first.
	Hashes []uint64
	// BlockSize is the block size the hashes were computed with.
	BlockSize int
}

// HashPrompt tokenizes r's prompt and hashes its full blocks of blockSize tokens exactly as
// Submit does (model, LoRA adapter and cache salt in the root hash), so that the result can be
// looked up in any engine of that block size without tokenizing again.
func HashPrompt(r Request, blockSize int) PromptHashes {
	ids := appendTokenIDs(nil, r.Prompt)
	root, buf := rootHashBuf(r.Model, r.LoRA, r.CacheSalt, nil)
	hashes, _ := appendBlockHashes(make([]uint64, 0, len(ids)/max(blockSize, 1)), root, ids, blockSize, buf)
	return PromptHashes{Tokens: len(ids), Hashes: hashes, BlockSize: blockSize}
}

// CachedPrefixTokens returns how many prompt tokens of p a request admitted now would find in
// the prefix cache: the leading full blocks present in the pool, capped at p.Tokens − 1 tokens
// as at admission. It is 0 with prefix caching off or when p was hashed with another block size.
// It reads the engine without advancing it.
func (e *Engine) CachedPrefixTokens(p PromptHashes) int {
	if !e.cfg.EnablePrefixCaching || p.BlockSize != e.cfg.BlockSize {
		return 0
	}
	e.mu.Lock()
	hit := e.pool.cachedPrefix(p.Hashes)
	e.mu.Unlock()
	return min(hit, max(p.Tokens-1, 0)/e.cfg.BlockSize) * e.cfg.BlockSize
}

// Close aborts every waiting and running sequence (their Next returns ErrEngineClosed), stops
// the background goroutine and waits for it. It is idempotent and always returns nil.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		<-e.loopDone
		return nil
	}
	e.closed = true
	for e.qHead != nil {
		e.abortLocked(e.qHead, ErrEngineClosed)
	}
	for len(e.events) > 0 {
		e.abortLocked(e.events[0], ErrEngineClosed)
	}
	close(e.done)
	e.mu.Unlock()
	<-e.loopDone
	return nil
}

// loop is the background goroutine: it processes due events that no consumer is waiting for
// (a finish that frees a slot and admits a queued request, tokens of a stream nobody reads),
// waking at the next due time but at most once per loopMinGap, and not at all when idle.
func (e *Engine) loop() {
	defer close(e.loopDone)
	var timer clock.Timer
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return
		}
		now := e.now()
		e.advanceLocked(now)
		var tc <-chan time.Time
		if len(e.events) > 0 {
			wait := max(e.events[0].due-now, loopMinGap)
			e.loopArmed, e.loopTarget = true, now+wait
			if timer == nil {
				timer = e.clock.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C()
		} else {
			e.loopArmed = false
		}
		e.mu.Unlock()

		select {
		case <-tc:
		case <-e.kick:
			if timer != nil {
				timer.Stop()
			}
		case <-e.done:
		}
	}
}

// armLoopLocked makes sure the background goroutine wakes by due (within loopMinGap: a kick
// for an event only slightly earlier than the current target would defeat the rate bound).
func (e *Engine) armLoopLocked(due time.Duration) {
	if !e.loopArmed || due < e.loopTarget-loopMinGap {
		e.loopArmed, e.loopTarget = true, due
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
}

// advanceLocked processes, in due-time order, every event due at or before now. Each event is
// processed at its own due time, so the outcome does not depend on who calls or how late.
func (e *Engine) advanceLocked(now time.Duration) {
	for len(e.events) > 0 && e.events[0].due <= now {
		s := heap.Pop(&e.events).(*Sequence)
		e.emitLocked(s)
	}
}

// emitLocked produces s's next token at s.due.
func (e *Engine) emitLocked(s *Sequence) {
	t := s.due
	idx := s.emitted
	s.emitted++
	if !s.req.PrefillOnly {
		e.counters.GenerationTokens++
	}
	if idx == 0 {
		e.counters.PromptTokens += int64(s.prompt)
	}
	ev := Event{Index: idx, At: e.start.Add(t)}
	if s.req.PrefillOnly || s.emitted == s.req.MaxTokens {
		ev.Final, ev.FinishReason = true, s.finish
		e.deliverLocked(s, ev)
		s.state = stateDone
		s.endAt = t
		e.releaseLocked(s)
		if s.stopCtx != nil {
			s.stopCtx()
		}
		e.tryAdmitLocked(t)
	} else {
		e.deliverLocked(s, ev)
		f := loadFactor(e.cfg.TimeFactorUnderLoad, e.running, e.cfg.MaxNumSeqs)
		s.due = t + jitter(e.rng, scale(e.cfg.InterTokenLatency, f), e.cfg.InterTokenLatencyStdDev)
		heap.Push(&e.events, s)
	}
	// No signal: a consumer blocked in Next for this token sleeps on a timer armed for exactly
	// this due time and wakes by itself; waking it here too would double the wake-ups of every
	// token burst.
}

// deliverLocked hands a token to Config.OnToken, or queues it for Next.
func (e *Engine) deliverLocked(s *Sequence, ev Event) {
	if e.cfg.OnToken != nil {
		e.cfg.OnToken(s, ev)
		return
	}
	s.pushEvent(ev)
}

// tryAdmitLocked admits waiting requests at time t while slots are free: the first request in
// queue order whose LoRA adapter can run is taken; if its blocks do not fit, admission stops
// (head-of-line blocking on KV, as vLLM v1). Requests whose adapter cannot get a slot are
// skipped and keep their place.
func (e *Engine) tryAdmitLocked(t time.Duration) {
	if e.closed {
		return
	}
	for e.running < e.cfg.MaxNumSeqs {
		var s *Sequence
		for c := e.qHead; c != nil; c = c.qNext {
			if e.loraFitsLocked(c.req.LoRA) {
				s = c
				break
			}
		}
		if s == nil {
			return
		}
		if e.pool.plan(s.hashes, s.totalBlocks) > e.pool.available() {
			return
		}
		e.admitLocked(s, t)
	}
}

func (e *Engine) loraFitsLocked(lora string) bool {
	return lora == "" || e.loraRunning[lora] > 0 || len(e.loraRunning) < e.cfg.MaxLoras
}

// admitLocked moves s from the queue to running at time t: it takes s's blocks, records its
// cache hit and schedules its first token after the prefill time.
func (e *Engine) admitLocked(s *Sequence, t time.Duration) {
	e.dequeueLocked(s)
	e.running++
	if s.req.LoRA != "" {
		e.loraRunning[s.req.LoRA]++
	}
	bs := e.cfg.BlockSize
	if e.cfg.EnablePrefixCaching {
		// Leading full blocks found in the pool, capped so that at least one prompt token is
		// computed (vLLM kv_cache_manager.py get_computed_blocks: max_cache_hit_length =
		// num_tokens − 1, rounded down to whole blocks).
		hit := min(e.pool.cachedPrefix(s.hashes), max(s.prompt-1, 0)/bs)
		s.cached = hit * bs
		e.counters.PrefixCacheQueries += int64(s.prompt)
		e.counters.PrefixCacheHits += int64(s.cached)
	}
	s.blocks = e.pool.acquire(s.blocks[:0], s.hashes, s.ext, s.totalBlocks)
	if e.pool.events {
		e.publishAdmissionLocked(s, t)
	}

	f := loadFactor(e.cfg.TimeFactorUnderLoad, e.running, e.cfg.MaxNumSeqs)
	var prefill time.Duration
	if e.cfg.TimeToFirstToken != 0 || e.cfg.TimeToFirstTokenStdDev != 0 {
		// The simulator's fixed-TTFT mode (latencies.go GetTimeToFirstToken).
		prefill = jitter(e.rng, scale(e.cfg.TimeToFirstToken, f), e.cfg.TimeToFirstTokenStdDev)
	} else {
		base := e.cfg.PrefillOverhead + time.Duration(s.prompt-s.cached)*e.cfg.PrefillTimePerToken
		prefill = jitter(e.rng, scale(base, f), e.cfg.PrefillTimeStdDev)
	}
	s.state = stateRunning
	s.admitted = true
	s.admitAt = t
	s.due = t + prefill
	s.firstDue = s.due
	heap.Push(&e.events, s)
	e.armLoopLocked(s.due)
	s.signal()
}

// releaseLocked gives back s's running slot, adapter slot and blocks.
func (e *Engine) releaseLocked(s *Sequence) {
	e.running--
	if l := s.req.LoRA; l != "" {
		if e.loraRunning[l]--; e.loraRunning[l] == 0 {
			delete(e.loraRunning, l)
		}
	}
	nHashed := len(s.hashes)
	e.pool.release(s.blocks, nHashed)
	s.blocks = s.blocks[:0]
}

// abortLocked ends s with err unless it already ended. The caller has advanced the engine.
func (e *Engine) abortLocked(s *Sequence, err error) {
	switch s.state {
	case stateWaiting:
		e.dequeueLocked(s)
	case stateRunning:
		heap.Remove(&e.events, s.heapIdx)
		e.releaseLocked(s)
		e.tryAdmitLocked(e.now())
	default:
		return
	}
	s.state = stateAborted
	s.err = err
	if s.stopCtx != nil {
		s.stopCtx()
	}
	s.signal()
}

func (e *Engine) enqueueLocked(s *Sequence) {
	s.state = stateWaiting
	s.qPrev, s.qNext = e.qTail, nil
	if e.qTail != nil {
		e.qTail.qNext = s
	} else {
		e.qHead = s
	}
	e.qTail = s
	e.waiting++
	if s.req.LoRA != "" {
		e.loraWaiting[s.req.LoRA]++
	}
}

func (e *Engine) dequeueLocked(s *Sequence) {
	if s.qPrev != nil {
		s.qPrev.qNext = s.qNext
	} else {
		e.qHead = s.qNext
	}
	if s.qNext != nil {
		s.qNext.qPrev = s.qPrev
	} else {
		e.qTail = s.qPrev
	}
	s.qPrev, s.qNext = nil, nil
	e.waiting--
	if l := s.req.LoRA; l != "" {
		if e.loraWaiting[l]--; e.loraWaiting[l] == 0 {
			delete(e.loraWaiting, l)
		}
	}
}

// seqHeap orders running sequences by next due time, then by arrival, so that events at the
// same instant are processed in a fixed order.
type seqHeap []*Sequence

func (h seqHeap) Len() int { return len(h) }
func (h seqHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].id < h[j].id
}
func (h seqHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *seqHeap) Push(x any) {
	s := x.(*Sequence)
	s.heapIdx = len(*h)
	*h = append(*h, s)
}
func (h *seqHeap) Pop() any {
	old := *h
	n := len(old)
	s := old[n-1]
	old[n-1] = nil
	s.heapIdx = -1
	*h = old[:n-1]
	return s
}

// Latencies returns the latency settings in force.
func (e *Engine) Latencies() Latencies {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg.latencies()
}

// SetLatencies replaces the latency settings (the simulator's POST /admin/config latency keys).
// They apply from the next admission or token scheduled after the call; tokens already
// scheduled keep their due times. An out-of-range value is rejected, naming the field, and
// nothing changes.
func (e *Engine) SetLatencies(l Latencies) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	next := e.cfg
	next.setLatencies(l)
	if err := next.validate(); err != nil {
		return err
	}
	e.advanceLocked(e.now())
	e.cfg.setLatencies(l)
	return nil
}
