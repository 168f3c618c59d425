// Package prefixworkload generates the seeded prefix-cache workloads shared by the equivalence
// suite (suites/equivalence: legacy-prefix-cache-scorer vs approx-prefix-cache-producer) and the
// score-parity tool (tools/gie-v1.5.0/score-parity: upstream GIE v1.5.0 vs eppkit): requests with
// shared prefixes, a pool of endpoints with small KV capacities, load metrics and pool churn. Like
// reference/plugins/benchfixture it is data only — no hashing, index or matching code — so it
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
// encoding/json escapes (<, >, &), quotes, control characters and a two-byte rune (é).
const alphabet = "abcdefghij klmnopqrstuvwxyz ABC 0123 .,;:!? <>&\"'\n\té"

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
// cache salt; 40% are chat requests (system message = the prefix; the user turn as a string, as
// content blocks with a field upstream drops, or as decoded JSON content after a null assistant
// message), 60% completions (prompt = prefix + suffix). It returns the request (RequestID
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
	if w.rng.IntN(5) < 2 {
		msgs := []framework.Message{{Role: "system", Content: prefix}}
		switch w.rng.IntN(3) {
		case 0:
			msgs = append(msgs, framework.Message{Role: "user", Content: suffix})
		case 1:
			// Content blocks as a JSON decoder delivers them, with fields upstream drops.
			msgs = append(msgs, framework.Message{Role: "user", Content: []any{
				map[string]any{"type": "text", "text": suffix, "cache_control": map[string]any{"type": "ephemeral"}},
			}})
		default:
			msgs = append(msgs, framework.Message{Role: "assistant", Content: nil},
				framework.Message{Role: "user", Content: decodedTextBlocks(suffix)})
		}
		kind = fmt.Sprintf("chat/%d", len(msgs))
		req.Body.ChatCompletions = &framework.ChatCompletionsRequest{Messages: msgs, CacheSalt: salt}
	} else {
		req.Body.Completions = &framework.CompletionsRequest{Prompt: prefix + suffix, CacheSalt: salt}
	}
	if w.cfg.SelectionHeader {
		req.Headers[filters.TestEndpointSelectionHeader] = w.selectionHeader()
	}
	summary := fmt.Sprintf("%s %s model=%s salt=%q template=%d suffix=%d bytes pool=%d", req.RequestID, kind, model, salt,
		tpl, len(suffix), len(w.InPool()))
	return req, summary
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
