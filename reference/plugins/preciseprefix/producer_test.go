package preciseprefix

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/fakes/vllm/engine"
	"github.com/eppkit/eppkit/fakes/vllm/kvevents"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

// A test may use the fakes as a real publisher (test files cross the import rules).

type testHandle struct {
	ctx context.Context
	mu  sync.Mutex
	eps []*framework.EndpointMetadata
}

func (h *testHandle) Context() context.Context               { return h.ctx }
func (h *testHandle) PluginState() *framework.PluginState    { return nil }
func (h *testHandle) Plugin(string) (framework.Plugin, bool) { return nil, false }
func (h *testHandle) Clock() clock.WithTicker                { return clock.RealClock{} }
func (h *testHandle) Seed() int64                            { return 1 }
func (h *testHandle) Logger() *slog.Logger                   { return slog.New(slog.DiscardHandler) }
func (h *testHandle) Endpoints() []*framework.EndpointMetadata {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*framework.EndpointMetadata(nil), h.eps...)
}

func TestTokenizeMatchesTheSimulatorRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	alphabet := []byte("ab_Z09 \t\n{}:,-.?!;@#$%^&*()+~/\\><[]=\"'|`é\x01")
	for range 2000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		want := engine.Tokenize(string(b))
		got := Tokenize(nil, string(b))
		if len(got) != len(want) {
			t.Fatalf("%q: %d tokens, the fake's tokenizer %d", b, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i].ID {
				t.Fatalf("%q: token %d id %d, the fake's %d", b, i, got[i], want[i].ID)
			}
		}
	}
}

func TestDecodeParameters(t *testing.T) {
	p, err := DecodeParameters(nil)
	if err != nil || p.KVEventsConfig.PodDiscoveryConfig.SocketPort != 5557 || p.KVEventsConfig.TopicFilter != "kv@" || p.TokenProcessorConfig.BlockSizeTokens != 16 {
		t.Fatalf("defaults %+v %v", p, err)
	}
	p, err = DecodeParameters([]byte(`{"tokenProcessorConfig":{"blockSize":64},"indexerConfig":{"kvBlockIndexConfig":{"enableMetrics":true}}}`))
	if err != nil || p.TokenProcessorConfig.BlockSizeTokens != 64 {
		t.Fatalf("upstream's sample parameters: %+v %v", p, err)
	}
	for raw, want := range map[string]string{
		`{"kvEventsConfig":{"engineType":"sglang"}}`:                        "kvEventsConfig.engineType",
		`{"kvEventsConfig":{"zmqEndpoint":"tcp://*:5557"}}`:                 "kvEventsConfig.zmqEndpoint",
		`{"kvEventsConfig":{"podDiscoveryConfig":{"socketPort":0}}}`:        "podDiscoveryConfig.socketPort",
		`{"kvEventsConfig":{"podDiscoveryConfig":{"replaySocketPort":-1}}}`: "replaySocketPort",
		`{"tokenProcessorConfig":{"blockSizeTokens":-1}}`:                   "blockSizeTokens",
		`{"speculativeIndexing":true}`:                                      "speculativeIndexing",
		`{"indexerConfig":{"tokenizersPoolConfig":{}}}`:                     "tokenizersPoolConfig",
		`{"tokenizer":"hf"}`:                                                "parameters.tokenizer",
		`{"kvEventsConfig":{"topicFiltr":"kv@"}}`:                           "topicFiltr",
	} {
		if _, err := DecodeParameters([]byte(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", raw, err, want)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestFollowsTheFakesEvents: a producer subscribed to a fake vLLM's events matches a prompt the
// fake cached from traffic the EPP never saw, on that endpoint only; a reset of the fake's cache
// (AllBlocksCleared) and an eviction take the match away.
func TestFollowsTheFakesEvents(t *testing.T) {
	pub, replay := freePort(t), freePort(t)
	kc, err := kvevents.ParseConfig(fmt.Sprintf(`{"enable_kv_cache_events":true,"endpoint":"tcp://*:%d","replay_endpoint":"tcp://*:%d"}`, pub, replay))
	if err != nil {
		t.Fatal(err)
	}
	cfg := vllm.DefaultConfig()
	cfg.Model, cfg.Port, cfg.Seed, cfg.EnableKVCache, cfg.KVEvents = "m", 0, 1, true, kc
	cfg.KVCacheSize, cfg.MaxModelLen = 64, 1024
	cfg.LoraModules = []vllm.LoraModule{{Name: "lora-x"}}
	inst, err := vllm.Start(cfg, vllm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.Close)
	addr := inst.Ranks[0].Addr()
	host, portS, _ := net.SplitHostPort(addr)
	var port int
	fmt.Sscan(portS, &port)
	fakeMD := &framework.EndpointMetadata{Name: "fake", Address: host, Port: port}
	otherMD := &framework.EndpointMetadata{Name: "other", Address: "127.0.0.2", Port: port} // another IP: its events would be at 127.0.0.2:<socket port>, where nothing publishes

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h := &testHandle{ctx: ctx, eps: []*framework.EndpointMetadata{fakeMD, otherMD}}
	params := DefaultParameters()
	params.KVEventsConfig.PodDiscoveryConfig.SocketPort = pub
	params.KVEventsConfig.PodDiscoveryConfig.ReplaySocketPort = replay
	p, err := New("", params, h)
	if err != nil {
		t.Fatal(err)
	}
	words := func(tag string, n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "%s%d ", tag, i)
		}
		return b.String()
	}
	prompt := words("a", 100) // 6 full blocks of 16
	// Traffic that bypasses the EPP, before and after the producer subscribed.
	send := func(text string) {
		resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, text)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	send(prompt)
	match := func(text string) (fake, other, total int) {
		eps := []*framework.Endpoint{framework.NewEndpoint(fakeMD, nil), framework.NewEndpoint(otherMD, nil)}
		req := &framework.LLMRequest{RequestID: "r", TargetModel: "m", Body: &framework.LLMRequestBody{API: framework.APICompletions,
			Completions: &framework.CompletionsRequest{Prompt: text}}}
		if err := p.PrepareRequestData(context.Background(), req, eps); err != nil {
			t.Fatal(err)
		}
		a, _ := framework.AttributeAs[*prefix.PrefixCacheMatchInfo](eps[0], p.Key())
		b, _ := framework.AttributeAs[*prefix.PrefixCacheMatchInfo](eps[1], p.Key())
		return a.MatchBlocks, b.MatchBlocks, a.TotalBlocks
	}
	var last [3]int
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s (index holds %d blocks of the fake; last match %v)", what, p.Index().Blocks(fakeMD.Key()), last)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	eventually("the bypassing prompt is matched on the fake", func() bool {
		f, o, total := match(prompt + "tail")
		last = [3]int{f, o, total}
		return f == 6 && o == 0 && total == 6
	})
	t.Logf("match %v", last)
	if f, _, _ := match(words("b", 100)); f != 0 {
		t.Fatalf("an unseen prompt matches %d blocks", f)
	}
	if f, _, _ := match(words("a", 40) + words("c", 60)); f != 2 {
		t.Fatalf("a prompt sharing 2 blocks matches %d", f)
	}
	// An adapter's blocks match requests for that adapter only.
	lprompt := words("l", 100)
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"model":"lora-x","prompt":%q,"max_tokens":1}`, lprompt)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	matchModel := func(model, text string) int {
		req := &framework.LLMRequest{RequestID: "r", TargetModel: model, Body: &framework.LLMRequestBody{API: framework.APICompletions,
			Completions: &framework.CompletionsRequest{Prompt: text}}}
		eps := []*framework.Endpoint{framework.NewEndpoint(fakeMD, nil)}
		_ = p.PrepareRequestData(context.Background(), req, eps)
		info, _ := framework.AttributeAs[*prefix.PrefixCacheMatchInfo](eps[0], p.Key())
		return info.MatchBlocks
	}
	eventually("the adapter's prompt matches for the adapter", func() bool { return matchModel("lora-x", lprompt) == 6 })
	if n := matchModel("m", lprompt); n != 0 {
		t.Fatalf("the base model matched %d blocks of the adapter's prompt", n)
	}
	if n := matchModel("lora-x", prompt); n != 0 {
		t.Fatalf("the adapter matched %d blocks of the base model's prompt", n)
	}
	// AllBlocksCleared.
	resp, err = http.Post("http://"+addr+"/reset_prefix_cache", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	eventually("the reset clears the match", func() bool { f, _, _ := match(prompt); return f == 0 })
	// Evictions: fill the 64-block pool with other prompts until the prompt's blocks go.
	send(prompt)
	eventually("stored again", func() bool { f, _, _ := match(prompt); return f == 6 })
	for i := range 12 {
		send(words(fmt.Sprintf("z%d-", i), 100))
	}
	eventually("evicted blocks stop matching", func() bool { f, _, _ := match(prompt); return f < 6 })
	// The endpoint leaves the pool: its subscriber stops and its blocks go.
	h.mu.Lock()
	h.eps = []*framework.EndpointMetadata{otherMD}
	h.mu.Unlock()
	p.Reconcile()
	if p.Index().Blocks(fakeMD.Key()) != 0 {
		t.Fatal("a departed endpoint keeps its blocks")
	}
}
