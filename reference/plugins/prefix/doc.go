// Package prefix implements approximate prefix-cache affinity (SPEC §2): the request hashing, the
// per-endpoint index of block hashes, the `approx-prefix-cache-producer` PrepareData plugin that
// puts a *PrefixCacheMatchInfo on every candidate, and the thin `prefix-cache-scorer` that turns it
// into a score.
//
// # Upstream source
//
// Ported in our own words from the Gateway API Inference Extension (GIE) v1.5.0, module
// sigs.k8s.io/gateway-api-inference-extension@v1.5.0, git tag v1.5.0 =
// commit df9f8909fe06fe2dfd4a6fc0bd0c01a0acabf849, files
//
//	pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/hashing.go  (hashPrompt, getUserInputBytes)
//	pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/plugin.go   (producer, PreRequest, GetBlockSize)
//	pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/indexer.go  (per-pod LRU + reverse map)
//	pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/types.go    (defaults, parameters)
//	pkg/epp/framework/plugins/scheduling/scorer/prefix/plugin.go                       (thin scorer)
//	pkg/epp/framework/interface/scheduling/types.go                                    (Prompt, Message, Content JSON shapes)
//	pkg/epp/config/loader/configloader.go                                              (scorer parameters → auto-created producer)
//
// # Hashing (SPEC §2.1), exactly as v1.5.0
//
//   - Input text. Completions: the prompt string; an array prompt is joined with one space
//     (v1.5.0 Prompt.PlainText: strings.Join(p.Strings, " ")) — the request parser stores the joined
//     string in framework.CompletionsRequest.Prompt. Chat: json.Marshal of the messages as typed
//     structs: each message {"role" (omitted when empty), "content"}; content is the raw string when
//     it is a non-empty string, else the array of content blocks when it is an array, else "";
//     each content block is {"type", "text" (omitted when empty), "image_url":{"url"?},
//     "input_audio":{"data"?,"format"?}, "video_url":{"url"?}} — unknown block fields are dropped and
//     the three sub-objects are always present. Go's encoding/json defaults apply (<, >, & escaped as
//     \u003c, \u003e, \u0026; U+2028/U+2029 escaped). Tools, documents and the other chat fields do not
//     take part (v1.5.0 hashes only the messages).
//   - Block size in characters (bytes of the input) = blockSizeTokens × 4.
//   - An input shorter than one block yields no hashes (TotalBlocks = 0). An input longer than
//     maxBlocks × blockChars is truncated to that many bytes. The trailing partial block is NOT
//     hashed in v1.5.0 (later upstream commits, GIE PR #2823, hash it; v1.5.0 does not).
//   - seed = xxhash64(targetModel ‖ cacheSalt), the salt written only when non-empty;
//     h_i = xxhash64(block_i ‖ littleEndian64(h_{i−1})), h_{−1} = seed. The seed itself is not a block.
//   - maxBlocks = maxPrefixBlocksToMatch (default 256), or maxPrefixTokensToMatch / blockSizeTokens
//     when maxPrefixTokensToMatch > 0 (a v1.5.0 parameter SPEC does not name; we accept it).
//
// # Where v1.5.0 and SPEC differ, and what this package does
//
//   - Auto-tuned block size: v1.5.0 reads CacheBlockSize of the FIRST CANDIDATE in list order only
//     and falls back to blockSizeTokens when that one endpoint reports none. SPEC §2.1 says "the
//     first endpoint, by name, that reports one". Candidate order is not stable upstream, so we
//     follow SPEC: endpoints sorted by EndpointMetadata.Name (then Key), the first with
//     CacheBlockSize > 0. On a fleet with one block size (the parity set-up) both agree.
//   - LRU capacity: v1.5.0 sizes a new endpoint's LRU with its num_gpu_blocks under autoTune, else
//     with the constant 31250 — the lruCapacityPerServer parameter is never used (the pod's
//     NumOfGPUBlocks is always > 0). We follow SPEC §2.2: lruCapacityPerServer, or under autoTune
//     the endpoint's CacheNumGPUBlocks when > 0; fixed at the endpoint's first insert.
//   - Reverse map: v1.5.0 Add first inserts every hash into the LRU (evicting, which removes the
//     pod from the reverse map), then adds the pod to the reverse map for every hash — so when one
//     request carries more blocks than the LRU holds, the reverse map lists hashes the LRU already
//     evicted. We insert into both at the same time, so the reverse map is exactly the union of the
//     LRUs (SPEC §2.2 "stays consistent on eviction").
//   - Indexing: v1.5.0 updates the index in a goroutine after PreRequest returns; ours is
//     synchronous (Index.Flush is a no-op barrier kept for callers that want one).
//   - Parameters: decoded strictly (unknown fields are errors), and nonsensical values
//     (maxPrefixBlocksToMatch ≤ 0, lruCapacityPerServer ≤ 0, negatives) are config errors naming the
//     field; v1.5.0 accepts them silently. The deprecated `blockSize` (characters) is accepted and
//     ignored with a warning when blockSizeTokens > 0, and is an error when blockSizeTokens ≤ 0, as
//     in v1.5.0.
//   - Plugin state: v1.5.0 keeps a private store per producer and deletes the whole request from it;
//     ours lives in the framework's shared PluginState under the producer's own key
//     (Producer.StateKey) and PreRequest deletes only that key.
//
// # Match length
//
// As v1.5.0 matchLongestPrefix: walk the request's hashes from block 0 and stop at the first hash
// that no endpoint in the whole index holds (not only the candidates); an endpoint's MatchBlocks
// is the number of hashes before that point that it holds. When an endpoint holds a leading run
// this is the run's length; when its LRU evicted early blocks (LRU order evicts block 0 first) the
// later blocks it still holds are counted, as upstream counts them.
package prefix
