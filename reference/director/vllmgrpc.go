package director

import (
	"encoding/binary"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/eppkit/eppkit/internal/vllmgrpc"
	"github.com/eppkit/eppkit/reference/framework"
)

// vLLM's gRPC engine API as the reference reads it: the request path names the method
// (/vllm.grpc.engine.VllmEngine/<Method>, matched by suffix as llm-d-router v0.10.0
// pkg/epp/framework/plugins/requesthandling/parsers/vllmgrpc/vllmgrpc.go matches it) and the
// body is one gRPC message frame (gRPC over HTTP/2, PROTOCOL-HTTP2.md "Length-Prefixed-Message":
// a compressed-flag byte, a 4-byte big-endian length, the protobuf message). The wire types are
// internal/vllmgrpc's.
const (
	// VLLMGRPCService is the gRPC service whose requests the reference parses.
	VLLMGRPCService = "vllm.grpc.engine.VllmEngine"
	// APIVLLMGRPCOther is any other method of VLLMGRPCService (GetModelInfo, HealthCheck, …):
	// routed without reading the body, as upstream passes such payloads through raw.
	APIVLLMGRPCOther framework.API = VLLMGRPCService + "/other"
	// grpcFrameHeader is the length of a gRPC message frame's header.
	grpcFrameHeader = 5
)

// vllmGRPCAPI returns the API of a vLLM gRPC path ("" when path is not one): Generate, Embed
// or APIVLLMGRPCOther.
func vllmGRPCAPI(path string) framework.API {
	i := strings.LastIndex(path, "/"+VLLMGRPCService+"/")
	if i < 0 {
		return ""
	}
	switch path[i+1:] {
	case string(framework.APIVLLMGRPCGenerate):
		return framework.APIVLLMGRPCGenerate
	case string(framework.APIVLLMGRPCEmbed):
		return framework.APIVLLMGRPCEmbed
	}
	return APIVLLMGRPCOther
}

// isVLLMGRPC reports whether api is one of vLLM's gRPC engine API.
func isVLLMGRPC(api framework.API) bool {
	return api == framework.APIVLLMGRPCGenerate || api == framework.APIVLLMGRPCEmbed || api == APIVLLMGRPCOther
}

// grpcMessage returns the message of a body that must be exactly one uncompressed gRPC frame.
// Refusals wrap framework.ErrBadRequest: a body shorter than the 5-byte header, a compressed
// message (the reference reads no grpc-encoding), a flag other than 0 or 1, or a length that
// does not match the bytes that follow (a truncated frame, or more than one message).
func grpcMessage(body []byte) ([]byte, error) {
	if len(body) < grpcFrameHeader {
		return nil, badBody("gRPC frame: %d bytes, shorter than the 5-byte message header", len(body))
	}
	switch body[0] {
	case 0:
	case 1:
		return nil, badBody("gRPC frame: the message is compressed (flag 1); send it uncompressed")
	default:
		return nil, badBody("gRPC frame: compressed-flag byte is %d, want 0", body[0])
	}
	n := binary.BigEndian.Uint32(body[1:grpcFrameHeader])
	if rest := uint64(len(body) - grpcFrameHeader); uint64(n) != rest {
		return nil, badBody("gRPC frame: header declares a %d-byte message, the body holds %d bytes after it (one message per request)", n, rest)
	}
	return body[grpcFrameHeader:], nil
}

// parseVLLMGRPC parses a body of one of vLLM's gRPC APIs. Generate: the GenerateRequest's
// prompt becomes a completions prompt (text, or token ids copied), stream its "stream";
// "input" is required, "text" and "tokenized.input_ids" must not be empty. Embed:
// "tokenized.input_ids" is required and becomes the embeddings input. The request names no
// model: Model stays "". Refusals name the protobuf field and wrap framework.ErrBadRequest.
func parseVLLMGRPC(api framework.API, body []byte) (*ParsedBody, error) {
	p := &ParsedBody{API: api, Body: &framework.LLMRequestBody{API: api}}
	if api == APIVLLMGRPCOther {
		return p, nil
	}
	msg, err := grpcMessage(body)
	if err != nil {
		return nil, err
	}
	switch api {
	case framework.APIVLLMGRPCGenerate:
		var req vllmgrpc.GenerateRequest
		if err := proto.Unmarshal(msg, &req); err != nil {
			return nil, badBody("protobuf GenerateRequest: %v", err)
		}
		c := &framework.CompletionsRequest{}
		switch in := req.GetInput().(type) {
		case *vllmgrpc.GenerateRequest_Text:
			if in.Text == "" {
				return nil, badBody(`field "text" must not be empty`)
			}
			c.Prompt = in.Text
		case *vllmgrpc.GenerateRequest_Tokenized:
			ids := in.Tokenized.GetInputIds()
			if len(ids) == 0 {
				return nil, badBody(`field "tokenized.input_ids" must not be empty`)
			}
			c.TokenIDs = append([]uint32(nil), ids...)
		default:
			return nil, badBody(`field "input" is required: set "tokenized" or "text"`)
		}
		p.Stream = req.GetStream()
		p.Body.Completions = c
	case framework.APIVLLMGRPCEmbed:
		var req vllmgrpc.EmbedRequest
		if err := proto.Unmarshal(msg, &req); err != nil {
			return nil, badBody("protobuf EmbedRequest: %v", err)
		}
		ids := req.GetTokenized().GetInputIds()
		if len(ids) == 0 {
			return nil, badBody(`field "tokenized.input_ids" is required and must not be empty`)
		}
		p.Body.Embeddings = &framework.EmbeddingsRequest{TokenIDs: append([]uint32(nil), ids...)}
	}
	return p, nil
}
