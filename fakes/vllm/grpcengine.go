package vllm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
	"github.com/eppkit/eppkit/internal/vllmgrpc"
)

// GRPCService is the full name of vLLM's gRPC engine service; its methods are served at
// /<GRPCService>/<Method> on the HTTP port over h2c (docs/fake-vllm.md, "gRPC engine API").
const GRPCService = "vllm.grpc.engine.VllmEngine"

// grpcEngine serves vLLM's gRPC engine API (internal/vllmgrpc) on the server's engines: a
// Generate runs through the same model check, context-window check, output plan, engine
// sequence, KV-cache blocks and metrics as an OpenAI completions request of the same prompt.
type grpcEngine struct {
	vllmgrpc.UnimplementedVllmEngineServer
	s *Server
}

// newGRPCServer builds the gRPC server of s; it is reached through s.Handler (ServeHTTP). It
// also serves gRPC server reflection, as llm-d-inference-sim v0.10.2 does
// (pkg/communication/grpc.go startGRPC), so grpcurl needs no .proto file.
func newGRPCServer(s *Server) *grpc.Server {
	g := grpc.NewServer()
	vllmgrpc.RegisterVllmEngineServer(g, &grpcEngine{s: s})
	reflection.Register(g)
	return g
}

// isGRPC reports whether r is a gRPC call: HTTP/2 with a content type of application/grpc
// (gRPC over HTTP/2, PROTOCOL-HTTP2.md: "application/grpc" optionally followed by "+proto" etc.).
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return r.ProtoMajor == 2 && (ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;"))
}

// invalidField is the InvalidArgument status of a request field that is missing or wrong.
func invalidField(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "field %q "+format, append([]any{field}, args...)...)
}

// generateRequest checks in and turns it into the completions request the HTTP APIs would run:
// one prompt (text, or token ids copied through), max_tokens from sampling_params. Refusals are
// InvalidArgument naming the field.
func generateRequest(in *vllmgrpc.GenerateRequest, model string) (*genRequest, error) {
	var p promptInput
	switch x := in.GetInput().(type) {
	case *vllmgrpc.GenerateRequest_Text:
		if x.Text == "" {
			return nil, invalidField("text", "must not be empty")
		}
		p.text = x.Text
	case *vllmgrpc.GenerateRequest_Tokenized:
		if len(x.Tokenized.GetInputIds()) == 0 {
			return nil, invalidField("tokenized.input_ids", "must not be empty")
		}
		p.ids = x.Tokenized.GetInputIds()
	default:
		return nil, invalidField("input", "is required: set tokenized or text")
	}
	req := &genRequest{api: apiCompletions, model: model, prompts: []promptInput{p},
		echo: [][]engine.Token{p.engineTokens()}, stream: in.GetStream()}
	if sp := in.GetSamplingParams(); sp != nil {
		if sp.GetN() > 1 {
			return nil, invalidField("sampling_params.n", "must be 0 or 1 (the fake runs one sample per gRPC request), got %d", sp.GetN())
		}
		if sp.MaxTokens != nil {
			if *sp.MaxTokens == 0 {
				return nil, invalidField("sampling_params.max_tokens", "must be at least 1")
			}
			req.maxTokens = int(*sp.MaxTokens)
		}
	}
	return req, nil
}

// grpcStatus maps an API refusal to the gRPC status llm-d-inference-sim v0.10.2 would send for
// the same HTTP status (pkg/communication/grpc.go, extractGRPCCode).
func grpcStatus(e *APIError) error {
	code := codes.Unknown
	switch e.Code {
	case http.StatusBadRequest:
		code = codes.InvalidArgument
	case http.StatusUnauthorized:
		code = codes.Unauthenticated
	case http.StatusForbidden:
		code = codes.PermissionDenied
	case http.StatusNotFound:
		code = codes.NotFound
	case http.StatusConflict:
		code = codes.Aborted
	case http.StatusTooManyRequests:
		code = codes.ResourceExhausted
	case http.StatusNotImplemented:
		code = codes.Unimplemented
	case http.StatusServiceUnavailable:
		code = codes.Unavailable
	case http.StatusGatewayTimeout:
		code = codes.DeadlineExceeded
	case http.StatusInternalServerError:
		code = codes.Internal
	}
	msg := e.Message
	if e.Param != nil && *e.Param != "" {
		msg = "field " + strconv.Quote(*e.Param) + ": " + msg
	}
	return status.Error(code, msg)
}

// Generate runs one request on an engine. Streamed, it sends one GenerateStreamChunk per output
// token as the token falls due (the engine's timing model, as SSE), with the prompt, completion
// and cached token counts so far, then a GenerateComplete with the finish reason and usage (no
// output_ids: the chunks carried them). Not streamed, one GenerateComplete with every output id.
func (g *grpcEngine) Generate(in *vllmgrpc.GenerateRequest, out grpc.ServerStreamingServer[vllmgrpc.GenerateResponse]) error {
	s := g.s
	ctx := out.Context()
	arrival := s.opts.Clock.Now()
	req, err := generateRequest(in, s.cfg.DisplayModel())
	if err != nil {
		return err
	}
	runs, apiErr := s.planRuns(req)
	if apiErr != nil {
		return grpcStatus(apiErr)
	}
	c := runs[0]
	id := in.GetRequestId()
	if id == "" {
		id = strconv.Itoa(s.rank) + "-" + strconv.FormatUint(s.reqSeq.Add(1), 10)
	}
	eng := s.pickEngine()
	seq, err := eng.engine.Submit(ctx, engine.Request{ID: id, Model: s.cfg.Model, Prompt: c.prompt.text,
		TokenIDs: c.prompt.ids, MaxTokens: max(len(c.out), 1), FinishReason: c.finish})
	if err != nil {
		if e := s.submitError(ctx, err, apiCompletions); e != nil {
			return grpcStatus(e)
		}
		return status.FromContextError(ctx.Err()).Err()
	}
	c.seq = seq
	defer seq.Close()
	ids := make([]uint32, 0, len(c.out))
	for {
		ev, err := seq.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			if errors.Is(err, engine.ErrEngineClosed) {
				return status.Error(codes.Unavailable, "the server is shutting down")
			}
			return status.Errorf(codes.Internal, "engine: %v", err)
		}
		s.record(eng, c, ev)
		var tok []uint32
		if ev.Index < len(c.out) {
			tok = []uint32{c.out[ev.Index].ID}
		}
		ids = append(ids, tok...)
		if req.stream {
			chunk := &vllmgrpc.GenerateStreamChunk{TokenIds: tok, PromptTokens: uint32(seq.PromptTokens()),
				CompletionTokens: uint32(c.n), CachedTokens: uint32(seq.CachedTokens())}
			if err := out.Send(&vllmgrpc.GenerateResponse{Response: &vllmgrpc.GenerateResponse_Chunk{Chunk: chunk}}); err != nil {
				return err
			}
			eng.met.tokenLate(s.opts.Clock.Since(ev.At))
		}
		if ev.Final {
			break
		}
	}
	s.finishRun(eng, c, arrival, false)
	done := &vllmgrpc.GenerateComplete{FinishReason: c.finish, PromptTokens: uint32(seq.PromptTokens()),
		CompletionTokens: uint32(c.n), CachedTokens: uint32(seq.CachedTokens())}
	if !req.stream {
		done.OutputIds = ids
	}
	return out.Send(&vllmgrpc.GenerateResponse{Response: &vllmgrpc.GenerateResponse_Complete{Complete: done}})
}

// Embed pools a tokenized input as POST /v1/embeddings does (the same vector for the same ids).
func (g *grpcEngine) Embed(ctx context.Context, in *vllmgrpc.EmbedRequest) (*vllmgrpc.EmbedResponse, error) {
	s := g.s
	ids := in.GetTokenized().GetInputIds()
	if len(ids) == 0 {
		return nil, invalidField("tokenized.input_ids", "is required and must not be empty")
	}
	if len(ids) > s.cfg.MaxModelLen {
		return nil, invalidField("tokenized.input_ids", "has %d tokens, over the model's maximum context length of %d", len(ids), s.cfg.MaxModelLen)
	}
	arrival := s.opts.Clock.Now()
	c := &choiceRun{prompt: promptInput{ids: ids}, finish: engine.FinishStop}
	eng := s.pickEngine()
	id := in.GetRequestId()
	if id == "" {
		id = strconv.Itoa(s.rank) + "-" + strconv.FormatUint(s.reqSeq.Add(1), 10)
	}
	seq, err := eng.engine.Submit(ctx, engine.Request{ID: id, Model: s.cfg.Model, TokenIDs: ids, PrefillOnly: true})
	if err != nil {
		if e := s.submitError(ctx, err, apiEmbeddings); e != nil {
			return nil, grpcStatus(e)
		}
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	c.seq = seq
	defer seq.Close()
	if err := s.drain(ctx, eng, c); err != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	s.finishRun(eng, c, arrival, true)
	v := embedding(ids, s.cfg.EmbeddingDim)
	return &vllmgrpc.EmbedResponse{Embedding: v, PromptTokens: uint32(seq.PromptTokens()), EmbeddingDim: uint32(len(v))}, nil
}

// HealthCheck answers healthy unless /admin/config set a failing health status (as GET /health).
func (g *grpcEngine) HealthCheck(context.Context, *vllmgrpc.HealthCheckRequest) (*vllmgrpc.HealthCheckResponse, error) {
	if code := g.s.dyn.Load().healthStatus; code != 0 && code != http.StatusOK {
		return &vllmgrpc.HealthCheckResponse{Healthy: false, Message: "health status " + strconv.Itoa(code) + " (admin health-status)"}, nil
	}
	return &vllmgrpc.HealthCheckResponse{Healthy: true, Message: "healthy"}, nil
}

// GetModelInfo describes the served model: its name, the context window and the dummy
// tokenizer's id space (ids are 32-bit FNV hashes, so the whole uint32 range).
func (g *grpcEngine) GetModelInfo(context.Context, *vllmgrpc.GetModelInfoRequest) (*vllmgrpc.GetModelInfoResponse, error) {
	return &vllmgrpc.GetModelInfoResponse{ModelPath: g.s.cfg.DisplayModel(), IsGeneration: true,
		MaxContextLength: uint32(g.s.cfg.MaxModelLen), VocabSize: 0}, nil
}
