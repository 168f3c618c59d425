package vllm

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
	"github.com/eppkit/eppkit/internal/vllmgrpc"
)

// dialGRPC opens a real grpc-go client connection (h2c) to the fake's HTTP port.
func dialGRPC(t *testing.T, inst *Instance) vllmgrpc.VllmEngineClient {
	t.Helper()
	cc, err := grpc.NewClient(strings.TrimPrefix(inst.URL(), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return vllmgrpc.NewVllmEngineClient(cc)
}

// generate runs one Generate call and returns every response and the header metadata.
func generate(t *testing.T, c vllmgrpc.VllmEngineClient, req *vllmgrpc.GenerateRequest) ([]*vllmgrpc.GenerateResponse, metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Generate(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var out []*vllmgrpc.GenerateResponse
	for {
		r, err := st.Recv()
		if err == io.EOF {
			md, _ := st.Header()
			return out, md, nil
		}
		if err != nil {
			return out, nil, err
		}
		out = append(out, r)
	}
}

func maxTokens(n uint32) *vllmgrpc.SamplingParams { return &vllmgrpc.SamplingParams{MaxTokens: &n} }

func TestGRPCGenerateStream(t *testing.T) {
	inst := startTest(t, func(c *Config) {
		c.Mode = ModeEcho
		c.EnableKVCache = true
		c.Latency.InterTokenLatency = Duration(5 * time.Millisecond)
	})
	c := dialGRPC(t, inst)
	ids := make([]uint32, 40)
	for i := range ids {
		ids[i] = uint32(1000 + i)
	}
	req := &vllmgrpc.GenerateRequest{RequestId: "r1", Stream: true, SamplingParams: maxTokens(8),
		Input: &vllmgrpc.GenerateRequest_Tokenized{Tokenized: &vllmgrpc.TokenizedInput{InputIds: ids}}}
	start := time.Now()
	resps, md, err := generate(t, c, req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if got := md.Get(HeaderPod); len(got) != 1 || got[0] != "pod-a" {
		t.Errorf("header %s = %v, want [pod-a]", HeaderPod, got)
	}
	if len(resps) != 9 {
		t.Fatalf("got %d responses, want 8 chunks and a complete: %v", len(resps), resps)
	}
	for i, r := range resps[:8] {
		ch := r.GetChunk()
		if ch == nil || len(ch.TokenIds) != 1 || ch.TokenIds[0] != ids[i] || ch.CompletionTokens != uint32(i+1) || ch.PromptTokens != 40 {
			t.Errorf("chunk %d = %v, want token %d (echo), completion_tokens %d, prompt_tokens 40", i, r, ids[i], i+1)
		}
	}
	done := resps[8].GetComplete()
	if done == nil || done.FinishReason != engine.FinishLength || done.CompletionTokens != 8 || done.PromptTokens != 40 || len(done.OutputIds) != 0 {
		t.Errorf("complete = %v, want finish length, 8 completion and 40 prompt tokens, no output ids (streamed)", resps[8])
	}
	if el := time.Since(start); el < 7*5*time.Millisecond {
		t.Errorf("8 tokens in %v: the engine's inter-token latency (5 ms) was not applied", el)
	}
	// Same prompt again: the prefix cache holds its full blocks.
	resps, _, err = generate(t, c, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resps[len(resps)-1].GetComplete().GetCachedTokens(); got == 0 {
		t.Errorf("second identical prompt: cached_tokens = 0, want the cached prefix blocks")
	}
	// The engine's metrics count gRPC requests as they count HTTP ones.
	fams := scrapeFamilies(t, inst.URL())
	if f := fams["vllm:request_success_total"]; f == nil || sumCounter(f) < 2 {
		t.Errorf("vllm:request_success_total does not count the 2 gRPC requests: %v", f)
	}
}

func sumCounter(f *dto.MetricFamily) float64 {
	var n float64
	for _, m := range f.GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return n
}

func TestGRPCGenerateUnary(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.Mode = ModeEcho })
	c := dialGRPC(t, inst)
	resps, _, err := generate(t, c, &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Text{Text: "hello there world"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resps) != 1 || resps[0].GetComplete() == nil {
		t.Fatalf("not streamed: got %v, want one GenerateComplete", resps)
	}
	done := resps[0].GetComplete()
	want := engine.Tokenize("hello there world")
	if len(done.OutputIds) != len(want) || done.FinishReason != engine.FinishStop || done.CompletionTokens != uint32(len(want)) {
		t.Fatalf("complete = %v, want the %d echoed ids, finish stop", done, len(want))
	}
	for i, tok := range want {
		if done.OutputIds[i] != tok.ID {
			t.Errorf("output_ids[%d] = %d, want %d", i, done.OutputIds[i], tok.ID)
		}
	}
}

func TestGRPCBadInput(t *testing.T) {
	inst := startTest(t, nil)
	c := dialGRPC(t, inst)
	zero := uint32(0)
	for _, tc := range []struct {
		name  string
		req   *vllmgrpc.GenerateRequest
		field string
	}{
		{"no input", &vllmgrpc.GenerateRequest{RequestId: "x"}, `"input"`},
		{"empty text", &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Text{}}, `"text"`},
		{"empty ids", &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Tokenized{Tokenized: &vllmgrpc.TokenizedInput{}}}, `"tokenized.input_ids"`},
		{"zero max_tokens", &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Text{Text: "a"},
			SamplingParams: &vllmgrpc.SamplingParams{MaxTokens: &zero}}, `"sampling_params.max_tokens"`},
		{"n", &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Text{Text: "a"},
			SamplingParams: &vllmgrpc.SamplingParams{N: 3}}, `"sampling_params.n"`},
		{"context window", &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Text{Text: "a"},
			SamplingParams: maxTokens(1 << 30)}, `"prompt"`},
	} {
		_, _, err := generate(t, c, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("%s: err = %v, want InvalidArgument naming %s", tc.name, err, tc.field)
		}
	}
	// The server keeps serving, over gRPC and HTTP.
	if _, _, err := generate(t, c, &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Text{Text: "still here"}, SamplingParams: maxTokens(2)}); err != nil {
		t.Errorf("Generate after bad requests: %v", err)
	}
	resp, err := http.Get(inst.URL() + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /health after bad gRPC requests: %v %v", resp, err)
	}
}

func TestGRPCInfoAndHealth(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.MaxModelLen = 2048 })
	c := dialGRPC(t, inst)
	ctx := context.Background()
	mi, err := c.GetModelInfo(ctx, &vllmgrpc.GetModelInfoRequest{})
	if err != nil || mi.ModelPath != "m" || mi.MaxContextLength != 2048 || !mi.IsGeneration {
		t.Errorf("GetModelInfo = %v, %v; want model m, 2048, generation", mi, err)
	}
	h, err := c.HealthCheck(ctx, &vllmgrpc.HealthCheckRequest{})
	if err != nil || !h.Healthy {
		t.Errorf("HealthCheck = %v, %v; want healthy", h, err)
	}
	e, err := c.Embed(ctx, &vllmgrpc.EmbedRequest{Tokenized: &vllmgrpc.TokenizedInput{InputIds: []uint32{1, 2, 3}}})
	if err != nil || len(e.Embedding) != int(e.EmbeddingDim) || e.PromptTokens != 3 {
		t.Errorf("Embed = %v, %v", e, err)
	}
	if _, err := c.Abort(ctx, &vllmgrpc.AbortRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Abort: %v, want Unimplemented", err)
	}
}

// TestGRPCReflection: the fake lists vLLM's service through gRPC server reflection (as the
// simulator), over h2c on its HTTP port.
func TestGRPCReflection(t *testing.T) {
	inst := startTest(t, nil)
	cc, err := grpc.NewClient(strings.TrimPrefix(inst.URL(), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	if !slices.Contains(names, GRPCService) {
		t.Errorf("reflection lists %v, want %s among them", names, GRPCService)
	}
}
