package vllm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/fakes/vllm/kvevents"
)

// kvEventsConfig returns an enabled vLLM KVEventsConfig on the given ports of the fake's host
// (0: a free one).
func kvEventsConfig(t *testing.T, pubPort, replayPort int) kvevents.Config {
	t.Helper()
	c, err := kvevents.ParseConfig(fmt.Sprintf(`{"enable_kv_cache_events":true,"endpoint":"tcp://*:%d","replay_endpoint":"tcp://*:%d","buffer_steps":1000}`, pubPort, replayPort))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startKVEvents(t *testing.T, port int, kc kvevents.Config) (*Instance, func()) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Model, cfg.Port, cfg.Seed, cfg.PodName = "m", port, 42, "pod-kv"
	cfg.EnableKVCache = true
	cfg.KVCacheSize, cfg.MaxModelLen, cfg.BlockSize = 20, 256, 16 // small: prompts evict each other
	cfg.KVEvents = kc
	inst, err := Start(cfg, Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := inst.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}
	return inst, stop
}

func sendPrompts(t *testing.T, url string, rng *rand.Rand, n int) {
	t.Helper()
	prefixes := []string{"alpha", "bravo", "charlie", "delta", "echo"}
	for i := range n {
		var b strings.Builder
		p := prefixes[rng.IntN(len(prefixes))]
		for k := range 48 + rng.IntN(64) {
			fmt.Fprintf(&b, "%s%d ", p, k)
		}
		fmt.Fprintf(&b, "tail%d", i)
		resp, body := post(t, url+"/v1/completions", fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, b.String()))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
}

// waitSynced waits until sub has applied every batch the server published and its index equals
// the engine's prefix cache.
func waitSynced(t *testing.T, s *Server, sub *testSubscriber, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.KVEventsStates()[0]
		index, next, errs := sub.snapshot()
		if len(errs) > 0 {
			t.Fatalf("%s: subscriber errors: %v", what, errs)
		}
		same := next == st.NextSeq && len(index) == len(st.Cached)
		for _, h := range st.Cached {
			same = same && index[h]
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after 10s the subscriber has next seq %d and %d blocks, the server published up to %d and caches %d (%v)",
				what, next, len(index), st.NextSeq, len(st.Cached), sub)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKVEventsCrossCheck: a subscriber with its own decoder, written from vLLM's schema, sees
// every block the engine stores and removes, in order, with no gap in the sequence numbers:
// batches sent before it joined come from the replay socket; after the engine restarts (the
// server closed and started again on the same ports) the numbering starts at 0 and the
// subscriber starts over; a prefix-cache reset is one AllBlocksCleared. After every phase its
// index equals the engine's cache.
func TestKVEventsCrossCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 1))
	inst, stop := startKVEvents(t, 0, kvEventsConfig(t, 0, 0))
	srv := inst.Ranks[0]
	st := srv.KVEventsStates()[0]
	if !strings.HasPrefix(st.Endpoint, "tcp://127.0.0.1:") || !strings.HasPrefix(st.ReplayEndpoint, "tcp://127.0.0.1:") {
		t.Fatalf("endpoints %q %q: want \"*\" bound on the fake's host", st.Endpoint, st.ReplayEndpoint)
	}
	// Traffic before anyone subscribes: only the replay socket can deliver it.
	sendPrompts(t, srv.URL(), rng, 10)
	if srv.KVEventsStates()[0].NextSeq == 0 {
		t.Fatal("nothing published")
	}
	sub := newTestSubscriber(t, st.Endpoint, st.ReplayEndpoint, "kv@")
	waitSubscribed(t, srv)
	sendPrompts(t, srv.URL(), rng, 40)
	waitSynced(t, srv, sub, "first life")

	// Restart on the same ports.
	port := srv.ln.Addr().(*net.TCPAddr).Port
	pubPort, replayPort := portOf(t, st.Endpoint), portOf(t, st.ReplayEndpoint)
	stop()
	inst, stop = startKVEvents(t, port, kvEventsConfig(t, pubPort, replayPort))
	defer stop()
	srv = inst.Ranks[0]
	waitSubscribed(t, srv)
	sendPrompts(t, srv.URL(), rng, 30)
	waitSynced(t, srv, sub, "after the restart")

	resp, b := post(t, srv.URL()+"/reset_prefix_cache", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reset_prefix_cache: %d %s", resp.StatusCode, b)
	}
	waitSynced(t, srv, sub, "after a reset")
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.lives != 2 || sub.removed == 0 || sub.cleared != 1 || len(sub.index) != 0 {
		t.Fatalf("subscriber: %d publisher lives, %d blocks removed, %d clears, %d cached; want 2 lives, evictions, 1 clear, 0 cached",
			sub.lives, sub.removed, sub.cleared, len(sub.index))
	}
	for i, s := range sub.applied {
		if s != uint64(i) {
			t.Fatalf("second life applied seqs %v: want 0, 1, 2, ... without a gap", sub.applied)
		}
	}
	for _, b := range sub.seen {
		if b.topic != "replay" && b.topic != fmt.Sprintf("kv@127.0.0.1:%d@m", port) {
			t.Fatalf("topic %q, want kv@<host>:<port>@<model>", b.topic)
		}
		if b.rank != 0 || b.ts < 1.7e9 {
			t.Fatalf("batch seq %d: rank %d ts %v", b.seq, b.rank, b.ts)
		}
	}
}

// waitSubscribed waits until a subscription reached the server's publisher.
func waitSubscribed(t *testing.T, s *Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.KVEventsStates()[0].Topics) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no subscriber reached the publisher within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func portOf(t *testing.T, ep string) int {
	t.Helper()
	p, err := strconv.Atoi(ep[strings.LastIndexByte(ep, ':')+1:])
	if err != nil {
		t.Fatalf("endpoint %q: %v", ep, err)
	}
	return p
}

// TestKVEventsMapFormat: with --use-vllm-map-event-format the same subscriber (which reads both
// encodings by the schema's field names) sees the same index.
func TestKVEventsMapFormat(t *testing.T) {
	kc := kvEventsConfig(t, 0, 0)
	cfg := DefaultConfig()
	cfg.Model, cfg.Port, cfg.Seed = "m", 0, 1
	cfg.EnableKVCache, cfg.KVEvents, cfg.UseVLLMMapEventFormat = true, kc, true
	inst, err := Start(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.Close)
	srv := inst.Ranks[0]
	st := srv.KVEventsStates()[0]
	sub := newTestSubscriber(t, st.Endpoint, st.ReplayEndpoint, "kv@")
	waitSubscribed(t, srv)
	sendPrompts(t, srv.URL(), rand.New(rand.NewPCG(1, 2)), 5)
	waitSynced(t, srv, sub, "map format")
	if idx, _, _ := sub.snapshot(); len(idx) == 0 {
		t.Fatal("no blocks seen")
	}
}

// TestKVEventsFlags: --kv-events-config takes vLLM's JSON; a malformed one is an error naming the
// field; events need --enable-kvcache; --hash-seed and PYTHONHASHSEED seed the hashes.
func TestKVEventsFlags(t *testing.T) {
	cfg, _, err := parseArgs(t, "--model", "m", "--enable-kvcache", "--kv-events-config", `{"enable_kv_cache_events":true,"endpoint":"tcp://*:6557","topic":"kv@x@m"}`, "--hash-seed", "7")
	if err != nil || !cfg.KVEvents.Enabled() || cfg.KVEvents.Endpoint != "tcp://*:6557" || cfg.KVEvents.Topic != "kv@x@m" || cfg.EventsHashSeed() != "7" {
		t.Fatalf("parsed %+v seed %q: %v", cfg.KVEvents, cfg.EventsHashSeed(), err)
	}
	for args, want := range map[string]string{
		`{"enable_kv_cache_events":true,"bufer_steps":3}`:      `unknown field "bufer_steps"`,
		`{"enable_kv_cache_events":true,"endpoint":5557}`:      `field "endpoint" must be string`,
		`{"enable_kv_cache_events":true,"endpoint":"tcp://*"}`: `field "endpoint"`,
		`{"enable_kv_cache_events":tru}`:                       `want a JSON object`,
	} {
		_, _, err := parseArgs(t, "--model", "m", "--enable-kvcache", "--kv-events-config", args)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "kv-events-config") {
			t.Errorf("%s: %v, want an error containing %q", args, err, want)
		}
	}
	if _, _, err := parseArgs(t, "--model", "m", "--kv-events-config", `{"enable_kv_cache_events":true}`); err == nil || !strings.Contains(err.Error(), "--enable-kvcache") {
		t.Errorf("events without the cache: %v", err)
	}
	t.Setenv("PYTHONHASHSEED", "99")
	cfg, _, _ = parseArgs(t, "--model", "m", "--seed", "5")
	if cfg.EventsHashSeed() != "99" {
		t.Errorf("PYTHONHASHSEED: seed %q", cfg.EventsHashSeed())
	}
	t.Setenv("PYTHONHASHSEED", "")
	if cfg.EventsHashSeed() != "5" {
		t.Errorf("no seed given: %q, want --seed", cfg.EventsHashSeed())
	}
}
