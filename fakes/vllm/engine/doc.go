// Package engine is the model of a vLLM GPU server behind eppkit's fake vLLM (fakes/vllm): it
// decides when each request runs and when each of its output tokens is due, so that a fake
// endpoint rewards the same routing a real one does (prefix-cache affinity, spreading load,
// keeping LoRA adapters together) without a GPU. SPEC.md §7 is the rulebook.
//
// What is modelled, and where each rule comes from:
//
//   - Tokenizer: the dummy tokenizer of llm-d-inference-sim (pkg/tokenizer/tokenizer.go): a token is
//     one punctuation character or a run of ASCII word characters, each with the whitespace that
//     follows it; its id is the FNV-32a hash of the token text. See Tokenize.
//   - Scheduler: MaxNumSeqs running slots and a FIFO waiting queue of MaxWaitingQueueLength
//     (llm-d-inference-sim pkg/llm-d-inference-sim/simulator.go: --max-num-seqs,
//     --max-waiting-queue-length; a full queue is a 429 there, ErrQueueFull here).
//   - KV cache: a pool of KVCacheSize blocks of BlockSize tokens. Full prompt blocks carry chained
//     hashes over token ids, with the base model, LoRA adapter and cache salt in the root hash (vLLM
//     vllm/v1/core/kv_cache_utils.py hash_block_tokens; llm-d-inference-sim pkg/kv-cache). A
//     request's cache hit is the run of leading full blocks found in the pool, capped at
//     prompt length − 1 tokens (vLLM vllm/v1/core/kv_cache_manager.py get_computed_blocks: at
//     least one prompt token is always computed). Unreferenced blocks stay cached and are evicted
//     least recently used first; a block a running request holds is never evicted.
//   - Block allocation policy: a request takes all the blocks it can ever need,
//     ceil((prompt + MaxTokens) / BlockSize), when it is admitted, and gives them back when it
//     finishes or is aborted. Only its full prompt blocks are hashed (cacheable); the partial
//     prompt block and the output blocks are private. So a running request can never run out of
//     blocks and nothing is ever preempted (vLLM allocates decode blocks step by step and
//     preempts when the pool runs dry; this model trades that for determinism). KV usage is the
//     number of blocks held by running requests ÷ KVCacheSize.
//   - Pooling requests (Request.PrefillOnly, vLLM's pooling runner behind /v1/embeddings): a
//     running slot and ceil(prompt / BlockSize) blocks, prefilled like any request (cache hits
//     included), finished at the prefill time with no output token.
//   - Token-id prompts (Request.TokenIDs): the ids are the prompt's tokens as given, one token
//     each, hashed as they are (an OpenAI prompt of integers never goes through a tokenizer).
//   - Admission order: the waiting queue is scanned from its head. A request for a LoRA adapter
//     that cannot get one of the MaxLoras adapter slots is skipped — it keeps its place, and
//     requests behind it may run (as vLLM v1's scheduler and llm-d-inference-sim's dequeue do).
//     A request whose blocks do not fit in the pool blocks the queue: nothing behind it is
//     admitted until blocks are released (vLLM v1 stops scheduling waiting requests when
//     allocate_slots fails).
//   - Latency: TTFT = queue wait + prefill, where prefill = (PrefillOverhead + uncached prompt
//     tokens × PrefillTimePerToken) × load factor, or TimeToFirstToken × load factor when the
//     simulator's fixed-TTFT mode is on. Each later token follows the previous one after
//     InterTokenLatency × load factor, with the running count of that moment. The load factor is
//     1 + (TimeFactorUnderLoad − 1)(running − 1)/(MaxNumSeqs − 1) (llm-d-inference-sim
//     pkg/llm-d-inference-sim/latencies.go). Jitter is normal with the configured standard
//     deviation, clamped to [0.3, 1.7] × mean like the simulator's RandomNormTruncated
//     (pkg/common/utils.go), drawn from one seeded source.
//
// Time is virtual and exact: every event (admission, token, finish) happens at its computed due
// time on the engine's clock, however late the goroutine that notices it runs, and the engine is
// brought up to date by every call (Submit, Next, Stats) and by one background goroutine. With a
// k8s.io/utils/clock/testing FakeClock, a test steps the clock and then calls Next, which returns
// at once with every token already due; nothing sleeps. Sequence.Blocked tells a test that a
// goroutine is parked in Next.
//
// A discrete-event simulation drives the engine without goroutines or timers: Config.Stepped
// drops the background goroutine, Config.OnToken receives every token at its due time, and
// NextDue says when the next one is due, so the driver advances its virtual clock from event to
// event (bench/sim). HashPrompt and CachedPrefixTokens let it ask, without
// submitting, how much of a prompt an engine has cached.
//
// Cost: no goroutine or timer per token. A consumer blocked in Next sleeps on one timer it reuses
// for its whole stream; the background goroutine wakes at most once per millisecond (and not at
// all when idle) to process events nobody is waiting on, such as a finish that frees a slot.
package engine
