// Package benchfixture holds the fixed data of the prefix-cache benchmarks, so the
// approx-prefix-cache-producer (reference/plugins/prefix) and legacy-prefix-cache-scorer
// (reference/plugins/legacyprefix) benchmarks measure the same thing. It is data only — requests,
// endpoint metadata and which endpoint served which warm-up request — and contains no hashing,
// index or matching code, so it adds no shared code path between the two implementations.
//
// The fixture: 100 endpoints; an 8,000-character completions prompt; endpoints 0–9 served the
// whole prompt and endpoints 10–39 served its first half (4,000 characters), so with 16-token
// (64-character) blocks the measured request has 125 blocks, 10 endpoints match 125 and 30 match 62.
package benchfixture

import (
	"fmt"
	"strings"

	"github.com/eppkit/eppkit/reference/framework"
)

const (
	// NumEndpoints is the number of endpoints in the pool.
	NumEndpoints = 100
	// NumFull is how many endpoints (0 .. NumFull-1) served the whole prompt.
	NumFull = 10
	// NumHalf is how many endpoints (NumFull .. NumFull+NumHalf-1) served the first half.
	NumHalf = 30
	// PromptChars is the prompt length in characters (bytes).
	PromptChars = 8000
	// Model is the target model of every request.
	Model = "meta-llama/Llama-3.1-8B-Instruct"
)

// Prompt returns the 8,000-character ASCII prompt.
func Prompt() string {
	return strings.Repeat("The quick brown fox jumps over the lazy dog. ", 200)[:PromptChars]
}

// EndpointMetadata returns the 100 endpoints: name pod-000 … pod-099, namespace "ns",
// address 10.0.(i/250).(i%250+1), port 8000.
func EndpointMetadata() []*framework.EndpointMetadata {
	out := make([]*framework.EndpointMetadata, NumEndpoints)
	for i := range out {
		name := fmt.Sprintf("pod-%03d", i)
		out[i] = &framework.EndpointMetadata{Namespace: "ns", Name: name, PodName: name,
			Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 8000}
	}
	return out
}

// NewEndpoints returns fresh request-scoped endpoints (empty metrics, no attributes) for mds.
// Each request needs its own.
func NewEndpoints(mds []*framework.EndpointMetadata) []*framework.Endpoint {
	out := make([]*framework.Endpoint, len(mds))
	for i, md := range mds {
		out[i] = framework.NewEndpoint(md, &framework.Metrics{})
	}
	return out
}

// Request returns a completions request for prompt with the fixture's model.
func Request(id, prompt string) *framework.LLMRequest {
	return &framework.LLMRequest{RequestID: id, TargetModel: Model,
		Body: &framework.LLMRequestBody{Completions: &framework.CompletionsRequest{Prompt: prompt}}}
}

// Warmup is one request to run through a plugin's PrepareData/Score and PreRequest, with the
// index (into EndpointMetadata) of the endpoint that was picked for it.
type Warmup struct {
	Request *framework.LLMRequest
	Target  int
}

// Warmups returns the 40 warm-up requests: the whole prompt to endpoints 0–9 and its first
// half to endpoints 10–39, in that order.
func Warmups() []Warmup {
	prompt := Prompt()
	out := make([]Warmup, 0, NumFull+NumHalf)
	for i := 0; i < NumFull+NumHalf; i++ {
		p := prompt
		if i >= NumFull {
			p = prompt[:PromptChars/2]
		}
		out = append(out, Warmup{Request: Request(fmt.Sprintf("warm-%d", i), p), Target: i})
	}
	return out
}
