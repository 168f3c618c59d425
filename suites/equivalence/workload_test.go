package equivalence_test

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/filters"
)

const (
	minEndpoints = 1
	maxEndpoints = 16
)

var (
	models = []string{"meta-llama/Llama-3.1-8B-Instruct", "sql-lora", "tweet-summary-lora", "Qwen/Qwen2.5-7B"}
	salts  = []string{"", "", "", "tenant-a", "tenant-b"}
)

// endpointState is one endpoint the workload knows, in or out of the pool.
type endpointState struct {
	md      *framework.EndpointMetadata
	metrics *framework.Metrics
	inPool  bool
}

// workload generates requests, metrics and pool changes from one seeded source.
type workload struct {
	rng       *rand.Rand
	sh        shape
	endpoints []*endpointState // every endpoint ever created, in creation order
	templates []string
	nextIP    int
}

// churnEvent is one pool change: left names the key of an endpoint that left ("" = one joined).
type churnEvent struct {
	left    string
	bySweep bool
}

func newWorkload(rng *rand.Rand, sh shape) *workload {
	w := &workload{rng: rng, sh: sh}
	// Shared-prefix templates: a few long system prompts (some with characters JSON escapes),
	// a short one below one block, and an empty one.
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
		w.templates = append(w.templates, w.text(n))
	}
	return w
}

// text returns n characters drawn from a small alphabet that includes <, >, & and non-ASCII.
func (w *workload) text(n int) string {
	const alphabet = "abcdefghij klmnopqrstuvwxyz ABC 0123 .,;:!? <>&\"'\n\té"
	var b strings.Builder
	for b.Len() < n {
		b.WriteByte(alphabet[w.rng.IntN(len(alphabet))])
	}
	return b.String()
}

func (w *workload) newEndpoint() *endpointState {
	w.nextIP++
	name := fmt.Sprintf("vllm-%02d", w.nextIP)
	e := &endpointState{
		md: &framework.EndpointMetadata{Namespace: "eq", Name: name, PodName: name,
			Address: fmt.Sprintf("10.1.%d.%d", w.nextIP/200, w.nextIP%200+1), Port: 8000},
		metrics: &framework.Metrics{CacheBlockSize: w.sh.PoolBlockSize},
		inPool:  true,
	}
	if w.rng.IntN(2) == 0 {
		// A small num_gpu_blocks (half a request's blocks to four requests' worth), so autoTune
		// capacities force evictions too, some of them inside a single request.
		e.metrics.CacheNumGPUBlocks = max(1, w.sh.MaxBlocks*(1+w.rng.IntN(8))/2)
	}
	w.endpoints = append(w.endpoints, e)
	return e
}

func (w *workload) initialPool() []*framework.EndpointMetadata {
	n := minEndpoints + w.rng.IntN(maxEndpoints-minEndpoints+1)
	for range n {
		w.newEndpoint()
	}
	return w.poolMetadata()
}

func (w *workload) inPool() []*endpointState {
	var out []*endpointState
	for _, e := range w.endpoints {
		if e.inPool {
			out = append(out, e)
		}
	}
	return out
}

func (w *workload) poolMetadata() []*framework.EndpointMetadata {
	var out []*framework.EndpointMetadata
	for _, e := range w.inPool() {
		out = append(out, e.md)
	}
	return out
}

// churn makes at most one pool change: with probability 4% an endpoint leaves, with 4% one joins
// (a new one, or one that left earlier and comes back at the same address).
func (w *workload) churn() *churnEvent {
	live := w.inPool()
	switch r := w.rng.IntN(100); {
	case r < 4 && len(live) > minEndpoints:
		e := live[w.rng.IntN(len(live))]
		e.inPool = false
		return &churnEvent{left: e.md.Key(), bySweep: w.rng.IntN(2) == 0}
	case r < 8 && len(live) < maxEndpoints:
		var gone []*endpointState
		for _, e := range w.endpoints {
			if !e.inPool {
				gone = append(gone, e)
			}
		}
		if len(gone) > 0 && w.rng.IntN(2) == 0 {
			gone[w.rng.IntN(len(gone))].inPool = true
		} else {
			w.newEndpoint()
		}
		return &churnEvent{}
	}
	return nil
}

// snapshot returns request-scoped endpoints for the pool in a shuffled order, after randomising
// the load metrics of some endpoints. Call it once per pipeline per request: both calls see the
// same metrics only if nothing changed in between, so the metrics are updated by request, see
// request.
func (w *workload) snapshot() []*framework.Endpoint {
	live := w.inPool()
	out := make([]*framework.Endpoint, len(live))
	for i, e := range live {
		out[i] = framework.NewEndpoint(e.md, e.metrics.Clone())
	}
	return out
}

// request draws the next request, updates metrics, and orders the pool; it returns the request
// and a one-line summary for failure messages.
func (w *workload) request(i int) (*framework.LLMRequest, string) {
	for _, e := range w.inPool() {
		if w.rng.IntN(3) == 0 {
			e.metrics.WaitingQueueSize = w.rng.IntN(10)
			e.metrics.RunningRequests = w.rng.IntN(10)
			e.metrics.KVCacheUsage = float64(w.rng.IntN(101)) / 100
		}
	}
	// Candidate order varies between requests (upstream order is not stable).
	w.rng.Shuffle(len(w.endpoints), func(a, b int) { w.endpoints[a], w.endpoints[b] = w.endpoints[b], w.endpoints[a] })

	tpl := w.rng.IntN(len(w.templates))
	prefix := w.templates[tpl]
	suffix := w.text(w.rng.IntN(400))
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
		kind = "chat"
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
				framework.Message{Role: "user", Content: mustJSON(`[{"type":"text","text":` + jsonString(suffix) + `}]`)})
		}
		req.Body.ChatCompletions = &framework.ChatCompletionsRequest{Messages: msgs, CacheSalt: salt}
	} else {
		req.Body.Completions = &framework.CompletionsRequest{Prompt: prefix + suffix, CacheSalt: salt}
	}
	if w.sh.Filter == "header" {
		req.Headers[filters.TestEndpointSelectionHeader] = w.selectionHeader()
	}
	summary := fmt.Sprintf("%s %s model=%s salt=%q template=%d suffix=%d chars pool=%d", req.RequestID, kind, model, salt,
		tpl, len(suffix), len(w.inPool()))
	return req, summary
}

// selectionHeader names a random non-empty subset of the pool for header-based-testing-filter,
// each entry as "ip" or "ip:port", sometimes with an address that is not in the pool.
func (w *workload) selectionHeader() string {
	live := w.inPool()
	var parts []string
	for _, e := range live {
		if w.rng.IntN(2) == 0 {
			continue
		}
		if w.rng.IntN(2) == 0 {
			parts = append(parts, e.md.Address)
		} else {
			parts = append(parts, e.md.Key())
		}
	}
	if len(parts) == 0 {
		parts = append(parts, live[w.rng.IntN(len(live))].md.Key())
	}
	if w.rng.IntN(4) == 0 {
		parts = append(parts, "192.0.2.1:8000")
	}
	w.rng.Shuffle(len(parts), func(a, b int) { parts[a], parts[b] = parts[b], parts[a] })
	return strings.Join(parts, ",")
}
