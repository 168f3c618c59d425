package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/fakes/vllm/kvevents"
)

// The KV-event sockets of the PrecisePrefixCache pool: vLLM's default endpoint and the usual
// replay port, on every pod's IP (the EPP's contract: tcp://<endpoint IP>:<socketPort>, llm-d-router
// v0.10.0 podDiscoveryConfig.socketPort default 5557; replaySocketPort 5558 in eppkit's configs).
const (
	preciseEventsConfig = `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558"}`
	// preciseKVBlocks is each pod's KV pool (16-token blocks): room for a few long prompts, so a
	// flood of bypassing traffic evicts older blocks.
	preciseKVBlocks = 192
	// preciseFloodPrompts × preciseFloodWords tokens evict every older block of a pod.
	preciseFloodPrompts, preciseFloodWords = 5, 900
	// precisePrefixWords is the shared prefix's length in words (one token each, ≥ 16 blocks).
	precisePrefixWords = 300
	// preciseProbeWords is a probe's length in words: more than one block of the largest block
	// size vLLM has (128 tokens), so an EPP that indexes whole blocks of any size can match a
	// probe. llm-d-router v0.10.0's shipped precise config indexes 64-token blocks and drops a
	// partial one (llm-d-kv-cache kvblock/token_processor.go): with 20-word probes it scored
	// every probe 0 and routed them at random.
	preciseProbeWords = 140
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "PrecisePrefixCache",
		Description: "Prefix routing MUST follow the model servers' KV-cache events: requests sharing a prefix that traffic " +
			"bypassing the EPP stored on an endpoint go to that endpoint, and once an endpoint's events say a prefix's blocks " +
			"were evicted there (and another endpoint stored them), requests sharing it go to the endpoint that holds it.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeaturePrecisePrefixCache},
		Preconditions: []string{
			"the harness starts a second pool of " + fmt.Sprint(variantPods) + " fakes publishing vLLM's KV events (" +
				preciseEventsConfig + ": each pod binds tcp://<its IP>:5557, replay on :5558) and its own instance of the EPP " +
				"(the run's config): the reference and command targets; the address and cluster targets skip",
			"the EPP subscribes to tcp://<endpoint IP>:5557 of every endpoint (optionally replaying from :5558) and scores " +
				"prefix matches from those events (reference: precise-prefix-cache-producer with its defaults and a " +
				"prefix-cache-scorer naming it, weighted above any approximate prefix scorer); it tokenizes completions prompts " +
				"as the fakes do (llm-d-inference-sim's dummy tokenizer) with 16-token blocks",
			"the EPP observes new events within metricsPropagation",
		},
		Source: "llm-d-router v0.10.0 pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache and pkg/kvevents; " +
			"vLLM vllm/distributed/kv_events.py; docs/fake-vllm.md (KV-cache events over ZMQ)",
		Run: runPrecisePrefixCache,
	})
}

// bypass posts a completions request for prompt straight to the model server at ep (ip:port),
// not through the gateway: the EPP sees only the server's events.
func bypass(t harness.TestingT, s *harness.Suite, ep, prompt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ep+pathCompletions,
		strings.NewReader(string(completionBody(s.ModelName, prompt, nil))))
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s%s directly: %v", ep, pathCompletions, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s%s directly: %d %s", ep, pathCompletions, resp.StatusCode, b)
	}
}

// publisherOf returns the fake that serves ep (ip:port) in pool.
func publisherOf(t harness.TestingT, pool *harness.Suite, ep string) *vllm.Server {
	t.Helper()
	for _, m := range pool.Fleet.Members() {
		if m.Addr() == ep {
			if inst := m.Instance(); inst != nil {
				return inst.Ranks[0]
			}
		}
	}
	t.Fatalf("no running fake serves %s", ep)
	return nil
}

// sentAfter waits until the fake at ep has sent a KV-event batch numbered seq or later over its
// PUB socket (bounded by Timeouts.Request): what a subscriber can see, the EPP included.
func sentAfter(t harness.TestingT, pool *harness.Suite, ep string, seq uint64) {
	t.Helper()
	srv := publisherOf(t, pool, ep)
	err := harness.Eventually(pool.Timeouts.Request.D(), pool.Timeouts.Poll.D()/10+time.Millisecond, 1, func() error {
		if st := srv.KVEventsStates(); len(st) > 0 && st[0].NextSeq > seq {
			return nil
		}
		return fmt.Errorf("%s has not published batch %d", ep, seq)
	})
	if err != nil {
		t.Fatalf("the fake's KV events: %v", err)
	}
}

// nextSeq is the sequence number the fake at ep gives its next KV-event batch.
func nextSeq(t harness.TestingT, pool *harness.Suite, ep string) uint64 {
	st := publisherOf(t, pool, ep).KVEventsStates()
	if len(st) == 0 {
		t.Fatalf("the fake at %s publishes no KV events", ep)
	}
	return st[0].NextSeq
}

// probeHeaders make a probe's model server answer 503 before it runs anything (fakes/vllm
// X-Return-Error), so the probe leaves no KV-cache block behind.
var probeHeaders = map[string]string{"X-Return-Error": "503"}

func runPrecisePrefixCache(t harness.TestingT, s *harness.Suite) {
	if why := s.SidePoolUnsupported(); why != "" {
		harness.Skip(t, "%s", why)
	}
	kc, err := kvevents.ParseConfig(preciseEventsConfig)
	if err != nil {
		t.Fatalf("the pool's --kv-events-config: %v", err)
	}
	pool := s.StartVariantPool(t, harness.FleetVariant{Name: "kv-events", Pods: variantPods,
		Configure: func(_ int, c *vllm.Config) {
			c.KVEvents = kc
			c.KVCacheSize = preciseKVBlocks
		}})
	eps := pool.Endpoints()
	t.Logf("pool publishing KV events on tcp://<ip>:5557: %v", eps)
	// The EPP must have subscribed to every endpoint before traffic it should see live.
	err = harness.Eventually(pool.Timeouts.MetricsPropagation.D(), pool.Timeouts.Poll.D(), 1, func() error {
		for _, ep := range eps {
			if st := publisherOf(t, pool, ep).KVEventsStates(); len(st) == 0 || len(st[0].Topics) == 0 {
				return fmt.Errorf("nothing subscribed to %s's KV events (tcp://%s:5557)", ep, hostOf(ep))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the EPP does not follow the pool's KV events within metricsPropagation %s: %v", pool.Timeouts.MetricsPropagation.D(), err)
	}
	r := s.Rand(t)
	words := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString(vocabulary[r.IntN(len(vocabulary))])
			b.WriteByte(' ')
		}
		return b.String()
	}
	pick := func(from []string) string { return from[r.IntN(len(from))] }
	plan := harness.MustPlan(t, harness.Shape{
		Outcome: "requests sent to the endpoint whose KV events say it holds their prefix", Tail: harness.AtLeast,
		Compliant: 1 - harness.Exploration, Random: 1 / float64(len(eps)),
	})
	// Each trial uses its own prefix, so a request that goes astray (and stores its prefix where
	// it lands) spoils only its own trial. The EPP follows events asynchronously (within
	// metricsPropagation, a precondition): before a trial's request, probes made of the prefix's
	// first preciseProbeWords words are sent until requiredConsecutiveSuccesses in a row go to the holder; a
	// trial whose probes never do within metricsPropagation is a miss. Each probe asks its model
	// server to fail at once (X-Return-Error: 503, answered before anything runs, as
	// llm-d-inference-sim does), so a probe stores no block where it lands: a probe sent before
	// the EPP has the events cannot make a second endpoint hold the prefix.
	probeOf := func(prefix string) string {
		f := strings.Fields(prefix)
		return strings.Join(f[:min(len(f), preciseProbeWords)], " ") + " "
	}
	check := func(what string, trial func() (prefix, want string)) {
		t.Helper()
		hits := 0
		var misses []string
		for i := 0; i < plan.N; i++ {
			prefix, want := trial()
			err := pool.Eventually(pool.Timeouts.MetricsPropagation.D(), pool.Timeouts.RequiredConsecutiveSuccesses, func() error {
				ep, err := sendWithHeaders(pool, pathCompletions, completionBody(pool.ModelName, probeOf(prefix)+words(1), nil), probeHeaders)
				if err != nil {
					return err
				}
				if ep != want {
					return fmt.Errorf("a probe went to %s", ep)
				}
				return nil
			})
			if err != nil {
				if cause := pool.BrokenCause(); cause != "" {
					// The gateway cannot route anything: every further trial would spend its whole
					// metricsPropagation bound finding that out again.
					t.Fatalf("%s: trial %d of %d: the probes of a prefix held by %s: %v", what, i+1, plan.N, want, err)
				}
				misses = append(misses, want+"→(probes: "+err.Error()+")")
				continue
			}
			ep := mustSend(t, pool, pathCompletions, completionBody(pool.ModelName, prefix+words(8), nil))
			if ep == want {
				hits++
			} else {
				misses = append(misses, want+"→"+ep)
			}
		}
		if len(misses) > 0 {
			t.Logf("%s: requests that left the holder (holder→served): %v", what, misses)
		}
		plan.Check(t, pool, hits, plan.N)
	}

	// 1. A prefix stored by traffic that bypassed the EPP attracts requests.
	check("a prefix stored by bypassing traffic", func() (string, string) {
		holder := pick(eps)
		prefix := uniquePrompt(pool, t, r, 0) + " " + words(precisePrefixWords)
		seq := nextSeq(t, pool, holder)
		bypass(t, pool, holder, prefix)
		sentAfter(t, pool, holder, seq)
		return prefix, holder
	})

	// 2. Blocks evicted on the endpoint that served the prefix stop attracting it there; the
	// endpoint that holds them now gets the requests.
	check("a prefix evicted where it was served", func() (string, string) {
		prefix := uniquePrompt(pool, t, r, 0) + " " + words(precisePrefixWords)
		served := mustSend(t, pool, pathCompletions, completionBody(pool.ModelName, prefix+words(8), nil))
		var others []string
		for _, e := range eps {
			if e != served {
				others = append(others, e)
			}
		}
		holder := pick(others)
		// The EPP must first know the prefix is cached where it was served (its events said so):
		// what it later unlearns is what it had learnt.
		if err := pool.Eventually(pool.Timeouts.MetricsPropagation.D(), pool.Timeouts.RequiredConsecutiveSuccesses, func() error {
			ep, err := sendWithHeaders(pool, pathCompletions, completionBody(pool.ModelName, probeOf(prefix)+words(1), nil), probeHeaders)
			if err != nil {
				return err
			}
			if ep != served {
				return fmt.Errorf("a probe went to %s", ep)
			}
			return nil
		}); err != nil {
			t.Logf("the EPP did not route the prefix's probes to %s, where it was served: %v", served, err)
		}
		seqH, seqS := nextSeq(t, pool, holder), nextSeq(t, pool, served)
		bypass(t, pool, holder, prefix)
		for i := 0; i < preciseFloodPrompts; i++ {
			bypass(t, pool, served, uniquePrompt(pool, t, r, 0)+" "+words(preciseFloodWords))
		}
		sentAfter(t, pool, holder, seqH)
		sentAfter(t, pool, served, seqS+preciseFloodPrompts-1)
		return prefix, holder
	})
}
