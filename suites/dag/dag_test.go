package dag_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/internal/testseed"

	"github.com/eppkit/eppkit/reference/framework"
)

type matchInfo struct{ Blocks int }
type otherInfo struct{ Blocks int } // same shape as matchInfo, another type

var _ = ginkgo.Describe("PrepareData DAG ordering", ginkgo.Label("dag"), func() {
	ginkgo.When("plugins form a linear chain", func() {
		ginkgo.It("should run every producer before its consumer, whatever the config order", func() {
			log := &calls{}
			e := newEnv().add(
				newNode("c", []string{"kc"}, []string{"kb"}, log),
				newNode("a", []string{"ka"}, nil, log),
				newNode("b", []string{"kb"}, []string{"ka"}, log),
			)
			r := e.mustBuild()
			gomega.Expect(layerNames(r)).To(gomega.BeComparableTo([][]string{{"a"}, {"b"}, {"c"}}))
			gomega.Expect(dependsOn(r)).To(gomega.BeComparableTo(map[string][]string{"a": nil, "b": {"a"}, "c": {"b"}}))

			eps := endpoints(2)
			gomega.Expect(r.PrepareData(context.Background(), request(), eps)).To(gomega.Succeed())
			gomega.Expect(log.get()).To(gomega.BeComparableTo([]string{"a", "b", "c"}))
			for _, ep := range eps {
				gomega.Expect(attr(ep, "kc")).To(gomega.Equal("c(b(a()))"), "each consumer saw its producer's committed data")
			}
		})
	})

	ginkgo.When("several producers feed one consumer (fan-in)", func() {
		ginkgo.It("should put the consumer after every producer and let it see all their data", func() {
			e := newEnv().add(
				newNode("sink", []string{"out"}, []string{"k1", "k2", "k3"}, nil),
				newNode("p3", []string{"k3"}, nil, nil),
				newNode("p1", []string{"k1"}, nil, nil),
				newNode("p2", []string{"k2"}, nil, nil),
			)
			r := e.mustBuild()
			gomega.Expect(layerNames(r)).To(gomega.BeComparableTo([][]string{{"p1", "p2", "p3"}, {"sink"}}))
			gomega.Expect(dependsOn(r)["sink"]).To(gomega.BeComparableTo([]string{"p1", "p2", "p3"}))
			eps := endpoints(1)
			gomega.Expect(r.PrepareData(context.Background(), request(), eps)).To(gomega.Succeed())
			gomega.Expect(attr(eps[0], "out")).To(gomega.Equal("sink(p1()p2()p3())"))
		})
	})

	ginkgo.When("one producer feeds several consumers (fan-out)", func() {
		ginkgo.It("should put the consumers in one layer after the producer, sorted by name", func() {
			e := newEnv().add(
				newNode("zeta", []string{"z"}, []string{"k"}, nil),
				newNode("alpha", []string{"a"}, []string{"k"}, nil),
				newNode("src", []string{"k"}, nil, nil),
				newNode("mid", []string{"m"}, []string{"k"}, nil),
			)
			r := e.mustBuild()
			gomega.Expect(layerNames(r)).To(gomega.BeComparableTo([][]string{{"src"}, {"alpha", "mid", "zeta"}}))
			gomega.Expect(names(r.PrepareDataOrder())).To(gomega.BeComparableTo([]string{"src", "alpha", "mid", "zeta"}))
		})
	})

	ginkgo.When("the graph is a diamond", func() {
		ginkgo.It("should run the top first, the two sides together, then the bottom", func() {
			e := newEnv().add(
				newNode("bottom", []string{"out"}, []string{"l", "r"}, nil),
				newNode("right", []string{"r"}, []string{"t"}, nil),
				newNode("left", []string{"l"}, []string{"t"}, nil),
				newNode("top", []string{"t"}, nil, nil),
			)
			r := e.mustBuild()
			gomega.Expect(layerNames(r)).To(gomega.BeComparableTo([][]string{{"top"}, {"left", "right"}, {"bottom"}}))
			eps := endpoints(1)
			gomega.Expect(r.PrepareData(context.Background(), request(), eps)).To(gomega.Succeed())
			gomega.Expect(attr(eps[0], "out")).To(gomega.Equal("bottom(left(top())right(top()))"))
		})

		ginkgo.It("should place a plugin by its longest path from a source", func() {
			// short: src → short; long: src → a → long; sink consumes short and long.
			e := newEnv().add(
				newNode("sink", nil, []string{"short", "long"}, nil),
				newNode("short", []string{"short"}, []string{"src"}, nil),
				newNode("long", []string{"long"}, []string{"a"}, nil),
				newNode("a", []string{"a"}, []string{"src"}, nil),
				newNode("src", []string{"src"}, nil, nil),
			)
			r := e.mustBuild()
			gomega.Expect(layerNames(r)).To(gomega.BeComparableTo([][]string{{"src"}, {"a", "short"}, {"long"}, {"sink"}}))
		})
	})

	ginkgo.When("independent plugins are configured and registered in shuffled orders", func() {
		ginkgo.It("should sort them identically, by name then type, on every start", func() {
			seed := testseed.Seed()
			rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
			// Eight independent producers (of two types), two consumers in layer 1, one scorer.
			mk := func() []framework.Plugin {
				ps := []framework.Plugin{
					newNode("echo", []string{"e"}, nil, nil), newNode("bravo", []string{"b"}, nil, nil),
					newNode("hotel", []string{"h"}, nil, nil), newNode("alpha", []string{"a"}, nil, nil),
					newNode("golf", []string{"g"}, nil, nil), newNode("delta", []string{"d"}, nil, nil),
					newNode("foxtrot", []string{"f"}, []string{"a", "b"}, nil), newNode("charlie", []string{"c"}, []string{"h"}, nil),
					&keyScorer{tn: framework.TypedName{Type: "key-scorer", Name: "alpha2"}, consumes: map[string]any{"c": ""}},
				}
				other := newNode("india", []string{"i"}, nil, nil)
				other.tn.Type = "another-node"
				return append(ps, other, newNode("india-node", []string{"i2"}, nil, nil))
			}
			want := []string{"alpha", "bravo", "delta", "echo", "golf", "hotel", "india", "india-node", "charlie", "foxtrot"}
			var first []framework.DAGNode
			for i := 0; i < 100; i++ {
				ps := mk()
				rng.Shuffle(len(ps), func(a, b int) { ps[a], ps[b] = ps[b], ps[a] })
				e := newEnv().add(ps...)
				// Registration order follows the shuffled config order; shuffle it once more.
				rng.Shuffle(len(e.typeOrder), func(a, b int) { e.typeOrder[a], e.typeOrder[b] = e.typeOrder[b], e.typeOrder[a] })
				r, err := e.build(e.config(), nil)
				gomega.Expect(err).NotTo(gomega.HaveOccurred(), repro(seed))
				gomega.Expect(names(r.PrepareDataOrder())).To(gomega.BeComparableTo(want), "shuffle %d; %s", i, repro(seed))
				if first == nil {
					first = r.DAG()
					continue
				}
				gomega.Expect(r.DAG()).To(gomega.BeComparableTo(first), "shuffle %d; %s", i, repro(seed))
			}
		})
	})

	ginkgo.When("a scorer consumes data", func() {
		ginkgo.It("should make the scorer a node after its producer without calling it in PrepareData", func() {
			log := &calls{}
			s := &keyScorer{tn: framework.TypedName{Type: "key-scorer", Name: "aaa-scorer"}, consumes: map[string]any{"k": ""}}
			e := newEnv().add(s, newNode("producer", []string{"k"}, nil, log))
			r := e.mustBuild()
			dag := r.DAG()
			gomega.Expect(dag).To(gomega.HaveLen(2))
			gomega.Expect(dag[1].Plugin.Name).To(gomega.Equal("aaa-scorer"), "the scorer sorts after its producer despite its name")
			gomega.Expect(dag[1].Phase).To(gomega.Equal(framework.PhaseScheduling))
			gomega.Expect(dag[1].DependsOn).To(gomega.BeComparableTo([]framework.TypedName{{Type: "node", Name: "producer"}}))
			gomega.Expect(names(r.PrepareDataOrder())).To(gomega.BeComparableTo([]string{"producer"}))

			res, err := r.Schedule(context.Background(), request(), endpoints(2))
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(res.Primary().TargetEndpoints).To(gomega.HaveLen(1))
			gomega.Expect(log.get()).To(gomega.Equal([]string{"producer"}))
			gomega.Expect(s.lastSeen()).To(gomega.ContainElement(map[string]any{"k": "producer()"}))
		})
	})
})

var _ = ginkgo.Describe("PrepareData DAG cycles", ginkgo.Label("dag"), func() {
	ginkgo.When("two plugins consume each other's data", func() {
		ginkgo.It("should fail and print the cycle from its smallest node", func() {
			e := newEnv().add(
				newNode("beta", []string{"b"}, []string{"a"}, nil),
				newNode("alpha", []string{"a"}, []string{"b"}, nil),
			)
			gomega.Expect(e.buildErr()).To(gomega.Equal(
				"prepareData DAG: dependency cycle alpha/node -> beta/node -> alpha/node " +
					"(each plugin consumes a data key the next one produces)"))
		})
	})

	ginkgo.When("three plugins form a cycle behind other plugins", func() {
		ginkgo.It("should fail and print exactly the three-node cycle", func() {
			e := newEnv().add(
				newNode("aaa-consumer", nil, []string{"x"}, nil), // depends on the cycle, is not on it
				newNode("zed", []string{"z"}, []string{"y"}, nil),
				newNode("x", []string{"x"}, []string{"z"}, nil),
				newNode("y", []string{"y"}, []string{"x"}, nil),
				newNode("free", []string{"f"}, nil, nil),
			)
			gomega.Expect(e.buildErr()).To(gomega.Equal(
				"prepareData DAG: dependency cycle x/node -> zed/node -> y/node -> x/node " +
					"(each plugin consumes a data key the next one produces)"))
		})
	})

	ginkgo.When("a plugin consumes a key it produces itself", func() {
		ginkgo.It("should not count that as a cycle", func() {
			e := newEnv().add(newNode("self", []string{"k"}, []string{"k"}, nil))
			r := e.mustBuild()
			gomega.Expect(names(r.PrepareDataOrder())).To(gomega.Equal([]string{"self"}))
		})
	})
})

var _ = ginkgo.Describe("PrepareData DAG type checks", ginkgo.Label("dag"), func() {
	ginkgo.When("the types of the second shared key differ", func() {
		ginkgo.It("should fail naming the key, the producer, the consumer and both types", func() {
			p := newNode("prod", nil, nil, nil)
			p.produces = map[string]any{"a-first": matchInfo{}, "b-second": matchInfo{}}
			c := newNode("cons", nil, nil, nil)
			c.consumes = map[string]any{"a-first": matchInfo{}, "b-second": otherInfo{}}
			gomega.Expect(newEnv().add(p, c).buildErr()).To(gomega.Equal(fmt.Sprintf(
				`prepareData DAG: data key "b-second": producer prod/node produces %s but consumer cons/node consumes %s`,
				typeName(matchInfo{}), typeName(otherInfo{}))))
		})
	})

	ginkgo.When("producer and consumer declare two different pointers of one type", func() {
		ginkgo.It("should accept them: types are compared, not values", func() {
			p := newNode("prod", nil, nil, nil)
			p.produces = map[string]any{"k": &matchInfo{Blocks: 1}}
			c := newNode("cons", nil, nil, nil)
			c.consumes = map[string]any{"k": &matchInfo{Blocks: 2}}
			s := &keyScorer{tn: framework.TypedName{Type: "key-scorer", Name: "s"}, consumes: map[string]any{"k": (*matchInfo)(nil)}}
			r := newEnv().add(p, c, s).mustBuild()
			gomega.Expect(dependsOn(r)).To(gomega.BeComparableTo(map[string][]string{"prod": nil, "cons": {"prod"}, "s": {"prod"}}))
		})
	})

	ginkgo.When("one side declares a pointer and the other a value", func() {
		ginkgo.It("should fail", func() {
			p := newNode("prod", nil, nil, nil)
			p.produces = map[string]any{"k": &matchInfo{}}
			s := &keyScorer{tn: framework.TypedName{Type: "key-scorer", Name: "s"}, consumes: map[string]any{"k": matchInfo{}}}
			gomega.Expect(newEnv().add(p, s).buildErr()).To(gomega.Equal(fmt.Sprintf(
				`prepareData DAG: data key "k": producer prod/node produces %s but consumer s/key-scorer consumes %s`,
				typeName(&matchInfo{}), typeName(matchInfo{}))))
		})
	})

	ginkgo.When("a key has two producers and one of them disagrees on its type", func() {
		ginkgo.It("should fail naming the disagreeing producer", func() {
			p1 := newNode("p1", nil, nil, nil)
			p1.produces = map[string]any{"k": matchInfo{}}
			p2 := newNode("p2", nil, nil, nil)
			p2.produces = map[string]any{"k": otherInfo{}}
			c := newNode("c", nil, nil, nil)
			c.consumes = map[string]any{"k": matchInfo{}}
			gomega.Expect(newEnv().add(c, p2, p1).buildErr()).To(gomega.Equal(fmt.Sprintf(
				`prepareData DAG: data key "k": producer p2/node produces %s but consumer c/node consumes %s`,
				typeName(otherInfo{}), typeName(matchInfo{}))))
		})
	})
})

var _ = ginkgo.Describe("PrepareData DAG missing producers", ginkgo.Label("dag"), func() {
	ginkgo.When("a default producer is registered for the key", func() {
		ginkgo.It("should create it with default parameters, log it and run it first", func() {
			log := &calls{}
			s := &keyScorer{tn: framework.TypedName{Type: "key-scorer", Name: "scorer"}, consumes: map[string]any{"match": ""}}
			e := newEnv().add(s)
			e.defaultProducer("match", "match-producer", nil, log)
			r := e.mustBuild()
			gomega.Expect(r.AutoCreated()).To(gomega.ContainElement(framework.TypedName{Type: "match-producer", Name: "match-producer"}))
			gomega.Expect(e.defaultParams).To(gomega.HaveKeyWithValue("match-producer", gomega.BeNil()))
			gomega.Expect(names(r.PrepareDataOrder())).To(gomega.Equal([]string{"match-producer"}))
			gomega.Expect(e.logs).To(gbytes.Say(`created the default producer of a consumed data key.*key=match consumer=scorer/key-scorer producer=match-producer/match-producer`))

			_, err := r.Schedule(context.Background(), request(), endpoints(1))
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(log.get()).To(gomega.Equal([]string{"match-producer"}))
			gomega.Expect(s.lastSeen()).To(gomega.ContainElement(map[string]any{"match": "match-producer()"}))
		})

		ginkgo.It("should hand a carrier's producer parameters to it with a deprecation warning", func() {
			s := &carrierScorer{&keyScorer{tn: framework.TypedName{Type: "old-scorer", Name: "old"},
				consumes: map[string]any{"match": ""}, params: json.RawMessage(`{"blockSize":64}`)}}
			e := newEnv().add(s)
			e.defaultProducer("match", "match-producer", nil, nil)
			e.mustBuild()
			gomega.Expect(string(e.defaultParams["match-producer"])).To(gomega.Equal(`{"blockSize":64}`))
			gomega.Expect(e.logs).To(gbytes.Say(`level=WARN msg="deprecated: producer parameters given to a consumer were moved to the default producer`))
		})
	})

	ginkgo.When("no default producer is registered for the key", func() {
		ginkgo.It("should fail naming the key and the consumer", func() {
			s := &keyScorer{tn: framework.TypedName{Type: "key-scorer", Name: "scorer"}, consumes: map[string]any{"match": ""}}
			gomega.Expect(newEnv().add(s).buildErr()).To(gomega.Equal(
				`prepareData DAG: plugin scorer/key-scorer consumes data key "match", which no plugin produces, ` +
					`and no default producer is registered for it`))
		})
	})

	ginkgo.When("a carrier's parameters disagree with a configured producer", func() {
		ginkgo.It("should fail naming both plugins and the field", func() {
			s := &carrierScorer{&keyScorer{tn: framework.TypedName{Type: "old-scorer", Name: "old"},
				consumes: map[string]any{"match": ""}, params: json.RawMessage(`{"blockSize":64}`)}}
			e := newEnv().add(s, newNode("producer", []string{"match"}, nil, nil))
			gomega.Expect(e.buildErr()).To(gomega.Equal(
				`prepareData DAG: plugin old/old-scorer carries producer parameters for data key "match" that disagree with ` +
					`configured producer producer/node (plugins[1]) on field "blockSize": 64 vs <unset>; set them on the producer only`))
		})
	})
})

var _ = ginkgo.Describe("PrepareData DAG layers", ginkgo.Label("dag"), func() {
	ginkgo.When("a consumer is pinned to the layer of its producer", func() {
		ginkgo.It("should fail: the producer does not run in an earlier layer", func() {
			e := newEnv().add(
				&pinnedNode{node: newNode("consumer", []string{"out"}, []string{"k"}, nil), layer: 0},
				newNode("producer", []string{"k"}, nil, nil),
			)
			gomega.Expect(e.buildErr()).To(gomega.Equal(
				`prepareData DAG: layer violation: producer producer/node runs in layer 0, not earlier than its consumer ` +
					`consumer/node (fixed layer 0), data keys ["k"]`))
		})
	})

	ginkgo.When("a producer is pinned to a later layer", func() {
		ginkgo.It("should move its consumers after it", func() {
			e := newEnv().add(
				newNode("consumer", nil, []string{"k"}, nil),
				&pinnedNode{node: newNode("producer", []string{"k"}, nil, nil), layer: 3},
				newNode("other", []string{"o"}, nil, nil),
			)
			r := e.mustBuild()
			gomega.Expect(layerNames(r)).To(gomega.BeComparableTo([][]string{{"other"}, {"producer"}, {"consumer"}}))
			layers := map[string]int{}
			for _, n := range r.DAG() {
				layers[n.Plugin.Name] = n.Layer
			}
			gomega.Expect(layers).To(gomega.BeComparableTo(map[string]int{"other": 0, "producer": 3, "consumer": 4}))
		})
	})

	ginkgo.When("a scheduling-phase producer feeds a PrepareData consumer", func() {
		ginkgo.It("should fail: the producer would run in a later phase than its consumer", func() {
			f := &producingFilter{tn: framework.TypedName{Type: "producing-filter", Name: "f"}, produces: map[string]any{"k": ""}}
			e := newEnv().add(f, newNode("consumer", nil, []string{"k"}, nil))
			gomega.Expect(e.buildErr()).To(gomega.Equal(
				`prepareData DAG: layer violation: producer f/producing-filter runs in phase Scheduling, after its consumer ` +
					`consumer/node (phase PrepareData), data keys ["k"]`))
		})
	})
})

var _ = ginkgo.Describe("PrepareData execution", ginkgo.Label("dag"), func() {
	ginkgo.When("a graph with several layers runs", func() {
		ginkgo.It("should call the plugins in the sorted order, layer by layer", func() {
			log := &calls{}
			e := newEnv().add(
				newNode("d", []string{"kd"}, []string{"kb", "kc"}, log),
				newNode("c", []string{"kc"}, []string{"ka"}, log),
				newNode("b", []string{"kb"}, []string{"ka"}, log),
				newNode("a", []string{"ka"}, nil, log),
				newNode("e", []string{"ke"}, nil, log),
			)
			r := e.mustBuild()
			layers := layerNames(r)
			gomega.Expect(layers).To(gomega.BeComparableTo([][]string{{"a", "e"}, {"b", "c"}, {"d"}}))
			for range 20 {
				log.names = nil
				gomega.Expect(r.PrepareData(context.Background(), request(), endpoints(2))).To(gomega.Succeed())
				got := log.get()
				gomega.Expect(got).To(gomega.HaveLen(5))
				// Plugins of one layer run concurrently, so only the layer sequence is fixed: the calls,
				// cut into runs of the layer sizes, are the layers.
				at := 0
				for _, layer := range layers {
					gomega.Expect(got[at:at+len(layer)]).To(gomega.ConsistOf(layer), "calls %v", got)
					at += len(layer)
				}
			}
		})

		ginkgo.It("should run the plugins of one layer concurrently", func() {
			var started sync.WaitGroup
			started.Add(2)
			barrier := make(chan struct{})
			go func() { started.Wait(); close(barrier) }()
			a := newNode("a", []string{"ka"}, nil, nil)
			b := newNode("b", []string{"kb"}, nil, nil)
			for _, n := range []*node{a, b} {
				n.barrier, n.started = barrier, started.Done
			}
			e := newEnv().add(a, b)
			r := e.mustBuild()
			eps := endpoints(1)
			// Sequential execution would block a on the barrier until the 400 ms budget ran out.
			gomega.Expect(r.PrepareData(context.Background(), request(), eps)).To(gomega.Succeed())
			gomega.Expect(r.PrepareDataStats().Timeouts).To(gomega.BeEmpty())
			gomega.Expect(eps[0].Keys()).To(gomega.ConsistOf("ka", "kb"))
		})
	})

	ginkgo.When("a plugin overruns the phase budget", func() {
		ginkgo.It("should cancel it, keep its late writes out of the snapshot, and still schedule", func() {
			slow := newNode("slow", []string{"slow"}, nil, nil)
			slow.block, slow.lateDone = true, make(chan error, 1)
			fast := newNode("fast", []string{"fast"}, nil, nil)
			s := &keyScorer{tn: framework.TypedName{Type: "key-scorer", Name: "s"}, consumes: map[string]any{"fast": "", "slow": ""}}
			e := newEnv().add(slow, fast, s)
			cfg := e.config()
			cfg.PrepareData = &framework.PrepareDataConfig{TimeoutMs: 50}
			r, err := e.build(cfg, nil)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())

			eps := endpoints(3)
			began := time.Now()
			res, err := r.Schedule(context.Background(), request(), eps)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(time.Since(began)).To(gomega.BeNumerically(">=", 50*time.Millisecond))
			gomega.Expect(res.Primary().TargetEndpoints).To(gomega.HaveLen(1))

			var lateErr error
			gomega.Eventually(slow.lateDone).WithTimeout(5 * time.Second).Should(gomega.Receive(&lateErr))
			gomega.Expect(lateErr).To(gomega.MatchError(context.Canceled), "the plugin's context was cancelled")
			for _, ep := range eps {
				gomega.Expect(ep.Keys()).To(gomega.ConsistOf("fast"), "late writes never reach %s", ep.Key())
			}
			gomega.Expect(s.lastSeen()).To(gomega.HaveEach(map[string]any{"fast": "fast()"}), "scheduling saw only committed data")
			gomega.Expect(r.PrepareDataStats().Timeouts).To(gomega.Equal(map[framework.TypedName]int64{slow.tn: 1}))
		})

		ginkgo.It("should time the budget with the injected clock", func() {
			fc := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
			slow := newNode("slow", []string{"slow"}, nil, nil)
			slow.block, slow.lateDone = true, make(chan error, 1)
			e := newEnv().add(slow, newNode("fast", []string{"fast"}, nil, nil))
			r, err := e.build(e.config(), fc)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(r.PrepareDataBudget()).To(gomega.Equal(400 * time.Millisecond))

			eps := endpoints(1)
			done := make(chan error, 1)
			go func() { done <- r.PrepareData(context.Background(), request(), eps) }()
			gomega.Eventually(fc.HasWaiters).Should(gomega.BeTrue())
			fc.Step(399 * time.Millisecond)
			gomega.Consistently(done).WithTimeout(50 * time.Millisecond).ShouldNot(gomega.Receive())
			fc.Step(time.Millisecond)
			gomega.Eventually(done).WithTimeout(5 * time.Second).Should(gomega.Receive(gomega.BeNil()))
			gomega.Eventually(slow.lateDone).WithTimeout(5 * time.Second).Should(gomega.Receive())
			gomega.Expect(eps[0].Keys()).To(gomega.ConsistOf("fast"))
		})
	})

	ginkgo.When("a plugin fails", func() {
		ginkgo.It("should log and count the error and let the request continue", func() {
			bad := newNode("bad", []string{"bad"}, nil, nil)
			bad.err = errors.New("backend unavailable")
			after := newNode("after", []string{"after"}, []string{"bad"}, nil)
			s := &keyScorer{tn: framework.TypedName{Type: "key-scorer", Name: "s"}, consumes: map[string]any{"after": ""}}
			e := newEnv().add(bad, after, s)
			r := e.mustBuild()
			eps := endpoints(2)
			res, err := r.Schedule(context.Background(), request(), eps)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(res.Primary().TargetEndpoints).To(gomega.HaveLen(1))
			gomega.Expect(eps[0].Keys()).To(gomega.ConsistOf("after"), "the failed plugin's writes are discarded; its consumer still ran")
			gomega.Expect(attr(eps[0], "after")).To(gomega.Equal("after()"))
			gomega.Expect(r.PrepareDataStats().Errors).To(gomega.Equal(map[framework.TypedName]int64{bad.tn: 1}))
			gomega.Expect(e.logs).To(gbytes.Say(`prepareData: plugin failed; continuing without its data" plugin=bad/node .*error="backend unavailable"`))
		})
	})

	ginkgo.When("a plugin returns ErrBadRequest", func() {
		ginkgo.It("should end the request with that error before scheduling", func() {
			log := &calls{}
			bad := newNode("bad", []string{"bad"}, nil, log)
			bad.err = fmt.Errorf("header x-slo-ttft-ms %q is not a number: %w", "fast", framework.ErrBadRequest)
			after := newNode("after", []string{"after"}, []string{"bad"}, log)
			e := newEnv().add(bad, after)
			r := e.mustBuild()
			_, err := r.Schedule(context.Background(), request(), endpoints(2))
			gomega.Expect(err).To(gomega.MatchError(framework.ErrBadRequest))
			gomega.Expect(err.Error()).To(gomega.Equal(`prepareData bad/node: header x-slo-ttft-ms "fast" is not a number: bad request`))
			gomega.Expect(log.get()).To(gomega.Equal([]string{"bad"}), "no later layer ran")
			gomega.Expect(e.picker.count()).To(gomega.BeZero(), "scheduling did not run")
		})
	})
})
