package plugins

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/reference/plugins/tokenload"
)

// TestTokenAwareConfigsRoute builds the committed token-aware configs, checks the PrepareData
// order (prefix producer before the in-flight producer), and routes three requests sharing a
// long prefix over two endpoints: the first two stick to the endpoint that holds the prefix, and
// the in-flight producer counts them there until they end.
func TestTokenAwareConfigsRoute(t *testing.T) {
	for _, name := range []string{"optimized-baseline-token-aware.yaml", "active-request.yaml"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := framework.LoadConfigFile(filepath.Join("..", "..", "manifests", "epp-configs", name))
			if err != nil {
				t.Fatal(err)
			}
			reg := framework.NewRegistry()
			RegisterAll(reg)
			rt, err := framework.NewRuntime(cfg, reg, framework.RuntimeOptions{Context: t.Context(), Seed: 1})
			if err != nil {
				t.Fatalf("NewRuntime: %v", err)
			}
			pos := map[string]int{}
			for i, tn := range rt.PrepareDataOrder() {
				pos[tn.Type] = i
			}
			if pi, ok := pos[prefix.ProducerType]; !ok || pi >= pos[tokenload.ProducerType] {
				t.Fatalf("PrepareData order %v", rt.PrepareDataOrder())
			}
			pl, _ := rt.Plugin(tokenload.ProducerType)
			prod := pl.(*tokenload.Producer)
			mds := []*framework.EndpointMetadata{{Name: "a", Address: "10.0.0.1", Port: 8000}, {Name: "b", Address: "10.0.0.2", Port: 8000}}
			shared := strings.Repeat("abcd ", 2000)
			ctx := context.Background()
			var picks []string
			var reqs []*framework.LLMRequest
			for i, suffix := range []string{"one", "two", "three"} {
				req := &framework.LLMRequest{RequestID: "r" + suffix, TargetModel: "m", Body: &framework.LLMRequestBody{
					API: framework.APICompletions, Completions: &framework.CompletionsRequest{Prompt: shared + suffix}}}
				eps := []*framework.Endpoint{framework.NewEndpoint(mds[0], nil), framework.NewEndpoint(mds[1], nil)}
				res, err := rt.Schedule(ctx, req, eps)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				rt.PreRequest(ctx, req, res)
				picks = append(picks, res.Primary().TargetEndpoints[0].Key())
				reqs = append(reqs, req)
			}
			if picks[1] != picks[0] {
				t.Fatalf("picks %v: the second request should stick to the endpoint holding the prefix", picks)
			}
			if l := prod.Load(picks[0]); l.Requests < 2 {
				t.Fatalf("in-flight on %s: %+v, want at least the two sticky requests", picks[0], l)
			}
			for _, req := range reqs {
				rt.ResponseComplete(ctx, req, &framework.Response{RequestID: req.RequestID, EndOfStream: true})
			}
			for _, md := range mds {
				if l := prod.Load(md.Key()); l != (tokenload.InFlightLoad{}) {
					t.Fatalf("after every request ended, %s holds %+v", md.Key(), l)
				}
			}
		})
	}
}

// TestTokenLoadScorerAloneCreatesProducers: a config with only token-load-scorer gets the default
// inflight-load-producer, which gets the default prefix producer.
func TestTokenLoadScorerAloneCreatesProducers(t *testing.T) {
	rt, err := loadRuntime(t, "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: token-load-scorer\n- type: active-request-scorer\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{tokenload.ProducerType, prefix.ProducerType} {
		if _, ok := rt.Plugin(typ); !ok {
			t.Fatalf("%s not created; auto-created: %v", typ, rt.AutoCreated())
		}
	}
}
