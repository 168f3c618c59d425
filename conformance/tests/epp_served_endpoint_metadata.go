package tests

import (
	"context"
	"fmt"
	"strconv"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "EPPServedEndpointMetadata",
		Description: "The EPP MUST accept the served endpoint in the response-phase filter metadata " +
			"envoy.lb/x-gateway-destination-endpoint-served: it answers every response phase (headers and streamed body chunks) " +
			"without a stream error or ImmediateResponse, and keeps serving.",
		Level:         conformance.LevelMUST,
		Profile:       conformance.ProfileEPP,
		Preconditions: []string{"the EPP serves the pool's base model"},
		Source: "GIE proposal 004 (docs/proposals/004-endpoint-picker-protocol) as of GIE v1.6.2, Destination Endpoint Served (since " +
			"protocol v1.0.0: \"the data plane MUST communicate to the EPP the endpoint that served the request\") and \"The EPP MUST " +
			"support streaming mode for inference requests and responses\" (GIE v1.6.0, GIE PR #2514); SPEC §5.1",
		Run: runEPPServedEndpointMetadata,
	})
}

// A JSON completion and an SSE chat stream, as a model server answers them.
const (
	servedJSONBody = `{"id":"cmpl-eppkit","object":"text_completion","model":"%s","choices":[{"index":0,"text":"ok","finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}`
	servedSSEBody  = "data: {\"id\":\"chatcmpl-eppkit\",\"object\":\"chat.completion.chunk\",\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"}}]}\n\n" +
		"data: {\"id\":\"chatcmpl-eppkit\",\"object\":\"chat.completion.chunk\",\"model\":\"%s\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":1,\"total_tokens\":13}}\n\n" +
		"data: [DONE]\n\n"
)

func runEPPServedEndpointMetadata(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 1)
	c := s.ExtProc(t)
	r := s.Rand(t)
	for i := 0; i < 6; i++ {
		st := openStream(t, s, c)
		req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
		addrs := mustRoute(t, s, exchangeOn(t, s, st, req), req)
		// The data plane reports where the request was served: the pick, or (after a retry down
		// the pick's list, or a fallback) another pool endpoint.
		served := addrs[0]
		if i%2 == 1 {
			served = pool[r.IntN(len(pool))]
		}
		var resp extprocclient.Response
		if i%3 == 2 {
			body := fmt.Sprintf(servedSSEBody, s.ModelName, s.ModelName)
			cut := 1 + r.IntN(len(body)-1)
			resp = extprocclient.Response{
				Headers: []extprocclient.Header{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "text/event-stream"}},
				Chunks:  [][]byte{[]byte(body[:cut]), []byte(body[cut:])},
				Served:  served,
			}
		} else {
			body := fmt.Sprintf(servedJSONBody, s.ModelName)
			resp = extprocclient.Response{
				Headers: []extprocclient.Header{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "application/json"},
					{Key: "content-length", Value: strconv.Itoa(len(body))}},
				Chunks: [][]byte{[]byte(body)},
				Served: served,
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		rr, err := st.Respond(ctx, resp)
		cancel()
		if err != nil {
			t.Fatalf("response phases with served endpoint %s: %v", served, err)
		}
		if rr.Immediate != nil {
			t.Fatalf("EPP answered the response phases (served endpoint %s) with ImmediateResponse %d: %s", served, rr.Immediate.Status, rr.Immediate.Body)
		}
		// How the EPP ends the stream after that is not part of the rule: once processing is
		// complete Envoy ignores a gRPC error on the stream (ext_proc.cc Filter::onGrpcError
		// returns when processing_complete_), so a compliant EPP may end it either way.
		st.Close()
	}
	// The EPP keeps serving.
	req := chatRequest(s, uniquePrompt(s, t, r, 12), nil)
	mustRoute(t, s, exchange(t, s, c, req), req)
}
