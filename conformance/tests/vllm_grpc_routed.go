package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/internal/vllmgrpc"
)

// grpcMaxTokens is the output length of every VLLMGRPCRouted call. Its affinity part shapes
// prompts as TokenIDPrompts does (tokenPrefixIDs shared ids, tokenTailIDs distinct ones).
const grpcMaxTokens = 4

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "VLLMGRPCRouted",
		Description: "On an InferencePool whose appProtocol is kubernetes.io/h2c, vLLM gRPC Generate calls " +
			"(/vllm.grpc.engine.VllmEngine/Generate, one gRPC frame holding a protobuf GenerateRequest, streamed or not) " +
			"MUST be routed to a ready pool endpoint that serves them, and with equal load a call whose token ids share " +
			"a long run (≥ 32 blocks) with an earlier call's MUST go to the endpoint that served it.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureVLLMGRPC, conformance.FeaturePrefixCacheAffinity},
		Preconditions: []string{"the EPP parses vLLM's gRPC engine API bodies (llm-d-router v0.10.0: the vllmgrpc-parser, claimed for h2c pools)",
			"the model servers serve vLLM's gRPC engine API on the pool's port (the fake vLLM and llm-d-inference-sim v0.10.2 do)",
			"prefix-cache affinity as in PrefixCacheAffinity, token-id prompts hashed by their ids",
			"a pool of its own with appProtocol kubernetes.io/h2c (the apiserver source writes it into the InferencePool) and its own instance " +
				"of the EPP (the run's config): the reference and command targets; the address and cluster targets send the calls to the run's pool"},
		Source: "llm-d-router v0.10.0 pkg/epp/framework/plugins/requesthandling/parsers/vllmgrpc/vllmgrpc.go (GenerateRequest: " +
			"text → prompt, tokenized.input_ids → token ids); GIE v1.5.0 api/v1 InferencePool spec.appProtocol kubernetes.io/h2c (GIE #2162)",
		Run: runVLLMGRPCRouted,
	})
}

// grpcCall is what one Generate call through the h2c gateway gave.
type grpcCall struct {
	routedTo, pod string
	tokens        int
	complete      *vllmgrpc.GenerateComplete
}

// generateThrough sends req through the gateway client and reads the whole reply stream; hint,
// when not nil, is sent as the subset hint header.
func generateThrough(s *harness.Suite, client vllmgrpc.VllmEngineClient, req *vllmgrpc.GenerateRequest, hint []string) (grpcCall, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	if hint != nil {
		ctx = metadata.AppendToOutgoingContext(ctx, gateway.SubsetHintHeader, strings.Join(hint, ","))
	}
	var hdr metadata.MD
	st, err := client.Generate(ctx, req, grpc.Header(&hdr))
	if err != nil {
		return grpcCall{}, err
	}
	var c grpcCall
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c, err
		}
		c.tokens += len(r.GetChunk().GetTokenIds())
		if r.GetComplete() != nil {
			c.complete = r.GetComplete()
			c.tokens += len(r.GetComplete().GetOutputIds())
		}
	}
	if v := hdr.Get(gateway.RoutedToHeader); len(v) == 1 {
		c.routedTo = v[0]
	}
	if v := hdr.Get(gateway.PodHeader); len(v) == 1 {
		c.pod = v[0]
	}
	return c, nil
}

func tokenizedRequest(ids []int, stream bool) *vllmgrpc.GenerateRequest {
	u := make([]uint32, len(ids))
	for i, id := range ids {
		u[i] = uint32(id)
	}
	n := uint32(grpcMaxTokens)
	return &vllmgrpc.GenerateRequest{Stream: stream, SamplingParams: &vllmgrpc.SamplingParams{MaxTokens: &n},
		Input: &vllmgrpc.GenerateRequest_Tokenized{Tokenized: &vllmgrpc.TokenizedInput{InputIds: u}}}
}

func runVLLMGRPCRouted(t harness.TestingT, s *harness.Suite) {
	r := s.Rand(t)
	// An InferencePool with appProtocol kubernetes.io/h2c: a pool of its own with its own EPP
	// instance (the run's config), so a source that describes pools (apiserver) writes the
	// appProtocol the EPP reads. A run that cannot start one (the address and cluster targets)
	// uses its own pool: the fakes serve gRPC on their HTTP port, so it is an h2c pool as well,
	// for an EPP that chooses its parser by the request's path.
	if why := s.SidePoolUnsupported(); why == "" {
		s = s.StartVariantPool(t, harness.FleetVariant{Name: "h2c", Pods: variantPods, AppProtocol: gateway.AppProtocolH2C})
	} else {
		t.Logf("gRPC calls go to the run's own pool (%s)", why)
	}
	pool := requireEndpoints(t, s, 2)
	cc, err := grpc.NewClient(s.H2CGateway(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("gRPC client to the h2c gateway: %v", err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	client := vllmgrpc.NewVllmEngineClient(cc)

	// Part 1: every call, streamed or not, text or token ids, is routed to a pool endpoint
	// that serves it (the endpoint's own name comes back) and its tokens come back. No chance is
	// involved: a fixed count.
	check := func(what string, c grpcCall, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: Generate through the h2c gateway: %v", what, err)
		}
		if !slices.Contains(pool, c.routedTo) {
			t.Fatalf("%s: routed to %q (%s), not an endpoint of the pool %v", what, c.routedTo, gateway.RoutedToHeader, pool)
		}
		if addr, ok := s.PodAddr(c.pod); ok && addr != c.routedTo {
			t.Fatalf("%s: routed to %s but served by %s (%s)", what, c.routedTo, addr, c.pod)
		}
		if c.complete == nil || c.tokens == 0 || c.tokens != int(c.complete.GetCompletionTokens()) {
			t.Fatalf("%s: %d tokens and GenerateComplete %v, want tokens and a GenerateComplete counting them", what, c.tokens, c.complete)
		}
	}
	served := map[string]int{}
	for i := 0; i < 2*len(pool); i++ {
		stream := i%2 == 0
		c, err := generateThrough(s, client, tokenizedRequest(tokenIDs(r.Uint64(), 40), stream), nil)
		check(fmt.Sprintf("token ids, stream=%v", stream), c, err)
		served[c.routedTo]++
	}
	n := uint32(grpcMaxTokens)
	c, err := generateThrough(s, client, &vllmgrpc.GenerateRequest{Stream: true, SamplingParams: &vllmgrpc.SamplingParams{MaxTokens: &n},
		Input: &vllmgrpc.GenerateRequest_Text{Text: uniquePrompt(s, t, r, 12)}}, nil)
	check("text, stream", c, err)
	served[c.routedTo]++
	t.Logf("endpoints that served the %d calls: %v", 2*len(pool)+1, served)

	// Part 2: prefix affinity by token ids, as TokenIDPrompts over the completions API. The first
	// call is placed on an endpoint drawn at random (subset hint), so an EPP that does not read
	// the ids meets the follow-up there only 1 time in len(pool).
	plan := harness.MustPlan(t, harness.Shape{
		Outcome: "gRPC token-id follow-ups sent to the endpoint that served their prefix", Tail: harness.AtLeast,
		Compliant: 1 - harness.Exploration, Random: 1 / float64(len(pool)),
	})
	hits := 0
	var misses []string
	for i := 0; i < plan.N; i++ {
		first, second := tokenIDPair(r)
		home := pool[r.IntN(len(pool))]
		a, err := generateThrough(s, client, tokenizedRequest(first, true), []string{home})
		check(fmt.Sprintf("trial %d, first call", i), a, err)
		if a.routedTo != home {
			t.Fatalf("trial %d: the first call with the subset hint [%s] was routed to %s (SPEC §5.1: the pick stays inside the hint)", i, home, a.routedTo)
		}
		b, err := generateThrough(s, client, tokenizedRequest(second, i%2 == 0), nil)
		check(fmt.Sprintf("trial %d, follow-up", i), b, err)
		if b.routedTo == a.routedTo {
			hits++
		} else {
			misses = append(misses, fmtIDs(first)+": "+a.routedTo+"→"+b.routedTo)
		}
	}
	if len(misses) > 0 {
		t.Logf("follow-ups that left their prefix's endpoint: %v", misses)
	}
	plan.Check(t, s, hits, plan.N)
}
