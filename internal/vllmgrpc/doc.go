// Package vllmgrpc holds the Go types and gRPC stubs of vLLM's gRPC engine API (service
// vllm.grpc.engine.VllmEngine: Generate, Embed, HealthCheck, Abort, GetModelInfo,
// GetServerInfo), generated from engine.proto beside this file. The fake vLLM (fakes/vllm)
// serves the service, the reference EPP (reference/director) parses its GenerateRequest bodies,
// and tests call it as a client; neither may import the other, so the wire types live here.
//
// The schema follows llm-d-inference-sim v0.10.2 (pkg/communication/grpc/engine.proto) and
// llm-d-router v0.10.0 (parsers/vllmgrpc/api/proto/vllm_engine.proto), which adds
// GenerateRequest.mm_inputs: the same package, names and field numbers, so any client or server
// of either speaks with eppkit's.
//
// The generated files are committed; CI never runs protoc. To regenerate (`make proto`) install
// protoc (Debian: protobuf-compiler, 3.21.12 made the committed files),
// google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12 (go.mod's version) and
// google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0.
package vllmgrpc

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative engine.proto
