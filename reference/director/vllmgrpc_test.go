package director_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/internal/vllmgrpc"
	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
)

// frame is m as one uncompressed gRPC message frame.
func frame(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

func TestParseBodyVLLMGRPC(t *testing.T) {
	gen := director.APIFromPath("/vllm.grpc.engine.VllmEngine/Generate")
	if gen != director.APIVLLMGRPCGenerate || director.APIFromPath("/vllm.grpc.engine.VllmEngine/Embed") != director.APIVLLMGRPCEmbed ||
		director.APIFromPath("/vllm.grpc.engine.VllmEngine/GetModelInfo") != director.APIVLLMGRPCOther {
		t.Fatalf("APIFromPath: Generate %q, Embed %q, GetModelInfo %q", gen, director.APIFromPath("/vllm.grpc.engine.VllmEngine/Embed"),
			director.APIFromPath("/vllm.grpc.engine.VllmEngine/GetModelInfo"))
	}
	p, err := director.ParseBody(gen, frame(t, &vllmgrpc.GenerateRequest{Stream: true,
		Input: &vllmgrpc.GenerateRequest_Tokenized{Tokenized: &vllmgrpc.TokenizedInput{InputIds: []uint32{7, 8, 9}}}}))
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Body.Completions; c == nil || len(c.TokenIDs) != 3 || c.TokenIDs[2] != 9 || c.Prompt != "" || !p.Stream || p.Model != "" || p.Body.API != gen {
		t.Fatalf("token ids: parsed %+v body %+v", p, p.Body)
	}
	p, err = director.ParseBody(gen, frame(t, &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Text{Text: "hello"}}))
	if err != nil || p.Body.Completions == nil || p.Body.Completions.Prompt != "hello" || p.Stream {
		t.Fatalf("text: %+v %v", p, err)
	}
	p, err = director.ParseBody(director.APIVLLMGRPCEmbed, frame(t, &vllmgrpc.EmbedRequest{Tokenized: &vllmgrpc.TokenizedInput{InputIds: []uint32{1}}}))
	if err != nil || p.Body.Embeddings == nil || len(p.Body.Embeddings.TokenIDs) != 1 {
		t.Fatalf("embed: %+v %v", p, err)
	}
	if p, err = director.ParseBody(director.APIVLLMGRPCOther, []byte{0, 0, 0, 0, 0}); err != nil || p.Body.Completions != nil {
		t.Fatalf("other method: %+v %v", p, err)
	}

	good := frame(t, &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Text{Text: "x"}})
	for _, tc := range []struct {
		name string
		api  framework.API
		body []byte
		want string
	}{
		{"JSON", gen, []byte(`{"model":"m","prompt":"x"}`), "compressed-flag byte is 123"},
		{"short", gen, []byte{0, 0, 0}, "shorter than the 5-byte message header"},
		{"compressed", gen, append([]byte{1}, good[1:]...), "compressed (flag 1)"},
		{"truncated", gen, good[:len(good)-1], "declares a 3-byte message, the body holds 2 bytes"},
		{"two messages", gen, append(append([]byte(nil), good...), good...), "one message per request"},
		{"not protobuf", gen, []byte{0, 0, 0, 0, 2, 0xff, 0xff}, "protobuf GenerateRequest"},
		{"no input", gen, frame(t, &vllmgrpc.GenerateRequest{RequestId: "r"}), `field "input" is required`},
		{"empty text", gen, frame(t, &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Text{}}), `field "text" must not be empty`},
		{"empty ids", gen, frame(t, &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Tokenized{Tokenized: &vllmgrpc.TokenizedInput{}}}), `field "tokenized.input_ids"`},
		{"embed without ids", director.APIVLLMGRPCEmbed, frame(t, &vllmgrpc.EmbedRequest{}), `field "tokenized.input_ids" is required`},
	} {
		_, err := director.ParseBody(tc.api, tc.body)
		if err == nil || !errors.Is(err, framework.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want a bad request containing %q", tc.name, err, tc.want)
		}
	}
}

// TestHandleRequestVLLMGRPC: a Generate request is scheduled with its body untouched, even with a
// model rewrite header (the request names no model), and a malformed one is a 400 after which
// the director keeps serving.
func TestHandleRequestVLLMGRPC(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	src := &source{eps: []*framework.EndpointMetadata{ep(1), ep(2)}}
	ms := &metricsSource{m: map[string]*framework.Metrics{ep(1).Key(): {UpdateTime: clk.Now()}, ep(2).Key(): {UpdateTime: clk.Now()}}}
	d := newDirector(t, src, ms, clk)
	hdr := map[string]string{":path": "/vllm.grpc.engine.VllmEngine/Generate", "content-type": "application/grpc"}
	if _, err := d.HandleRequest(context.Background(), &director.Input{Headers: hdr, Body: []byte{0, 0, 0, 0, 9, 1}}); director.StatusFor(err) != 400 {
		t.Fatalf("malformed frame: err %v, want a 400", err)
	}
	body := frame(t, &vllmgrpc.GenerateRequest{Input: &vllmgrpc.GenerateRequest_Tokenized{Tokenized: &vllmgrpc.TokenizedInput{InputIds: []uint32{1, 2, 3, 4}}}})
	hdr["x-gateway-model-name-rewrite"] = "lora-a"
	res, err := d.HandleRequest(context.Background(), &director.Input{Headers: hdr, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	defer d.EndRequest(res.Request)
	if len(res.Targets) != 1 || res.BodyMutated || string(res.Body) != string(body) || res.API != director.APIVLLMGRPCGenerate {
		t.Fatalf("result %+v: want one target, the body unchanged, API Generate", res)
	}
}
