// Package preciseprefix is the reference EPP's `precise-prefix-cache-producer` (llm-d-router
// v0.10.0, pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache): a
// PrepareData producer that does not guess what each model server cached, as
// `approx-prefix-cache-producer` does from its own picks, but follows the KV-cache events every
// vLLM engine publishes (vllm/distributed/kv_events.py) and produces the prefix match of each
// request from them.
//
// # Where the events come from (the contract)
//
// For every endpoint of the pool (framework.Handle.Endpoints, ensured again for the candidates
// of every request), the producer subscribes a ZMQ SUB socket to
// tcp://<endpoint IP>:<socketPort + rank index>, with the rank index of "<pod>-rank-<i>"
// endpoint names (0 otherwise), filtered on topicFilter (default "kv@"), as llm-d-router's
// per-pod subscribers do (extractor.go ensureSubscriber: podDiscoveryConfig.socketPort, default
// 5557). With replaySocketPort set it also asks tcp://<endpoint IP>:<replaySocketPort + rank>
// for every buffered batch from sequence 0 when it connects, and for the missing ones when it
// sees a gap (vLLM's replay protocol). A sequence number lower than the last one received live
// is a restarted engine: the endpoint's index is cleared and replayed, as llm-d-router does.
// An endpoint that leaves the pool loses its subscriber and its index.
//
// # What is indexed, and how a request matches
//
// The index holds, per endpoint, the blocks its events say are cached. Like llm-d's kv-cache
// indexer it keys blocks by its own request keys, computed from the tokens each BlockStored
// event carries (and the parent block's key), not by the engine's hashes, so it needs neither
// the engine's hash algorithm nor its seed: key(block i) = xxhash64(key(block i−1) ‖ the block's
// token ids as little-endian uint32), key(−1) = xxhash64(hashSeed ‖ 0 ‖ adapter ‖ 0 ‖ cache
// salt), where adapter is the event's lora_name ("" for the base model: one engine serves one
// base model, as vLLM's own hashes leave the model out) and the cache salt the one in the first
// block's extra_keys. A request is keyed the same way from its tokens and cache_salt, with its
// target model as the adapter when an event has named that model as an adapter, else "" (so a
// request for an adapter that has stored nothing yet is keyed as the base model: it can match
// the base model's blocks until its adapter's first event; the topic, which names the base
// model, is not used because vLLM's replay messages carry none). Only full blocks count (vLLM
// caches only full blocks). Tokens come from the model server's tokenizer; the only
// tokenizer the reference has is llm-d-inference-sim's dummy tokenizer (Tokenize), which eppkit's
// fake vLLM and the simulator use: parameter `tokenizer` (eppkit's; upstream takes tokens from
// a token-producer plugin). Completions prompts (text or token ids) are keyed; other APIs get
// TotalBlocks 0 (their chat template is the model server's).
//
// An endpoint's MatchBlocks is the run of the request's leading blocks it holds; TotalBlocks the
// request's full blocks. The attribute goes on every candidate under MatchInfoKey(name)
// ("PrefixCacheMatchInfo/<name>"), which `prefix-cache-scorer` reads when its
// `prefixMatchInfoProducerName` names this producer (upstream's pairing).
package preciseprefix
