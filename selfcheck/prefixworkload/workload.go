// Package prefixworkload generates the seeded prefix-cache workloads shared by the equivalence
// suite (suites/equivalence: legacy-prefix-cache-scorer vs approx-prefix-cache-producer) and the
// score-parity tool (tools/gie-v1.5.0/score-parity: upstream GIE v1.5.0 vs eppkit): requests with
// shared prefixes, a pool of endpoints with small KV capacities, load metrics and pool churn. Like
// selfcheck/benchfixture it is data only — no hashing, index or matching code — so it
// adds no shared code path between the implementations it feeds.
//
// Everything is drawn from one *rand.Rand, in a fixed order, so a seed reproduces a workload.
// Not safe for concurrent use.
package prefixworkload

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/filters"
)

// Pool size bounds: InitialPool draws MinEndpoints..MaxEndpoints endpoints and Churn keeps the
// pool within them.
const (
	MinEndpoints = 1
	MaxEndpoints = 16
)

// alphabet is what Text draws from: ASCII letters, digits and punctuation, the characters
// encoding/json escapes (<, >, &), quotes, control characters, a two-byte rune (é), three-byte
// CJK ideographs, kana and a Hangul syllable (日本語かカ한) and a four-byte rune (😀), so block
// boundaries fall inside multi-byte sequences when counted in bytes.
const alphabet = "abcdefghij klmnopqrstuvwxyz ABC 0123 .,;:!? <>&\"'\n\té日本語かカ한😀"

var (
	models = []string{"meta-llama/Llama-3.1-8B-Instruct", "sql-lora", "tweet-summary-lora", "Qwen/Qwen2.5-7B"}
	salts  = []string{"", "", "", "tenant-a", "tenant-b"}
)

// Config is what a workload needs from its caller's configuration.
type Config struct {
	// MaxBlocks is the producer's maxPrefixBlocksToMatch; about half the endpoints report a
	// num_gpu_blocks of MaxBlocks×k/2 (k = 1..8, at least 1), so autoTune capacities evict, some
	// of them within a single request.
	MaxBlocks int
	// PoolBlockSize is the vllm:cache_config_info{block_size} every endpoint reports (0 = none).
	PoolBlockSize int
	// SelectionHeader puts header-based-testing-filter's header (a random non-empty subset of the
	// pool, sometimes with an address outside it) on every request.
	SelectionHeader bool
	// ValidUTF8 makes Text draw whole runes. By default it draws bytes, so half of an é can appear
	// (plugins receiving requests in-process must cope); a JSON body cannot carry invalid UTF-8
	// past a decoder, so a harness that sends requests as JSON sets it.
	ValidUTF8 bool
	// AllAPIs draws requests of every API and input form of SPEC §9.1: besides completions (text)
	// and chat (text, image, audio and file parts), token-id prompts, tool calls and tool
	// definitions, embeddings, Anthropic Messages and OpenAI Responses. Without it, only the
	// forms upstream v1.5.0's request parser reads (the score-parity tool).
	AllAPIs bool
}

// Endpoint is one endpoint the workload created, in or out of the pool.
type Endpoint struct {
	// Metadata is fixed for the endpoint's life (name vllm-NN, address 10.1.x.y, port 8000).
	Metadata *framework.EndpointMetadata
	// Metrics are the endpoint's current metrics; Request updates the load fields of some.
	Metrics *framework.Metrics
	// InPool says whether the endpoint is currently in the pool.
	InPool bool
}

// ChurnEvent is one pool change made by Churn.
type ChurnEvent struct {
	// Left is the Key() of the endpoint that left; "" when one joined.
	Left string
	// BySweep says a leave should be discovered by the producer's periodic sweep rather than a
	// discovery event.
	BySweep bool
}

// Workload generates requests, metrics and pool changes from one seeded source.
type Workload struct {
	rng       *rand.Rand
	cfg       Config
	endpoints []*Endpoint // every endpoint ever created; Request reorders them
	templates []string
	nextIP    int
}

// New returns a workload drawing from rng. It draws seven shared-prefix templates at once: an
// empty one, a 3-character one (below one block) and five of 100–1,999 characters.
func New(rng *rand.Rand, cfg Config) *Workload {
	w := &Workload{rng: rng, cfg: cfg}
	for i := range 7 {
		var n int
		switch i {
		case 0:
			n = 0
		case 1:
			n = 3
		default:
			n = 100 + rng.IntN(1900)
		}
		w.templates = append(w.templates, w.Text(n))
	}
	return w
}

// Text returns at least n bytes drawn from the workload's alphabet (exactly n unless ValidUTF8
// ends it on a two-byte rune).
func (w *Workload) Text(n int) string {
	var b strings.Builder
	if w.cfg.ValidUTF8 {
		runes := []rune(alphabet)
		for b.Len() < n {
			b.WriteRune(runes[w.rng.IntN(len(runes))])
		}
		return b.String()
	}
	for b.Len() < n {
		b.WriteByte(alphabet[w.rng.IntN(len(alphabet))])
	}
	return b.String()
}

func (w *Workload) newEndpoint() *Endpoint {
	w.nextIP++
	name := fmt.Sprintf("vllm-%02d", w.nextIP)
	e := &Endpoint{
		Metadata: &framework.EndpointMetadata{Namespace: "eq", Name: name, PodName: name,
			Address: fmt.Sprintf("10.1.%d.%d", w.nextIP/200, w.nextIP%200+1), Port: 8000},
		Metrics: &framework.Metrics{CacheBlockSize: w.cfg.PoolBlockSize},
		InPool:  true,
	}
	if w.rng.IntN(2) == 0 {
		// A small num_gpu_blocks (half a request's blocks to four requests' worth), so autoTune
		// capacities force evictions too, some of them inside a single request.
		e.Metrics.CacheNumGPUBlocks = max(1, w.cfg.MaxBlocks*(1+w.rng.IntN(8))/2)
	}
	w.endpoints = append(w.endpoints, e)
	return e
}

// InitialPool creates MinEndpoints..MaxEndpoints endpoints and returns the pool's metadata.
// Call it once, before the first Request.
func (w *Workload) InitialPool() []*framework.EndpointMetadata {
	n := MinEndpoints + w.rng.IntN(MaxEndpoints-MinEndpoints+1)
	for range n {
		w.newEndpoint()
	}
	return w.PoolMetadata()
}

// InPool returns the endpoints currently in the pool, in the order the last Request drew.
func (w *Workload) InPool() []*Endpoint {
	var out []*Endpoint
	for _, e := range w.endpoints {
		if e.InPool {
			out = append(out, e)
		}
	}
	return out
}

// PoolMetadata returns the metadata of InPool.
func (w *Workload) PoolMetadata() []*framework.EndpointMetadata {
	var out []*framework.EndpointMetadata
	for _, e := range w.InPool() {
		out = append(out, e.Metadata)
	}
	return out
}

// Churn makes at most one pool change and returns it (nil = none): with probability 4% an
// endpoint leaves, with 4% one joins (a new one, or one that left earlier and comes back at the
// same address), within MinEndpoints..MaxEndpoints.
func (w *Workload) Churn() *ChurnEvent {
	live := w.InPool()
	switch r := w.rng.IntN(100); {
	case r < 4 && len(live) > MinEndpoints:
		e := live[w.rng.IntN(len(live))]
		e.InPool = false
		return &ChurnEvent{Left: e.Metadata.Key(), BySweep: w.rng.IntN(2) == 0}
	case r < 8 && len(live) < MaxEndpoints:
		var gone []*Endpoint
		for _, e := range w.endpoints {
			if !e.InPool {
				gone = append(gone, e)
			}
		}
		if len(gone) > 0 && w.rng.IntN(2) == 0 {
			gone[w.rng.IntN(len(gone))].InPool = true
		} else {
			w.newEndpoint()
		}
		return &ChurnEvent{}
	}
	return nil
}

// Snapshot returns request-scoped endpoints for the pool, in InPool order, each with a copy of
// its current metrics. Call it once per pipeline per request, after Request.
func (w *Workload) Snapshot() []*framework.Endpoint {
	live := w.InPool()
	out := make([]*framework.Endpoint, len(live))
	for i, e := range live {
		out[i] = framework.NewEndpoint(e.Metadata, e.Metrics.Clone())
	}
	return out
}

// Request draws request number i: it first randomises the load metrics (queue, running, KV
// usage) of about a third of the pool and reorders the endpoints (upstream's candidate order is
// not stable), then draws a template prefix plus a random suffix of 0–399 bytes, a model and a
// cache salt. Without AllAPIs, 40% are chat requests (system message = the prefix; the user turn
// as a string, as content blocks with a field upstream drops, as decoded JSON content after a
// null assistant message, or as text, a non-text part and text) and 60% completions (prompt =
// prefix + suffix). With AllAPIs, 40% chat (a quarter of them with tools and a tool call), 20%
// completions, 10% each token-id completions, embeddings (text or ids), Anthropic Messages
// (system = the prefix, an image block) and Responses (instructions = the prefix; a string
// input or an item with an inline image). It returns the request (RequestID
// "req-NNNN") and a one-line summary for failure messages.
func (w *Workload) Request(i int) (*framework.LLMRequest, string) {
	for _, e := range w.InPool() {
		if w.rng.IntN(3) == 0 {
			e.Metrics.WaitingQueueSize = w.rng.IntN(10)
			e.Metrics.RunningRequests = w.rng.IntN(10)
			e.Metrics.KVCacheUsage = float64(w.rng.IntN(101)) / 100
		}
	}
	w.rng.Shuffle(len(w.endpoints), func(a, b int) { w.endpoints[a], w.endpoints[b] = w.endpoints[b], w.endpoints[a] })

	tpl := w.rng.IntN(len(w.templates))
	prefix := w.templates[tpl]
	suffix := w.Text(w.rng.IntN(400))
	model := models[w.rng.IntN(len(models))]
	salt := salts[w.rng.IntN(len(salts))]
	req := &framework.LLMRequest{
		RequestID:   fmt.Sprintf("req-%04d", i),
		TargetModel: model,
		Headers:     map[string]string{},
		Body:        &framework.LLMRequestBody{},
	}
	kind := "completions"
	roll := w.rng.IntN(10)
	if !w.cfg.AllAPIs {
		roll = min(roll, 5) // 0-3 chat, 4-5 completions
	}
	switch roll {
	case 0, 1, 2, 3:
		msgs := []framework.Message{{Role: "system", Content: prefix}}
		switch w.rng.IntN(5) {
		case 0:
			msgs = append(msgs, framework.Message{Role: "user", Content: suffix})
		case 1:
			// Content blocks as a JSON decoder delivers them, with fields upstream drops.
			msgs = append(msgs, framework.Message{Role: "user", Content: []any{
				map[string]any{"type": "text", "text": suffix, "cache_control": map[string]any{"type": "ephemeral"}},
			}})
		case 2:
			msgs = append(msgs, framework.Message{Role: "assistant", Content: nil},
				framework.Message{Role: "user", Content: decodedTextBlocks(suffix)})
		default:
			// A multimodal turn: text, then one of a few non-text parts, then text again.
			msgs = append(msgs, framework.Message{Role: "user", Content: decoded([]any{
				map[string]any{"type": "text", "text": suffix},
				w.mediaPart(),
				map[string]any{"type": "text", "text": w.Text(w.rng.IntN(100))},
			})})
		}
		chat := &framework.ChatCompletionsRequest{Messages: msgs, CacheSalt: salt}
		if w.cfg.AllAPIs && w.rng.IntN(4) == 0 {
			chat.Tools = decoded([]any{map[string]any{"type": "function", "function": map[string]any{"name": "lookup", "parameters": map[string]any{}}}}).([]any)
			chat.Messages = append(chat.Messages,
				framework.Message{Role: "assistant", ToolCalls: decoded([]any{map[string]any{"id": "call-1", "type": "function",
					"function": map[string]any{"name": "lookup", "arguments": w.Text(20)}}}).([]any)},
				framework.Message{Role: "tool", ToolCallID: "call-1", Content: w.Text(30)})
		}
		kind = fmt.Sprintf("chat/%d", len(chat.Messages))
		req.Body.ChatCompletions = chat
	case 4, 5:
		req.Body.Completions = &framework.CompletionsRequest{Prompt: prefix + suffix, CacheSalt: salt}
	case 6:
		kind = "completions/token-ids"
		req.Body.Completions = &framework.CompletionsRequest{TokenIDs: w.tokenIDs(tpl, len(suffix)/4), CacheSalt: salt}
	case 7:
		kind = "embeddings"
		if w.rng.IntN(2) == 0 {
			req.Body.Embeddings = &framework.EmbeddingsRequest{Input: prefix + suffix, CacheSalt: salt}
		} else {
			req.Body.Embeddings = &framework.EmbeddingsRequest{TokenIDs: w.tokenIDs(tpl, len(suffix)/4), CacheSalt: salt}
		}
	case 8:
		kind = "messages"
		req.Body.Messages = &framework.MessagesRequest{System: prefix, CacheSalt: salt, Messages: []framework.Message{
			{Role: "user", Content: decoded([]any{
				map[string]any{"type": "text", "text": suffix},
				map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": w.Text(40)}},
			})}}}
	default:
		kind = "responses"
		r := &framework.ResponsesRequest{Instructions: prefix, CacheSalt: salt, Input: suffix}
		if w.rng.IntN(2) == 0 {
			r.Input = decoded([]any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": suffix},
				map[string]any{"type": "input_image", "image_url": "data:image/png;base64," + w.Text(30)},
			}}})
		}
		req.Body.Responses = r
	}
	req.Body.API = apiOf(req.Body)
	if w.cfg.SelectionHeader {
		req.Headers[filters.TestEndpointSelectionHeader] = w.selectionHeader()
	}
	summary := fmt.Sprintf("%s %s model=%s salt=%q template=%d suffix=%d bytes pool=%d", req.RequestID, kind, model, salt,
		tpl, len(suffix), len(w.InPool()))
	return req, summary
}

// mediaPart draws one non-text chat content part: an image by URL (one of four) or inline (a
// data: URL over one of four payloads), an audio clip or a file, so that requests with the same
// text differ only in the part.
func (w *Workload) mediaPart() map[string]any {
	n := w.rng.IntN(4)
	switch w.rng.IntN(4) {
	case 0:
		return map[string]any{"type": "image_url", "image_url": map[string]any{"url": fmt.Sprintf("https://img.example/%d.png", n)}}
	case 1:
		return map[string]any{"type": "image_url", "image_url": map[string]any{"url": fmt.Sprintf("data:image/png;base64,iVBOR%dAAAA", n)}}
	case 2:
		return map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": fmt.Sprintf("UklGR%d", n), "format": "wav"}}
	default:
		return map[string]any{"type": "file", "file": map[string]any{"filename": "doc.pdf", "file_data": fmt.Sprintf("JVBERi%d", n)}}
	}
}

// tokenIDs returns a token-id prompt: 20–200 ids derived from the template (so prompts of one
// template share a prefix) followed by extra random ids.
func (w *Workload) tokenIDs(tpl, extra int) []uint32 {
	n := 20 + tpl*30
	ids := make([]uint32, 0, n+extra)
	for i := range n {
		ids = append(ids, uint32(tpl*1000+i*7))
	}
	for range extra {
		ids = append(ids, w.rng.Uint32())
	}
	return ids
}

// apiOf names the API whose field of b is set.
func apiOf(b *framework.LLMRequestBody) framework.API {
	switch {
	case b.ChatCompletions != nil:
		return framework.APIChatCompletions
	case b.Embeddings != nil:
		return framework.APIEmbeddings
	case b.Messages != nil:
		return framework.APIMessages
	case b.Responses != nil:
		return framework.APIResponses
	}
	return framework.APICompletions
}

// decoded returns v after a JSON round trip, as a JSON decoder delivers it to plugins ([]any of
// map[string]any, numbers as float64).
func decoded(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // built from strings, maps and slices: always marshals
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// decodedTextBlocks returns [{"type":"text","text":s}] as encoding/json decodes it into an any
// ([]any of map[string]any), the way a chat body's content reaches a plugin.
func decodedTextBlocks(s string) any {
	js, err := json.Marshal(s)
	if err != nil {
		panic(err) // a string always marshals
	}
	var v any
	if err := json.Unmarshal([]byte(`[{"type":"text","text":`+string(js)+`}]`), &v); err != nil {
		panic(err) // built from a marshalled string: always valid
	}
	return v
}

// selectionHeader names a random non-empty subset of the pool for header-based-testing-filter,
// each entry as "ip" or "ip:port", sometimes with an address that is not in the pool.
func (w *Workload) selectionHeader() string {
	live := w.InPool()
	var parts []string
	for _, e := range live {
		if w.rng.IntN(2) == 0 {
			continue
		}
		if w.rng.IntN(2) == 0 {
			parts = append(parts, e.Metadata.Address)
		} else {
			parts = append(parts, e.Metadata.Key())
		}
	}
	if len(parts) == 0 {
		parts = append(parts, live[w.rng.IntN(len(live))].Metadata.Key())
	}
	if w.rng.IntN(4) == 0 {
		parts = append(parts, "192.0.2.1:8000")
	}
	w.rng.Shuffle(len(parts), func(a, b int) { parts[a], parts[b] = parts[b], parts[a] })
	return strings.Join(parts, ",")
}
