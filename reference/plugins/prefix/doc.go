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
// # Input (SPEC §2.1, §9.1)
//
//   - Completions prompt and embeddings input: the text as sent (an array of strings joined with
//     one space, as v1.5.0 Prompt.PlainText: strings.Join(p.Strings, " ") — the request parser
//     stores the joined string), or the token ids ([]int, or [][]int concatenated in order).
//   - Chat: json.Marshal of the messages as typed structs, as v1.5.0 encodes them: each message
//     {"role" (omitted when empty), "content"}; content is the raw string when it is a non-empty
//     string, else the array of content blocks when it is an array, else ""; each content block
//     is {"type", "text" (omitted when empty), "image_url":{"url"?}, "input_audio":{"data"?,
//     "format"?}, "video_url":{"url"?}} — unknown block fields are dropped and the three
//     sub-objects are always present. Go's encoding/json defaults apply (<, >, & escaped as
//     <, >, &; U+2028/U+2029 escaped). eppkit adds, so that every part reaches the
//     hash by identity (each addition is omitted when empty, so a chat of text and URL parts
//     encodes byte for byte as in v1.5.0): inline data — a data: URL (RFC 2397) in image_url or
//     video_url, input_audio.data — is replaced by its Digest ("xxh64:" + 16 hex digits of
//     xxhash64); a file part keeps "file":{"file_id"?, "filename"?, "file_data"? (Digest)}; an
//     assistant message keeps "tool_calls" as sent and a tool message "tool_call_id"; non-empty
//     "tools" come first, as {"tools":[...]} before the messages array (chat templates render them
//     before the conversation).
//   - Anthropic Messages: the list [{"role":"system","content":system}?, {"role","content"} per
//     message], and OpenAI Responses: [{"role":"system","content":instructions}?, then
//     {"role":"user","content":input} for a string input or each input item as sent]; in that
//     list every data: URL string and every string under a "data" or "file_data" key is replaced
//     by its Digest; encoded with encoding/json (map keys sorted); non-empty tools first as above.
//   - Any other API: no input (no blocks; routed without prefix affinity).
//
// # Hashing (SPEC §2.1)
//
//   - Text blocks are blockSizeTokens × 4 characters (Unicode code points; a block never ends
//     inside a UTF-8 sequence; an invalid byte counts as one character). For ASCII this is
//     v1.5.0's byte blocks. Token-id blocks are blockSizeTokens ids, each written as 4
//     little-endian bytes.
//   - The trailing partial block is hashed as a last, shorter block, so an input shorter than one
//     block has one block (GIE PR #2823 does the same upstream, after v1.5.0). An empty input has
//     none. At most maxBlocks blocks are hashed (the input is cut after them).
//   - seed = xxhash64(targetModel ‖ cacheSalt), the salt written only when non-empty;
//     h_i = xxhash64(block_i ‖ littleEndian64(h_{i−1})), h_{−1} = seed. The seed itself is not a block.
//   - maxBlocks = maxPrefixBlocksToMatch (default 256), or maxPrefixTokensToMatch / blockSizeTokens
//     when maxPrefixTokensToMatch > 0 (a v1.5.0 parameter SPEC does not name; we accept it).
//   - The input-token estimate of SPEC §4.1 (Input.EstimateTokens) counts the same input: one
//     token per id, or one per CJK ideograph, kana or Hangul syllable plus one per 4 other
//     characters.
//
// HashCompat (ProducerParameters.Compat, Go only) reverts these amendments one by one to v1.5.0's
// rules — no trailing partial block, byte blocks, v1.5.0's chat encoding — for the score-parity
// tool (tools/gie-v1.5.0/score-parity), which compares with the real module and names every
// difference by the rule that causes it.
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
