// Package prefixtrace is the format of a prefix-score trace (JSON lines): one seeded workload of
// selfcheck/prefixworkload as upstream GIE v1.5.0's approx-prefix-cache-producer +
// prefix-cache-scorer saw it, with their results, so that another GIE version, built in a module
// of its own, can replay it and compare score by score. Written by tools/gie-v1.5.0/score-parity
// (-record), read by tools/llmd-v0.7.1/prefix-replay (make interop-llmd-prefix-scores).
package prefixtrace

import "encoding/json"

// The ops of a Line.
const (
	// OpConfig is the first line: Seed, Shape and Params (the producer parameters as JSON).
	OpConfig = "config"
	// OpLeave says the endpoint Leave left the pool (and every index).
	OpLeave = "leave"
	// OpRequest is one request: RequestID, Summary, Model (the target model), Path and Body (the
	// OpenAI wire body a client would send), Endpoints (the candidates in the order the producer
	// got them), V150 (v1.5.0's result for each, same order) and Pick (the index into Endpoints
	// of the endpoint PreRequest recorded).
	OpRequest = "request"
)

// Line is one line of a trace; which fields are set depends on Op.
type Line struct {
	Op        string          `json:"op"`
	Seed      int64           `json:"seed,omitempty"`
	Shape     json.RawMessage `json:"shape,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Leave     *Endpoint       `json:"leave,omitempty"`
	RequestID string          `json:"requestID,omitempty"`
	Summary   string          `json:"summary,omitempty"`
	Model     string          `json:"model,omitempty"`
	Path      string          `json:"path,omitempty"`
	Body      json.RawMessage `json:"body,omitempty"`
	Endpoints []Endpoint      `json:"endpoints,omitempty"`
	V150      []Score         `json:"v150,omitempty"`
	Pick      *int            `json:"pick,omitempty"`
}

// Endpoint is one candidate: its pod identity and the two metrics the prefix plugins read
// (vllm:cache_config_info block_size and num_gpu_blocks; 0 = not reported).
type Endpoint struct {
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	Address      string `json:"address"`
	Port         int    `json:"port"`
	BlockSize    int    `json:"blockSize"`
	NumGPUBlocks int    `json:"numGPUBlocks"`
}

// Score is one endpoint's prefix result: MatchBlocks, TotalBlocks and the scorer's score in [0,1].
type Score struct {
	Match int     `json:"match"`
	Total int     `json:"total"`
	Score float64 `json:"score"`
}
