// Package vllm is eppkit's fake vLLM GPU server: an OpenAI-compatible HTTP server whose flags,
// metrics, admin endpoint and failure injection follow llm-d-inference-sim v0.10.2
// (github.com/llm-d/llm-d-inference-sim, pkg/common/config.go and pkg/llm-d-inference-sim), backed
// by the queueing and KV-cache engine in fakes/vllm/engine. SPEC.md §7 is the rulebook.
//
// One Server is one data-parallel rank: its own engine, port and /metrics; or, with
// DataParallelInternal, one server in front of every engine (vLLM's internal load balancing,
// series labelled engine="0".."N-1"). Start starts all ranks of a Config (rank i listens on
// Port+i) and returns an Instance.
//
// Endpoints: POST /v1/completions (every OpenAI prompt form: string, []string, []int, [][]int),
// POST /v1/chat/completions, POST /v1/messages (Anthropic Messages, as vLLM serves it), POST
// /v1/responses (OpenAI Responses, as vLLM serves it) — each as JSON or SSE with its own event
// names and usage fields — POST /v1/messages/count_tokens (Anthropic's count, no engine
// request), POST /v1/embeddings (a prefill-only engine request per input), GET
// /v1/models, POST /v1/load_lora_adapter, POST /v1/unload_lora_adapter, GET /health, GET
// /metrics (names of the MetricsNames generation), GET|POST /admin/config, GET
// /admin/metrics-scrapes (eppkit only: /metrics pages written); on the same port over h2c,
// vLLM's gRPC engine API (service vllm.grpc.engine.VllmEngine, grpcengine.go: Generate on the
// same engine, Embed, HealthCheck, GetModelInfo; gRPC server reflection). Usage is vLLM's: without
// --enable-prompt-tokens-details (vLLM's default) completions and chat usage has no cached_tokens
// ("prompt_tokens_details":null in a JSON response, no key in a usage chunk), and
// stream_options.continuous_usage_stats puts each choice's usage so far in every chunk. Errors are written
// in each API's own shape. Every response carries x-inference-pod, x-inference-namespace and
// x-inference-port; x-request-id is echoed. SPEC.md §7 and §7.1 are the rulebook.
package vllm
