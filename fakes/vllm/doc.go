// Package vllm is eppkit's fake vLLM GPU server: an OpenAI-compatible HTTP server whose flags,
// metrics, admin endpoint and failure injection follow llm-d-inference-sim v0.10.2
// (github.com/llm-d/llm-d-inference-sim, pkg/common/config.go and pkg/llm-d-inference-sim), backed
// by the queueing and KV-cache engine in fakes/vllm/engine. SPEC.md §7 is the rulebook.
//
// One Server is one data-parallel rank: its own engine, port and /metrics. Start starts all ranks
// of a Config (rank i listens on Port+i) and returns an Instance.
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions (JSON or SSE), GET /v1/models,
// POST /v1/load_lora_adapter, POST /v1/unload_lora_adapter, GET /health, GET /metrics,
// GET|POST /admin/config. Every response carries x-inference-pod, x-inference-namespace and
// x-inference-port; x-request-id is echoed.
package vllm
