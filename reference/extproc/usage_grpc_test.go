package extproc_test

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/eppkit/eppkit/internal/vllmgrpc"
	"github.com/eppkit/eppkit/reference/extproc"
	"github.com/eppkit/eppkit/reference/framework"
)

func grpcFrames(t *testing.T, msgs ...proto.Message) []byte {
	t.Helper()
	var out []byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, 0, 0, 0, 0, 0)
		binary.BigEndian.PutUint32(out[len(out)-4:], uint32(len(b)))
		out = append(out, b...)
	}
	return out
}

func chunkMsg(p, c, cached uint32) *vllmgrpc.GenerateResponse {
	return &vllmgrpc.GenerateResponse{Response: &vllmgrpc.GenerateResponse_Chunk{Chunk: &vllmgrpc.GenerateStreamChunk{
		TokenIds: []uint32{1}, PromptTokens: p, CompletionTokens: c, CachedTokens: cached}}}
}

// TestUsageParserVLLMGRPC: the usage of a vLLM gRPC Generate stream is its last counted message,
// whatever the chunking; an Embed response gives its prompt count; garbage gives none.
func TestUsageParserVLLMGRPC(t *testing.T) {
	stream := grpcFrames(t, chunkMsg(12, 1, 0), chunkMsg(12, 2, 0),
		&vllmgrpc.GenerateResponse{Response: &vllmgrpc.GenerateResponse_Complete{Complete: &vllmgrpc.GenerateComplete{
			FinishReason: "length", PromptTokens: 12, CompletionTokens: 3, CachedTokens: 8}}})
	want := &framework.Usage{PromptTokens: ptr(12), CompletionTokens: ptr(3), TotalTokens: ptr(15), CachedTokens: ptr(8)}
	for _, size := range []int{1, 3, 7, len(stream)} {
		p := extproc.NewUsageParser(framework.APIVLLMGRPCGenerate, false)
		for i := 0; i < len(stream); i += size {
			p.Write(stream[i:min(i+size, len(stream))])
		}
		if diff := cmp.Diff(want, p.Finish()); diff != "" {
			t.Errorf("chunks of %d bytes: usage (-want +got):\n%s", size, diff)
		}
	}
	p := extproc.NewUsageParser(framework.APIVLLMGRPCEmbed, false)
	p.Write(grpcFrames(t, &vllmgrpc.EmbedResponse{Embedding: []float32{0.5}, PromptTokens: 5, EmbeddingDim: 1}))
	if diff := cmp.Diff(&framework.Usage{PromptTokens: ptr(5), CompletionTokens: ptr(0), TotalTokens: ptr(5), CachedTokens: ptr(0)}, p.Finish()); diff != "" {
		t.Errorf("embed usage (-want +got):\n%s", diff)
	}
	for name, body := range map[string][]byte{
		"JSON":         []byte(`{"usage":{"prompt_tokens":1}}`),
		"truncated":    stream[:len(stream)-1][:9],
		"not protobuf": {0, 0, 0, 0, 2, 0xff, 0xff},
		"compressed":   append([]byte{1}, grpcFrames(t, chunkMsg(1, 1, 0))[1:]...),
		"oversized":    {0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3},
	} {
		p := extproc.NewUsageParser(framework.APIVLLMGRPCGenerate, true)
		p.Write(body)
		if u := p.Finish(); u != nil {
			t.Errorf("%s: usage %+v, want none", name, u)
		}
	}
}
